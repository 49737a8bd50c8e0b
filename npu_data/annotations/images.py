"""Resolve Label Studio image references to local files, and decode images.

References are read as Label Studio writes and serves them: ``/data/local-files/?d=`` with the
path URL-escaped (``%5C`` for the backslashes of a Windows server, ``%20``, ``%25``, UTF-8
escapes; a leading ``/`` is relative to the root, as the server strips it), uploads under
``/data/upload/<project>/<hash>-<name>``, both also behind the server's own address
(``http://host:8080/data/...``, what a server with ``HOSTNAME`` set writes). A name that is not
on disk as written is also looked up with ``/`` for ``\\`` and in the other Unicode
normalisation (macOS writes decomposed names). Images decode to the RGB the annotator saw in
the browser (``decode_image``).
"""

from __future__ import annotations

import io
import os
import posixpath
import unicodedata
import warnings
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import numpy as np
from PIL import Image, ImageOps

from npu_data.annotations import cloud, fetch
from npu_data.annotations.fetch import ImageError
from npu_data.errors import UserError, UserTypeError, UserValueError

CLOUD_SCHEMES = ("s3://", "gs://", "azure-blob://")
__all__ = ["ImageError", "ImageOptions", "decode_image", "load_image", "load_image_as_shown",
           "prefetch", "read_image_bytes", "resolve_image"]


@dataclass
class ImageOptions:
    """Where references point to on this machine, and what may be fetched.

    ``images_root`` confines relative paths, absolute paths and ``file://`` references;
    ``allow_download`` names the hosts http(s) images may be downloaded from (``"a,b"`` or a
    list; nothing is downloaded otherwise), each at most ``max_download_bytes``, with
    ``timeout`` seconds for a connect or a read; downloads are cached, verified, in
    ``cache_dir`` (default: ``fetch.default_cache_dir()``, mode 0700). Cloud storage
    (``s3://``, ``gs://``, ``azure-blob://``, Label Studio's storage links, presigned URLs) is
    read with the user's own credentials (``storage_endpoint``: an S3-compatible store), by
    ``download_workers`` threads at once during an import (see ``cloud``).
    """

    ls_data_dir: Path | None = None
    local_files_root: Path | None = None
    images_root: Path | None = None
    allow_download: Any = ()
    cache_dir: Path | None = None
    timeout: float = fetch.DEFAULT_TIMEOUT
    max_download_bytes: int = fetch.DEFAULT_MAX_BYTES
    storage_endpoint: str | None = None
    download_workers: int = 8

    def __post_init__(self) -> None:
        self.allow_download = fetch.parse_hosts(self.allow_download)
        self.storage_endpoint = cloud.check_endpoint(self.storage_endpoint)
        _positive("download_workers", self.download_workers, int, "must be at least 1")
        _positive("max_download_bytes", self.max_download_bytes, int, "must be positive")
        _positive("timeout", self.timeout, float, "must be a positive number of seconds")


def _positive(option: str, value: Any, kind: type, why: str) -> None:
    """``UserValueError`` unless ``value`` is a number above 0, ``UserTypeError`` unless it
    is a number (of ``kind``: an ``int`` where it is): ``<option>=<value>: <why>``."""
    shown = f"{value:g}" if isinstance(value, float) else repr(value)
    text = f"{{{option}={shown}}}: {why}"
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if number and not value > 0:
        raise UserValueError(text, option=option)
    if not number or not isinstance(value, (int, kind)):
        raise UserTypeError(f"{text} ({kind.__name__})", option=option)


def _spellings(rel: str) -> list[str]:
    """``rel`` as written, then with ``/`` for ``\\`` (a Windows server's separators), each
    also in NFC and NFD (decomposed names from macOS): the names a file may have on disk."""
    out: list[str] = []
    for r in dict.fromkeys((rel, rel.replace("\\", "/"))):
        for v in (r, unicodedata.normalize("NFC", r), unicodedata.normalize("NFD", r)):
            if v not in out:
                out.append(v)
    return out


def _existing(base: Path, rel: str) -> Path:
    """The first spelling of ``rel`` under ``base`` that exists, else the ``/`` spelling."""
    names = _spellings(rel)
    for name in names:
        p = base / name
        if p.exists():
            return p
    return base / rel.replace("\\", "/")


def _under(root: Path, rel: str, ref: str, what: str) -> Path:
    base = root.resolve()
    target = _existing(base, rel).resolve()
    if not target.is_relative_to(base):
        raise ImageError(f"{ref}: the path leaves the {what} {base} — refused")
    return target


def _inside(path: str, root: Path) -> bool:
    """Whether ``path`` (absolute) names something under ``root``, as written (``..``
    collapsed, the user's own symlinks inside the root kept) or under the root's real path."""
    p = PurePath(os.path.normpath(path))
    return any(p.is_relative_to(r) for r in (Path(os.path.abspath(root)), Path(root).resolve()))


def _confined(path: str, ref: str, options: ImageOptions) -> Path:
    """A relative path, an absolute path or a ``file://`` reference's path: read only under
    the images root (the export's folder unless ``images_root`` says otherwise)."""
    if os.path.isabs(path):
        if options.images_root is None:
            raise ImageError(f"{ref}: an absolute path — pass {{images_root}} <folder that holds "
                             "it> (absolute paths and file:// references are read only under "
                             "it)", option="images_root")
        root = Path(options.images_root)
        target = _existing(Path("/"), path.lstrip("/"))
    else:
        root = Path(options.images_root or ".")
        target = _existing(root, path)
    where = os.path.normpath(os.path.abspath(target))  # read as checked: '..' collapsed
    if not _inside(where, root):
        raise ImageError(f"{ref}: outside the images root {os.path.abspath(root)} — refused "
                         "(relative and absolute paths and file:// references are read only "
                         "under the images root: pass {images_root} <one that holds the "
                         "images>)", option="images_root")
    return Path(where)


def _local_files_rel(d: str) -> str:
    """The path Label Studio serves for ``?d=<d>`` (already unescaped): normalised, leading
    ``/`` stripped — relative to its LOCAL_FILES_DOCUMENT_ROOT (the server's own rule)."""
    d = d.replace("\\", "/") if "\\" in d else d
    return posixpath.normpath(d).lstrip("/") if d else d


def _server_path(ref: str) -> str | None:
    """``/data/...`` of a reference to the Label Studio server itself (``http(s)://host/data/
    upload/...`` or ``.../data/local-files/?d=...``), else None."""
    parts = urlsplit(ref)
    if parts.path.startswith("/data/upload/") or parts.path.startswith("/data/local-files"):
        return parts.path + (f"?{parts.query}" if parts.query else "")
    return None


def resolve_image(ref: str, options: ImageOptions | None) -> Path:
    """The local path of image reference ``ref`` (downloading it when allowed)."""
    options = options if options is not None else ImageOptions()
    obj = cloud.parse(ref, options)
    if obj is not None:
        try:
            return cloud.read(ref, obj, options, _cache(options))
        except ImageError:
            # a presigned URL the user cannot read with their own credentials is still a
            # download from a host they may have named
            if ref.startswith(("http://", "https://")) and fetch.host_allowed(
                    ref, options.allow_download):
                return _download(ref, options)
            raise
    if ref.startswith(("http://", "https://")):
        local = _server_path(ref)  # the server's own files: read where they are when we can
        if local is not None and (
                (local.startswith("/data/upload/") and options.ls_data_dir is not None)
                or (local.startswith("/data/local-files")
                    and options.local_files_root is not None)):
            return _resolve_server(local, ref, options)
        return _download(ref, options)
    if ref.startswith(("/data/upload/", "/data/local-files")):
        return _resolve_server(ref, ref, options)
    if ref.startswith("file://"):
        parts = urlsplit(ref)
        if parts.netloc not in ("", "localhost"):
            raise ImageError(f"{ref}: a file on another machine ({parts.netloc}) — refused")
        return _confined(unquote(parts.path), ref, options)
    return _confined(ref, ref, options)


def _download(ref: str, options: ImageOptions) -> Path:
    """``fetch.download`` of ``ref``. A presigned URL in Label Studio's doubly escaped form
    (``%252F``) that the server refuses as written is asked for once more with that extra
    escaping undone (the error reported is the first one)."""
    def get(url: str) -> Path:
        return fetch.download(url, options.allow_download, _cache(options),
                              options.max_download_bytes, options.timeout)

    try:
        return get(ref)
    except ImageError as first:
        if "%25" not in ref or first.status not in (400, 403, 404) or not cloud.is_signed(ref):
            raise
        try:
            return get(ref.replace("%25", "%"))
        except ImageError:
            raise first from None


def prefetch(refs: list[str], options: ImageOptions | None) -> dict[str, Path | UserError]:
    """Resolve the remote references among ``refs`` (downloads, cloud storage) in parallel,
    ``download_workers`` at a time: ref -> local path, or the error that rejects it."""
    if options is None:
        return {}
    remote = [r for r in dict.fromkeys(refs) if isinstance(r, str) and (
        r.startswith(("http://", "https://")) or cloud.is_cloud(r))]
    workers = min(options.download_workers, len(remote))
    if workers < 2:
        return {}
    from concurrent.futures import ThreadPoolExecutor

    out: dict[str, Path | UserError] = {}
    with ThreadPoolExecutor(workers, thread_name_prefix="npu-data-fetch") as pool:
        futures = {r: pool.submit(resolve_image, r, options) for r in remote}
        for r, f in futures.items():
            try:
                out[r] = f.result()
            except UserError as e:
                out[r] = e
    return out


def _cache(options: ImageOptions) -> Path:
    return Path(options.cache_dir) if options.cache_dir else fetch.default_cache_dir()


def _resolve_server(path: str, ref: str, options: ImageOptions) -> Path:
    """``/data/upload/...`` or ``/data/local-files/?d=...`` (``ref``: as the task wrote it)."""
    if path.startswith("/data/upload/"):
        if options.ls_data_dir is None:
            raise ImageError(f"{ref}: an uploaded file — pass {{ls_data_dir}} (Label Studio's "
                             "LABEL_STUDIO_BASE_DATA_DIR)", option="ls_data_dir")
        rel = unquote(urlsplit(path).path[len("/data/upload/"):])
        return _under(Path(options.ls_data_dir) / "media" / "upload", rel, ref,
                      "upload folder")
    d = parse_qs(urlsplit(path).query).get("d")
    if not d:
        raise ImageError(f"{ref}: a local-files reference without ?d=<path>")
    if options.local_files_root is None:
        raise ImageError(f"{ref}: a local file — pass {{local_files_root}} (Label Studio's "
                         "LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT)", option="local_files_root")
    return _under(Path(options.local_files_root), _local_files_rel(d[0]), ref,
                  "local-files root")


def read_image_bytes(path: Path) -> bytes:
    """The bytes of an image file (ImageError if missing or unreadable)."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise ImageError(f"{path}: image file not found") from None
    except OSError as e:
        raise ImageError(f"{path}: cannot read the image ({e.strerror})") from None


def load_image(path: Path, max_pixels: int = 178_956_970) -> np.ndarray:
    """Decode ``path`` to RGB uint8 (H, W, 3) as the browser showed it (``decode_image``)."""
    return decode_image(read_image_bytes(path), str(path), max_pixels)


def load_image_as_shown(path: Path, max_pixels: int = 178_956_970,
                        alpha: str = "white") -> tuple[np.ndarray, bool]:
    """``load_image`` and whether Pillow's plain ``convert("RGB")`` gives the same pixels
    (False for alpha, transparency and 16-bit samples: the file alone would decode otherwise).
    ``alpha="drop"``: Pillow's ``convert("RGB")`` of the oriented image, as trainers load
    images (transparent pixels keep their colour)."""
    return _decode(read_image_bytes(path), str(path), max_pixels, alpha)


BACKGROUND = 255  # what shows through transparent pixels: the white of Label Studio's editor
PLAIN_MODES = ("RGB", "L", "1", "P", "CMYK", "YCbCr")  # convert("RGB") is what a browser shows


def decode_image(data: bytes, name: str, max_pixels: int = 178_956_970) -> np.ndarray:
    """Decode encoded image bytes to RGB uint8 (H, W, 3): the pixels Label Studio's editor
    showed the annotator. EXIF orientation applied; alpha (RGBA, LA, PA, a palette's or a
    colour key's transparency) composited over white; 16-bit samples (``I;16``) reduced to
    their high byte, as browsers (libpng's strip_16) and Pillow's own 16-bit RGB decoding do;
    CMYK, palette, bilevel and grayscale by Pillow's conversion (a browser's for a CMYK JPEG
    without a colour profile)."""
    return _decode(data, name, max_pixels)[0]


def _decode(data: bytes, name: str, max_pixels: int,
            alpha: str = "white") -> tuple[np.ndarray, bool]:
    try:
        with warnings.catch_warnings():  # the size is checked here, never warned about raw
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            im = Image.open(io.BytesIO(data))  # reads the header only
        with im:
            w, h = im.size
            if w * h > max_pixels:  # before a pixel is decoded: memory stays bounded
                raise ImageError(f"{name}: {w}x{h} = {w * h} pixels, over the limit of "
                                 f"{max_pixels} (a decompression bomb?) — raise {{max_pixels}} "
                                 "if it is genuine", option="max_pixels")
            im.load()
            png = im.format == "PNG"
            oriented = ImageOps.exif_transpose(im) or im
            if alpha == "drop":
                return np.asarray(oriented.convert("RGB"), dtype=np.uint8), True
            return _as_shown(oriented, png)
    except ImageError:
        raise
    except Image.DecompressionBombError:
        limit = 2 * (Image.MAX_IMAGE_PIXELS or 0)
        raise ImageError(f"{name}: over {limit} pixels, Pillow's own limit (a decompression "
                         "bomb?) — if it is genuine, raise PIL.Image.MAX_IMAGE_PIXELS and "
                         "{max_pixels}", option="max_pixels") from None
    except (OSError, SyntaxError, ValueError) as e:
        raise ImageError(f"{name}: cannot decode the image ({e}) — truncated or corrupt") from None


def _as_shown(im: Image.Image, png: bool) -> tuple[np.ndarray, bool]:
    """(RGB uint8 pixels of ``im`` as a browser shows them, whether convert("RGB") agrees)."""
    mode = im.mode
    key = im.info.get("transparency")
    if mode.startswith("I;16") or (mode == "I" and png):  # 16-bit gray (older Pillow: "I")
        v = np.asarray(im).astype(np.int64)
        gray = (np.clip(v, 0, 65535) >> 8).astype(np.uint8)
        alpha = None if not isinstance(key, int) else np.where(v == key, 0, 255).astype(np.uint8)
        return _over_background(np.repeat(gray[..., None], 3, axis=2), alpha), False
    if mode in ("RGBA", "LA", "PA", "RGBa", "La") or key is not None:
        rgba = np.asarray(im.convert("RGBA"), dtype=np.uint8)
        return _over_background(rgba[..., :3], rgba[..., 3]), False
    return np.asarray(im.convert("RGB"), dtype=np.uint8), mode in PLAIN_MODES


def _over_background(rgb: np.ndarray, alpha: np.ndarray | None) -> np.ndarray:
    """``rgb`` composited over the white background by ``alpha`` (rounded to nearest)."""
    if alpha is None:
        return np.ascontiguousarray(rgb)
    a = alpha.astype(np.uint32)[..., None]
    out = (rgb.astype(np.uint32) * a + BACKGROUND * (255 - a) + 127) // 255
    return out.astype(np.uint8)
