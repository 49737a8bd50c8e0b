"""Batch-level MixUp and CutMix (torchvision v2's): images mixed with a partner, labels to
soft targets.

torchvision pairs sample ``i`` with ``i - 1`` of the batch (``roll(1)``) and draws one
``lam ~ Beta(alpha, alpha)`` per batch. Here the pairing and ``lam`` are keyed: each sample draws
an order key; the batch is ordered by those keys, each sample paired with the one before it
(cyclically), and the first one in that order supplies ``lam`` (and CutMix's box centre). So a
batch of the same samples gets the same mixing in any order, on any worker or rank, and after a
resume. The Beta draw is Marsaglia and Tsang's gamma method on the keyed uniforms (float64, on
the host).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from npu_data.common.compat import is_compiling
from npu_data.errors import UserError, UserTypeError, UserValueError
from npu_data.transforms import functional as F
from npu_data.transforms.base import (
    Batch,
    Params,
    Trait,
    Transform,
)
from npu_data.transforms.draws import Uniforms

_TRIES = 12  # gamma tries: each rejects with probability < 5%
_GEOMETRY = ("boxes.", "polygons.", "keypoints.", "ellipses.", "masks.")


def gamma_draws(u: np.ndarray, shape: float) -> np.ndarray:
    """``Gamma(shape, 1)`` from ``u (B, 3 * _TRIES + 1)`` uniforms: Marsaglia-Tsang (Box-Muller
    normals), boosted by ``U ** (1 / shape)`` below shape 1."""
    a = shape if shape >= 1.0 else shape + 1.0
    d = a - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    tries = u[:, :3 * _TRIES].reshape(-1, _TRIES, 3)
    z = np.sqrt(-2.0 * np.log1p(-tries[..., 0])) * np.cos(2.0 * math.pi * tries[..., 1])
    v = (1.0 + c * z) ** 3
    with np.errstate(invalid="ignore", divide="ignore"):
        ok = (v > 0) & (np.log1p(-tries[..., 2]) < 0.5 * z * z + d - d * v + d * np.log(v))
    first = np.argmax(ok, axis=1)
    rows = np.arange(u.shape[0])
    g = np.where(ok[rows, first], d * v[rows, first], d)
    if shape < 1.0:
        g = g * (1.0 - u[:, -1]) ** (1.0 / shape)
    return np.asarray(g, dtype=np.float64)


def beta_draws(u: np.ndarray, alpha: float) -> np.ndarray:
    """``Beta(alpha, alpha)`` from ``u (B, 2 * (3 * _TRIES + 1))`` uniforms."""
    n = 3 * _TRIES + 1
    x, y = gamma_draws(u[:, :n], alpha), gamma_draws(u[:, n:], alpha)
    total = x + y
    return np.where(total > 0, x / np.where(total > 0, total, 1.0), 0.5)


class _Mixing(Transform):
    traits = frozenset({Trait.FLOAT_IN})

    def __init__(self, alpha: float, num_classes: int | None, labels_key: str) -> None:
        if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not (
                alpha > 0 and math.isfinite(alpha)):
            raise UserValueError(f"{self.name}: alpha must be a number > 0, got {alpha!r}")
        if num_classes is not None and (isinstance(num_classes, bool) or not isinstance(
                num_classes, int) or num_classes < 1):
            raise UserValueError(f"{self.name}: num_classes must be an int >= 1 (or None for "
                                 f"labels already one-hot), got {num_classes!r}")
        if not isinstance(labels_key, str):
            raise UserTypeError(f"{self.name}: labels_key must be a str, got {labels_key!r}")
        self.alpha, self.num_classes, self.labels_key = float(alpha), num_classes, labels_key
        self.dataset_classes: int | None = None  # from the dataset's labels (take_classes)

    def take_classes(self, labels: dict[str, list[str]]) -> None:
        """The class count of a dataset's labels (``{control: names}``: the DataLoader gives
        them), used for class ids when ``num_classes`` is None; several label sets: none."""
        counts = [len(v) for v in labels.values() if len(v)]
        self.dataset_classes = counts[0] if len(counts) == 1 else None

    def labels_of(self, batch: Batch) -> tuple[torch.Tensor, int | None]:
        """``(labels, num_classes)``: the batch's ``labels_key`` column, else (the default
        ``"label"``) its ``choices.label`` column (B, 1) — one class per sample; class ids
        (B,) or (B, 1), or (B, classes) rows."""
        key = self.labels_key
        if key not in batch and key == "label" and "choices.label" in batch:
            key = "choices.label"
            valid = batch.get("choices.valid")
            if batch[key].ndim != 2 or batch[key].shape[1] != 1 or (
                    valid is not None and valid.is_cpu and not is_compiling()
                    and not bool(valid.all())):
                raise UserValueError(f"{self.name}: 'choices.label' must hold one class per "
                                     f"sample, got {tuple(batch[key].shape)} (some samples with "
                                     "none or several) — mixing needs one class per sample")
        labels = batch[key]
        if labels.ndim == 2 and labels.shape[1] == 1 and not labels.is_floating_point():
            labels = labels[:, 0]
        num = self.num_classes if self.num_classes is not None else self.dataset_classes
        if num is None and not labels.is_floating_point():
            raise UserValueError(f"{self.name}: the labels are class ids — pass num_classes= "
                                 "(the DataLoader takes it from a dataset with one label set)")
        if not labels.is_floating_point():
            labels = labels.to(torch.int64)
        return labels, num

    def _check(self, batch: Batch) -> None:
        """Refuse a batch without labels (a bare tensor has none), with geometry, or of
        unmixable samples."""
        found = self.labels_key in batch or (self.labels_key == "label"
                                             and "choices.label" in batch)
        if not found:
            raise UserValueError(f"{self.name}: the batch has no {self.labels_key!r} labels "
                                 "(nor 'choices.label') — pass a batch dict with the class ids "
                                 "(or set labels_key)")
        geometry = [k for k in batch if k.startswith(_GEOMETRY)]
        if geometry:
            raise UserValueError(f"{self.name}: a batch with geometry ({geometry[0]}) cannot "
                                 "be mixed — use it for classification batches only")
        _check_mixable(batch, self.labels_key if self.labels_key in batch else "choices.label",
                       self.name)

    def _draw(self, rng: Uniforms, extra: int) -> tuple[np.ndarray, float, np.ndarray]:
        """``(partner (B,), the batch's lam, the leader's ``extra`` uniforms)``."""
        b = len(rng)
        order_key = rng.uniform(1)[:, 0]
        lam_u = rng.uniform(2 * (3 * _TRIES + 1))
        more = rng.uniform(extra) if extra else np.zeros((b, 0))
        order = np.argsort(order_key, kind="stable")
        partner = np.empty(b, np.int64)
        partner[order] = np.roll(order, 1)
        leader = int(order[0]) if b else 0
        lam = float(beta_draws(lam_u[leader:leader + 1], self.alpha)[0]) if b else 1.0
        return partner, lam, more[leader] if b else more

    def soft_labels(self, batch: Batch, partner: torch.Tensor, weight: torch.Tensor
                    ) -> torch.Tensor:
        """``(B, num_classes)`` float32: ``weight`` of the sample's label (:meth:`labels_of`)
        plus ``1 - weight`` of its partner's (``functional.soft_labels``, its errors named
        after this transform)."""
        labels, num = self.labels_of(batch)
        try:
            return F.soft_labels(labels, partner, weight, num)
        except UserError as e:
            raise type(e)(f"{self.name}: {str(e).removeprefix('soft_labels: ')}") from None

    def mix_reference(self, images: list[np.ndarray], params: Params) -> list[np.ndarray]:
        """The batch mixed on the host (the CPU reference); each subclass defines it."""
        raise NotImplementedError

    def reference(self, image: np.ndarray, params: Params, index: int) -> np.ndarray:
        raise UserValueError(f"{self.name} mixes pairs of samples: replay a batch with "
                             f"{self.name}.mix_reference(images, params), not sample by sample")


class MixUp(_Mixing):
    """Blend each sample with its partner: ``lam * x + (1 - lam) * partner``, labels alike.

    Args:
        alpha: Beta(alpha, alpha) for ``lam`` (torchvision: 1.0; the ResNet recipe 0.2).
        num_classes: Turns the class ids (B,) or (B, 1) into one-hot rows; None: from the
            dataset's labels (the DataLoader gives them) for class ids, else the labels are
            already (B, classes) float.
        labels_key: The batch key of the labels (replaced by the soft targets); the default
            ``"label"`` reads a batch's ``choices.label`` (B, 1) when it has no ``label``
            and writes the soft targets under ``"label"``.

    Raises:
        UserError: A bad alpha or num_classes; at call, a batch without labels, with geometry,
            or with class ids outside ``num_classes``.
    """

    def __init__(self, alpha: float = 1.0, num_classes: int | None = None,
                 labels_key: str = "label") -> None:
        super().__init__(alpha, num_classes, labels_key)

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        partner, lam, _ = self._draw(rng, 0)
        b = len(rng)
        lam32 = np.full(b, lam, np.float32)
        return {"partner": torch.from_numpy(partner), "lam": torch.from_numpy(lam32),
                "label_lam": torch.from_numpy(lam32.copy())}

    def apply(self, batch: Batch, params: Params) -> Batch:
        self._check(batch)
        out = dict(batch)
        with F.riding(F.soft_label_riders(params["partner"], params["label_lam"])):  # one copy
            out["image"] = F.mixup(batch["image"], params["partner"], params["lam"])
            out[self.labels_key] = self.soft_labels(batch, params["partner"],
                                                    params["label_lam"])
        return out

    def mix_reference(self, images: list[np.ndarray], params: Params) -> list[np.ndarray]:
        """The batch mixed on the host in float32 and rounded half to even (uint8): the same
        formula, sample by sample."""
        out = []
        for i, img in enumerate(images):
            lam = np.float32(params["lam"][i])
            j = int(params["partner"][i])
            mixed = images[j].astype(np.float32) * (np.float32(1.0) - lam) + \
                img.astype(np.float32) * lam
            out.append(np.rint(mixed).clip(0, 255).astype(np.uint8)
                       if img.dtype == np.uint8 else mixed)
        return out


class CutMix(_Mixing):
    """Paste a box of the partner into each sample: the box is torchvision's (centre uniform,
    sides ``sqrt(1 - lam)`` of the image, clipped), the label weight ``1 - box area / area``.

    Args:
        alpha: Beta(alpha, alpha) for ``lam`` (torchvision: 1.0).
        num_classes: As for :class:`MixUp`.
        labels_key: As for :class:`MixUp`.

    Raises:
        UserError: As for :class:`MixUp`.
    """

    def __init__(self, alpha: float = 1.0, num_classes: int | None = None,
                 labels_key: str = "label") -> None:
        super().__init__(alpha, num_classes, labels_key)

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        partner, lam, centre = self._draw(rng, 2)
        h, w = sizes[:, 0].astype(np.int64), sizes[:, 1].astype(np.int64)
        ry = np.floor(centre[0] * h).astype(np.int64) if len(centre) else h * 0
        rx = np.floor(centre[1] * w).astype(np.int64) if len(centre) else w * 0
        r = 0.5 * math.sqrt(1.0 - lam)
        half_w, half_h = (r * w).astype(np.int64), (r * h).astype(np.int64)
        x1, y1 = np.maximum(rx - half_w, 0), np.maximum(ry - half_h, 0)
        x2, y2 = np.minimum(rx + half_w, w), np.minimum(ry + half_h, h)
        area = np.maximum(h * w, 1)
        label_lam = 1.0 - (x2 - x1) * (y2 - y1) / area
        boxes = np.stack([y1, x1, y2 - y1, x2 - x1], 1)
        return {"partner": torch.from_numpy(partner), "boxes": torch.from_numpy(boxes),
                "label_lam": torch.from_numpy(label_lam.astype(np.float32))}

    def apply(self, batch: Batch, params: Params) -> Batch:
        self._check(batch)
        out = dict(batch)
        with F.riding(F.soft_label_riders(params["partner"], params["label_lam"])):  # one copy
            out["image"] = F.cutmix(batch["image"], params["partner"], params["boxes"])
            out[self.labels_key] = self.soft_labels(batch, params["partner"],
                                                    params["label_lam"])
        return out

    def mix_reference(self, images: list[np.ndarray], params: Params) -> list[np.ndarray]:
        """The batch with each box copied from the partner (the partner's pixels at the same
        place; samples of one size, as CutMix expects)."""
        out = []
        for i, img in enumerate(images):
            top, left, h, w = (int(v) for v in params["boxes"][i])
            mixed = img.copy()
            src = images[int(params["partner"][i])]
            mixed[top:top + h, left:left + w] = src[top:top + h, left:left + w]
            out.append(mixed)
        return out


def _check_mixable(batch: Batch, labels_key: str, who: str) -> None:
    """One label per image, and (host ``sizes``) every sample of one size: a sample mixed
    with a larger partner would take its partner's pixels into its padding, a smaller one
    the padding into its valid pixels."""
    images, labels, sizes = batch.get("image"), batch[labels_key], batch.get("sizes")
    if not isinstance(images, torch.Tensor) or not isinstance(labels, torch.Tensor):
        return
    if labels.ndim == 0 or labels.shape[0] != images.shape[0]:
        raise UserValueError(f"{who}: the batch has {images.shape[0]} images and "
                             f"{labels.shape[0] if labels.ndim else 'no row of'} "
                             f"{labels_key!r} labels — give one label per image")
    if not isinstance(sizes, torch.Tensor) or not sizes.is_cpu or is_compiling():
        return  # device sizes: never read back
    if len(sizes) and bool((sizes != sizes[:1]).any()):
        raise UserValueError(f"{who}: a padded batch of mixed sizes would blend padding into "
                             "valid pixels — bring every sample to one size first (a crop or "
                             "resize), or batch samples of one size (BucketBatchSampler)")
