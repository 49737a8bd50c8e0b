"""Paths as Label Studio writes them (issue 15.3): ``?d=`` references from Windows servers
(``%5C``), spaces, ``%``, Unicode (either normalisation on disk), uploads, references behind the
server's own address, exports with a byte order mark. Every case writes real files under
tmp_path."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path, PureWindowsPath
from urllib.parse import quote

import pytest

from npu_data.annotations import ImageError, ImageOptions, load_image, parse_export, resolve_image
from npu_data.errors import UserError


def _file(path: Path, body: bytes = b"x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    return path


def _ls_local_ref(rel_windows: str, host: str = "") -> str:
    """What Label Studio's local-files storage writes for a file of a Windows server:
    ``quote(str(path.relative_to(document_root)))`` (backslashes, quote's escaping)."""
    return f"{host}/data/local-files/?d={quote(str(PureWindowsPath(rel_windows)))}"


# --- references -------------------------------------------------------------------------

def test_local_files_from_a_windows_server(tmp_path: Path) -> None:
    root = tmp_path / "root"
    opts = ImageOptions(local_files_root=root)
    img = _file(root / "sub" / "img.jpg")
    assert resolve_image("/data/local-files/?d=sub%5Cimg.jpg", opts) == img.resolve()
    odd = _file(root / "my data" / "100% done" / "猫 café.png")
    ref = _ls_local_ref("my data\\100% done\\猫 café.png")
    assert ref == ("/data/local-files/?d=my%20data%5C100%25%20done%5C%E7%8C%AB%20caf%C3%A9.png")
    assert resolve_image(ref, opts) == odd.resolve()
    assert resolve_image(ref.replace("%5C", "/"), opts) == odd.resolve()  # a Linux server's
    plus = _file(root / "a+b.png")  # quote() writes '+' as %2B
    assert resolve_image(_ls_local_ref("a+b.png"), opts) == plus.resolve()
    raw = _file(root / "raw 50%.png")  # a hand-written reference, nothing escaped
    assert resolve_image("/data/local-files/?d=raw 50%.png", opts) == raw.resolve()


def test_unicode_names_in_either_normalisation(tmp_path: Path) -> None:
    root = tmp_path / "root"
    opts = ImageOptions(local_files_root=root, images_root=tmp_path / "imgs")
    nfd = unicodedata.normalize("NFD", "café.png")
    on_disk = _file(root / nfd)  # a macOS upload: decomposed é
    nfc_ref = "/data/local-files/?d=" + quote(unicodedata.normalize("NFC", "café.png"))
    assert nfc_ref != "/data/local-files/?d=" + quote(nfd)
    assert resolve_image(nfc_ref, opts) == on_disk.resolve()
    plain = _file(tmp_path / "imgs" / unicodedata.normalize("NFC", "Ångström.png"))
    assert resolve_image(unicodedata.normalize("NFD", "Ångström.png"), opts) == plain


def test_local_files_leading_slash_and_traversal(tmp_path: Path) -> None:
    root = tmp_path / "root"
    opts = ImageOptions(local_files_root=root)
    # the server strips the leading '/': d=/x/y.jpg is <root>/x/y.jpg, never the machine's /x
    inside = _file(root / "home" / "u" / "y.jpg")
    assert resolve_image("/data/local-files/?d=/home/u/y.jpg", opts) == inside.resolve()
    assert resolve_image("/data/local-files/?d=%2Fetc%2Fpasswd", opts) == (
        root / "etc" / "passwd").resolve()
    for bad in ("/data/local-files/?d=..%5C..%5Csecret.txt", "/data/local-files/?d=sub%5C..%5C..",
                "/data/local-files/?d=a/../../x.jpg"):
        with pytest.raises(ImageError, match="refused"):
            resolve_image(bad, opts)
    missing = resolve_image("/data/local-files/?d=nope%5Cgone.jpg", opts)
    assert missing == (root / "nope" / "gone.jpg").resolve()  # named with '/' in the error
    with pytest.raises(ImageError, match=r"nope/gone\.jpg: image file not found"):
        load_image(missing)


def test_uploads_and_the_servers_own_address(tmp_path: Path) -> None:
    ls = tmp_path / "ls"
    opts = ImageOptions(ls_data_dir=ls, local_files_root=tmp_path / "root")
    up = _file(ls / "media" / "upload" / "3" / "1a2b3c4d-my_photo.jpg")
    assert resolve_image("/data/upload/3/1a2b3c4d-my_photo.jpg", opts) == up.resolve()
    uni = _file(ls / "media" / "upload" / "3" / "9f8e7d6c-猫.jpg")  # Django keeps \w letters
    assert resolve_image("/data/upload/3/9f8e7d6c-%E7%8C%AB.jpg", opts) == uni.resolve()
    # a server with HOSTNAME set writes its own address in front
    assert resolve_image("http://localhost:8080/data/upload/3/1a2b3c4d-my_photo.jpg",
                         opts) == up.resolve()
    win = _file(tmp_path / "root" / "sub" / "img.jpg")
    assert resolve_image(_ls_local_ref("sub\\img.jpg", "https://ls.example.com"),
                         opts) == win.resolve()
    with pytest.raises(ImageError, match="refused"):
        resolve_image("http://localhost:8080/data/upload/3/..%2F..%2F..%2Fx", opts)
    # without the folder the URL is a URL (downloads need --allow-download)
    with pytest.raises(ImageError, match="--allow-download"):
        resolve_image("http://localhost:8080/data/upload/3/x.jpg", ImageOptions())
    with pytest.raises(ImageError, match="--allow-download"):
        resolve_image("http://localhost:8080/data/local-files/?d=x.jpg",
                      ImageOptions(ls_data_dir=ls))


def test_relative_paths_with_windows_separators(tmp_path: Path) -> None:
    opts = ImageOptions(images_root=tmp_path / "imgs")
    p = _file(tmp_path / "imgs" / "cats" / "a b.png")
    assert resolve_image("cats\\a b.png", opts) == p
    literal = _file(tmp_path / "imgs" / "odd\\name.png")  # a Linux name with a backslash
    assert resolve_image("odd\\name.png", opts) == literal


def test_exports_with_a_byte_order_mark(tmp_path: Path) -> None:
    box = {"id": "r1", "type": "rectanglelabels", "from_name": "b", "to_name": "image",
           "original_width": 10, "original_height": 10,
           "value": {"x": 1, "y": 2, "width": 3, "height": 4, "rectanglelabels": ["cat"]}}
    tasks = [{"id": 7, "data": {"image": "/data/local-files/?d=sub%5Ccafé.jpg"},
              "annotations": [{"id": 1, "result": [box]}]}]
    p = tmp_path / "export.json"
    for body in (json.dumps(tasks, ensure_ascii=False), json.dumps(tasks, indent=2) + "\r\n"):
        p.write_bytes(b"\xef\xbb\xbf" + body.encode("utf-8"))  # Notepad's "UTF-8 with BOM"
        r = parse_export(p)
        assert r.rejected == [] and r.table.columns["task_id"].tolist() == [7]
        assert r.table.texts("image_ref") == ["/data/local-files/?d=sub%5Ccafé.jpg"]
        assert r.table.columns["boxes.xywhr"][0, :4].tolist() == [1, 2, 3, 4]
    p.write_bytes(b"\xef\xbb\xbf" + json.dumps([{"id": 1, "image": "a.jpg", "cls": "x"}]).encode())
    assert parse_export(p).stats.flavour == "json-min"
    p.write_bytes(json.dumps(tasks).encode("utf-16"))  # PowerShell's Out-File
    with pytest.raises(UserError, match="UTF-16.*save it as UTF-8"):
        parse_export(p)
    from npu_data.annotations.pull import _load_tasks

    p.write_bytes(b"\xef\xbb\xbf" + json.dumps(tasks).encode())
    assert _load_tasks(p, "export") == tasks
