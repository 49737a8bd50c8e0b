"""The detection recipes' geometric steps: RandomZoomOut and ScaleJitter (torchvision v2's),
per sample, batched, geometry following.

Both change each sample's size by a drawn amount: the batch grows to the largest output and
``sizes`` holds each sample's own. ``RandomZoomOut`` places the image on a filled canvas
(integer placement: exact); ``ScaleJitter`` resizes with Pillow's antialiased bilinear
(``functional.resized_crop``: exact). Boxes, polygons, keypoints, ellipses and masks move
with them (``warp_geometry``).

Their output sizes are drawn, so ``output_sizes(sizes)`` (what ``Compose`` hands the next
transform's draw) returns the sizes of this thread's last :meth:`draw_keyed` for those input
sizes, as ``Compose.draw_keyed`` calls it right after the draw.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import torch

from npu_data.errors import UserValueError
from npu_data.transforms import functional as F
from npu_data.transforms.base import Batch, Params, Transform, pair
from npu_data.transforms.crop_base import check_min_visible
from npu_data.transforms.draws import Uniforms
from npu_data.transforms.geometric import degrees_range
from npu_data.transforms.maps import check_fill, translation_matrices
from npu_data.transforms.warp_geometry import Warp, warp_geometry

__all__ = ["RandomZoomOut", "ScaleJitter"]


def _host(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(a, dtype=np.int64, order="C").reshape(-1, 2))


class _DrawnSize(Transform):
    """A transform whose output size is part of its parameters (``params["out"]``)."""

    def _last_draws(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        last: dict[int, tuple[np.ndarray, np.ndarray]] | None = self.__dict__.get("_last")
        if last is None:
            last = self.__dict__["_last"] = {}
        return last

    def draw_keyed(self, sizes: np.ndarray, keys: np.ndarray, position: int = 0) -> Params:
        params = super().draw_keyed(sizes, keys, position)
        key = threading.get_ident()
        self._last_draws()[key] = (np.asarray(sizes, np.int64).reshape(-1, 2).copy(),
                                   params["out"].numpy().copy())
        return params

    def output_sizes(self, sizes: np.ndarray) -> np.ndarray:
        """The output sizes of this thread's last :meth:`draw_keyed` for ``sizes``."""
        got = self._last_draws().get(threading.get_ident())
        sizes = np.asarray(sizes, np.int64).reshape(-1, 2)
        if got is None or not np.array_equal(got[0], sizes):
            raise UserValueError(f"{self.name}: each sample's output size is drawn — draw the "
                                 "parameters (draw_keyed) for these sizes first")
        return got[1].copy()

    def __getstate__(self) -> dict[str, object]:
        return {k: v for k, v in self.__dict__.items() if k != "_last"}

    @staticmethod
    def out_shape(params: Params) -> tuple[int, int]:
        out = params["out"]
        if not len(out):
            return 1, 1
        top = out.numpy().max(axis=0)
        return int(top[0]), int(top[1])

    @staticmethod
    def in_sizes(params: Params, batch: Batch) -> torch.Tensor:
        sizes = params.get("sizes")
        return sizes if sizes is not None else batch["sizes"].to("cpu")


class RandomZoomOut(_DrawnSize):
    """torchvision's ``RandomZoomOut``: with probability ``p``, each image on a canvas
    ``side`` times its size (``side`` drawn in ``side_range``), at a random place, the rest
    ``fill``.

    Args:
        fill: The canvas colour (int or three ints 0..255).
        side_range: (min, max) canvas side over image side, 1 <= min <= max.
        p: The probability of zooming out a sample.

    Raises:
        UserError: A bad fill, side range or probability.
    """

    name = "RandomZoomOut"

    def __init__(self, fill: int | Sequence[int] = 0,
                 side_range: Sequence[float] = (1.0, 4.0), p: float = 0.5) -> None:
        self.fill = check_fill(fill, self.name)
        self.side_range = degrees_range(side_range, "side_range", self.name)
        if self.side_range[0] < 1.0:
            raise UserValueError(f"{self.name}: side_range must be (min, max) with 1 <= min <= "
                                 f"max, got {side_range!r}")
        if isinstance(p, bool) or not isinstance(p, int | float) or not 0.0 <= p <= 1.0:
            raise UserValueError(f"{self.name}: p must be a probability in [0, 1], got {p!r}")
        self.p = float(p)

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        """torchvision's draws per sample: the coin, the side ratio, the place (4 draws)."""
        u = rng.uniform(4)
        h, w = sizes[:, 0], sizes[:, 1]
        lo, hi = self.side_range
        r = lo + u[:, 1] * (hi - lo)
        on = u[:, 0] < self.p
        canvas_w = np.where(on, (w * r).astype(np.int64), w)
        canvas_h = np.where(on, (h * r).astype(np.int64), h)
        left = ((canvas_w - w) * u[:, 2]).astype(np.int64)
        top = ((canvas_h - h) * u[:, 3]).astype(np.int64)
        return {"out": _host(np.stack([canvas_h, canvas_w], 1)),
                "offset": _host(np.stack([top, left], 1)), "sizes": _host(sizes)}

    def _apply(self, batch: Batch, params: Params) -> Batch:
        sizes = self.in_sizes(params, batch)
        shape = self.out_shape(params)
        offset = params["offset"].numpy()
        m = translation_matrices(offset[:, 0], offset[:, 1])
        out = dict(batch)
        out["image"] = F.warp(batch["image"], sizes, m, "nearest", self.fill,
                              params["out"].numpy(), shape)
        out["sizes"] = params["out"].to(batch["sizes"].dtype).to(batch["sizes"].device,
                                                                   non_blocking=True)
        out.update(warp_geometry(batch, Warp.from_inverse(m, sizes, params["out"], shape, 0.0)))
        return out

    def apply_reference(self, image: np.ndarray, params: Params, index: int) -> np.ndarray:
        from npu_data.transforms import reference_geometric as RG

        top, left = (int(v) for v in params["offset"][index].tolist())
        height, width = (int(v) for v in params["out"][index].tolist())
        return RG.pad(image, top, left, height, width, self.fill)

    def __repr__(self) -> str:
        return f"{self.name}(fill={self.fill}, side_range={self.side_range}, p={self.p})"


class ScaleJitter(_DrawnSize):
    """torchvision's ``ScaleJitter`` (large-scale jitter): each image resized by
    ``min(target_h / h, target_w / w) * s``, ``s`` drawn in ``scale_range`` (sizes truncated,
    at least 1), with Pillow's antialiased bilinear resize.

    Args:
        target_size: The (height, width) the scale is relative to, or one int for both.
        scale_range: (min, max) jitter, 0 < min <= max.
        min_visible: Boxes, polygons and masks keeping less than this fraction of their area
            are marked invalid.

    Raises:
        UserError: A bad target size, scale range or ``min_visible``.
    """

    name = "ScaleJitter"

    def __init__(self, target_size: int | Sequence[int],
                 scale_range: Sequence[float] = (0.1, 2.0), min_visible: float = 0.25) -> None:
        self.target_size = pair(target_size, "target_size", self.name)
        self.scale_range = degrees_range(scale_range, "scale_range", self.name)
        if self.scale_range[0] <= 0:
            raise UserValueError(f"{self.name}: scale_range must be (min, max) with 0 < min, "
                                 f"got {scale_range!r}")
        self.min_visible = check_min_visible(min_visible, self.name)

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        """One draw per sample: the jitter; the new size in float64 (torchvision: float32)."""
        u = rng.uniform(1)[:, 0]
        lo, hi = self.scale_range
        h, w = sizes[:, 0].astype(np.float64), sizes[:, 1].astype(np.float64)
        r = np.minimum(self.target_size[1] / w, self.target_size[0] / h) * (lo + u * (hi - lo))
        new = np.stack([(h * r).astype(np.int64), (w * r).astype(np.int64)], 1)
        return {"out": _host(np.maximum(new, 1)), "sizes": _host(sizes)}

    def _apply(self, batch: Batch, params: Params) -> Batch:
        sizes = self.in_sizes(params, batch)
        shape = self.out_shape(params)
        new = params["out"]
        b = new.shape[0]
        boxes = torch.cat([torch.zeros(b, 2, dtype=torch.int64), sizes.to(torch.int64)], 1)
        windows = torch.cat([torch.zeros(b, 2, dtype=torch.int64), new], 1)
        out = dict(batch)
        out["image"] = F.resized_crop(batch["image"], sizes.to(batch["sizes"].device), boxes,
                                      shape, windows=windows)
        out["sizes"] = new.to(batch["sizes"].dtype).to(batch["sizes"].device, non_blocking=True)
        s = sizes.numpy().astype(np.float64)
        n = new.numpy().astype(np.float64)
        zero = np.zeros(b)
        m = np.stack([s[:, 1] / n[:, 1], zero, zero, zero, s[:, 0] / n[:, 0], zero], 1)
        warp = Warp.from_inverse(m, sizes, new, shape, self.min_visible)
        out.update(warp_geometry(batch, warp))
        return out

    def apply_reference(self, image: np.ndarray, params: Params, index: int) -> np.ndarray:
        from npu_data.transforms import reference

        h, w = image.shape[:2]
        return reference.resized_crop(image, [0, 0, h, w],
                                      tuple(int(v) for v in params["out"][index].tolist()))

    def __repr__(self) -> str:
        return (f"{self.name}(target_size={self.target_size}, scale_range={self.scale_range}, "
                f"min_visible={self.min_visible})")
