"""The pure-torch kernels obey the accelerators' rules, checked on the CPU (issue 13).

A ``TorchDispatchMode`` sees every aten op the torch kernels dispatch while a transform
applies parameters that were drawn beforehand (keyed draws happen on the host in numpy, which
is allowed). It fails on

- any float64 (or complex128) tensor produced: Ascend's aclnn operators reject DT_DOUBLE for
  many ops or fall back to AICPU, consumer CUDA GPUs run it at 1/32-1/64 speed;
- any host sync: ``_local_scalar_dense`` / ``item`` (``bool(t)``, ``int(t)``, ``float(t)``),
  ops tagged ``data_dependent_output`` or ``dynamic_output_shape`` (``nonzero``, boolean-mask
  indexing, ``masked_select``, ``unique``...), and ``Tensor.tolist`` / ``Tensor.numpy``, which
  read the data without dispatching an op.

Run ``python -m tests.transforms.test_device_rules`` for the per-case counts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from npu_data.common.compat import autocast_enabled
from npu_data.parity.precision import MODES, reduced_precision, round_mantissa, wrapped_numbers
from npu_data.transforms import (
    ColorJitter,
    Compose,
    Normalize,
    RandomHorizontalFlip,
    RandomResizedCrop,
    _native,
)
from npu_data.transforms import functional as F
from npu_data.transforms._kernels import accelerator_path
from npu_data.transforms._kernels.tables import color_tables
from npu_data.transforms.draws import sample_keys
from tests.support.batches import keyed_params
from tests.support.device_audit import DeviceRulesAudit, audit
from tests.support.device_cases import CASES, channels_last_batch, jittered, with_geometry

aten = torch.ops.aten




@pytest.mark.parametrize("case", list(CASES))
def test_no_float64_and_no_host_sync(case: str) -> None:
    mode = audit(CASES[case])
    assert sum(mode.ops.values()) > 0
    assert not mode.float64 and not mode.syncs, mode.summary()


@pytest.mark.parametrize("case", list(CASES))
def test_the_accelerator_path_gives_the_compiled_kernels_pixels(case: str) -> None:
    """What the audit ran is exact: the same output as the compiled CPU kernels (which
    match Pillow bit for bit, tests/transforms/test_native.py)."""
    expected = CASES[case]()
    with accelerator_path():
        got = CASES[case]()
    e = expected["image"] if isinstance(expected, dict) else expected
    g = got["image"] if isinstance(got, dict) else got
    assert e.dtype == g.dtype and e.shape == g.shape
    assert torch.equal(e, g), (case, (e.double() - g.double()).abs().max())


@pytest.mark.parametrize("case", ["resized_crop 96", "Compose crop+jitter+flip"])
def test_no_float64_on_the_cpu_torch_path_either(case: str) -> None:
    """With host tensors the kernels may read values (argument checks, one pass order per
    sample in two groups), but float64 stays out there too."""
    mode = DeviceRulesAudit()
    with _native.disabled(), mode:
        CASES[case]()
    assert not mode.float64, mode.summary()


def test_the_audit_sees_what_it_must_refuse() -> None:
    """Negative controls: each forbidden thing is caught."""
    x = torch.arange(6, dtype=torch.float32)
    for bad, kind in ((lambda: x.to(torch.float64), "float64"),
                      (lambda: bool(x.sum() > 0), "syncs"),
                      (lambda: x.max().item(), "syncs"),
                      (lambda: x.tolist(), "syncs"),
                      (lambda: torch.nonzero(x), "syncs"),
                      (lambda: x[x > 2], "syncs"),
                      (lambda: torch.unique(x), "syncs")):
        mode = audit(bad)
        assert getattr(mode, kind), (kind, mode.summary())
    clean = audit(lambda: torch.where(x > 2, x, 0.0).sum(dtype=torch.float32))
    assert not clean.float64 and not clean.syncs, clean.summary()


# --- reduced-precision matmul (npu_data.parity.precision: set for real, emulated) -------
def test_the_precision_emulation_changes_what_it_must() -> None:
    """Negative control: a product needing more than 11 significant bits changes."""
    a = torch.tensor([[255.0, 1.0]])
    b = torch.tensor([[4194303.0], [3.0]])  # 2**22 - 1: the largest resize weight
    exact = torch.mm(a, b)
    before = (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32)
    for name, (_, precision, autocast) in MODES.items():
        with reduced_precision(name, torch.device("cpu")) as mode:
            assert torch.get_float32_matmul_precision() == precision
            assert autocast_enabled("cpu") == autocast
            approx = torch.mm(a, b)
            conv = torch.nn.functional.conv1d(a.view(1, 1, 2), b.view(1, 1, 2))
        assert mode.seen and not torch.equal(approx.float(), exact), name
        assert conv.float().item() != exact.item(), name
    assert (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32) == before
    assert not autocast_enabled("cpu")
    x = torch.tensor([1.0, 1.0 + 2**-10, 1.0 + 2**-11, 1.0 + 3 * 2**-11, 3.0 * 2**-130])
    assert round_mantissa(x, 10).tolist() == [1.0, 1.0 + 2**-10, 1.0, 1.0 + 2**-9,
                                              3.0 * 2**-130]


def test_reduced_precision_refuses_what_it_cannot_set() -> None:
    from npu_data.errors import UserError

    with pytest.raises(UserError, match="mode must be one of tf32/hf32"):
        with reduced_precision("fp8", torch.device("cpu")):
            pass
    with pytest.raises(UserError, match="no autocast for meta"):
        with reduced_precision("bf16 autocast", torch.device("meta")):
            pass
    with reduced_precision("tf32/hf32", torch.device("meta")) as mode:  # no autocast needed
        torch.mm(torch.ones(2, 2, device="meta"), torch.ones(2, 2, device="meta"))
    assert mode.seen


@pytest.mark.parametrize("precision", list(MODES))
@pytest.mark.parametrize("case", list(CASES))
def test_exact_under_reduced_precision_matmul(case: str, precision: str) -> None:
    """Under TF32/HF32, bf16 matmul inputs or bf16 autocast the torch kernels still give the
    compiled kernels' (Pillow's) pixels bit for bit: they have no matmul for it to reach."""
    expected = CASES[case]()
    with accelerator_path(), reduced_precision(precision, torch.device("cpu")) as mode:
        got = CASES[case]()
    e = expected["image"] if isinstance(expected, dict) else expected
    g = got["image"] if isinstance(got, dict) else got
    assert torch.equal(e, g), (case, precision, dict(mode.seen))
    assert not mode.seen, f"a matmul on the device path: {dict(mode.seen)} — split its " \
        "operands so every product is exact in 8 bits, or keep it out"


# --- graph mode and the meta device ----------------------------------------------------------
def _small() -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    rng = np.random.default_rng(5)
    sizes = torch.tensor([[32, 40], [20, 30], [32, 1], [1, 40]])
    image = torch.from_numpy(rng.integers(0, 256, (4, 32, 40, 3), dtype=np.uint8))
    return {"image": image.permute(0, 3, 1, 2), "sizes": sizes}, torch.arange(4)


_JITTER = ColorJitter(0.4, 0.4, 0.4, 0.1)
_PIPE = Compose([RandomResizedCrop(24), _JITTER, RandomHorizontalFlip(), Normalize()])


def _graph_cases() -> dict[str, Callable[[dict[str, torch.Tensor], torch.Tensor], Any]]:
    def pipeline(t: Any) -> Callable[[dict[str, torch.Tensor], torch.Tensor], Any]:
        return lambda b, p: t.apply(b, p)["image"]
    return {
        "adjust_brightness": lambda b, f: F.adjust_brightness(b["image"], b["sizes"], f),
        "adjust_contrast": lambda b, f: F.adjust_contrast(b["image"], b["sizes"], f),
        "adjust_saturation": lambda b, f: F.adjust_saturation(b["image"], b["sizes"], f),
        "adjust_hue": lambda b, f: F.adjust_hue(b["image"], b["sizes"], (f - 1) / 4),
        "hflip": lambda b, f: F.hflip(b["image"], b["sizes"], f > 1),
        "normalize": lambda b, f: F.normalize(b["image"], (0.5, 0.4, 0.3), (0.2, 0.3, 0.25)),
        "resized_crop": lambda b, f: F.resized_crop(
            b["image"], b["sizes"], torch.tensor([[0, 0, 20, 1], [3, 2, 17, 28], [0, 0, 32, 1],
                                                  [0, 5, 1, 30]]), (24, 16)),
        "ColorJitter": pipeline(_JITTER),
        "Compose crop+jitter+flip+normalize": pipeline(_PIPE),
    }


def _graph_args(case: str, batch: dict[str, torch.Tensor], ids: torch.Tensor) -> Any:
    if case in ("ColorJitter", "Compose crop+jitter+flip+normalize"):
        t = _JITTER if case == "ColorJitter" else _PIPE
        return t.draw_keyed(batch["sizes"].numpy(), sample_keys(11, 0, ids.numpy()))
    return torch.tensor([0.5, 1.0, 1.3, 2.0])


@pytest.mark.newest_torch
@pytest.mark.parametrize("case", list(_graph_cases()))
def test_traced_whole_by_torch_compile(case: str) -> None:
    """``torch.compile(fullgraph=True)`` captures each kernel as one graph (no graph break:
    what CUDA graph mode and the NPU's graph mode need), and the graph gives the same pixels.
    ``aot_eager`` traces down to aten ops; Inductor's code generation is checked below."""
    import torch._dynamo

    fn = _graph_cases()[case]
    batch, ids = _small()
    args = _graph_args(case, batch, ids)
    color_tables(batch["image"].device)
    torch._dynamo.reset()
    try:
        with accelerator_path():
            expected = fn(batch, args)
            got = torch.compile(fn, fullgraph=True, backend="aot_eager")(batch, args)
    finally:
        torch._dynamo.reset()
    assert torch.equal(expected, got), case


@pytest.mark.slow
@pytest.mark.newest_torch
def test_inductor_code_for_the_colour_kernels_is_exact() -> None:
    """Inductor's generated kernels (what ``torch.compile`` runs on CUDA) for a fixed-order
    ColorJitter — all four colour ops — give the eager pixels bit for bit."""
    import torch._dynamo

    t = ColorJitter(0.4, 0.4, 0.4, 0.1, order="fixed")
    batch, ids = _small()
    params = t.draw_keyed(batch["sizes"].numpy(), sample_keys(2, 0, ids.numpy()))
    color_tables(batch["image"].device)

    def fn(b: dict[str, torch.Tensor], p: dict[str, torch.Tensor]) -> torch.Tensor:
        return t.apply(b, p)["image"]

    torch._dynamo.reset()
    try:
        with accelerator_path():
            expected = fn(batch, params)
            got = torch.compile(fn, fullgraph=True)(batch, params)
    finally:
        torch._dynamo.reset()
    assert torch.equal(expected, got)


@pytest.mark.parametrize("case", list(_graph_cases()))
def test_runs_on_the_meta_device(case: str) -> None:
    """No value is needed to run the kernels: on ``meta`` tensors they produce the right
    shapes and dtypes (a read back would raise there)."""
    fn = _graph_cases()[case]
    batch, ids = _small()
    args = _graph_args(case, batch, ids)
    with accelerator_path():
        expected = fn(batch, args)
    meta = torch.device("meta")
    mbatch = {k: v.to(meta) for k, v in batch.items()}
    margs = {k: v.to(meta) for k, v in args.items()} if isinstance(args, dict) else args.to(meta)
    got = fn(mbatch, margs)
    assert got.device == meta
    assert (got.shape, got.dtype) == (expected.shape, expected.dtype)


# --- host parameters on a device batch (what the DataLoader hands to apply) ----------------
def _host_param_cases() -> dict[str, tuple[Any, dict[str, torch.Tensor]]]:
    batch, small = with_geometry(channels_last_batch()), with_geometry(jittered())
    return {
        "RandomResizedCrop(96)": (RandomResizedCrop(96), batch),
        "ColorJitter(0.4,0.4,0.4,0.1)": (ColorJitter(0.4, 0.4, 0.4, 0.1), small),
        "ColorJitter fixed order": (ColorJitter(0.4, 0.4, 0.4, 0.1, order="fixed"), small),
        "RandomHorizontalFlip": (RandomHorizontalFlip(), small),
        "Compose crop+jitter+flip+normalize": (
            Compose([RandomResizedCrop(96), ColorJitter(0.4, 0.4, 0.4, 0.1),
                     RandomHorizontalFlip(), Normalize()]), batch),
    }


class BlockingCopies(TorchDispatchMode):
    """Counts host-to-device copies made without ``non_blocking``: on CUDA/NPU the host waits
    for the device's queue to drain before each (``torch.tensor(..., device=)`` is one too;
    the source check below finds those)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        kw = kwargs or {}
        packet = func.overloadpacket
        if packet is aten._to_copy and args[0].device.type == "cpu" and not kw.get(
                "non_blocking", False) and kw.get("device", args[0].device).type != "cpu":
            self.seen[func.name()] += 1
        if packet is aten.copy_ and args[1].device.type == "cpu" and args[0].device.type != \
                "cpu" and not (args[2] if len(args) > 2 else kw.get("non_blocking", False)):
            self.seen[func.name()] += 1
        return func(*wrapped_numbers(func, args), **kw)


def test_blocking_copies_are_seen() -> None:
    """Negative control for :class:`BlockingCopies`."""
    x = torch.arange(4)
    with BlockingCopies() as copies:
        x.to("meta", non_blocking=True)
        torch.empty(4, device="meta").copy_(x, non_blocking=True)
        x.to(torch.float32)
    assert not copies.seen
    with BlockingCopies() as copies:
        x.to("meta")
        torch.empty(4, device="meta").copy_(x)
    assert sum(copies.seen.values()) == 2, copies.seen


def test_no_tensor_is_built_directly_on_the_device() -> None:
    """``torch.tensor(data, device=d)`` / ``t.new_tensor(data)`` copy from the host and wait
    for ``d``'s queue: the transforms build on the host and queue the copy (``to_device``)."""
    import ast
    from pathlib import Path

    import npu_data.transforms as T

    found = []
    for path in sorted(Path(T.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            name = node.func.attr
            direct = name in ("tensor", "as_tensor") and any(k.arg == "device"
                                                             for k in node.keywords)
            if direct or name == "new_tensor":
                found.append(f"{path.name}:{node.lineno}")
    assert not found, found


@pytest.mark.parametrize("case", list(_host_param_cases()))
def test_host_parameters_apply_to_a_device_batch(case: str) -> None:
    """The DataLoader draws parameters on the host and ``apply`` takes them as they are
    (CPU tensors) with the batch on the device: no device->host read is needed and no host
    tensor meets a device tensor in an op. On ``meta`` both would raise, as a mixed-device
    op does on CUDA/NPU; every key (pixels and geometry) comes out on the batch's device
    with the shapes and dtypes of the CPU run."""
    t, batch = _host_param_cases()[case]
    params = keyed_params(t, batch, 3)
    assert all(v.device.type == "cpu" for v in params.values())
    expected = t.apply(batch, params)
    meta = {k: v.to("meta") for k, v in batch.items()}
    with BlockingCopies() as copies:
        got = t.apply(meta, params)
    assert not copies.seen, f"host-to-device copies that wait for the device: {copies.seen}"
    assert set(got) == set(expected)
    for k, e in expected.items():
        assert got[k].device.type == "meta", k
        assert (got[k].shape, got[k].dtype) == (e.shape, e.dtype), k


if __name__ == "__main__":
    for name, fn in CASES.items():
        m = audit(fn)
        print(f"{name:32s} {m.summary()}")
