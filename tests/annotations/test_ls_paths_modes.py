"""Paths and images as Label Studio writes them (issue 15.3): ``?d=`` references from Windows
servers (``%5C``), spaces, ``%``, Unicode (either normalisation on disk), uploads, references
behind the server's own address, exports with a byte order mark, and images in CMYK, 16-bit,
palette (with and without transparency), LA and RGBA modes decoded to the RGB the annotator saw
(composited over the editor's white, 16-bit samples by their high byte); EXIF orientation kept.
Every case writes real files under tmp_path."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path, PureWindowsPath
from urllib.parse import quote

import numpy as np
import pytest
from PIL import Image

from npu_data.annotations import ImageError, ImageOptions, load_image, parse_export, resolve_image
from npu_data.annotations.images import decode_image, load_image_as_shown
from npu_data.codecs import jpeg_ops, with_restarts
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
    with pytest.raises(ImageError, match="allow_download="):
        resolve_image("http://localhost:8080/data/upload/3/x.jpg", ImageOptions())
    with pytest.raises(ImageError, match="allow_download="):
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


# --- image modes --------------------------------------------------------------------------

def _over_white(rgb: np.ndarray, a: np.ndarray) -> np.ndarray:
    a = a.astype(np.int64)[..., None]
    return ((rgb.astype(np.int64) * a + 255 * (255 - a) + 127) // 255).astype(np.uint8)


def _exif(orientation: int) -> Image.Exif:
    e = Image.Exif()
    e[0x0112] = orientation
    return e


def test_cmyk_jpeg_as_a_browser_shows_it(tmp_path: Path) -> None:
    cmyk = np.zeros((6, 8, 4), np.uint8)
    cmyk[..., 0], cmyk[..., 1], cmyk[:, :4, 2], cmyk[..., 3] = 10, 200, 30, 40
    p = tmp_path / "cmyk.jpg"
    Image.fromarray(cmyk, "CMYK").save(p, quality=100)
    with Image.open(p) as im:
        assert im.mode == "CMYK"
        stored = np.asarray(im).astype(np.int64)  # after JPEG (Adobe inverted, undone)
    got, plain = load_image_as_shown(p)
    assert plain and got.shape == (6, 8, 3)
    k = 255 - stored[..., 3:]
    want = np.clip(np.round((255 - stored[..., :3]) * k / 255), 0, 255)
    assert np.abs(got.astype(np.int64) - want).max() <= 1  # (255 - C)(255 - K) / 255
    assert got[0, 7].tolist() == pytest.approx([207, 46, 215], abs=3)  # C=10 M=200 Y=0 K=40
    r = tmp_path / "cmyk-rot.jpg"
    Image.fromarray(cmyk, "CMYK").save(r, quality=100, exif=_exif(6))
    np.testing.assert_array_equal(load_image(r), np.rot90(got, -1))


def test_16_bit_grayscale_by_its_high_byte(tmp_path: Path) -> None:
    v = np.array([[0, 255, 256, 1000, 40000, 65535]], np.uint16)
    p = tmp_path / "g16.png"
    Image.fromarray(v).save(p)
    with Image.open(p) as im:
        assert im.mode == "I;16"
        assert np.asarray(im.convert("RGB"))[0, :, 0].tolist() == [0, 255, 255, 255, 255, 255]
    got, plain = load_image_as_shown(p)
    assert not plain  # Pillow's convert("RGB") clips: 40000 would show as white
    assert got[0].tolist() == [[x] * 3 for x in (0, 0, 1, 3, 156, 255)]
    tall = np.arange(12, dtype=np.uint16).reshape(3, 4) * 5000
    r = tmp_path / "g16-rot.png"
    Image.fromarray(tall).save(r, exif=_exif(6))
    want = np.repeat((np.rot90(tall, -1) >> 8).astype(np.uint8)[..., None], 3, axis=2)
    np.testing.assert_array_equal(load_image(r), want)
    key = tmp_path / "g16-key.png"  # a 16-bit gray colour key (tRNS) is transparent
    Image.fromarray(v).save(key, transparency=1000)
    assert load_image(key)[0, 3].tolist() == [255, 255, 255]


def test_palette_images_with_and_without_transparency(tmp_path: Path) -> None:
    idx = np.array([[0, 1, 2, 1]], np.uint8)
    pal = [200, 10, 20, 30, 140, 250, 5, 6, 7] + [0] * (256 * 3 - 9)

    def palette_image() -> Image.Image:
        im = Image.fromarray(idx, "P")
        im.putpalette(pal)
        return im

    plain_p = tmp_path / "p.png"
    palette_image().save(plain_p)
    got, plain = load_image_as_shown(plain_p)
    assert plain and got[0].tolist() == [[200, 10, 20], [30, 140, 250], [5, 6, 7], [30, 140, 250]]
    one = tmp_path / "p-key.png"
    palette_image().save(one, transparency=1)  # index 1 transparent (tRNS)
    got, plain = load_image_as_shown(one)
    assert not plain
    assert got[0].tolist() == [[200, 10, 20], [255, 255, 255], [5, 6, 7], [255, 255, 255]]
    per = tmp_path / "p-alpha.png"
    palette_image().save(per, transparency=bytes([255, 128, 0]))  # alpha per palette entry
    want = _over_white(np.array([[[200, 10, 20], [30, 140, 250], [5, 6, 7], [30, 140, 250]]]),
                       np.array([[255, 128, 0, 128]]))
    np.testing.assert_array_equal(load_image(per), want)
    gif = tmp_path / "p.gif"
    palette_image().save(gif, transparency=2)
    assert load_image(gif)[0, 2].tolist() == [255, 255, 255]
    assert load_image(gif)[0, 0].tolist() == [200, 10, 20]


def test_la_rgba_and_colour_key_over_white(tmp_path: Path) -> None:
    la = np.array([[[100, 255], [100, 0], [100, 128], [7, 1]]], np.uint8)
    p = tmp_path / "la.png"
    Image.fromarray(la, "LA").save(p)
    got, plain = load_image_as_shown(p)
    assert not plain
    want = _over_white(np.repeat(la[..., :1], 3, axis=2), la[..., 1])
    np.testing.assert_array_equal(got, want)
    assert got[0, :3, 0].tolist() == [100, 255, (100 * 128 + 255 * 127 + 127) // 255]
    rgba = np.array([[[200, 100, 50, 255], [200, 100, 50, 0], [200, 100, 50, 64]]], np.uint8)
    q = tmp_path / "rgba.png"
    Image.fromarray(rgba, "RGBA").save(q)
    np.testing.assert_array_equal(load_image(q), _over_white(rgba[..., :3], rgba[..., 3]))
    w = tmp_path / "rgba.webp"
    Image.fromarray(rgba, "RGBA").save(w, lossless=True)
    np.testing.assert_array_equal(load_image(w), _over_white(rgba[..., :3], rgba[..., 3]))
    opaque = tmp_path / "opaque.png"  # fully opaque RGBA: the same pixels as before
    Image.fromarray((np.full((2, 2, 4), 255) * [1, 0, 1, 1]).astype(np.uint8)).save(opaque)
    assert load_image(opaque).tolist() == np.asarray(
        Image.open(opaque).convert("RGB")).tolist()
    key = tmp_path / "rgb-key.png"
    Image.fromarray(np.array([[[1, 2, 3], [4, 5, 6]]], np.uint8)).save(key,
                                                                      transparency=(4, 5, 6))
    assert load_image(key).tolist() == [[[1, 2, 3], [255, 255, 255]]]
    rot = tmp_path / "rgba-rot.png"
    Image.fromarray(rgba, "RGBA").save(rot, exif=_exif(8))
    np.testing.assert_array_equal(load_image(rot),
                                  np.rot90(_over_white(rgba[..., :3], rgba[..., 3])))


def test_plain_modes_unchanged(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    for mode in ("RGB", "L", "1"):
        arr = rng.integers(0, 256, (5, 7, 3), np.uint8)
        im = Image.fromarray(arr).convert(mode)
        p = tmp_path / f"{mode}.png"
        im.save(p)
        got, plain = load_image_as_shown(p)
        assert plain
        np.testing.assert_array_equal(got, np.asarray(Image.open(p).convert("RGB")))
        assert decode_image(p.read_bytes(), "x").tobytes() == got.tobytes()


# --- the whole import -----------------------------------------------------------------------

def _mode_images(root: Path) -> dict[str, Path]:
    """One file per mode case under ``root`` (names with spaces, % and Unicode)."""
    rng = np.random.default_rng(5)
    out: dict[str, Path] = {}
    d = root / "shots 100%" / "ünï"
    d.mkdir(parents=True)
    cmyk = rng.integers(0, 256, (12, 16, 4), np.uint8)
    out["cmyk"] = d / "cmyk 猫.jpg"
    Image.fromarray(cmyk, "CMYK").save(out["cmyk"], quality=95)
    out["i16"] = d / "depth.png"
    Image.fromarray(rng.integers(0, 65536, (12, 16), np.uint16)).save(out["i16"])
    pim = Image.fromarray(rng.integers(0, 4, (12, 16), np.uint8), "P")
    pim.putpalette(list(range(12)) + [0] * (256 * 3 - 12))
    out["p"] = d / "pal.png"
    pim.save(out["p"])
    out["p_key"] = d / "pal key.png"
    pim.save(out["p_key"], transparency=2)
    out["la"] = d / "la.png"
    Image.fromarray(rng.integers(0, 256, (12, 16, 2), np.uint8), "LA").save(out["la"])
    out["rgba"] = d / "rgba.png"
    Image.fromarray(rng.integers(0, 256, (12, 16, 4), np.uint8), "RGBA").save(out["rgba"])
    out["exif"] = d / "rot.jpg"
    Image.fromarray(rng.integers(0, 256, (12, 16, 3), np.uint8)).save(out["exif"],
                                                                      exif=_exif(6))
    return out


@pytest.mark.parametrize("store", ["raw", "encoded"])
def test_import_reads_every_case_as_shown(tmp_path: Path, store: str) -> None:
    from npu_data.shards.format import ENC_JPEG, ENC_PNG
    from npu_data.shards.reader import ShardDataset
    from npu_data.shards.writer import WriteOptions, write_dataset

    root, ls = tmp_path / "docroot", tmp_path / "lsdata"
    files = _mode_images(root)
    upload = _file(ls / "media" / "upload" / "4" / "0a1b2c3d-up.png",
                   files["rgba"].read_bytes())
    refs = {k: _ls_local_ref(str(PureWindowsPath(p.relative_to(root))))
            for k, p in files.items()}
    refs["upload"] = "/data/upload/4/0a1b2c3d-up.png"
    tasks = [{"id": i + 1, "data": {"image": ref}, "annotations": []}
             for i, ref in enumerate(refs.values())]
    export = tmp_path / "export.json"
    export.write_bytes(b"\xef\xbb\xbf" + json.dumps(tasks, ensure_ascii=False).encode("utf-8"))
    s = write_dataset(export, tmp_path / "ds", WriteOptions(
        store=store, shard_size=3, images=ImageOptions(local_files_root=root, ls_data_dir=ls)))
    assert s.samples == len(tasks)
    ds = ShardDataset(tmp_path / "ds")
    paths = [*files.values(), upload]
    for i, (name, path) in enumerate(zip(refs, paths, strict=True)):
        want = load_image(path)
        np.testing.assert_array_equal(ds[i]["image"], want, err_msg=name)
        if store == "encoded":
            k, j = ds.locate(i)
            enc = int(ds.shard(k).index[j]["encoding"])
            # files that a plain decode would misread are stored as PNGs of what was shown
            assert enc == {"cmyk": ENC_JPEG, "exif": ENC_JPEG, "p": ENC_PNG}.get(name, ENC_PNG)
            if name in ("cmyk", "exif", "p"):
                off, n = int(ds.shard(k).index[j]["offset"]), int(ds.shard(k).index[j]["length"])
                # the JPEG's own bytes, re-encoded losslessly with restart markers (the CMYK
                # one cannot be: kept as it is)
                kept = path.read_bytes()
                stored = ds.shard(k).data[off:off + n].tobytes()
                assert stored == (with_restarts(kept) if name == "exif" else kept), name
                assert (stored != kept) == (name == "exif" and jpeg_ops() is not None), name
    assert ds[list(refs).index("exif")]["image"].shape == (16, 12, 3)
    with Image.open(files["i16"]) as im:
        assert (np.asarray(im) > 255).any()  # the test means 16-bit
