"""The batch types shared by the shard reader and the loaders: the request of one batch
(``BatchRequest``: its samples and its parameters, drawn once in the main process), a batch
read column-wise (``BatchColumns``), the crop a reader applies while reading (``CropPlan``),
a JPEG not decoded yet (``EncodedImage``), and ``ColumnBatch``, the lazy batch of sample
dicts that the loaders' assembler builds from its columns in one shot."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Sample = dict[str, Any]  # one sample as a dataset returns it
Batch = dict[str, Any]  # a collated batch: image, sizes, geometry groups, meta (architecture.md)


@dataclass
class BatchColumns:
    """One batch read column-wise; rows of every group are concatenated in batch order."""

    keys: list[str]                     # the sample dict's keys, in order
    images: list[Any]                   # (H, W, 3) uint8 per sample (raw: memmap views),
    #                                     or EncodedImage (JPEG bytes, read with a crop plan)
    ints: dict[str, np.ndarray]         # "index", "task_id": (B,) int64
    strings: dict[str, list[str]]       # "caption": one string per sample
    counts: dict[str, np.ndarray] = field(default_factory=dict)  # group -> (B,) rows
    rows: dict[str, np.ndarray] = field(default_factory=dict)    # column -> (rows, ...)
    texts: dict[str, list[list[str]]] = field(default_factory=dict)  # text column per sample
    # nested values (polygon points, mask bits): "<kind>.<values>" -> (values, per-row lengths)
    nested: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.images)


@dataclass(frozen=True)
class CropPlan:
    """The leading crop of a batch, drawn before its pixels are read (``transforms.read_crop``:
    one plan for every source): ``boxes (B, 4)`` int64 (top, left, height, width) per
    sample, resized to ``size = (height, width)``; boxes, polygons and masks keeping less
    than ``min_visible`` of their area become invalid; ``fast``: JPEGs may be decoded
    DCT-scaled (not exact, ``DataLoader(decode="fast")``). A window crop
    (``transforms.crop``) also has ``windows (B, 4)`` (top, left, full height, full
    width), ``out (B, 2)`` each sample's valid output size (``size`` the largest) and
    ``top_left (B, 2)``, its ``crop_top_left``. ``seed`` and ``epoch``: the pass it was
    drawn for. ``interpolation``: the resize filter (``"bilinear"``, ``"bicubic"`` or
    ``"lanczos"``); a window reads as far around it as the filter's support reaches.
    ``regions (B, 4)``: the pixels each window reads (None: the boxes); ``decode_regions``:
    a JPEG decodes only those (False where the torch kernels are forced: whole images)."""

    boxes: np.ndarray
    size: tuple[int, int]
    min_visible: float
    fast: bool = False
    windows: np.ndarray | None = None
    out: np.ndarray | None = None
    top_left: np.ndarray | None = None
    seed: int = 0
    epoch: int = 0
    interpolation: str = "bilinear"
    regions: np.ndarray | None = None
    decode_regions: bool = True


@dataclass(frozen=True)
class BatchRequest:
    """One batch as the loader asks for it (plain data; pickles small): the dataset
    ``indices``, the augmentation keys' sample ``ids``, the ``seed`` and augmentation
    ``epoch`` they were drawn for, the aspect-ratio ``bucket`` (the ``BucketBatchSampler``'s
    group index; None: none), the keyed pipeline's parameters drawn once from the stored
    sizes (``params``: name -> array; None when the transform draws none), the leading
    crop the reader applies (``crop``; None: the reader applies none) and the token of the
    pipeline the reader runs whole (``placed``, ``loaders.placement``; None: the main process
    runs it). Iterates over its indices, as the list it replaces."""

    indices: tuple[int, ...]
    ids: np.ndarray
    seed: int = 0
    epoch: int = 0
    bucket: int | None = None
    params: dict[str, np.ndarray] | None = None
    crop: CropPlan | None = None
    placed: bytes | None = None

    def __len__(self) -> int:
        return len(self.indices)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)


@dataclass(frozen=True)
class EncodedImage:
    """A stored JPEG not decoded yet: its bytes (a view of the memory map), its stored
    ``shape (H, W, 3)``, and ``decode()`` — the full Pillow decode ``ds[i]`` does."""

    data: np.ndarray
    shape: tuple[int, int, int]
    dataset: Any
    shard: int
    local: int

    def decode(self) -> np.ndarray:
        try:
            return self.dataset.image(self.shard, self.local)  # type: ignore[no-any-return]
        except Exception:  # ds[i] names the sample and the fix
            self.dataset[int(self.dataset._starts[self.shard]) + self.local]
            raise


class ColumnBatch(Sequence[Sample]):
    """A batch of sample dicts that can also be read column-wise at once (``columns()``);
    ``request``: the ``BatchRequest`` it was read for (None: plain indices)."""

    request: BatchRequest | None

    @abstractmethod
    def columns(self) -> BatchColumns:
        """The whole batch read column-wise."""
