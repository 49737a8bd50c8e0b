"""The host-side keyed parameter draws have torchvision's distributions, checked over 10^5
draws against a transcription of torchvision's own samplers run with numpy's
``default_rng`` as the reference.

Two-sample Kolmogorov-Smirnov statistics (numpy, no scipy) compare continuous and integer
parameters at alpha = 1e-4; rates are compared with a pooled two-proportion test (within 5
standard errors) or against their exact value. Every check battery is also run against a
deliberately wrong reference (one try instead of ten, another scale or ratio range, a biased
position, another fallback, a non-uniform order, another flip rate, a shared draw position)
and must fail there, so the tests are shown to have the power to see such mistakes. The same
sampler fed by a torch generator (``GeneratorDraws``: ``get_params``) has the same
properties (other numbers).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence

import numpy as np
import pytest
import torch

from npu_data.transforms import ColorJitter, Compose, RandomHorizontalFlip, RandomResizedCrop
from npu_data.transforms.draws import GeneratorDraws, child_position, sample_keys

N = 100_000
ALPHA = 1e-4
Z = 5.0  # standard errors allowed for a rate
DEFAULT_SCALE = (0.08, 1.0)
DEFAULT_RATIO = (3 / 4, 4 / 3)
Range = tuple[float, float]


# ----------------------------------------------------------------------------- statistics


def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sample Kolmogorov-Smirnov statistic sup |F_a - F_b| (exact with ties)."""
    a = np.sort(np.asarray(a, dtype=np.float64))
    b = np.sort(np.asarray(b, dtype=np.float64))
    grid = np.concatenate([a, b])
    cdf_a = np.searchsorted(a, grid, side="right") / a.size
    cdf_b = np.searchsorted(b, grid, side="right") / b.size
    return float(np.max(np.abs(cdf_a - cdf_b)))


def ks_critical(n: int, m: int, alpha: float = ALPHA) -> float:
    """The asymptotic critical value c(alpha) * sqrt((n + m) / (n m))."""
    return math.sqrt(-math.log(alpha / 2) / 2) * math.sqrt((n + m) / (n * m))


def ks_failure(name: str, a: np.ndarray, b: np.ndarray) -> list[str]:
    d, crit = ks_statistic(a, b), ks_critical(len(a), len(b))
    return [f"KS {name}: D={d:.4f} > {crit:.4f}"] if d > crit else []


def rates_differ(k1: int, n1: int, k2: int, n2: int, z: float = Z) -> bool:
    """Pooled two-proportion test: |p1 - p2| beyond ``z`` standard errors."""
    p = (k1 + k2) / (n1 + n2)
    se = math.sqrt(p * (1 - p) * (1 / n1 + 1 / n2))
    return abs(k1 / n1 - k2 / n2) > z * se


def rate_off(k: int, n: int, p: float, z: float = Z) -> bool:
    """``k`` of ``n`` beyond ``z`` standard errors of the exact probability ``p``."""
    return abs(k / n - p) > z * math.sqrt(p * (1 - p) / n)


def chi2_critical(df: int, alpha: float = ALPHA) -> float:
    """Wilson-Hilferty's approximation of the chi-square upper quantile (z for 1e-4)."""
    z = {1e-4: 3.719}[alpha]
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def corr(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(np.asarray(a, np.float64), np.asarray(b, np.float64))[0, 1])


# ------------------------------------------------------------- torchvision's samplers, numpy


def tv_fallback(height: int, width: int, ratio: Range) -> tuple[int, int, int, int]:
    """torchvision ``RandomResizedCrop.get_params``' fallback: the central crop with the
    nearest allowed aspect ratio, ``(i, j, h, w)``."""
    in_ratio = float(width) / float(height)
    if in_ratio < min(ratio):
        w = width
        h = int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        h = height
        w = int(round(h * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def tv_get_params(height: int, width: int, scales: Sequence[float],
                  log_aspects: Sequence[float], ratio: Range) -> tuple[int, int, bool]:
    """torchvision's (v0.2x) ``RandomResizedCrop.get_params(img, scale, ratio)`` for one
    image, line by line, with its uniforms given: ``scales[t]`` stands for
    ``torch.empty(1).uniform_(scale[0], scale[1])`` and ``log_aspects[t]`` for
    ``torch.empty(1).uniform_(log_ratio[0], log_ratio[1])`` of try ``t``::

        area = height * width
        log_ratio = torch.log(torch.tensor(ratio))
        for _ in range(10):
            target_area = area * torch.empty(1).uniform_(scale[0], scale[1]).item()
            aspect_ratio = math.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1]).item())
            w = int(round(math.sqrt(target_area * aspect_ratio)))
            h = int(round(math.sqrt(target_area / aspect_ratio)))
            if 0 < w <= width and 0 < h <= height:
                i = torch.randint(0, height - h + 1, size=(1,)).item()
                j = torch.randint(0, width - w + 1, size=(1,)).item()
                return i, j, h, w
        # fallback to central crop (see tv_fallback)

    Returns ``(h, w, found)``; the position is drawn apart (:func:`tv_crop_boxes`).
    """
    area = height * width
    for s, la in zip(scales, log_aspects, strict=True):
        target_area = area * s
        aspect_ratio = math.exp(la)
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < w <= width and 0 < h <= height:
            return h, w, True
    _, _, h, w = tv_fallback(height, width, ratio)
    return h, w, False


def tv_crop_sizes(height: int, width: int, scales: np.ndarray, log_aspects: np.ndarray,
                  ratio: Range) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`tv_get_params` for ``(N, tries)`` uniforms at once: the same loop over the
    tries, each run for all samples still pending (``np.rint`` rounds half to even like
    Python's ``round``), then the fallback for those left. Returns ``(h, w, found)``."""
    n = scales.shape[0]
    area = height * width
    h = np.zeros(n, dtype=np.int64)
    w = np.zeros(n, dtype=np.int64)
    pending = np.ones(n, dtype=bool)
    for t in range(scales.shape[1]):
        target_area = area * scales[:, t]
        aspect_ratio = np.exp(log_aspects[:, t])
        cw = np.rint(np.sqrt(target_area * aspect_ratio)).astype(np.int64)
        ch = np.rint(np.sqrt(target_area / aspect_ratio)).astype(np.int64)
        fits = pending & (cw > 0) & (cw <= width) & (ch > 0) & (ch <= height)
        h[fits], w[fits] = ch[fits], cw[fits]
        pending &= ~fits
    _, _, h[pending], w[pending] = tv_fallback(height, width, ratio)
    return h, w, ~pending


def tv_uniforms(scale: Range, ratio: Range, n: int, tries: int,
                seed: int) -> tuple[np.ndarray, np.ndarray, np.random.Generator]:
    """The ``(n, tries)`` scale and log-aspect uniforms of every try, from ``default_rng``."""
    rng = np.random.default_rng(seed)
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    scales = rng.uniform(scale[0], scale[1], (n, tries))
    return scales, rng.uniform(log_ratio[0], log_ratio[1], (n, tries)), rng


@functools.cache
def tv_crop_boxes(height: int, width: int, scale: Range, ratio: Range, seed: int,
                  tries: int = 10, fallback: str = "torchvision",
                  position: str = "uniform") -> np.ndarray:
    """``(N, 4)`` boxes ``(i, j, h, w)`` of torchvision's ``get_params`` (:func:`tv_crop_sizes`)
    with numpy's ``default_rng(seed)``; the position ``torch.randint(0, margin + 1)`` is drawn
    after the tries (it is independent of them). ``tries``, ``fallback="whole"`` (the whole
    image) and ``position="off_by_one"`` / ``"biased"`` make deliberately wrong references.
    """
    scales, log_aspects, rng = tv_uniforms(scale, ratio, N, tries, seed)
    h, w, found = tv_crop_sizes(height, width, scales, log_aspects, ratio)
    fb = tv_fallback(height, width, ratio) if fallback == "torchvision" else (0, 0, height, width)
    h, w = np.where(found, h, fb[2]), np.where(found, w, fb[3])
    top = np.where(found, _tv_position(rng, height - h, position), fb[0])
    left = np.where(found, _tv_position(rng, width - w, position), fb[1])
    return np.stack([top, left, h, w], axis=1).astype(np.int64)


def _tv_position(rng: np.random.Generator, margin: np.ndarray, position: str) -> np.ndarray:
    """``torch.randint(0, margin + 1)`` (or a wrong variant) for every sample."""
    if position == "uniform":
        return rng.integers(0, margin + 1)
    if position == "off_by_one":
        return rng.integers(0, np.maximum(margin, 1))
    assert position == "biased"
    return rng.integers(0, margin // 2 + 1)


def tv_jitter_orders(n_ops: int, seed: int) -> np.ndarray:
    """torchvision ``ColorJitter.get_params``' ``fn_idx = torch.randperm(4)``, one per sample."""
    rng = np.random.default_rng(seed)
    return rng.permuted(np.tile(np.arange(n_ops), (N, 1)), axis=1)


# ---------------------------------------------------------------------------- npu_data side


def keys(seed: int, epoch: int = 0) -> np.ndarray:
    return sample_keys(seed, epoch, np.arange(N))


def sizes_of(height: int, width: int) -> np.ndarray:
    return np.tile(np.array([[height, width]], dtype=np.int64), (N, 1))


@functools.cache
def npu_crop_boxes(height: int, width: int, scale: Range, ratio: Range, seed: int) -> np.ndarray:
    t = RandomResizedCrop(224, scale=scale, ratio=ratio)
    return t.draw_keyed(sizes_of(height, width), keys(seed))["boxes"].numpy()


# ----------------------------------------------------------------------------- crop battery


def fallback_shaped(boxes: np.ndarray, height: int, width: int, ratio: Range) -> np.ndarray:
    """Boxes equal to torchvision's fallback box (a fitting try rarely gives one too)."""
    return np.all(boxes == np.array(tv_fallback(height, width, ratio)), axis=1)


def crop_discrepancies(got: np.ndarray, ref: np.ndarray, height: int, width: int,
                       ratio: Range) -> list[str]:
    """Every way the boxes ``got`` differ in distribution from the boxes ``ref``."""
    failures: list[str] = []
    stats = {
        "height": lambda b: b[:, 2],
        "width": lambda b: b[:, 3],
        "area fraction": lambda b: b[:, 2] * b[:, 3] / (height * width),
        "aspect w/h": lambda b: b[:, 3] / b[:, 2],
        "top/(H-h+1)": lambda b: b[:, 0] / (height - b[:, 2] + 1),
        "left/(W-w+1)": lambda b: b[:, 1] / (width - b[:, 3] + 1),
    }
    for name, stat in stats.items():
        failures += ks_failure(name, stat(got), stat(ref))
    events = {
        "fallback": lambda b: fallback_shaped(b, height, width, ratio),
        "top at 0": lambda b: (b[:, 0] == 0) & (b[:, 2] < height),
        "top at H-h": lambda b: (b[:, 0] == height - b[:, 2]) & (b[:, 2] < height),
        "left at 0": lambda b: (b[:, 1] == 0) & (b[:, 3] < width),
        "left at W-w": lambda b: (b[:, 1] == width - b[:, 3]) & (b[:, 3] < width),
    }
    for name, event in events.items():
        k1, k2 = int(event(got).sum()), int(event(ref).sum())
        if rates_differ(k1, len(got), k2, len(ref)):
            failures.append(f"rate {name}: {k1 / len(got):.5f} vs {k2 / len(ref):.5f}")
    return failures


CROP_CASES = {
    "default": (375, 500, DEFAULT_SCALE, DEFAULT_RATIO),
    "wide": (60, 900, DEFAULT_SCALE, DEFAULT_RATIO),  # fallback: full height, w = 80
    "tall": (900, 60, DEFAULT_SCALE, DEFAULT_RATIO),  # fallback: full width, h = 80
    "custom": (375, 500, (0.5, 0.9), (0.5, 2.0)),
}


@pytest.mark.parametrize("case", list(CROP_CASES))
def test_random_resized_crop_matches_torchvision(case: str) -> None:
    """Boxes inside the image, and KS-equal sizes, areas, aspects and positions, and equal
    fallback and edge-position rates, to torchvision's ``get_params``."""
    height, width, scale, ratio = CROP_CASES[case]
    got = npu_crop_boxes(height, width, scale, ratio, seed=1)
    ref = tv_crop_boxes(height, width, scale, ratio, seed=101)
    top, left, h, w = got.T
    assert got.dtype == np.int64 and got.shape == (N, 4)
    assert (h > 0).all() and (w > 0).all()
    assert (top >= 0).all() and (left >= 0).all()
    assert (top + h <= height).all() and (left + w <= width).all()
    assert crop_discrepancies(got, ref, height, width, ratio) == []


def test_fallback_rates_are_exercised() -> None:
    """The cases cover both regimes: rare fallbacks and mostly fallbacks."""
    rates = {c: fallback_shaped(npu_crop_boxes(*v, seed=1), *v[:2], v[3]).mean()
             for c, v in CROP_CASES.items()}
    assert rates["default"] < 0.01 and rates["custom"] < 0.01
    assert rates["wide"] > 0.5 and rates["tall"] > 0.5


@pytest.mark.parametrize("case", list(CROP_CASES))
def test_vectorised_reference_is_torchvisions_loop(case: str) -> None:
    """The vectorised reference gives exactly what the line-by-line transcription gives."""
    height, width, scale, ratio = CROP_CASES[case]
    scales, log_aspects, _ = tv_uniforms(scale, ratio, 10_000, 10, seed=102)
    h, w, found = tv_crop_sizes(height, width, scales, log_aspects, ratio)
    loop = [tv_get_params(height, width, s, la, ratio)
            for s, la in zip(scales.tolist(), log_aspects.tolist(), strict=True)]
    assert np.array_equal(np.stack([h, w, found], axis=1), np.array(loop, dtype=np.int64))


WRONG_REFERENCES = {  # label: (case, the change to the reference, a check it must fail)
    "one try": ("default", {"tries": 1}, "rate fallback"),
    "one try, wide": ("wide", {"tries": 1}, "rate fallback"),
    "scale (0.2, 1)": ("default", {"scale": (0.2, 1.0)}, "KS area fraction"),
    "ratio (0.5, 2)": ("default", {"ratio": (0.5, 2.0)}, "KS aspect w/h"),
    "scale and ratio swapped": ("custom", {"scale": (0.5, 2.0), "ratio": (0.5, 0.9)},
                                "KS aspect w/h"),
    "whole-image fallback": ("wide", {"fallback": "whole"}, "KS width"),
    "whole-image fallback, tall": ("tall", {"fallback": "whole"}, "KS height"),
    "position off by one": ("default", {"position": "off_by_one"}, "rate top at H-h"),
    "position biased": ("custom", {"position": "biased"}, "KS top/(H-h+1)"),
}


@pytest.mark.parametrize("label", list(WRONG_REFERENCES))
def test_crop_checks_reject_a_wrong_reference(label: str) -> None:
    """Negative controls: the battery of the test above fails against a wrong reference."""
    case, change, expected = WRONG_REFERENCES[label]
    height, width, scale, ratio = CROP_CASES[case]
    got = npu_crop_boxes(height, width, scale, ratio, seed=1)
    kwargs = {"scale": scale, "ratio": ratio, **change}
    wrong = tv_crop_boxes(height, width, kwargs.pop("scale"), kwargs.pop("ratio"), seed=101,
                          **kwargs)
    failures = crop_discrepancies(got, wrong, height, width, ratio)
    assert any(f.startswith(expected) for f in failures), failures


# ------------------------------------------------------------------------------ ColorJitter


def order_discrepancies(order: np.ndarray, enabled: Sequence[int]) -> list[str]:
    """How the rows of ``order`` differ from uniform random orders of ``enabled``."""
    perms = list(itertools.permutations(enabled))
    weights = 4 ** np.arange(len(enabled))
    codes = order @ weights
    counts = np.array([(codes == np.array(p) @ weights).sum() for p in perms])
    n = order.shape[0]
    if counts.sum() != n:
        return [f"{n - counts.sum()} rows are not orders of {tuple(enabled)}"]
    p = 1 / len(perms)
    failures = [f"order {perm}: {c / n:.5f} vs {p:.5f}"
                for perm, c in zip(perms, counts, strict=True) if rate_off(int(c), n, p)]
    chi2 = float(((counts - n * p) ** 2 / (n * p)).sum())
    if len(perms) > 2 and chi2 > chi2_critical(len(perms) - 1):
        failures.append(f"chi2 {chi2:.1f} > {chi2_critical(len(perms) - 1):.1f}")
    return failures


def factor_discrepancies(values: np.ndarray, lo: float, hi: float, seed: int) -> list[str]:
    """``values`` against torchvision's ``torch.empty(1).uniform_(lo, hi)``, per sample."""
    ref = np.random.default_rng(seed).uniform(lo, hi, N)
    failures = ks_failure(f"U({lo}, {hi})", values, ref)
    if values.min() < lo - 1e-6 or values.max() > hi + 1e-6:
        failures.append(f"out of [{lo}, {hi}]: {values.min()}..{values.max()}")
    return failures


JITTERS = {  # kwargs, {op: torchvision range}, enabled op ids in OPS order
    "all": ({"brightness": 0.4, "contrast": 0.4, "saturation": 0.4, "hue": 0.1},
            {"brightness": (0.6, 1.4), "contrast": (0.6, 1.4), "saturation": (0.6, 1.4),
             "hue": (-0.1, 0.1)}, (0, 1, 2, 3)),
    "brightness+hue": ({"brightness": 0.3, "hue": 0.2},
                       {"brightness": (0.7, 1.3), "hue": (-0.2, 0.2)}, (0, 3)),
    "clipped+pairs": ({"brightness": 1.5, "contrast": (0.2, 0.9), "saturation": (1.0, 3.0)},
                      {"brightness": (0.0, 2.5), "contrast": (0.2, 0.9),
                       "saturation": (1.0, 3.0)}, (0, 1, 2)),
}
IDENTITY = {"brightness": 1.0, "contrast": 1.0, "saturation": 1.0, "hue": 0.0}


@pytest.mark.parametrize("name", list(JITTERS))
def test_color_jitter_matches_torchvision(name: str) -> None:
    kwargs, ranges, enabled = JITTERS[name]
    params = ColorJitter(**kwargs).draw_keyed(sizes_of(8, 8), keys(20 + list(JITTERS).index(name)))
    order = params["order"].numpy()
    assert order.dtype == np.int64 and order.shape == (N, len(enabled))
    assert order_discrepancies(order, enabled) == []
    for i, (op, ident) in enumerate(IDENTITY.items()):
        values = params[op].numpy()
        assert values.dtype == np.float32 and values.shape == (N,)
        if op in ranges:
            assert factor_discrepancies(values, *ranges[op], seed=200 + i) == [], op
        else:
            assert (values == ident).all(), op


def test_color_jitter_fixed_order() -> None:
    """order="fixed": brightness, contrast, saturation, hue (the enabled ones), factors as
    with the random order."""
    for name in ("all", "brightness+hue"):
        kwargs, ranges, enabled = JITTERS[name]
        params = ColorJitter(**kwargs, order="fixed").draw_keyed(sizes_of(8, 8), keys(3))
        assert (params["order"].numpy() == np.array(enabled)).all()
        for op, (lo, hi) in ranges.items():
            assert factor_discrepancies(params[op].numpy(), lo, hi, seed=300) == [], op


def test_jitter_checks_reject_wrong_orders_and_ranges() -> None:
    rng = np.random.default_rng(400)
    ref = tv_jitter_orders(4, seed=401)
    assert order_discrepancies(ref, (0, 1, 2, 3)) == []  # the reference itself passes
    later_hue = np.argsort(rng.random((N, 4)) * np.array([1, 1, 1, 1.2]), axis=1)
    assert order_discrepancies(later_hue, (0, 1, 2, 3)) != []
    one_swap = np.tile(np.arange(4), (N, 1))
    k = rng.integers(0, 3, N)
    rows = np.arange(N)
    one_swap[rows, k], one_swap[rows, k + 1] = one_swap[rows, k + 1], one_swap[rows, k].copy()
    assert order_discrepancies(one_swap, (0, 1, 2, 3)) != []
    pair = np.where(rng.random(N)[:, None] < 0.48, [[0, 3]], [[3, 0]])
    assert order_discrepancies(pair, (0, 3)) != []
    values = ColorJitter(0.4).draw_keyed(sizes_of(8, 8), keys(2))["brightness"].numpy()
    assert factor_discrepancies(values, 0.6, 1.4, seed=402) == []
    assert factor_discrepancies(values, 0.65, 1.4, seed=402) != []  # a slightly wrong range


# ------------------------------------------------------------------------------------ flips


def test_horizontal_flip_rate() -> None:
    flip = RandomHorizontalFlip(p=0.3).draw_keyed(sizes_of(8, 8), keys(4))["flip"].numpy()
    assert flip.dtype == np.bool_ and flip.shape == (N,)
    assert not rate_off(int(flip.sum()), N, 0.3)
    assert rate_off(int((np.random.default_rng(500).random(N) < 0.32).sum()), N, 0.3)
    for p, expected in [(0.0, False), (1.0, True)]:
        flips = RandomHorizontalFlip(p=p).draw_keyed(sizes_of(8, 8), keys(4))["flip"].numpy()
        assert (flips == expected).all()


# ------------------------------------------------------------------------------ independence


def test_compose_positions_are_independent() -> None:
    """Compose's children draw independent numbers: the flip is uncorrelated with the crop,
    and a flip drawn at the crop's own position (a collision) is caught."""
    sizes = sizes_of(375, 500)
    params = Compose([RandomResizedCrop(224), RandomHorizontalFlip()]).draw_keyed(sizes, keys(5))
    boxes, flip = params["0.boxes"].numpy(), params["1.flip"].numpy()
    area = boxes[:, 2] * boxes[:, 3]
    bound = 5 / math.sqrt(N)
    for name, stat in {"top": boxes[:, 0], "left": boxes[:, 1], "height": boxes[:, 2],
                       "area": area}.items():
        assert abs(corr(flip, stat)) < bound, name
    collided = RandomHorizontalFlip().draw_keyed(sizes, keys(5), child_position(0, 0))["flip"]
    assert abs(corr(collided.numpy(), area)) > bound


def test_draws_are_independent_across_samples_and_epochs() -> None:
    """Neighbouring sample ids, and the same ids in the next epoch or under another seed, get
    uncorrelated crops."""
    t, sizes = RandomResizedCrop(224), sizes_of(375, 500)
    top = t.draw_keyed(sizes, keys(6))["boxes"].numpy()[:, 0]
    bound = 5 / math.sqrt(N)
    assert abs(corr(top[1:], top[:-1])) < bound
    for other in (keys(6, epoch=1), keys(7)):
        assert abs(corr(top, t.draw_keyed(sizes, other)["boxes"].numpy()[:, 0])) < bound


# ------------------------------------------------------------------ a generator's numbers


def generator_params(t: object, sizes: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """``t.make_params`` fed by a torch generator (``GeneratorDraws``, what ``get_params``
    uses): the same sampler as the keyed draws, other numbers."""
    rng = GeneratorDraws(len(sizes), torch.Generator().manual_seed(seed), torch.device("cpu"))
    return {k: v.numpy() for k, v in t.make_params(sizes, rng).items()}  # type: ignore[attr-defined]


@pytest.mark.parametrize("case", list(CROP_CASES))
def test_generator_crops_match_torchvision_too(case: str) -> None:
    height, width, scale, ratio = CROP_CASES[case]
    got = generator_params(RandomResizedCrop(224, scale=scale, ratio=ratio),
                           sizes_of(height, width), seed=600)["boxes"]
    top, left, h, w = got.T
    assert (h > 0).all() and (w > 0).all() and (top >= 0).all() and (left >= 0).all()
    assert (top + h <= height).all() and (left + w <= width).all()
    ref = tv_crop_boxes(height, width, scale, ratio, seed=601)
    assert crop_discrepancies(got, ref, height, width, ratio) == []


def test_generator_jitter_and_flip_match_torchvision_too() -> None:
    kwargs, ranges, enabled = JITTERS["all"]
    params = generator_params(ColorJitter(**kwargs), sizes_of(8, 8), seed=602)
    assert order_discrepancies(params["order"], enabled) == []
    for i, op in enumerate(IDENTITY):
        assert factor_discrepancies(params[op], *ranges[op], seed=603 + i) == [], op
    flip = generator_params(RandomHorizontalFlip(p=0.3), sizes_of(8, 8), seed=604)["flip"]
    assert not rate_off(int(flip.sum()), N, 0.3)


def test_get_params_is_make_params_fed_by_the_generator() -> None:
    """One sampler: ``get_params(batch, generator)`` is ``make_params`` on the batch's sizes
    with that generator's numbers; host tensors of the keyed draws' dtypes and shapes."""
    rng = np.random.default_rng(605)
    sizes = np.stack([rng.integers(5, 60, 64), rng.integers(5, 60, 64)], 1)
    batch = {"image": torch.zeros(64, 3, 60, 60, dtype=torch.uint8),
             "sizes": torch.from_numpy(sizes)}
    for t in (RandomResizedCrop(16), ColorJitter(0.4, 0.4, 0.4, 0.1), RandomHorizontalFlip()):
        got = t.get_params(batch, torch.Generator().manual_seed(7))
        want = generator_params(t, sizes, seed=7)
        keyed = t.draw_keyed(sizes, keys(1)[:64])
        assert got.keys() == want.keys() == keyed.keys()
        for k, v in got.items():
            assert v.device.type == "cpu" and np.array_equal(v.numpy(), want[k]), k
            assert (v.dtype, v.shape) == (keyed[k].dtype, keyed[k].shape), k
