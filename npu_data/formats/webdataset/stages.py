"""The small stages a WebDataset stream chains (as webdataset's pipelines): tars -> samples
of this consumer (``split``) -> sample dicts (``decode``, or ``planned`` when the pass crops
while reading) -> a shuffle buffer (``shuffle``).

A sample dict is what ``ShardDataset[i]`` returns for the same sample: the JSON's columns
(``mapping.sample_columns``, pixel coordinates, the shard dtypes) with the image.
"""

from __future__ import annotations

import io
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from npu_data.batch import EncodedImage
from npu_data.errors import UserError
from npu_data.formats.webdataset import jpeg_header
from npu_data.formats.webdataset.mapping import sample_columns
from npu_data.formats.webdataset.reader import (
    TarAccess,
    WdsSample,
    bad_annotations,
    iter_tar_samples,
    shown,
)
from npu_data.kinds.registry import KINDS
from npu_data.shards.image_payload import MAX_PIXELS

_TRANSPOSED = frozenset(range(2, 9))  # EXIF orientations Pillow's exif_transpose applies
_BAD_IMAGE = (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError)


def decode_image(data: bytes) -> np.ndarray:
    """The ``(H, W, 3)`` uint8 pixels of an image file (its EXIF orientation applied)."""
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(ImageOps.exif_transpose(im).convert("RGB"))


@dataclass(frozen=True)
class TarJpeg(EncodedImage):
    """A tar's JPEG not decoded yet (crop at read): its bytes, its decoded ``shape``, the
    sample it belongs to (``where``: tar and key, for errors); ``decode()`` is ``decode``'s
    full decode."""

    where: str = ""

    def decode(self) -> np.ndarray:
        try:
            return decode_image(self.data.tobytes())
        except _BAD_IMAGE as exc:
            raise UserError(f"{self.where}: the image does not decode ({exc}) — export it "
                            "again") from None


def plain_jpeg_size(data: bytes) -> tuple[int, int] | None:
    """``(height, width)`` of a JPEG the region decoder may decode as stored (RGB or grey,
    no orientation that ``decode_image`` applies), from its header; None for any other.
    The markers are read directly (``jpeg_header``); Pillow answers what they do not settle
    (several EXIF segments, an XMP orientation, other precisions, unusual headers)."""
    head = jpeg_header.scan(data)
    if head is not None and head.exif_segments <= 1 and not head.xmp_orientation \
            and head.precision == 8:
        if head.components not in (1, 3) or head.orientation in _TRANSPOSED:
            return None
        return head.height, head.width
    return _pillow_size(data)


def _pillow_size(data: bytes) -> tuple[int, int] | None:
    """``plain_jpeg_size`` through Pillow (its mode, EXIF and XMP orientation)."""
    with Image.open(io.BytesIO(data)) as im:
        if im.format != "JPEG" or im.mode not in ("RGB", "L"):
            return None
        if im.getexif().get(0x0112, 1) in _TRANSPOSED:  # EXIF or XMP, as exif_transpose
            return None
        w, h = im.size
    return int(h), int(w)


# ------------------------------------------------------------------------------ per sample
def annotate(smp: WdsSample, image: Any, h: int, w: int) -> dict[str, Any]:
    """The sample dict of ``smp`` with ``image`` (pixels or ``TarJpeg``) of ``h`` x ``w``."""
    ann = smp.annotations
    try:
        cols = sample_columns(ann)
        size = int(ann["height"]), int(ann["width"])
        s: dict[str, Any] = {"image": image, "index": int(ann["index"]),
                             "task_id": int(ann["task_id"]),
                             "original_size": np.array([h, w], np.int64)}
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise bad_annotations(smp, exc) from None
    if size != (h, w):
        raise UserError(f"{shown(smp.url)}: sample {smp.key}: the image is {h}x{w} pixels but "
                        f"its annotations are for {size[0]}x{size[1]} — export it again")
    for kind in KINDS:
        kind.json_sample(cols, (h, w))
    s.update(cols)
    texts = s.get("texts.text") or []
    s["caption"] = texts[0] if texts else ""
    return s


def _where(smp: WdsSample) -> str:
    return f"{shown(smp.url)}: sample {smp.key}"


def _image(smp: WdsSample) -> np.ndarray:
    try:
        return decode_image(smp.image)
    except _BAD_IMAGE as exc:
        raise UserError(f"{_where(smp)}: the image does not decode ({exc}) — export it "
                        "again") from None


def decode(smp: WdsSample) -> dict[str, Any]:
    """The ShardDataset sample dict of one WebDataset sample (the image decoded)."""
    image = _image(smp)
    return annotate(smp, image, image.shape[0], image.shape[1])


def planned(smp: WdsSample, plan: object) -> dict[str, Any]:
    """``decode`` for a pass that crops while reading (``plan``): a plain JPEG stays encoded
    (``TarJpeg``, its size from the header) for the reader's region decoder
    (``readers.read_crop.decode_boxes``), any other image is decoded."""
    try:
        size = plain_jpeg_size(smp.image)
    except _BAD_IMAGE:
        size = None  # ``decode`` names the sample
    if size is None:
        s = decode(smp)
    else:
        h, w = size
        if h * w > MAX_PIXELS:  # the crop's buffers follow the header's size: capped first
            raise UserError(f"{_where(smp)}: the JPEG header claims {w}x{h} pixels, more "
                            f"than {MAX_PIXELS} — refused (a decompression bomb?)")
        data = np.frombuffer(smp.image, dtype=np.uint8)
        s = annotate(smp, TarJpeg(data, (h, w, 3), None, -1, -1, _where(smp)), h, w)
    return s


# ------------------------------------------------------------------------------ streams
def split(urls: Sequence[str], plan: Iterable[tuple[int, int, int]],
          access: TarAccess | None = None) -> Iterator[WdsSample]:
    """The samples of a consumer's ``plan``: (tar, offset, stride) — sample ``n`` of tar
    ``urls[tar]`` when ``n % stride == offset``."""
    for k, offset, stride in plan:
        for n, smp in enumerate(iter_tar_samples(urls[k], access)):
            if n % stride == offset:
                yield smp


def to_dicts(samples: Iterable[WdsSample], crop: object | None) -> Iterator[dict[str, Any]]:
    """Sample dicts: decoded (``crop`` None) or planned for the pass's crop at read (``crop``:
    the pass's draw, ``loaders.request.CropState.plan``)."""
    for smp in samples:
        yield decode(smp) if crop is None else planned(smp, crop)


def shuffle(items: Iterable[dict[str, Any]], buffer: int, rng: random.Random | None
            ) -> Iterator[dict[str, Any]]:
    """``items`` through a ``buffer``-item shuffle window (in order when ``rng`` is None)."""
    if rng is None:
        yield from items
        return
    pool: list[dict[str, Any]] = []
    for item in items:
        pool.append(item)
        if len(pool) >= buffer:
            yield pool.pop(rng.randrange(len(pool)))
    rng.shuffle(pool)
    yield from pool
