"""What the kinds' hooks are handed, as Protocols: the seam between the kinds and the parts
above them, typed so that mypy checks both sides.

The kinds sit below ``npu_data.annotations`` and ``npu_data.transforms`` (as torchvision's
tv_tensors below its transforms) and import neither, not even for typing. The callers hand the
hooks what they need; each Protocol here says what that is, and the caller's object satisfies
it structurally:

- ``ValueChecks``: ``Kind.check(c)`` (``annotations.checks.Check``);
- ``ExtractionContext``, ``ResultBatch``, ``ExtractedRows`` and ``Extraction``:
  ``Kind.extract(ctx, b, R)`` (``annotations.results``' ``Context``, ``Batch``, the
  ``builders.Rows`` it makes, and the module itself as the toolkit ``R``);
- ``GeometryKernels``: ``Kind.resized_crop(..., G)`` / ``Kind.hflip(..., G)`` /
  ``Kind.warp(..., G)``, handed on to the kind's ``kinds.geometry`` layout (the module
  ``transforms.geometry``);
- ``GeometryWarp``: ``Kind.warp(batch, W, G)`` (``transforms.warp_geometry.Warp``);
- ``Canvas``: ``Kind.paint(canvas, sample)`` (``previews.canvas.Canvas``).

Modules satisfy a Protocol when they are passed by name (``kind.extract(ctx, b, results)``):
mypy then checks every function the Protocol names against the module's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

if TYPE_CHECKING:
    import torch
    from PIL import Image, ImageDraw

Colour = tuple[int, int, int]


class ValueChecks(Protocol):
    """The checks of one batch of result values (``Kind.check``); ``fail(row, why)`` rejects
    the row's task with a reason."""

    MISSING: Any  # the value of an absent key (``None`` is a value, and a wrong one)
    vals: Sequence[dict]
    res: Sequence[dict]

    def show(self, v: Any) -> str: ...
    def fail(self, i: int, msg: str) -> None: ...
    def column(self, key: str, dicts: Sequence[dict] | None = None) -> list[Any]: ...
    def numbers(self, key: str, required: bool = True, nonneg: bool = False) -> None: ...
    def required_numbers(self, keys: tuple[str, ...], nonneg: tuple[str, ...] = ()) -> None: ...
    def number(self, i: int, key: str, v: Any, required: bool, nonneg: bool) -> None: ...
    def labels(self, key: str) -> None: ...
    def strings(self, key: str, required: bool = True) -> None: ...
    def paths(self, key: str) -> None: ...
    def text_of(self, key: str, required: bool = True) -> None: ...
    def one_of(self, key: str, allowed: Sequence[Any]) -> None: ...
    def flag(self, key: str) -> None: ...
    def points(self, key: str = "points") -> None: ...
    def ints(self, key: str, rows: Sequence[int]) -> None: ...
    def score(self) -> None: ...


class CheckedKind(Protocol):
    """What ``Extraction.valid_rows`` needs of a kind (``Kind`` has it)."""

    @property
    def result_types(self) -> tuple[str, ...]: ...
    def check(self, c: ValueChecks) -> None: ...


class ResultBatch(Protocol):
    """The results of one kind in one chunk, column by column, in export order."""

    sample: np.ndarray  # int64 sample of each result
    slot: np.ndarray
    ann: np.ndarray
    src: np.ndarray  # uint8: 0 annotation, 1 prediction
    control: np.ndarray  # int16 control ids (-1 for relations)
    rid: list[str]
    res: list[dict]
    val: list[dict]
    pscore: list[Any]

    def __len__(self) -> int: ...
    def take(self, rows: list[int]) -> ResultBatch: ...


class ExtractionContext(Protocol):
    """What extraction needs from the parser: label ids, rejection, the clipping policy."""

    label_id: Callable[[int, str], int]
    label_ids: Callable[[np.ndarray, list[str]], list[int]]  # many at once
    clip: bool
    clipped: int
    unknown: dict[str, int]  # result types (and mask formats) counted and skipped
    task_of: Callable[[int], Any]  # sample -> task id (for reasons)

    def reject(self, sample: int, reason: str) -> None: ...


class ExtractedRows(Protocol):
    """The rows a kind extracts from one chunk: fixed-width columns, text columns and nested
    values (each of the last two a ragged ``(values, offsets)`` pair, ``common.ragged``)."""

    fixed: dict[str, np.ndarray]
    text: dict[str, tuple[np.ndarray, np.ndarray]]
    nested: dict[str, tuple[np.ndarray, np.ndarray]]


RowsT = TypeVar("RowsT", bound=ExtractedRows)
RowsT_co = TypeVar("RowsT_co", bound=ExtractedRows, covariant=True)


class Extraction(Protocol[RowsT_co]):
    """The extraction toolkit ``R`` (the module ``annotations.results``): reading result values
    column-wise, rejecting the tasks whose values are wrong, making rows."""

    NAN: float
    FAST: bool  # column-wise fast paths on (tests switch them off)

    @property
    def RLEError(self) -> type[Exception]: ...  # noqa: N802 - a class the module holds
    def valid_rows(self, ctx: ExtractionContext, b: ResultBatch,
                   kind: CheckedKind) -> ResultBatch: ...
    def common(self, group: str, b: ResultBatch, src: np.ndarray | None) -> RowsT_co: ...
    def labels(self, ctx: ExtractionContext, b: ResultBatch,
               key: str) -> tuple[np.ndarray | None, np.ndarray]: ...
    def float_cols(self, dicts: Sequence[dict], keys: tuple[str, ...],
                   defaults: tuple[float, ...]) -> np.ndarray: ...
    def in_range(self, ctx: ExtractionContext, arr: np.ndarray, names: Sequence[str],
                 what: str, b: ResultBatch, rows_item: np.ndarray | None = None,
                 lo: float = 0.0, hi: float = 100.0) -> np.ndarray: ...
    def angle(self, ctx: ExtractionContext, arr: np.ndarray, what: str,
              b: ResultBatch) -> np.ndarray: ...
    def pick(self, arr: np.ndarray, src: np.ndarray | None) -> np.ndarray: ...
    def scores(self, b: ResultBatch) -> np.ndarray: ...
    def point(self, p: Any) -> tuple[float, float]: ...
    def to_float(self, v: Any) -> float: ...
    def listed(self, v: Any) -> list: ...
    def listed_rows(self, b: ResultBatch, key: str) -> tuple[np.ndarray, list]: ...
    def as_text(self, v: Any) -> str: ...
    def all_of_class(self, values: list, cls: type) -> bool: ...
    def rle_to_mask(self, rle: Sequence[int] | np.ndarray, height: int,
                    width: int) -> np.ndarray: ...


class GeometryKernels(Protocol):
    """The geometry kernels ``G`` (the module ``transforms.geometry``): batched, branch-free
    maps of padded ``(B, N, ...)`` geometry through a resized crop or a flip."""

    def resized_crop_points(self, xy: torch.Tensor, crop_boxes: torch.Tensor,
                            out_size: tuple[int, int]) -> torch.Tensor: ...
    def resized_crop_xyxy(self, xyxy: torch.Tensor, valid: torch.Tensor,
                          crop_boxes: torch.Tensor, out_size: tuple[int, int],
                          min_visible: float = 0.25) -> tuple[torch.Tensor, torch.Tensor]: ...
    def resized_crop_corners(self, corners: torch.Tensor, valid: torch.Tensor,
                             crop_boxes: torch.Tensor, out_size: tuple[int, int],
                             min_visible: float = 0.25
                             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...
    def resized_crop_polygons(self, points: torch.Tensor, vertex_valid: torch.Tensor,
                              valid: torch.Tensor, crop_boxes: torch.Tensor,
                              out_size: tuple[int, int], min_visible: float = 0.25
                              ) -> tuple[torch.Tensor, torch.Tensor]: ...
    def resized_crop_keypoints(self, xy: torch.Tensor, valid: torch.Tensor,
                               crop_boxes: torch.Tensor, out_size: tuple[int, int]
                               ) -> tuple[torch.Tensor, torch.Tensor]: ...
    def resized_crop_ellipses(self, params: torch.Tensor, valid: torch.Tensor,
                              crop_boxes: torch.Tensor, out_size: tuple[int, int]
                              ) -> tuple[torch.Tensor, torch.Tensor]: ...
    def resized_crop_masks(self, masks: torch.Tensor, valid: torch.Tensor,
                           crop_boxes: torch.Tensor, out_size: tuple[int, int],
                           min_visible: float = 0.25) -> tuple[torch.Tensor, torch.Tensor]: ...
    def hflip_points(self, xy: torch.Tensor, widths: torch.Tensor,
                     flip: torch.Tensor) -> torch.Tensor: ...
    def hflip_xyxy(self, xyxy: torch.Tensor, widths: torch.Tensor,
                   flip: torch.Tensor) -> torch.Tensor: ...
    def hflip_corners(self, corners: torch.Tensor, widths: torch.Tensor,
                      flip: torch.Tensor) -> torch.Tensor: ...
    def hflip_ellipses(self, params: torch.Tensor, widths: torch.Tensor,
                       flip: torch.Tensor) -> torch.Tensor: ...
    def hflip_masks(self, masks: torch.Tensor, widths: torch.Tensor,
                    flip: torch.Tensor) -> torch.Tensor: ...
    def corners_from_xywhr(self, xywhr: torch.Tensor) -> torch.Tensor: ...
    def xywhr_from_corners(self, corners: torch.Tensor) -> torch.Tensor: ...


class GeometryWarp(Protocol):
    """One batch's affine warp (``transforms.warp_geometry.Warp``): its kernels move a kind's
    padded ``(B, N, ...)`` geometry into each sample's output, with the crops' visibility
    rules."""

    def points(self, xy: torch.Tensor) -> torch.Tensor: ...
    def xyxy(self, xyxy: torch.Tensor, valid: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor]: ...
    def corners(self, corners: torch.Tensor, valid: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...
    def polygons(self, points: torch.Tensor, vertex_valid: torch.Tensor, valid: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]: ...
    def keypoints(self, xy: torch.Tensor, valid: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]: ...
    def ellipses(self, params: torch.Tensor, valid: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]: ...
    def masks(self, masks: torch.Tensor, valid: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]: ...


class Canvas(Protocol):
    """The picture a preview draws on (``previews.canvas.Canvas``): the image scaled by
    ``scale``, its colours and the label names."""

    @property
    def scale(self) -> int: ...
    @property
    def width(self) -> int: ...  # line width in picture pixels
    @property
    def draw(self) -> ImageDraw.ImageDraw: ...
    def points(self, xy: Iterable[Any]) -> list[tuple[float, float]]: ...
    def colour(self, label: Any) -> Colour: ...
    def name(self, sample: Mapping[str, Any], kind: str, j: int) -> str: ...
    def control(self, sample: Mapping[str, Any], kind: str, j: int) -> str: ...
    def text(self, xy: tuple[float, float], label: str, colour: Colour) -> None: ...
    def note(self, line: str, colour: Colour) -> None: ...
    def overlay(self, alpha: Image.Image, colour: Colour) -> None: ...
