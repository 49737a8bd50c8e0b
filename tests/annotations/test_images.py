"""Image references and decoding."""

from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from npu_data.annotations import ImageError, ImageOptions, load_image, resolve_image
from npu_data.errors import UserError


def _png(path: Path, size: tuple[int, int] = (8, 6), color: tuple[int, int, int] = (10, 20, 30)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, color).save(path)
    return path


def test_upload_local_files_and_paths(tmp_path: Path) -> None:
    opts = ImageOptions(ls_data_dir=tmp_path / "ls", local_files_root=tmp_path / "root",
                        images_root=tmp_path / "imgs")
    assert resolve_image("/data/upload/3/ab12-x.jpg", opts) == (
        tmp_path / "ls/media/upload/3/ab12-x.jpg").resolve()
    got = resolve_image("/data/local-files/?d=sub%2Fmy%20img.png", opts)
    assert got == (tmp_path / "root/sub/my img.png").resolve()
    for bad in ("/data/local-files/?d=../etc/passwd", "/data/local-files/?d=%2E%2E/x"):
        with pytest.raises(ImageError, match="refused"):
            resolve_image(bad, opts)
    # Label Studio serves d=/etc/passwd from <root>/etc/passwd (it strips the leading '/')
    assert resolve_image("/data/local-files/?d=/etc/passwd", opts) == (
        tmp_path / "root/etc/passwd").resolve()
    assert resolve_image("a/b.jpg", opts) == tmp_path / "imgs/a/b.jpg"
    with pytest.raises(ImageError, match="outside the images root.*images_root="):
        resolve_image("/abs/c.jpg", opts)  # absolute paths only under --images-root
    assert resolve_image(str(tmp_path / "imgs/c.jpg"), opts) == tmp_path / "imgs/c.jpg"
    with pytest.raises(ImageError, match="allow_download="):
        resolve_image("http://127.0.0.1:1/x.png", opts)
    assert issubclass(ImageError, UserError)


def test_download_once_from_local_server(tmp_path: Path) -> None:
    served = tmp_path / "www"
    _png(served / "pic.png", color=(200, 100, 50))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/pic.png"
        opts = ImageOptions(allow_download="127.0.0.1", cache_dir=tmp_path / "cache", timeout=5)
        p = resolve_image(url, opts)
        assert p.parent == tmp_path / "cache" and p.suffix == ".png"
        assert load_image(p)[0, 0].tolist() == [200, 100, 50]
        (served / "pic.png").unlink()
        assert resolve_image(url, opts) == p  # cached: no second download
        with pytest.raises(ImageError, match="download failed"):
            resolve_image(url.replace("pic", "missing"), opts)
    finally:
        srv.shutdown()
        srv.server_close()


def test_load_image_reasons(tmp_path: Path) -> None:
    ok = _png(tmp_path / "ok.png", (8, 6))
    arr = load_image(ok)
    assert arr.shape == (6, 8, 3) and arr.dtype == np.uint8
    with pytest.raises(ImageError, match="decompression bomb"):
        load_image(ok, max_pixels=10)
    with pytest.raises(ImageError, match="not found"):
        load_image(tmp_path / "nope.png")
    trunc = tmp_path / "t.jpg"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), np.uint8)).save(trunc)
    trunc.write_bytes(trunc.read_bytes()[:300])
    with pytest.raises(ImageError, match="truncated or corrupt"):
        load_image(trunc)
    gray = tmp_path / "g.png"
    Image.new("L", (3, 2), 77).save(gray)
    assert load_image(gray).shape == (2, 3, 3)


def test_exif_orientation_applied(tmp_path: Path) -> None:
    p = tmp_path / "rot.jpg"
    im = Image.new("RGB", (8, 4), (255, 0, 0))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 CW on display
    im.save(p, exif=exif)
    assert load_image(p).shape == (8, 4, 3)
