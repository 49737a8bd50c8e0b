"""The torch kernels run a whole Compose batch in a few device ops, within a memory budget,
exactly, and compile into one graph (issue 28).

Costs are counted with the batch on the ``meta`` device and the parameters on the host, as
the DataLoader hands them (``npu_data.tools.device_costs``); exactness against the compiled
CPU kernels, which match Pillow bit for bit (``test_native.py``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from npu_data.parity.precision import wrapped_numbers
from npu_data.tools.device_costs import measure
from npu_data.transforms import (
    ColorJitter,
    Compose,
    RandomHorizontalFlip,
    RandomResizedCrop,
    _native,
)
from npu_data.transforms import functional as F
from npu_data.transforms._kernels import accelerator_path
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
