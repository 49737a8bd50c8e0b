"""The detection recipes' geometric steps: RandomZoomOut and ScaleJitter (torchvision v2's),
per sample, batched, geometry following.

Both change each sample's size by a drawn amount: the batch grows to the largest output and
``sizes`` holds each sample's own. ``RandomZoomOut`` places the image on a filled canvas
(integer placement: exact); ``ScaleJitter`` resizes with Pillow's antialiased bilinear
(``functional.resized_crop``: exact). Boxes, polygons, keypoints, ellipses and masks move
with them (``warp_geometry``).

Their output sizes are drawn: ``output_size(sizes, params)`` (what ``Compose`` hands the next
transform's draw) reads them from the drawn parameters, and refuses to answer before a draw
(``params`` None).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from npu_data.errors import UserValueError
from npu_data.transforms import functional as F
from npu_data.transforms.base import Batch, Params, Transform, pair
from npu_data.transforms.crop import check_min_visible
from npu_data.transforms.draws import Uniforms
from npu_data.transforms.maps import check_fill, translation_matrices
from npu_data.transforms.warp_geometry import Warp, warp_geometry
from npu_data.transforms.warp_ops import degrees_range

MAX_ZOOM = 16.0  # RandomZoomOut's largest canvas side over the image's
MAX_SIDE = 1 << 15  # ScaleJitter's largest output side
MAX_CANDIDATES = 4096  # RandomIoUCrop's trials x rounds per sample

__all__ = ["RandomIoUCrop", "RandomZoomOut", "ScaleJitter"]


def _host(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(a, dtype=np.int64, order="C").reshape(-1, 2))


def _in_sizes(params: Params, batch: Batch) -> torch.Tensor:
    """The sizes the parameters were drawn for (host), else the batch's."""
    sizes = params.get("sizes")
    return sizes if sizes is not None else batch["sizes"].to("cpu")


def nearest_masks(masks: torch.Tensor, sizes: torch.Tensor, new: torch.Tensor,
                  shape: tuple[int, int]) -> torch.Tensor:
    """Masks ``(B, M, H, W)`` resized from each sample's ``sizes`` to its ``new`` size (host
    int64 (B, 2)) as torch's ``interpolate(mode="nearest")`` does (torchvision's mask
    resize): source ``min(floor(i * float32(in / out)), in - 1)`` per axis; 0 outside each
    sample's output in the ``shape`` batch. Index tables on the host, one gather."""
    f32 = np.float32
    s = sizes.numpy().astype(np.int64)
    n = new.numpy().astype(np.int64)

    def table(axis: int, length: int) -> np.ndarray:
        scale = s[:, axis].astype(f32) / np.maximum(n[:, axis], 1).astype(f32)
        i = np.arange(length, dtype=f32)[None]
        src = np.minimum(np.floor(i * scale[:, None]).astype(np.int64), s[:, axis:axis + 1] - 1)
        return np.where(np.arange(length)[None] < n[:, axis:axis + 1], src, -1)

    b, m = masks.shape[:2]
    rows = torch.from_numpy(table(0, shape[0])).to(masks.device, non_blocking=True)
    cols = torch.from_numpy(table(1, shape[1])).to(masks.device, non_blocking=True)
    bi = torch.arange(b, device=masks.device).view(b, 1, 1, 1)
    mi = torch.arange(m, device=masks.device).view(1, m, 1, 1)
    r, c = rows.view(b, 1, -1, 1), cols.view(b, 1, 1, -1)
    out = masks[bi, mi, r.clamp(min=0), c.clamp(min=0)]
    return out * ((r >= 0) & (c >= 0)).to(out.dtype)


class _DrawnSize(Transform):
    """A transform whose output size is part of its parameters (``params["out"]``)."""

    def output_size(self, sizes: np.ndarray, params: Params | None = None) -> np.ndarray:
        """The drawn output sizes (``params["out"]``); before a draw (None) there are none."""
        if params is None:
            raise UserValueError(f"{self.name}: each sample's output size is drawn — draw the "
                                 "parameters (draw_keyed) and pass them: "
                                 "output_size(sizes, params)")
        return params["out"].numpy().astype(np.int64).reshape(-1, 2).copy()

    @staticmethod
    def out_shape(params: Params) -> tuple[int, int]:
        out = params["out"]
        if not len(out):
            return 1, 1
        top = out.numpy().max(axis=0)
        return int(top[0]), int(top[1])


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

    def __init__(self, fill: int | Sequence[int] = 0,
                 side_range: Sequence[float] = (1.0, 4.0), p: float = 0.5) -> None:
        self.fill = check_fill(fill, self.name)
        self.side_range = degrees_range(side_range, "side_range", self.name)
        if not 1.0 <= self.side_range[0] <= self.side_range[1] <= MAX_ZOOM:
            raise UserValueError(f"{self.name}: side_range must be (min, max) with 1 <= min <= "
                                 f"max <= {MAX_ZOOM:g}, got {side_range!r}")
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

    def apply(self, batch: Batch, params: Params) -> Batch:
        sizes = _in_sizes(params, batch)
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

    def reference(self, image: np.ndarray, params: Params, index: int) -> np.ndarray:
        from npu_data.transforms.oracle import pillow_geometric as RG

        top, left = (int(v) for v in params["offset"][index].tolist())
        height, width = (int(v) for v in params["out"][index].tolist())
        return RG.pad(image, top, left, height, width, self.fill)


class ScaleJitter(_DrawnSize):
    """torchvision's ``ScaleJitter`` (large-scale jitter): each image resized by
    ``min(target_size[1] / h, target_size[0] / w) * s`` — torchvision's axes, exactly —
    ``s`` drawn in ``scale_range`` (sizes truncated, at least 1), with Pillow's antialiased
    bilinear resize.

    Args:
        target_size: The size the scale is relative to, or one int for both; read as
            torchvision reads it (above: ``target_size[1]`` over the height).
        scale_range: (min, max) jitter, 0 < min <= max.
        min_visible: Boxes, polygons and masks keeping less than this fraction of their area
            are marked invalid; 0 (torchvision keeps them all): only those with nothing left
            inside (``min_visible=0.25``: the rule before 2026-12-07).
        masks: ``"torch"``: masks resized as torchvision resizes them (torch's nearest,
            :func:`nearest_masks`); ``"pillow"``: Pillow's centre-aligned nearest (the pixels'
            parity reference; the rule before 2026-12-07).

    Raises:
        UserError: A bad target size, scale range, ``min_visible`` or ``masks``.
    """

    def __init__(self, target_size: int | Sequence[int],
                 scale_range: Sequence[float] = (0.1, 2.0), min_visible: float = 0.0,
                 masks: str = "torch") -> None:
        if masks not in ("torch", "pillow"):
            raise UserValueError(f"{self.name}: masks must be 'torch' (torchvision's nearest) "
                                 f"or 'pillow' (Pillow's centre-aligned nearest), got {masks!r}")
        self.masks = masks
        self.target_size = pair(target_size, "target_size", self.name)
        self.scale_range = degrees_range(scale_range, "scale_range", self.name)
        if self.scale_range[0] <= 0:
            raise UserValueError(f"{self.name}: scale_range must be (min, max) with 0 < min, "
                                 f"got {scale_range!r}")
        if max(self.target_size) * self.scale_range[1] > MAX_SIDE:
            raise UserValueError(f"{self.name}: target_size {target_size!r} times the largest "
                                 f"scale {self.scale_range[1]:g} gives images over {MAX_SIDE} "
                                 "pixels a side — use a smaller target or scale")
        self.min_visible = check_min_visible(min_visible, self.name)

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        """One draw per sample: the jitter; the new size in torchvision's float32 arithmetic
        and axes (``make_params``): ``r = min(target[1] / h, target[0] / w) * scale``,
        ``(int(h * r), int(w * r))``."""
        f32 = np.float32
        u = rng.uniform(1)[:, 0].astype(f32)
        lo, hi = self.scale_range
        scale = f32(lo) + u * f32(hi - lo)
        h, w = sizes[:, 0], sizes[:, 1]
        base = np.minimum(self.target_size[1] / h.astype(np.float64),
                          self.target_size[0] / w.astype(np.float64))
        r = base.astype(f32) * scale
        new = np.stack([(h.astype(f32) * r).astype(np.int64),
                        (w.astype(f32) * r).astype(np.int64)], 1)
        return {"out": _host(np.maximum(new, 1)), "sizes": _host(sizes)}

    def apply(self, batch: Batch, params: Params) -> Batch:
        sizes = _in_sizes(params, batch)
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
        if self.masks == "torch" and "masks.mask" in batch:
            out["masks.mask"] = nearest_masks(batch["masks.mask"], sizes, new, shape)
        return out

    def reference(self, image: np.ndarray, params: Params, index: int) -> np.ndarray:
        from npu_data.transforms.oracle import pillow as reference

        h, w = image.shape[:2]
        return reference.resized_crop(image, [0, 0, h, w],
                                      tuple(int(v) for v in params["out"][index].tolist()))


class RandomIoUCrop(Transform):
    """torchvision's ``RandomIoUCrop`` (SSD): per sample, a crop whose overlap with some box
    reaches a drawn minimum IoU; boxes whose centre leaves the crop are marked invalid.

    torchvision draws until it succeeds; here each sample draws ``rounds`` options of
    ``trials`` candidates on the host (``make_params``: the same rules, a fixed number of
    draws so the draws are keyed), and the first candidate that fits the boxes is chosen on
    the device, branch-free (no read back). A sample with no fitting candidate in its rounds,
    or whose option says so, is left as it is. The crop is not resized (exact), so the batch
    keeps its shape and ``sizes`` holds each crop's size. The chosen boxes
    ``(top, left, height, width)`` are the batch's ``iou_crop`` key; :meth:`apply` also
    writes them to ``params["crop"]`` (for :meth:`reference`): in place for a host
    batch (a ``Compose``'s parameters see them), as a new device tensor otherwise (set a
    ``Compose``'s ``"<i>.crop"`` from ``iou_crop`` to replay a device batch).

    Args:
        min_scale: The smallest crop side over the image's, per axis.
        max_scale: The largest crop side over the image's, per axis.
        min_aspect_ratio: The smallest crop width over height.
        max_aspect_ratio: The largest crop width over height.
        sampler_options: The minimum IoUs an option picks from (>= 1: leave the sample).
        trials: Candidates per option.
        rounds: Options per sample (torchvision: unbounded). With 32, a sample whose boxes
            some option < 1 can fit runs out of rounds with probability under (5/7)^32 = 2e-5
            (it is then left as it is, as torchvision leaves one that no option fits):
            the outcomes are torchvision's (8 left 2.6 % more samples uncropped with one
            small box).
        min_visible: Polygons and masks keeping less than this fraction of their area are
            marked invalid (boxes: torchvision's centre rule).

    Raises:
        UserError: Bad ranges or counts; at apply, a batch without ``boxes.xyxy``.
    """

    def __init__(self, min_scale: float = 0.3, max_scale: float = 1.0,
                 min_aspect_ratio: float = 0.5, max_aspect_ratio: float = 2.0,
                 sampler_options: Sequence[float] | None = None, trials: int = 40,
                 rounds: int = 32, min_visible: float = 0.0) -> None:
        who = self.name
        self.scale = degrees_range((min_scale, max_scale), "min_scale/max_scale", who)
        self.aspect = degrees_range((min_aspect_ratio, max_aspect_ratio), "aspect ratios", who)
        if self.scale[0] < 0 or self.aspect[0] <= 0:
            raise UserValueError(f"{who}: scales must be >= 0 and aspect ratios > 0, got "
                                 f"{self.scale} and {self.aspect}")
        options = [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0] if sampler_options is None else list(
            sampler_options)
        if not options or not all(isinstance(o, int | float) and math.isfinite(o)
                                  for o in options):
            raise UserValueError(f"{who}: sampler_options must be numbers, got "
                                 f"{sampler_options!r}")
        self.options = np.asarray(options, dtype=np.float64)
        for what, v in (("trials", trials), ("rounds", rounds)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise UserValueError(f"{who}: {what} must be an int >= 1, got {v!r}")
        if trials * rounds > MAX_CANDIDATES:  # each drawn on the host for every sample
            raise UserValueError(f"{who}: trials x rounds must be at most {MAX_CANDIDATES} "
                                 f"candidates per sample, got {trials} x {rounds}")
        self.trials, self.rounds = trials, rounds
        self.min_visible = check_min_visible(min_visible, who)

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        """Per sample and round: the option (1 draw), then ``trials`` candidates (4 draws
        each: the scales, the place), in torchvision's arithmetic."""
        b, r, t = len(sizes), self.rounds, self.trials
        u = rng.uniform(r * (1 + 4 * t)).reshape(b, r, 1 + 4 * t)
        option = self.options[np.minimum((u[..., 0] * len(self.options)).astype(np.int64),
                                         len(self.options) - 1)]
        c = u[..., 1:].reshape(b, r, t, 4)
        h = sizes[:, 0].astype(np.float64)[:, None, None]
        w = sizes[:, 1].astype(np.float64)[:, None, None]
        lo, hi = self.scale
        new_w = (w * (lo + (hi - lo) * c[..., 0])).astype(np.int64)
        new_h = (h * (lo + (hi - lo) * c[..., 1])).astype(np.int64)
        aspect = new_w / np.maximum(new_h, 1)
        left = ((w - new_w) * c[..., 2]).astype(np.int64)
        top = ((h - new_h) * c[..., 3]).astype(np.int64)
        ok = ((new_h > 0) & (new_w > 0) & (aspect >= self.aspect[0])
              & (aspect <= self.aspect[1]))
        return {"candidates": torch.from_numpy(np.stack([top, left, new_h, new_w], -1)),
                "fits": torch.from_numpy(ok), "min_iou": torch.from_numpy(
                    option.astype(np.float32)), "crop": torch.from_numpy(
                    np.concatenate([np.zeros((b, 2), np.int64), sizes], 1)),
                "sizes": _host(sizes)}

    def choose(self, boxes: torch.Tensor, valid: torch.Tensor, params: Params
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(crop (B, 4) int64, within (B, N) bool)``: each sample's first candidate that
        fits its boxes (xyxy, ``valid``) and whether each box's centre is inside it; where
        none fits, the whole image and all true. On the boxes' device, no read back."""
        dev = boxes.device
        cand = params["candidates"].to(dev, non_blocking=True)
        top, left, ch, cw = (v.to(torch.float32) for v in cand.unbind(-1))  # (B, R, T)
        box = boxes.to(torch.float32)[:, None, None]  # (B, 1, 1, N, 4)
        cx = (box[..., 0] + box[..., 2]) * 0.5
        cy = (box[..., 1] + box[..., 3]) * 0.5
        right, bottom = (left + cw)[..., None], (top + ch)[..., None]
        l4, t4 = left[..., None], top[..., None]
        within = ((l4 < cx) & (cx < right) & (t4 < cy) & (cy < bottom)
                  & valid.to(dev)[:, None, None])  # (B, R, T, N)
        x0, y0 = box[..., 0], box[..., 1]
        iw = (torch.minimum(box[..., 2], right) - torch.where(x0 > l4, x0, l4)).clamp(min=0)
        ih = (torch.minimum(box[..., 3], bottom) - torch.where(y0 > t4, y0, t4)).clamp(min=0)
        inter = iw * ih
        area = (box[..., 2] - box[..., 0]) * (box[..., 3] - box[..., 1])
        iou = inter / (area + (cw * ch)[..., None] - inter).clamp(min=1e-12)
        best = torch.where(within, iou, -1.0).amax(-1)  # (B, R, T)
        min_iou = params["min_iou"].to(dev, non_blocking=True)
        leave = min_iou >= 1.0  # (B, R)
        fits = (params["fits"].to(dev, non_blocking=True) & within.any(-1)
                & (best >= min_iou[..., None]))
        found = fits.any(-1)
        trial = fits.to(torch.int64).argmax(-1)  # (B, R): first fitting candidate
        decided = leave | found
        rnd = decided.to(torch.int64).argmax(-1)  # (B,): the round that decides
        pick = found.gather(1, rnd[:, None])[:, 0] & decided.any(-1)
        t_idx = trial.gather(1, rnd[:, None])  # (B, 1)
        b = cand.shape[0]
        chosen = cand[torch.arange(b, device=dev), rnd, t_idx[:, 0]]  # (B, 4)
        n = box.shape[-2]
        inside = within[torch.arange(b, device=dev), rnd, t_idx[:, 0]]  # (B, N)
        whole = params["crop"].to(dev, non_blocking=True)
        crop = torch.where(pick[:, None], chosen, whole)
        return crop, torch.where(pick[:, None], inside, torch.ones(b, n, dtype=torch.bool,
                                                                    device=dev))

    def apply(self, batch: Batch, params: Params) -> Batch:
        if "boxes.xyxy" not in batch:
            raise UserValueError(f"{self.name}: the batch has no boxes ('boxes.xyxy') — the "
                                 "crop is chosen by its overlap with them")
        from npu_data.kinds.geometry import valid

        xyxy = batch["boxes.xyxy"]
        crop, inside = self.choose(xyxy, valid(batch, "boxes", xyxy), params)
        held = params.get("crop")
        if held is not None and held.device == crop.device:
            held.copy_(crop)  # in place: a Compose's parameters hold this very tensor
        else:  # a device batch: no copy back to the host (the batch's iou_crop has it)
            params["crop"] = crop
        sizes = _in_sizes(params, batch)
        out = dict(batch)
        out["image"] = F.crop(batch["image"], sizes, crop)
        dev = batch["sizes"].device
        out["sizes"] = crop[:, 2:].to(batch["sizes"].dtype).to(dev, non_blocking=True)
        out["iou_crop"] = crop
        shape = (int(batch["image"].shape[2]), int(batch["image"].shape[3]))
        warp = Warp.from_shift(crop[:, :2], sizes, crop[:, 2:], shape, self.min_visible)
        out.update(warp_geometry(batch, warp))
        if "boxes.valid" in out:
            out["boxes.valid"] = out["boxes.valid"] & inside.to(out["boxes.valid"].device)
        return out

    def reference(self, image: np.ndarray, params: Params, index: int) -> np.ndarray:
        from npu_data.transforms.oracle import pillow_geometric as RG

        top, left, height, width = (int(v) for v in params["crop"][index].tolist())
        return RG.crop(image, top, left, height, width)

    def output_size(self, sizes: np.ndarray, params: Params | None = None) -> np.ndarray:
        """The input sizes: each crop, chosen on the device, fits inside them (what a keyed
        ``Compose`` hands the next draw; a flip, as in torchvision's SSD recipe, draws
        without them, a transform that draws from sizes belongs before this one)."""
        return np.asarray(sizes, np.int64).reshape(-1, 2).copy()

