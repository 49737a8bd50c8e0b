"""Stream WebDataset tars (local paths or http URLs) as the sample dicts ShardDataset yields.

Work is split over ``rank x worker``: whole tars when there are at least as many tars as
consumers, otherwise each tar is shared by a group of consumers that take its samples
round-robin — so no worker is left without data and nothing is read twice by one consumer.

Under a ``DataLoader`` that crops while reading (``loaders.stream_crop``) a stream's JPEGs
are not decoded here: only their header is read (the size the crop box needs) and the
collate decodes each box alone.
"""

from __future__ import annotations

import hashlib
import io
import multiprocessing
import os
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageOps

from npu_data.annotations.table import GROUP_NESTED, GROUPS
from npu_data.common.batch import EncodedImage
from npu_data.loaders.stream_crop import PLAN_KEY, CropState, StreamPlan
from npu_data.shards.wds_io import WdsSample, iter_tar_samples, table_from_json


def _rank_world(rank: int | None, world: int | None) -> tuple[int, int]:
    if rank is not None and world is not None:
        return rank, world
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def assignment(num_shards: int, consumer: int, consumers: int) -> list[tuple[int, int, int]]:
    """(shard, offset, stride) triples consumer ``consumer`` of ``consumers`` reads."""
    if num_shards >= consumers:
        return [(k, 0, 1) for k in range(consumer, num_shards, consumers)]
    k = consumer % num_shards
    group = [c for c in range(consumers) if c % num_shards == k]
    return [(k, group.index(consumer), len(group))]


def decode_image(data: bytes) -> np.ndarray:
    """The ``(H, W, 3)`` uint8 pixels of an image file (its EXIF orientation applied)."""
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(ImageOps.exif_transpose(im).convert("RGB"))


@dataclass(frozen=True)
class TarJpeg(EncodedImage):
    """A tar's JPEG not decoded yet (crop at read): its bytes, its decoded ``shape``;
    ``decode()`` is ``decode_sample``'s full decode."""

    def decode(self) -> np.ndarray:
        return decode_image(self.data.tobytes())


_TRANSPOSED = frozenset(range(2, 9))  # EXIF orientations Pillow's exif_transpose applies


def plain_jpeg_size(data: bytes) -> tuple[int, int] | None:
    """``(height, width)`` of a JPEG the region decoder may decode as stored (RGB or grey,
    no orientation that ``decode_image`` applies), from its header; None for any other."""
    with Image.open(io.BytesIO(data)) as im:
        if im.format != "JPEG" or im.mode not in ("RGB", "L"):
            return None
        if im.getexif().get(0x0112, 1) in _TRANSPOSED:  # EXIF or XMP, as exif_transpose
            return None
        w, h = im.size
    return int(h), int(w)


def decode_sample(smp: WdsSample) -> dict[str, Any]:
    """The ShardDataset sample dict of one WebDataset sample."""
    image = decode_image(smp.image)
    return _sample(smp, image, image.shape[0], image.shape[1])


def planned_sample(smp: WdsSample, plan: StreamPlan) -> dict[str, Any]:
    """``decode_sample`` for a pass that crops while reading: a plain JPEG stays encoded
    (``TarJpeg``, its size from the header), any other image is decoded; tagged with
    ``plan`` for the collate (``loaders.stream_crop``)."""
    size = plain_jpeg_size(smp.image)
    if size is None:
        s = decode_sample(smp)
    else:
        h, w = size
        data = np.frombuffer(smp.image, dtype=np.uint8)
        s = _sample(smp, TarJpeg(data, (h, w, 3), None, -1, -1), h, w)
    s[PLAN_KEY] = plan
    return s


def _sample(smp: WdsSample, image: Any, h: int, w: int) -> dict[str, Any]:
    """The sample dict of ``smp`` with ``image`` (pixels or ``TarJpeg``) of ``h`` x ``w``."""
    from npu_data.shards.convert import to_pixels

    ann = smp.annotations
    table = table_from_json([ann], [""])
    cols = to_pixels(table, np.array([h]), np.array([w]))
    s: dict[str, Any] = {"image": image, "index": int(ann["index"]),
                         "task_id": int(ann["task_id"])}
    for group, fixed in GROUPS.items():
        for name in fixed:
            s[f"{group}.{name}"] = cols[f"{group}.{name}"]
        for name in ("rid", "text", "path", "from_rid", "to_rid", "labels"):
            key = f"{group}.{name}"
            if f"{key}.offsets" in cols:
                s[key] = table.texts(key)
        for values, offsets, _, _ in GROUP_NESTED.get(group, ()):
            if group == "masks":
                bits, off = cols["masks.bits"], cols["masks.bit_offsets"]
                m = len(off) - 1
                mask = np.zeros((m, h, w), np.uint8)
                for t in range(m):
                    mask[t] = np.unpackbits(bits[off[t]:off[t + 1]], count=h * w).reshape(h, w)
                s["masks.mask"] = mask
            else:
                s[f"{group}.{values}"] = cols[f"{group}.{values}"]
                s[f"{group}.{offsets}"] = cols[f"{group}.{offsets}"]
    s["boxes.corners"] = cols["boxes.corners"]
    s["boxes.xyxy"] = cols["boxes.xyxy"]
    s["caption"] = s["texts.text"][0] if s["texts.text"] else ""
    return s


def _stable_seed(*parts: object) -> int:
    """A seed from ``parts`` that is the same in every process (``hash`` of a str is salted)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


class WebDatasetStream(torch.utils.data.IterableDataset):
    """Streams ``urls`` (tar paths or http URLs) as ShardDataset-style sample dicts.

    ``rank`` / ``world_size`` default to torch.distributed, then ``RANK`` / ``WORLD_SIZE``.
    ``shuffle`` permutes the tar order and a ``buffer``-sample window per ``set_epoch``.
    ``crop_at_read``: armed by a ``DataLoader`` that applies its transform's leading crop
    while reading (``loaders.stream_crop``) for the passes it runs; the batches are the same.
    """

    def __init__(self, urls: Sequence[str], shuffle: bool = False, seed: int = 0,
                 buffer: int = 256, rank: int | None = None,
                 world_size: int | None = None) -> None:
        super().__init__()
        self.urls = [str(u) for u in urls]
        if not self.urls:
            raise ValueError("WebDatasetStream needs at least one tar")
        self.shuffle, self.seed, self.buffer = shuffle, seed, buffer
        self.rank, self.world_size = rank, world_size
        # shared memory: persistent DataLoader workers see set_epoch of the main process
        self._epoch = multiprocessing.RawValue("q", 0)
        self.crop_at_read = CropState()

    @property
    def epoch(self) -> int:
        """The epoch whose shuffle the next pass uses."""
        return int(self._epoch.value)

    def set_epoch(self, epoch: int) -> None:
        """Change the shuffle of the next pass (also in workers already started)."""
        self._epoch.value = int(epoch)

    def _plan(self) -> list[tuple[int, int, int]]:
        rank, world = _rank_world(self.rank, self.world_size)
        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info is not None else (0, 1)
        plan = assignment(len(self.urls), rank * nw + wid, world * nw)
        if self.shuffle:
            random.Random(_stable_seed(self.seed, self.epoch, rank, wid)).shuffle(plan)
        return plan

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = torch.utils.data.get_worker_info()
        rank, _ = _rank_world(self.rank, self.world_size)
        rng = random.Random(_stable_seed(self.seed, self.epoch, rank,
                                         info.id if info is not None else 0, "buffer"))
        crop = self.crop_at_read.plan()  # None unless a DataLoader armed this pass
        pool: list[dict[str, Any]] = []
        for k, offset, stride in self._plan():
            for n, smp in enumerate(iter_tar_samples(self.urls[k])):
                if n % stride != offset:
                    continue
                s = decode_sample(smp) if crop is None else planned_sample(smp, crop)
                if not self.shuffle:
                    yield s
                    continue
                pool.append(s)
                if len(pool) >= self.buffer:
                    yield pool.pop(rng.randrange(len(pool)))
        rng.shuffle(pool)
        yield from pool
