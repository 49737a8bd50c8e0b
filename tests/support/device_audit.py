"""The accelerators' rules as a ``TorchDispatchMode`` (issue 13): it sees every aten op the
torch kernels dispatch and counts the float64 (or complex128) tensors produced and the host
syncs (``_local_scalar_dense`` / ``item``, ops tagged ``data_dependent_output`` or
``dynamic_output_shape``, and ``Tensor.tolist`` / ``Tensor.numpy``, which read the data without
an op). tests/transforms/test_device_rules.py holds the cases."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from npu_data.parity.precision import wrapped_numbers
from npu_data.transforms._kernels import accelerator_path

aten = torch.ops.aten
_SYNC_OPS = {aten._local_scalar_dense, aten.item, aten.nonzero, aten.nonzero_static,
             aten.masked_select, aten.unique_consecutive, aten._unique2, aten.unique_dim,
             aten.is_nonzero, aten.equal, aten.allclose}
_WIDE = (torch.float64, torch.complex128)


_MASKS = (torch.bool, torch.uint8)


def _syncs(func: Any, args: Any) -> bool:
    """Whether the op waits for the data: its result, or its result's shape, depends on it."""
    packet = func.overloadpacket
    if packet in (aten.index, aten.index_put, aten.index_put_, aten._index_put_impl_):
        # integer indices have a known output shape; a boolean mask needs a nonzero
        return any(isinstance(i, torch.Tensor) and i.dtype in _MASKS for i in args[1])
    return (packet in _SYNC_OPS or torch.Tag.data_dependent_output in func.tags
            or torch.Tag.dynamic_output_shape in func.tags)


class DeviceRulesAudit(TorchDispatchMode):
    """Counts every dispatched op, the float64 tensors produced and the host syncs."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.float64: Counter[str] = Counter()
        self.syncs: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        out = func(*wrapped_numbers(func, args), **(kwargs or {}))
        name = func.name()
        self.ops[name] += 1
        if _syncs(func, args):
            self.syncs[name] += 1
        if any(isinstance(t, torch.Tensor) and t.dtype in _WIDE for t in tree_flatten(out)[0]):
            self.float64[name] += 1
        return out

    @contextlib.contextmanager
    def watching_reads(self) -> Iterator[None]:
        """Also count ``Tensor.tolist`` / ``Tensor.numpy`` (they read without an op)."""
        saved = {n: getattr(torch.Tensor, n) for n in ("tolist", "numpy")}

        def wrap(n: str) -> Callable[..., Any]:
            def read(t: torch.Tensor, *a: Any, **k: Any) -> Any:
                self.syncs[f"Tensor.{n}"] += 1
                return saved[n](t, *a, **k)
            return read

        for n in saved:
            setattr(torch.Tensor, n, wrap(n))
        try:
            yield
        finally:
            for n, fn in saved.items():
                setattr(torch.Tensor, n, fn)

    def summary(self) -> str:
        def top(c: Counter[str]) -> str:
            return ", ".join(f"{k} x{v}" for k, v in c.most_common(8)) or "-"
        return (f"{sum(self.ops.values())} ops, {sum(self.float64.values())} float64 "
                f"({top(self.float64)}), {sum(self.syncs.values())} syncs ({top(self.syncs)})")


def audit(fn: Callable[[], Any]) -> DeviceRulesAudit:
    """Run ``fn`` down the CUDA/NPU code path (``accelerator_path``: the torch kernels, no
    CPU-only value checks) under the audit."""
    mode = DeviceRulesAudit()
    with accelerator_path(), mode.watching_reads(), mode:
        fn()
    return mode
