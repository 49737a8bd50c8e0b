"""The three batch types of the path every batch takes (docs/architecture.md "The path of a
batch"): the request of one batch (``BatchRequest``: its samples and its parameters, drawn
once in the main process), the batch on the host (``HostBatch``: read for its request, then
assembled by the loaders) and the batch dict users get (``Batch``). A sample is a plain
``dict[str, Any]``. With them: the crop a reader applies while reading (``CropPlan``, part of
a request) and a JPEG not decoded yet (``EncodedImage``, an image of a host batch)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, overload

import numpy as np
import torch

Batch = dict[str, Any]  # the batch dict users get: image, sizes, geometry groups, meta


@dataclass(frozen=True)
class CropPlan:
    """The leading crop of a batch, drawn before its pixels are read (``transforms.pipeline``)
    and applied by the reader (``readers.read_crop``), one plan for every source: ``boxes
    (B, 4)`` int64 (top, left, height, width) per sample, resized to ``size = (height,
    width)``; boxes, polygons and masks keeping less
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


@dataclass(eq=False)
class HostBatch(Sequence[dict[str, Any]]):
    """One batch on the host, from its read to its copy to the device.

    The reader hands it out for a ``request`` (``ShardDataset.__getitems__``) with its
    samples not read yet: indexing gives sample dicts (``sample(i)``, read one at a time,
    what a user's ``collate_fn`` gets) and :meth:`columns` the whole batch read column-wise
    (``read()``: a ``HostBatch`` whose column attributes are set). The loaders' assembler
    makes it the assembled batch (``image``, ``sizes``, ``fields``): :meth:`as_dict` is the
    ``Batch`` users get.

    Attributes:
        request: what the batch was read for (its parameters); None: plain indices.
        sample: the reader's sample ``i`` of the batch (None: nothing left to read).
        read: the reader's column-wise read of the whole batch.
        size: the number of samples.
        keys: (columns) the sample dict's keys, in order.
        images: (columns) ``(H, W, 3)`` uint8 per sample (raw: memory-map views), or
            ``EncodedImage`` (JPEG bytes, read with a crop plan).
        ints: (columns) ``"index"``, ``"task_id"``, ``"original_size"``: ``(B, ...)`` int64.
        strings: (columns) ``"caption"``: one string per sample.
        counts: (columns) group -> ``(B,)`` rows per sample.
        rows: (columns) column -> ``(rows, ...)``, every group's rows in batch order.
        texts: (columns) text column -> one list of strings per sample.
        nested: (columns) nested values (polygon points, mask bits):
            ``"<kind>.<values>"`` -> (values, per-row lengths).
        batched: (columns, from sample dicts) the keys the columns above cannot carry,
            already in their batch form: float, array and object meta, a group's rows that
            hold None, differ in dtype or shape, or whose count is not the group's.
        padded: (columns, from sample dicts) group -> its kind's own keys padded from the
            samples (``Kind.pad_samples``: masks of any size and values, polygons).
        image: (assembled) ``(B, 3, H, W)`` uint8 (shared memory in a worker, pinned or
            pooled); None for samples without an image.
        sizes: (assembled) ``(B, 2)`` int64 (height, width) of each image in ``image``.
        stored_sizes: (assembled) ``(B, 2)`` int64 of the stored images (``sizes`` unless
            cropped).
        fields: (assembled) every other key of the batch dict, in order: the geometry
            groups (``<kind>.<column>``) and the meta (``index``, ``task_id``, ``caption``...).
        cropped: the request's leading crop is applied.
        applied: the whole keyed pipeline ran (``loaders.placement``): ``fields`` is the
            transformed batch dict, ``image`` and ``sizes`` are None.
        nbytes: the bytes of its tensors, counted where it is assembled (None: not counted).
    """

    request: BatchRequest | None = None
    sample: Callable[[int], dict[str, Any]] | None = None
    read: Callable[[], HostBatch] | None = None
    size: int = 0
    keys: list[str] = field(default_factory=list)
    images: list[Any] = field(default_factory=list)
    ints: dict[str, np.ndarray] = field(default_factory=dict)
    strings: dict[str, list[str]] = field(default_factory=dict)
    counts: dict[str, np.ndarray] = field(default_factory=dict)
    rows: dict[str, np.ndarray] = field(default_factory=dict)
    texts: dict[str, list[list[str]]] = field(default_factory=dict)
    nested: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    batched: dict[str, Any] = field(default_factory=dict)
    padded: dict[str, Batch] = field(default_factory=dict)
    image: torch.Tensor | None = None
    sizes: torch.Tensor | None = None
    stored_sizes: np.ndarray | None = None
    fields: Batch = field(default_factory=dict)
    cropped: bool = False
    applied: bool = False
    nbytes: int | None = None

    def __post_init__(self) -> None:
        self._samples: list[dict[str, Any] | None] = [None] * self.size

    # --- as the reader hands it out ---------------------------------------------------------
    def __len__(self) -> int:
        return self.size

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(i, slice):
            return [self[t] for t in range(len(self))[i]]
        if self.sample is None:
            raise TypeError("an assembled HostBatch holds no sample dicts — use as_dict()")
        s = self._samples[i]
        if s is None:
            s = self._samples[i] = self.sample(range(self.size)[i])
        return s

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self[t] for t in range(len(self)))

    def columns(self) -> HostBatch:
        """The whole batch read column-wise (the reader's ``read``)."""
        if self.read is None:
            return self
        return self.read()

    # --- assembled --------------------------------------------------------------------------
    @classmethod
    def of(cls, batch: Batch, stored: np.ndarray | None, request: BatchRequest | None = None,
           cropped: bool = False, nbytes: int | None = None) -> HostBatch:
        """The ``HostBatch`` of an assembled batch dict (``nbytes``: its tensors' bytes)."""
        fields = dict(batch)
        image, sizes = fields.pop("image", None), fields.pop("sizes", None)
        n = len(sizes) if sizes is not None else 0
        return cls(request, size=n, image=image, sizes=sizes, stored_sizes=stored,
                   fields=fields, cropped=cropped, nbytes=nbytes)

    @property
    def params(self) -> dict[str, torch.Tensor] | None:
        """The request's keyed parameters as host tensors (None: none drawn)."""
        if self.request is None or self.request.params is None:
            return None
        return {k: torch.from_numpy(v) for k, v in self.request.params.items()}

    def as_dict(self) -> Batch:
        """The batch dict users get (``image``, ``sizes``, then the other keys)."""
        if self.applied:
            return self.fields
        head = {k: v for k, v in (("image", self.image), ("sizes", self.sizes))
                if v is not None or k in self.fields}
        return {**head, **self.fields}

    def pin_memory(self) -> HostBatch:
        """Its tensors page-locked (torch's pin-memory thread calls this)."""
        return replace(self, image=pin_tree(self.image), sizes=pin_tree(self.sizes),
                       fields=pin_tree(self.fields))


def pin_tree(value: Any) -> Any:
    """Every CPU tensor of a (nested) value page-locked, its structure kept."""
    if isinstance(value, torch.Tensor):
        return value if value.is_pinned() else value.pin_memory()
    if isinstance(value, Mapping):
        out = {k: pin_tree(v) for k, v in value.items()}
        try:
            return type(value)(out)  # type: ignore[call-arg]
        except TypeError:
            return out
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # named tuple
        return type(value)(*(pin_tree(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(pin_tree(v) for v in value)  # type: ignore[call-arg]
    return value
