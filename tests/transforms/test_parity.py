"""compare_tensor on known differences; the parity suite and the ``npu-data parity`` command."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from npu_data import cli
from npu_data.parity import runner as parity_suite
from npu_data.parity.precision import MODES
from npu_data.parity.runner import run_parity_suite
from npu_data.transforms import functional as F
from npu_data.transforms.oracle.measures import (
    PRECISION_TOLERANCES,
    TOLERANCES,
    compare_tensor,
    within,
)


def test_identical_uint8_is_exact() -> None:
    x = torch.randint(0, 256, (3, 5, 7), dtype=torch.uint8)
    r = compare_tensor(x, x.clone())
    assert (r.max_abs, r.mean_abs, r.frac_off_gt1) == (0.0, 0.0, 0.0)
    assert r.cosine == pytest.approx(1.0) and r.allclose and r.passed
    assert r.shape == (3, 5, 7) and r.dtype == "uint8" and r.numel == 105


def test_known_uint8_differences() -> None:
    expected = np.full(8, 100, np.uint8)
    offsets = np.array([0, 1, 2, 3, 0, 0, 1, 5])
    actual = (expected + offsets).astype(np.uint8)
    r = compare_tensor(expected, torch.from_numpy(actual))
    assert r.max_abs == offsets.max()
    assert r.mean_abs == pytest.approx(offsets.mean())
    assert r.frac_off_gt1 == pytest.approx((offsets > 1).mean())
    assert not r.allclose and not r.passed  # 2 levels > atol 1 + rtol * 100
    assert compare_tensor(expected, actual, atol=5.0).passed
    line = str(r)
    assert "\n" not in line and line.startswith("FAIL") and "max_abs=5" in line


def test_uint8_difference_does_not_wrap() -> None:
    r = compare_tensor(np.array([0], np.uint8), np.array([255], np.uint8))
    assert r.max_abs == 255.0


def test_float_levels_depend_on_scale() -> None:
    e = torch.linspace(0, 1, 100, dtype=torch.float32)
    a = e.clone()
    a[:10] = (a[:10] + 2 / 255).clamp(max=1.0)  # two 8-bit levels on 0..1 data
    r = compare_tensor(e, a)
    assert r.frac_off_gt1 == pytest.approx(0.1)
    assert not r.allclose  # default float atol is 1e-5
    normalized = e * 4 - 2  # not 0..1 scaled: raw differences
    r2 = compare_tensor(normalized, normalized + 0.5)
    assert r2.frac_off_gt1 == 0.0 and r2.max_abs == pytest.approx(0.5)
    assert compare_tensor(normalized, normalized + 2.0).frac_off_gt1 == 1.0


def test_cosine_and_mixed_inputs() -> None:
    e = np.array([1.0, 0.0, 0.0])
    assert compare_tensor(e, torch.tensor([0.0, 2.0, 0.0])).cosine == pytest.approx(0.0)
    assert compare_tensor(e, torch.tensor([3.0, 0.0, 0.0])).cosine == pytest.approx(1.0)
    assert compare_tensor(np.zeros(3), np.zeros(3)).cosine == 1.0
    mixed = compare_tensor(np.array([1, 2], np.uint8), torch.tensor([1.0, 2.0]))
    assert mixed.max_abs == 0.0 and mixed.passed and mixed.dtype == "uint8/float32"


def test_shape_mismatch_names_both_shapes() -> None:
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(3, 2\)"):
        compare_tensor(torch.zeros(2, 3), torch.zeros(3, 2))


def test_within_applies_max_and_mean_bounds() -> None:
    assert within("hflip", 0, 0.0)
    assert not within("hflip", 0, 1e-9) and not within("hflip", 1, 0.0)
    assert within("resized_crop", 1, 0.05)
    assert not within("resized_crop", 2, 0.05) and not within("resized_crop", 1, 0.1)


@pytest.mark.slow
def test_suite_passes_on_cpu_for_every_kernel() -> None:
    rows = run_parity_suite("cpu", seed=0, batches=1, batch_size=5)
    # the compiled CPU kernels, then the pure-torch kernels that run on CUDA and NPU, then
    # those again under each reduced-precision mode (no loader row there)
    assert [r.kernel for r in rows] == list(TOLERANCES) + [f"{k} (torch)" for k in TOLERANCES] \
        + [f"{k} (torch, {mode})" for mode in MODES for k in PRECISION_TOLERANCES]
    assert "loader" not in PRECISION_TOLERANCES and "normalize" in PRECISION_TOLERANCES
    bad = [r for r in rows if not r.passed]
    assert not bad, bad
    for r in rows:
        base = r.kernel.split(" (")[0]
        assert r.samples >= 5 and r.max <= TOLERANCES[base][0]
        assert within(base, r.max, r.mean)
        # Pillow's rules reproduced exactly, pass order included; the bilinear warps may be
        # a level off where Pillow rounds in double, under every precision mode alike
        budgeted = ("normalize", "affine_bilinear", "rotate_bilinear", "gaussian_blur")
        if base not in budgeted:
            assert r.max == 0, r
        # the policies: exact here, a level of budget for aarch64's Pillow (parity.TOLERANCES)
        policies = ("trivial_augment_wide", "rand_augment", "auto_augment")
        if "(torch, " in r.kernel and base not in budgeted + policies:
            assert r.tolerance == "exact", r


@pytest.mark.slow
def test_precision_rows_catch_a_kernel_that_uses_a_matmul(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: brightness as a float32 matmul is exact at full precision but not
    with TF32/HF32 or bf16 operands, so only its precision rows fail."""
    real = F.adjust_brightness

    def via_matmul(images: torch.Tensor, sizes: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
        real(images, sizes, f)  # its checks
        x = images.to(torch.float32).reshape(images.shape[0], -1, 1)
        scale = f.to(torch.float32).view(-1, 1, 1) * (1 + 2**-9)  # needs more than 8 bits
        out = torch.bmm(x, scale) / (1 + 2**-9)
        return out.clamp(0, 255).to(torch.uint8).view_as(images)

    monkeypatch.setattr(F, "adjust_brightness", via_matmul)
    rows = {r.kernel: r for r in run_parity_suite("cpu", seed=2, batches=1, batch_size=4)}
    assert rows["adjust_brightness"].passed and rows["adjust_brightness (torch)"].passed
    for mode in MODES:
        assert not rows[f"adjust_brightness (torch, {mode})"].passed, mode
        assert rows[f"hflip (torch, {mode})"].passed, mode


def test_suite_detects_a_kernel_one_level_off(monkeypatch: pytest.MonkeyPatch) -> None:
    real = F.adjust_brightness

    def off_by_one(images: torch.Tensor, sizes: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
        out = real(images, sizes, f)
        return torch.where(out < 255, out + 1, out)

    monkeypatch.setattr(F, "adjust_brightness", off_by_one)
    rows = {r.kernel: r for r in run_parity_suite("cpu", seed=1, batches=1, batch_size=3,
                                                  precision=False)}
    assert not rows["adjust_brightness"].passed and rows["adjust_brightness"].max == 1.0
    assert rows["hflip"].passed


@pytest.mark.slow
def test_parity_command_on_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["parity", "--device", "cpu", "--batches", "1", "--batch-size", "3"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "cpu (" in out and "FAIL" not in out
    for kernel in TOLERANCES:
        line = next(ln for ln in out.splitlines() if ln.startswith(kernel + " "))
        assert line.rstrip().endswith("PASS")
    for mode in MODES:
        line = next(ln for ln in out.splitlines() if ln.startswith(f"pipeline (torch, {mode})"))
        assert line.split()[4] == "0" and line.split()[-2:] == ["exact", "PASS"], line
    code = cli.main(["parity", "--device", "cpu", "--batches", "1", "--batch-size", "2",
                     "--no-precision"])
    out = capsys.readouterr().out
    assert code == 0 and "(torch, " not in out and "hflip (torch)" in out


@pytest.mark.slow
def test_parity_command_fails_when_a_kernel_is_off(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(parity_suite, "TOLERANCES", {**TOLERANCES, "hflip": (-1, 0.0)})
    code = cli.main(["parity", "--device", "cpu", "--batches", "1", "--batch-size", "2"])
    out = capsys.readouterr().out
    assert code == 1 and "FAIL: hflip" in out


def test_parity_command_bad_arguments() -> None:
    assert cli.main(["parity", "--device", "cpu", "--batches", "0"]) == 1
    res = subprocess.run([sys.executable, "-m", "npu_data.cli", "parity", "--device", "npu"],
                         capture_output=True, text=True)
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "npu" in lines[0]
    assert "Traceback" not in res.stderr
