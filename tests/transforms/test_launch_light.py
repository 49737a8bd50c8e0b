"""The torch kernels run a whole Compose batch in a few device ops, within a memory budget,
exactly, and compile into one graph (issue 28).

Costs are counted with the batch on the ``meta`` device and the parameters on the host, as
the DataLoader hands them (``npu_data.bench.device_costs``); exactness against the compiled
CPU kernels, which match Pillow bit for bit (``test_native.py``).
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from npu_data.bench.device_costs import measure
from npu_data.parity.precision import wrapped_numbers
from npu_data.transforms import (
    ColorJitter,
    Compose,
    CutMix,
    MixUp,
    RandomHorizontalFlip,
    RandomResizedCrop,
    _native,
)
from npu_data.transforms import functional as F
from npu_data.transforms._kernels import accelerator_path, copies_on_host, pack_upload
from npu_data.transforms._kernels import color as K
from npu_data.transforms._kernels import resample as RS
from npu_data.transforms._kernels.crop import vertical_first
from npu_data.transforms.draws import sample_keys


def _pipe(size: int = 32) -> Compose:
    return Compose([RandomResizedCrop(size), ColorJitter(0.4, 0.4, 0.4, 0.1),
                    RandomHorizontalFlip()])


def _meta_batch(b: int, h: int, w: int) -> dict[str, torch.Tensor]:
    image = torch.empty((b, h, w, 3), dtype=torch.uint8, device="meta").permute(0, 3, 1, 2)
    return {"image": image, "sizes": torch.tensor([[h, w]] * b).to("meta")}


def _costs(b: int, h: int, w: int, boxes: np.ndarray | None = None, size: int = 32
           ) -> tuple[int, float]:
    pipe = _pipe(size)
    batch = _meta_batch(b, h, w)
    params = pipe.draw_keyed(np.array([[h, w]] * b), sample_keys(1, 0, np.arange(b)))
    if boxes is not None:
        params["0.boxes"] = torch.from_numpy(boxes)
    pipe.apply(batch, params)  # tables made on first use
    c = measure(lambda: pipe.apply(batch, params), [batch["image"], batch["sizes"]])
    return c.non_views, c.peak_bytes / batch["image"].numel()


def test_a_compose_batch_is_a_few_device_ops_whatever_the_batch_size() -> None:
    counts = {}
    for b in (4, 12):
        # every sample the whole image: the same tables' shapes for both batch sizes
        boxes = np.array([[0, 0, 60, 80]] * b)
        counts[b], _ = _costs(b, 60, 80, boxes)
    assert counts[4] == counts[12] <= 100, counts


def test_peak_device_memory_stays_within_the_budget() -> None:
    """The bench's Compose shapes: at most 4x the input batch's bytes at any moment (the
    colour steps' per-sample tables, ~0.7 MB while built, do not scale down with the image:
    smaller inputs than these pay relatively more)."""
    for b, h, w in ((6, 375, 500), (2, 1500, 2000)):
        _, ratio = _costs(b, h, w, size=224)
        assert ratio <= 4.0, (b, h, w, ratio)


def test_the_budget_chunks_the_passes_and_never_changes_pixels() -> None:
    rng = np.random.default_rng(3)
    x = torch.from_numpy(rng.integers(0, 256, (6, 70, 90, 3), dtype=np.uint8)).permute(0, 3, 1, 2)
    sizes = torch.tensor([[70, 90]] * 6)
    # tall boxes: most samples resize vertically first (Pillow >= 13)
    boxes = torch.tensor([[0, 5, 70, 20], [3, 0, 60, 90], [10, 30, 55, 12], [0, 0, 70, 90],
                          [20, 60, 40, 25], [1, 2, 3, 4]])
    size = (18, 24)
    assert bool(vertical_first(boxes, *size).any()) == RS.vertical_first_rule()
    expected = F.resized_crop(x, sizes, boxes, size)
    saved = RS.MEMORY_BUDGET
    try:
        for budget in (0.01, 1.0, 1000.0):
            RS.MEMORY_BUDGET = budget
            for ctx in (_native.disabled, accelerator_path):
                with ctx():
                    got = F.resized_crop(x, sizes, boxes, size)
                assert torch.equal(got, expected), (budget, ctx)
    finally:
        RS.MEMORY_BUDGET = saved


def test_the_planner_takes_the_fewest_ops_that_fit() -> None:
    elems, taps = 1000, 7
    roomy = RS.plan_pass(8, elems, taps, 0, 0, 10**9)
    assert roomy == RS.PassPlan(1, False)  # all taps at once: 5 ops
    # one tap at a time fits where all taps do not
    tight = RS.plan_pass(8, elems, taps, 0, 0, 8 * elems * 5)
    assert tight == RS.PassPlan(1, True)
    # all taps at once in chunks when that beats 2 ops per tap
    many = RS.plan_pass(8, elems, 19, 0, 0, 8 * elems * 5 * 19 // 2)
    assert many == RS.PassPlan(2, False) and many.ops(19) < RS.PassPlan(1, True).ops(19)
    # nothing fits: the smallest plan
    assert RS.plan_pass(8, elems, taps, 0, 0, 1) == RS.PassPlan(8, True)


def test_window_tables_are_the_full_tables_cut() -> None:
    full_x, full_w = RS.coefficients_np(np.array([37, 500]), 224, 9)
    for off, length in ((0, 224), (17, 40), (200, 24)):
        x, w = RS.window_coefficients_np(np.array([37, 500]), 224, np.array([off, off]),
                                         length, 9)
        assert np.array_equal(x, full_x[:, off:off + length])
        assert np.array_equal(w, full_w[:, off:off + length])


def test_blend_products_round_like_pillow_even_if_fused() -> None:
    """``fl(a * d)`` from the hi/lo split, also with one multiply fused into the add (FMA,
    emulated in float64: both products are exact, so the single rounding is the same)."""
    rng = np.random.default_rng(0)
    a = np.concatenate([rng.uniform(0, 3, 2000), [0.0, 1.0, 0.6, 1.4]]).astype(np.float32)
    f = torch.from_numpy(np.stack([a, a, a], 1))
    got = K.products(f)[:, 0].numpy()  # contrast's row
    d = np.arange(-255, 256, dtype=np.float32)
    assert np.array_equal(got, a[:, None] * d[None, :])
    hi = torch.from_numpy(a).to(torch.bfloat16).to(torch.float32).numpy().astype(np.float64)
    lo = a.astype(np.float64) - hi
    fused = (lo[:, None] * d + (hi[:, None] * d).astype(np.float32)).astype(np.float32)
    assert np.array_equal(fused, got)


@pytest.mark.newest_torch
def test_compose_compiles_into_one_graph_with_the_eager_bytes() -> None:
    """``torch.compile(fullgraph=True)`` (Inductor, CPU) of a Compose on host-drawn parameters:
    no graph break, no recompile for new parameters, the eager pixels."""
    import torch._dynamo

    rng = np.random.default_rng(5)
    b, h, w = 6, 40, 52
    x = torch.from_numpy(rng.integers(0, 256, (b, h, w, 3), dtype=np.uint8)).permute(0, 3, 1, 2)
    batch = {"image": x, "sizes": torch.tensor([[h, w]] * b)}
    pipe = _pipe()
    draws = [pipe.draw_keyed(batch["sizes"].numpy(), sample_keys(s, 0, np.arange(b)))
             for s in (3, 4)]

    def fn(bt: dict[str, torch.Tensor], p: dict[str, torch.Tensor]) -> torch.Tensor:
        return pipe.apply(bt, p)["image"]

    torch._dynamo.reset()
    try:
        with _native.disabled():
            expected = [fn(batch, p) for p in draws]
            compiled = torch.compile(fn, fullgraph=True)
            with torch._dynamo.config.patch(error_on_recompile=True):
                got = [compiled(batch, p) for p in draws]
    finally:
        torch._dynamo.reset()
    assert not torch.equal(expected[0], expected[1])
    for e, g in zip(expected, got, strict=True):
        assert torch.equal(e, g)


@pytest.mark.newest_torch
def test_the_compiled_compose_is_exact_under_reduced_precision_settings() -> None:
    """Compiled (Inductor) under bf16 autocast and "medium" float32 matmul precision (the
    loosest of ``precision.MODES``, really switched on): the eager bytes all the same (the
    kernels have no matmul for the settings to reach)."""
    import torch._dynamo

    rng = np.random.default_rng(8)
    b, h, w = 5, 36, 44
    x = torch.from_numpy(rng.integers(0, 256, (b, h, w, 3), dtype=np.uint8)).permute(0, 3, 1, 2)
    batch = {"image": x, "sizes": torch.tensor([[h, w]] * b)}
    pipe = _pipe()
    params = pipe.draw_keyed(batch["sizes"].numpy(), sample_keys(9, 0, np.arange(b)))
    saved = torch.get_float32_matmul_precision()
    torch._dynamo.reset()
    try:
        with _native.disabled():
            expected = pipe.apply(batch, params)["image"]
            compiled = torch.compile(lambda bt, p: pipe.apply(bt, p)["image"], fullgraph=True)
            torch.set_float32_matmul_precision("medium")
            with torch.autocast("cpu", dtype=torch.bfloat16):
                got = compiled(batch, params)
    finally:
        torch.set_float32_matmul_precision(saved)
        torch._dynamo.reset()
    assert torch.equal(expected, got)


class _HostCopies(TorchDispatchMode):
    """Counts the copies from the host to the ``meta`` device."""

    def __init__(self) -> None:
        super().__init__()
        self.copies = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        out = func(*wrapped_numbers(func, args), **(kwargs or {}))
        if (func.overloadpacket.__name__ == "_to_copy" and args[0].device.type == "cpu"
                and isinstance(out, torch.Tensor) and out.device.type == "meta"):
            self.copies += 1
        return out


def _recipe(b: int, h: int, w: int, size: int = 32) -> tuple[Compose, dict[str, torch.Tensor]]:
    from npu_data.bench.recipe import pipeline

    pipe = pipeline(size)
    return pipe, pipe.draw_keyed(np.array([[h, w]] * b), sample_keys(2, 0, np.arange(b)))


def test_a_batch_reaches_the_device_in_one_copy_and_few_ops() -> None:
    """Every host-made parameter and table of a Compose batch (crop, jitter, flip; and the
    classification recipe's crop, flip, TrivialAugmentWide, erasing, normalisation) rides in
    one host-to-device copy; MixUp / CutMix after it take one more. Issue 47 asks for <= 30
    and <= 60 device ops: these bounds hold what is reached (docs/benchmarks.md)."""
    b, h, w = 12, 375, 500
    batch = _meta_batch(b, h, w)
    cases = [(_pipe(224), _pipe(224).draw_keyed(np.array([[h, w]] * b),
                                                sample_keys(1, 0, np.arange(b))), 68)]
    cases.append((*_recipe(b, h, w, 224), 112))
    for pipe, params, bound in cases:
        pipe.apply(batch, params)  # tables made on first use
        mode = _HostCopies()
        with mode:
            pipe.apply(batch, params)
        assert mode.copies == 1, (pipe, mode.copies)
        cost = measure(lambda pipe=pipe, params=params: pipe.apply(batch, params),
                       [batch["image"], batch["sizes"]])
        assert cost.non_views <= bound, (pipe, cost.non_views, cost.by_op)
    image = torch.empty((b, 3, 224, 224), device="meta")
    label = torch.empty(b, dtype=torch.int64, device="meta")
    for mix in (MixUp(0.2, 10), CutMix(1.0, 10)):
        mp = mix.draw_keyed(np.array([[224, 224]] * b), sample_keys(3, 0, np.arange(b)), 7)
        mixed = {"image": image, "sizes": batch["sizes"], "label": label}
        mode = _HostCopies()
        with mode:
            mix.apply(mixed, mp)
        assert mode.copies == 1, (mix, mode.copies)


def test_the_one_copy_packing_changes_no_byte() -> None:
    """The packed copy's views (``_kernels.copies_on_host``: the packing run for the host as
    for a device) against the plain path, on the torch kernels: the Compose, the recipe and
    MixUp / CutMix after it give the same bytes; and so do the torch kernels where host
    sizes may be read (``_native.disabled``: full batches skip their padding masks)."""
    rng = np.random.default_rng(11)
    b, h, w = 24, 50, 66
    x = torch.from_numpy(rng.integers(0, 256, (b, h, w, 3), dtype=np.uint8)).permute(0, 3, 1, 2)
    batch = {"image": x, "sizes": torch.tensor([[h, w]] * b)}
    runs: list[list[torch.Tensor]] = []
    # seeds 6 and 7: every policy op but Invert among TrivialAugmentWide's draws, and erasing
    for mode, seed in itertools.product(("plain", "packed", "reads"), (6, 7)):
        keys = sample_keys(seed, 0, np.arange(b))
        out: list[torch.Tensor] = []
        with (_native.disabled() if mode == "reads" else accelerator_path(),
              copies_on_host() if mode == "packed" else contextlib.nullcontext()):
            for pipe in (_pipe(), _recipe(b, h, w)[0]):
                params = pipe.draw_keyed(batch["sizes"].numpy(), keys)
                res = pipe.apply(batch, params)
                out += [res["image"], res["sizes"]]
            labels = torch.arange(b) % 3
            for mix in (MixUp(0.2, 3), CutMix(1.0, 3)):
                mp = mix.draw_keyed(np.array([[32, 32]] * b), keys, 9)
                mixed = mix.apply({"image": out[2], "sizes": out[3], "label": labels}, mp)
                out += [mixed["image"], mixed["label"]]
        runs.append(out)
    for same in (runs[0::2], runs[1::2]):  # each seed: plain, packed, reads
        for plain, *others in zip(*same, strict=True):
            for other in others:
                assert plain.dtype == other.dtype and torch.equal(plain, other)


@pytest.mark.parametrize("interpolation, bound", [("nearest", 11), ("bilinear", 23)])
def test_a_warp_is_a_few_device_ops_whatever_the_filter(interpolation: str, bound: int
                                                         ) -> None:
    """A batch of affine warps (rotations and shears, every sample its own map) on a full
    ``meta`` batch with host sizes: both coordinates as one tensor, the four bilinear
    neighbours by one gather (was ~15 and ~54 ops)."""
    b, h, w = 8, 48, 64
    image = torch.empty((b, h, w, 3), dtype=torch.uint8, device="meta").permute(0, 3, 1, 2)
    sizes = torch.tensor([[h, w]] * b)
    rng = np.random.default_rng(4)
    angle = rng.uniform(-30, 30, b)
    m = np.stack([np.cos(np.radians(angle)), np.sin(np.radians(angle)), rng.uniform(-5, 5, b),
                  -np.sin(np.radians(angle)), np.cos(np.radians(angle)),
                  rng.uniform(-5, 5, b)], 1)

    def run() -> torch.Tensor:
        return F.warp(image, sizes, m, interpolation, fill=(1, 2, 3))

    run()
    cost = measure(run, [image])
    assert cost.non_views <= bound, (interpolation, cost.non_views, cost.by_op)


def test_pack_upload_round_trips_every_dtype() -> None:
    parts = [torch.arange(5, dtype=torch.int64), torch.tensor([True, False, True]),
             torch.linspace(-1, 1, 7).view(7, 1), torch.arange(3, dtype=torch.uint8),
             torch.empty(0, dtype=torch.int32), torch.arange(6, dtype=torch.int32).view(2, 3)]
    got = pack_upload(parts, torch.device("cpu"))
    for p, g in zip(parts, got, strict=True):
        assert g.dtype == p.dtype and g.shape == p.shape and torch.equal(g, p)
