"""Device ops and peak device memory of a call, counted on the host (no accelerator needed).

Run the call with its batch on PyTorch's ``meta`` device (shapes only) and its parameters
where the DataLoader hands them (the host): :class:`DeviceCosts` sees every aten op; the ones
that take or make a ``meta`` tensor are what an accelerator would launch (views are counted
apart: they launch nothing), and the bytes of the ``meta`` tensors alive at once are what it
would allocate. Deterministic: the same call gives the same counts on any machine.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from npu_data.parity.precision import wrapped_numbers


def _storage(t: torch.Tensor) -> int:
    return int(t.untyped_storage()._cdata)


class DeviceCosts(TorchDispatchMode):
    """Counts the ops that touch a tensor on ``device_type`` (one without an index, as
    ``meta``) and the peak bytes of the tensors they allocate there (storages of ``exclude``,
    the call's inputs, are not counted)."""

    def __init__(self, device_type: str = "meta", exclude: Iterable[torch.Tensor] = ()) -> None:
        super().__init__()
        self.device = torch.device(device_type)
        self.ops: Counter[str] = Counter()
        self.views = 0
        self.non_views = 0
        self.peak = 0
        self.live = 0
        self._refs: Counter[int] = Counter()
        self._bytes: dict[int, int] = {}
        self._exclude = {_storage(t) for t in exclude}

    def _release(self, key: int) -> None:
        self._refs[key] -= 1
        if self._refs[key] == 0:
            self.live -= self._bytes.pop(key)
            del self._refs[key]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        out = func(*wrapped_numbers(func, args), **(kwargs or {}))
        flat = tree_flatten((args, kwargs, out))[0]
        if any(isinstance(t, torch.Tensor) and t.device == self.device for t in flat):
            self.ops[func.overloadpacket.__name__] += 1
            view = any(r.alias_info is not None and not r.alias_info.is_write
                       for r in func._schema.returns)
            if view:
                self.views += 1
            else:
                self.non_views += 1
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.device != self.device:
                continue
            key = _storage(t)
            if key in self._exclude:
                continue
            if key not in self._bytes:
                self._bytes[key] = t.untyped_storage().nbytes()
                self.live += self._bytes[key]
                self.peak = max(self.peak, self.live)
            self._refs[key] += 1
            weakref.finalize(t, self._release, key)
        return out


@dataclass(frozen=True)
class Costs:
    """What one call cost on the device: ops (all, views, the rest), peak bytes allocated."""

    ops: int
    views: int
    non_views: int
    peak_bytes: int
    by_op: dict[str, int] = field(default_factory=dict)


def measure(fn: Callable[[], Any], inputs: Iterable[torch.Tensor], device_type: str = "meta"
            ) -> Costs:
    """Run ``fn`` once under :class:`DeviceCosts` (``inputs``: its device tensors, whose own
    memory is not counted). Warm the call first: tables made on first use are not per call."""
    mode = DeviceCosts(device_type, inputs)
    with mode:
        result = fn()
    del result
    return Costs(sum(mode.ops.values()), mode.views, mode.non_views, mode.peak,
                 dict(mode.ops.most_common()))
