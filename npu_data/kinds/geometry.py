"""How a padded kind's geometry sits in a batch and moves with the image, declared as data.

A kind names its geometry (``Kind.geometry``): which key it is and which of the layouts
below it has. The layout carries the whole template a kind would otherwise write again: skip
a batch without the key, read ``<name>.valid``, call the kernels of ``G``
(``transforms.geometry``, ``kinds.protocols.GeometryKernels``) or ``W`` (one batch's warp,
``kinds.protocols.GeometryWarp``) and return the moved key and its validity; the layouts
that the generic row padding does not cover (polygon points, masks) pad themselves too.

- ``Points``: points ``(B, N, ..., 2)`` moved unclipped (the validity is kept);
- ``Keypoints``: points ``(B, N, 2)``; those outside the output become invalid;
- ``Ellipses``: ``cx, cy, rx, ry, rotation`` rows ``(B, N, 5)``;
- ``RotatedBoxes``: the boxes' ``corners`` / ``xywhr`` / ``xyxy`` (whichever the batch has);
- ``PolygonPoints``: nested points padded to ``(B, N, V, 2)`` with ``vertex_valid``;
- ``BitMasks``: nested packed bits unpacked and padded to ``(B, N, H, W)`` uint8.

No torch at module level (the kinds are imported by the parser); the hooks import it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from npu_data.batch import Batch
from npu_data.common.ragged import offsets_of
from npu_data.kinds.protocols import GeometryKernels, GeometryWarp

if TYPE_CHECKING:
    import torch


def valid(batch: Batch, name: str, like: torch.Tensor) -> torch.Tensor:
    """``<name>.valid`` of ``batch`` as bool, all true when absent (``like``: (B, N, ...))."""
    import torch

    v = batch.get(f"{name}.valid")
    if v is None:
        return torch.ones(like.shape[:2], dtype=torch.bool, device=like.device)
    return v.to(torch.bool)


def unpack_mask(bits: np.ndarray, h: int, w: int) -> np.ndarray:
    """One (h, w) uint8 0/1 mask from its packed bits (``np.packbits`` of the row-major mask);
    ValueError when ``bits`` holds fewer than ``h * w`` bits (numpy would fill the rest with
    whatever memory held)."""
    if len(bits) * 8 < h * w:
        raise ValueError(f"a mask of {h}x{w} needs {(h * w + 7) // 8} bytes of bits, "
                         f"{len(bits)} stored")
    return np.unpackbits(bits, count=h * w).reshape(h, w)


@dataclass(frozen=True)
class Geometry:
    """One geometry key ``<name>.<key>`` of a padded kind. The hooks return the keys they
    change (none when the batch lacks the key); a layout writes only its kernel calls
    (``crop``, ``mirror``, ``move``) and, where rows need more than the generic padding,
    ``own_keys`` and the ``pad_*`` hooks (``Kind``'s collate hooks, same arguments)."""

    key: str

    # --- moving with the image -------------------------------------------------------------
    def resized_crop(self, name: str, batch: Batch, crop_boxes: torch.Tensor,
                     out_size: tuple[int, int], min_visible: float,
                     G: GeometryKernels) -> Batch:
        """The key and ``<name>.valid`` through a resized crop."""
        key = f"{name}.{self.key}"
        if key not in batch:
            return {}
        x = batch[key]
        moved, keep = self.crop(batch, name, x, valid(batch, name, x), crop_boxes, out_size,
                                min_visible, G)
        return {key: moved, f"{name}.valid": keep}

    def hflip(self, name: str, batch: Batch, widths: torch.Tensor, flip: torch.Tensor,
              G: GeometryKernels) -> Batch:
        """The key mirrored where ``flip`` (B,) is set."""
        key = f"{name}.{self.key}"
        if key not in batch:
            return {}
        return {key: self.mirror(batch[key], widths, flip, G)}

    def warp(self, name: str, batch: Batch, W: GeometryWarp, G: GeometryKernels) -> Batch:
        """The key and ``<name>.valid`` through the affine warp ``W``."""
        key = f"{name}.{self.key}"
        if key not in batch:
            return {}
        x = batch[key]
        moved, keep = self.move(batch, name, x, valid(batch, name, x), W)
        return {key: moved, f"{name}.valid": keep}

    def crop(self, batch: Batch, name: str, x: torch.Tensor, ok: torch.Tensor,
             crop_boxes: torch.Tensor, out_size: tuple[int, int], min_visible: float,
             G: GeometryKernels) -> tuple[torch.Tensor, torch.Tensor]:
        """(moved ``x``, validity) through a resized crop."""
        raise NotImplementedError(f"{type(self).__name__} has no crop kernel")

    def mirror(self, x: torch.Tensor, widths: torch.Tensor, flip: torch.Tensor,
               G: GeometryKernels) -> torch.Tensor:
        """``x`` mirrored: points ``(..., 2)`` by default."""
        return G.hflip_points(x, widths, flip)

    def move(self, batch: Batch, name: str, x: torch.Tensor, ok: torch.Tensor,
             W: GeometryWarp) -> tuple[torch.Tensor, torch.Tensor]:
        """(moved ``x``, validity) through the warp."""
        raise NotImplementedError(f"{type(self).__name__} has no warp kernel")

    # --- collate (what the generic row padding does not cover) ------------------------------
    def own_keys(self, name: str) -> tuple[str, ...]:
        """Sample keys the ``pad_*`` hooks handle; none by default."""
        return ()

    def pad_samples(self, name: str, samples: Sequence[Mapping[str, Any]], counts: np.ndarray,
                    nmax: int, hw: tuple[int, int], pin: bool, batch: Batch) -> None:
        """Pad ``own_keys`` of sample dicts into ``batch``."""

    def pad_columns(self, name: str, nested: Mapping[str, tuple[np.ndarray, np.ndarray]],
                    sample: np.ndarray, slot: np.ndarray, bn: tuple[int, int],
                    sizes: Sequence[tuple[int, int]], batch: Batch) -> None:
        """Pad ``own_keys`` from a batch read column-wise."""

    def pad_empty(self, name: str, b: int, hw: tuple[int, int], batch: Batch) -> None:
        """``own_keys`` for a batch without any row of the kind."""


@dataclass(frozen=True)
class Points(Geometry):
    """Points ``(B, N, ..., 2)`` moved unclipped; the validity is kept as it is."""

    def crop(self, batch: Batch, name: str, x: torch.Tensor, ok: torch.Tensor,
             crop_boxes: torch.Tensor, out_size: tuple[int, int], min_visible: float,
             G: GeometryKernels) -> tuple[torch.Tensor, torch.Tensor]:
        return G.resized_crop_points(x, crop_boxes, out_size), ok

    def move(self, batch: Batch, name: str, x: torch.Tensor, ok: torch.Tensor,
             W: GeometryWarp) -> tuple[torch.Tensor, torch.Tensor]:
        return W.points(x), ok


@dataclass(frozen=True)
class Keypoints(Geometry):
    """Keypoints ``(B, N, 2)``: those outside the output become invalid."""

    def crop(self, batch: Batch, name: str, x: torch.Tensor, ok: torch.Tensor,
             crop_boxes: torch.Tensor, out_size: tuple[int, int], min_visible: float,
             G: GeometryKernels) -> tuple[torch.Tensor, torch.Tensor]:
        return G.resized_crop_keypoints(x, ok, crop_boxes, out_size)

    def move(self, batch: Batch, name: str, x: torch.Tensor, ok: torch.Tensor,
             W: GeometryWarp) -> tuple[torch.Tensor, torch.Tensor]:
        return W.keypoints(x, ok)


@dataclass(frozen=True)
class Ellipses(Geometry):
    """Ellipses ``(B, N, 5)``: centre x, y, radii x, y, rotation in degrees."""

    def crop(self, batch: Batch, name: str, x: torch.Tensor, ok: torch.Tensor,
             crop_boxes: torch.Tensor, out_size: tuple[int, int], min_visible: float,
             G: GeometryKernels) -> tuple[torch.Tensor, torch.Tensor]:
        return G.resized_crop_ellipses(x, ok, crop_boxes, out_size)

    def mirror(self, x: torch.Tensor, widths: torch.Tensor, flip: torch.Tensor,
               G: GeometryKernels) -> torch.Tensor:
        return G.hflip_ellipses(x, widths, flip)

    def move(self, batch: Batch, name: str, x: torch.Tensor, ok: torch.Tensor,
             W: GeometryWarp) -> tuple[torch.Tensor, torch.Tensor]:
        return W.ellipses(x, ok)


@dataclass(frozen=True)
class RotatedBoxes(Geometry):
    """Boxes as ``corners`` (B, N, 4, 2) and/or ``xywhr`` (B, N, 5), with their envelope
    ``key`` (``xyxy``, B, N, 4): rotated boxes move exactly, the envelope is their clipped
    box; a batch with the envelope alone moves it as upright boxes."""

    def _corners(self, name: str, batch: Batch, G: GeometryKernels) -> torch.Tensor | None:
        """The corners (B, N, 4, 2): stored, or from ``xywhr``; None without either."""
        if f"{name}.corners" in batch:
            return batch[f"{name}.corners"]
        if f"{name}.xywhr" in batch:
            return G.corners_from_xywhr(batch[f"{name}.xywhr"])
        return None

    def _rotated(self, name: str, batch: Batch, moved: torch.Tensor, G: GeometryKernels,
                 out: Batch) -> Batch:
        """``out`` with the moved corners as the batch holds them (corners, xywhr)."""
        if f"{name}.corners" in batch:
            out[f"{name}.corners"] = moved
        if f"{name}.xywhr" in batch:
            out[f"{name}.xywhr"] = G.xywhr_from_corners(moved)
        return out

    def resized_crop(self, name: str, batch: Batch, crop_boxes: torch.Tensor,
                     out_size: tuple[int, int], min_visible: float,
                     G: GeometryKernels) -> Batch:
        out: Batch = {}
        key, keep = f"{name}.{self.key}", f"{name}.valid"
        corners = self._corners(name, batch, G)
        if corners is not None:
            mapped, out[key], out[keep] = G.resized_crop_corners(
                corners, valid(batch, name, corners), crop_boxes, out_size, min_visible)
            return self._rotated(name, batch, mapped, G, out)
        if key in batch:
            xyxy = batch[key]
            out[key], out[keep] = G.resized_crop_xyxy(
                xyxy, valid(batch, name, xyxy), crop_boxes, out_size, min_visible)
        return out

    def hflip(self, name: str, batch: Batch, widths: torch.Tensor, flip: torch.Tensor,
              G: GeometryKernels) -> Batch:
        out: Batch = {}
        key = f"{name}.{self.key}"
        if key in batch:
            out[key] = G.hflip_xyxy(batch[key], widths, flip)
        corners = self._corners(name, batch, G)
        if corners is not None:
            return self._rotated(name, batch, G.hflip_corners(corners, widths, flip), G, out)
        return out

    def warp(self, name: str, batch: Batch, W: GeometryWarp, G: GeometryKernels) -> Batch:
        out: Batch = {}
        key, keep = f"{name}.{self.key}", f"{name}.valid"
        corners = self._corners(name, batch, G)
        if corners is not None:
            moved, out[key], out[keep] = W.corners(corners, valid(batch, name, corners))
            return self._rotated(name, batch, moved, G, out)
        if key in batch:
            xyxy = batch[key]
            out[key], out[keep] = W.xyxy(xyxy, valid(batch, name, xyxy))
        return out


@dataclass(frozen=True)
class PolygonPoints(Geometry):
    """Polygon vertices: nested points (``key`` values, ``offsets`` per row) padded to
    ``(B, N, V, 2)`` float32 with ``vertex_valid`` (B, N, V); cut by crops as polygons."""

    offsets: str = "point_offsets"

    def _vertices(self, batch: Batch, name: str, x: torch.Tensor) -> torch.Tensor:
        import torch

        vv = batch.get(f"{name}.vertex_valid")
        return (torch.ones(x.shape[:-1], dtype=torch.bool, device=x.device) if vv is None
                else vv.to(torch.bool))

    def crop(self, batch: Batch, name: str, x: torch.Tensor, ok: torch.Tensor,
             crop_boxes: torch.Tensor, out_size: tuple[int, int], min_visible: float,
             G: GeometryKernels) -> tuple[torch.Tensor, torch.Tensor]:
        return G.resized_crop_polygons(x, self._vertices(batch, name, x), ok, crop_boxes,
                                       out_size, min_visible)

    def move(self, batch: Batch, name: str, x: torch.Tensor, ok: torch.Tensor,
             W: GeometryWarp) -> tuple[torch.Tensor, torch.Tensor]:
        return W.polygons(x, self._vertices(batch, name, x), ok)

    def own_keys(self, name: str) -> tuple[str, ...]:
        return (f"{name}.{self.key}", f"{name}.{self.offsets}")

    def pad_samples(self, name: str, samples: Sequence[Mapping[str, Any]], counts: np.ndarray,
                    nmax: int, hw: tuple[int, int], pin: bool, batch: Batch) -> None:
        import torch

        from npu_data.buffers import zeros_host

        b = len(samples)
        offs = [np.asarray(s.get(f"{name}.{self.offsets}", np.zeros(1, np.int64)))
                for s in samples]
        vmax = max((int(np.diff(o).max()) for o in offs if len(o) > 1), default=0)
        points = zeros_host((b, nmax, vmax, 2), torch.float32, pin)
        vvalid = np.zeros((b, nmax, vmax), dtype=bool)
        pview = points.numpy()
        for i, s in enumerate(samples):
            o = offs[i]
            n = len(o) - 1
            if n <= 0:
                continue
            lens = np.diff(o)
            pts = np.asarray(s[f"{name}.{self.key}"], dtype=np.float32)
            poly = np.repeat(np.arange(n), lens)
            vert = np.arange(len(pts)) - np.repeat(o[:-1], lens)
            pview[i, poly, vert] = pts
            vvalid[i, poly, vert] = True
        batch[f"{name}.{self.key}"] = points
        batch[f"{name}.vertex_valid"] = torch.from_numpy(vvalid)

    def pad_columns(self, name: str, nested: Mapping[str, tuple[np.ndarray, np.ndarray]],
                    sample: np.ndarray, slot: np.ndarray, bn: tuple[int, int],
                    sizes: Sequence[tuple[int, int]], batch: Batch) -> None:
        import torch

        values, lens = nested[f"{name}.{self.key}"]
        vmax = int(lens.max()) if len(lens) else 0
        points = torch.zeros((*bn, vmax, 2), dtype=torch.float32)
        vvalid = np.zeros((*bn, vmax), dtype=bool)
        poly = np.repeat(np.arange(len(lens)), lens)
        vert = np.arange(len(poly)) - np.repeat(offsets_of(lens)[:-1], lens)
        points.numpy()[sample[poly], slot[poly], vert] = np.asarray(values, dtype=np.float32)
        vvalid[sample[poly], slot[poly], vert] = True
        batch[f"{name}.{self.key}"] = points
        batch[f"{name}.vertex_valid"] = torch.from_numpy(vvalid)

    def pad_empty(self, name: str, b: int, hw: tuple[int, int], batch: Batch) -> None:
        import torch

        # V = 1, never 0: reductions over the vertex axis stay defined downstream
        batch[f"{name}.{self.key}"] = torch.zeros((b, 0, 1, 2), dtype=torch.float32)
        batch[f"{name}.vertex_valid"] = torch.zeros((b, 0, 1), dtype=torch.bool)


@dataclass(frozen=True)
class BitMasks(Geometry):
    """Masks ``(B, N, H, W)`` uint8 0/1 at the stored image size, padded from samples'
    ``(M, H, W)`` masks or from the packed bits (``bits``) of a column read."""

    bits: str = "bits"

    def crop(self, batch: Batch, name: str, x: torch.Tensor, ok: torch.Tensor,
             crop_boxes: torch.Tensor, out_size: tuple[int, int], min_visible: float,
             G: GeometryKernels) -> tuple[torch.Tensor, torch.Tensor]:
        return G.resized_crop_masks(x, ok, crop_boxes, out_size, min_visible)

    def mirror(self, x: torch.Tensor, widths: torch.Tensor, flip: torch.Tensor,
               G: GeometryKernels) -> torch.Tensor:
        return G.hflip_masks(x, widths, flip)

    def move(self, batch: Batch, name: str, x: torch.Tensor, ok: torch.Tensor,
             W: GeometryWarp) -> tuple[torch.Tensor, torch.Tensor]:
        return W.masks(x, ok)

    def own_keys(self, name: str) -> tuple[str, ...]:
        return (f"{name}.{self.key}",)

    def pad_samples(self, name: str, samples: Sequence[Mapping[str, Any]], counts: np.ndarray,
                    nmax: int, hw: tuple[int, int], pin: bool, batch: Batch) -> None:
        import torch

        from npu_data.buffers import zeros_host

        key = f"{name}.{self.key}"
        out = zeros_host((len(samples), nmax, hw[0], hw[1]), torch.uint8, pin)
        view = out.numpy()
        for i, s in enumerate(samples):
            m = s.get(key)
            if m is not None and counts[i]:
                view[i, :counts[i], :m.shape[1], :m.shape[2]] = m
        batch[key] = out

    def pad_columns(self, name: str, nested: Mapping[str, tuple[np.ndarray, np.ndarray]],
                    sample: np.ndarray, slot: np.ndarray, bn: tuple[int, int],
                    sizes: Sequence[tuple[int, int]], batch: Batch) -> None:
        import torch

        bits, per_row = nested[f"{name}.{self.bits}"]
        hmax = max((h for h, _ in sizes), default=0)
        wmax = max((w for _, w in sizes), default=0)
        out = torch.zeros((*bn, hmax, wmax), dtype=torch.uint8)
        view = out.numpy()
        off = offsets_of(per_row).tolist()
        for r, (i, t) in enumerate(zip(sample.tolist(), slot.tolist(), strict=True)):
            h, w = sizes[i]
            view[i, t, :h, :w] = unpack_mask(bits[off[r]:off[r + 1]], h, w)
        batch[f"{name}.{self.key}"] = out

    def pad_empty(self, name: str, b: int, hw: tuple[int, int], batch: Batch) -> None:
        import torch

        batch[f"{name}.{self.key}"] = torch.zeros((b, 0, hw[0], hw[1]), dtype=torch.uint8)
