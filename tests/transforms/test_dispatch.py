"""One dispatch point per kernel: only ``transforms/_dispatch.py`` asks which backend runs.

The source checks read the modules' syntax trees, so a new ``_native.for_tensor`` check in a
kernel or transform fails here even when every pixel stays right; the behaviour checks run
both backends of every op of the table.
"""

from __future__ import annotations

import ast
import contextlib
from pathlib import Path

import numpy as np
import pytest
import torch

import npu_data.transforms as T
from npu_data.errors import UserError
from npu_data.transforms import _dispatch, _native
from npu_data.transforms import functional as F
from npu_data.transforms._kernels import accelerator_path

ROOT = Path(T.__file__).parent
# the modules allowed to name the backend switch: the table, and where the switch is defined
_DISPATCH = {ROOT / "_dispatch.py", ROOT / "_native" / "__init__.py"}
# the transform classes: they draw parameters and call functional, nothing lower
_CLASSES = ["base.py", "color.py", "compose.py", "crop.py", "flip.py",
            "normalize.py", "presets.py", "resize.py", "warp_ops.py", "detection.py",
            "pixel_ops.py", "auto_augment.py", "mixing.py"]
_LOWER = ("npu_data.transforms._native", "npu_data.transforms._kernels",
          "npu_data.transforms._dispatch")


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _backend_checks(tree: ast.AST) -> list[int]:
    """Lines that name ``for_tensor`` (call, attribute or import) or compare a device type."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "for_tensor":
            lines.append(node.lineno)
        elif isinstance(node, ast.Name) and node.id == "for_tensor":
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and any(a.name == "for_tensor"
                                                      for a in node.names):
            lines.append(node.lineno)
        elif isinstance(node, ast.Compare) and any(
                isinstance(n, ast.Attribute) and n.attr == "type"
                and isinstance(n.value, ast.Attribute) and n.value.attr == "device"
                for n in [node.left, *node.comparators]):
            lines.append(node.lineno)
    return lines


def test_only_the_dispatch_module_picks_a_backend() -> None:
    offenders = {}
    for path in sorted(ROOT.rglob("*.py")):
        if path in _DISPATCH:
            continue
        lines = _backend_checks(_tree(path))
        if path.name == "__init__.py" and path.parent.name == "_kernels":
            lines = []  # host_values: may a kernel READ a value (not which backend runs)
        if lines:
            offenders[str(path.relative_to(ROOT))] = lines
    assert not offenders, f"backend checks outside _dispatch.py: {offenders} — add the " \
        "implementation to _dispatch.TABLE and call functional instead"


def test_nothing_outside_transforms_picks_a_backend() -> None:
    """Loaders, formats, commands and benches ask ``_dispatch`` too (the loader's list kernels)."""
    pkg = ROOT.parent
    paths = [p for p in pkg.rglob("*.py") if ROOT not in p.parents and p.parent != ROOT]
    offenders = {str(p): lines for p in paths if (lines := _backend_checks(_tree(p)))}
    assert paths and not offenders, f"backend checks outside transforms/_dispatch.py: {offenders}"


def test_the_check_finds_what_it_must() -> None:
    """Negative control: each form of the old check is caught."""
    for code in ("_native.for_tensor(x)", "from npu_data.transforms._native import for_tensor",
                 "for_tensor(x)", "x.device.type == 'cpu'", "'cuda' != t.device.type"):
        assert _backend_checks(ast.parse(code)), code
    assert not _backend_checks(ast.parse("kernel('hflip', x)(x, s, f)"))


@pytest.mark.parametrize("name", _CLASSES)
def test_transform_classes_only_call_functional(name: str) -> None:
    tree = _tree(ROOT / name)
    lower = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            mods = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            lower += [m for m in mods if m.startswith(_LOWER)]
        elif isinstance(node, ast.Import):
            lower += [a.name for a in node.names if a.name.startswith(_LOWER)]
    assert not lower, f"{name} imports {lower}: draw parameters and call functional"


def test_each_functional_op_dispatches_exactly_once() -> None:
    tree = _tree(ROOT / "functional.py")
    calls = {}
    for fn in tree.body:
        if isinstance(fn, ast.FunctionDef) and fn.name in F.__all__:
            calls[fn.name] = sum(isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                                 and n.func.id == "kernel" for n in ast.walk(fn))
    assert set(calls) == set(F.__all__) - {"COLOR_OPS", "POLICY_OPS"}
    assert calls.pop("to_dtype") == 0  # a dtype cast: the same op everywhere
    assert all(n == 1 for n in calls.values()), calls


def test_every_op_has_a_torch_backend_and_the_compiled_ones_run_on_the_cpu() -> None:
    cpu = torch.zeros(1, 3, 2, 2, dtype=torch.uint8)
    meta = cpu.to("meta")
    assert _native.available()
    for op, k in _dispatch.TABLE.items():
        assert callable(k.torch_ops), op
        assert _dispatch.backend(op, meta) == _dispatch.TORCH, op
        expected = _dispatch.COMPILED if k.compiled is not None else _dispatch.TORCH
        assert _dispatch.backend(op, cpu) == expected, op
        with _native.disabled():
            assert _dispatch.backend(op, cpu) == _dispatch.TORCH, op
        with accelerator_path():
            assert _dispatch.kernel(op, cpu) is k.torch_ops, op
    # normalize's compiled kernel takes uint8 only: float input runs the torch one
    assert _dispatch.backend("normalize", cpu.float()) == _dispatch.TORCH
    assert _dispatch.backend("adjust_hue_direct", cpu) == _dispatch.TORCH


def _padded(seed: int, b: int) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    sizes = np.stack([rng.integers(1, 30, b), rng.integers(1, 34, b)], 1)
    x = torch.zeros(b, 3, 30, 34, dtype=torch.uint8)
    for i, (h, w) in enumerate(sizes):
        x[i, :, :h, :w] = torch.from_numpy(rng.integers(0, 256, (3, h, w), dtype=np.uint8))
    return x, torch.from_numpy(sizes.astype(np.int64))


@pytest.mark.parametrize("ops", [(0, 1, 2, 3), (2, 0, 1), (3, 1), (1,), ()])
@pytest.mark.parametrize("backend", ["compiled", "torch", "accelerator"])
def test_color_jitter_equals_the_single_ops_in_each_samples_order(ops: tuple[int, ...],
                                                                  backend: str) -> None:
    x, sizes = _padded(len(ops), 9)
    b, n = x.shape[0], len(ops)
    g = torch.Generator().manual_seed(n)
    perm = torch.argsort(torch.rand(b, n, generator=g), dim=1)
    order = torch.tensor(ops, dtype=torch.int64)[perm] if n else torch.zeros(b, 0, dtype=torch.int64)
    factors = [torch.rand(b, generator=g) * 2 for _ in range(3)]
    hue = torch.rand(b, generator=g) - 0.5
    singles = [F.adjust_brightness, F.adjust_contrast, F.adjust_saturation, F.adjust_hue]
    expected = []
    for i in range(b):  # the single ops (compiled), sample by sample, in its own order
        img, sz = x[i:i + 1], sizes[i:i + 1]
        for op in order[i].tolist():
            img = singles[op](img, sz, (*factors, hue)[op][i:i + 1])
        expected.append(img)
    mode = {"compiled": contextlib.nullcontext(), "torch": _native.disabled(),
            "accelerator": accelerator_path()}[backend]
    with mode:
        got = F.color_jitter(x, sizes, ops, order, *factors, hue)
        fixed = F.color_jitter(x, sizes, ops, None, *factors, hue)
    assert torch.equal(got, torch.cat(expected)), backend
    same = torch.tensor(ops, dtype=torch.int64).expand(b, n)
    assert torch.equal(fixed, F.color_jitter(x, sizes, ops, same, *factors, hue))


def test_color_jitter_refuses_bad_arguments_in_one_line() -> None:
    x, sizes = _padded(0, 2)
    f = torch.ones(2)
    with pytest.raises(UserError, match="distinct ids in 0..3"):
        F.color_jitter(x, sizes, (0, 0), None, f, f, f, f - 1)
    with pytest.raises(UserError, match=r"order must have shape \(2, 2\)"):
        F.color_jitter(x, sizes, (0, 1), torch.zeros(2, 3, dtype=torch.int64), f, f, f, f - 1)
    with pytest.raises(UserError, match="contrast factors must be non-negative"):
        F.color_jitter(x, sizes, (1,), None, f, -f, f, f - 1)
