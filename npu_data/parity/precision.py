"""Reduced-precision settings training scripts turn on, set for real and emulated everywhere.

CUDA with ``allow_tf32`` / ``set_float32_matmul_precision("high")`` and Ascend with HF32 feed
float32 matmuls (and convolutions) to the units rounded to 10 explicit mantissa bits;
``"medium"`` and bf16 autocast keep 7 (8 significant bits). :func:`reduced_precision` sets
the real switches (they act on CUDA) and also rounds the float32 operands of every
matmul/convolution the same way (:class:`ReducedPrecisionMatmul`), so the CPU and any
accelerator see the same effect. The transforms' kernels have no matmul, so their pixels must
not change (``npu-data parity`` rows ``(torch, <mode>)``; ``tests/transforms/
test_device_rules.py``).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from npu_data.common.compat import autocast_available
from npu_data.errors import UserError, UserValueError

aten = torch.ops.aten
# op -> positions of the operands a reduced-precision unit rounds
MATMULS = {aten.mm: (0, 1), aten.bmm: (0, 1), aten.addmm: (1, 2), aten.baddbmm: (1, 2),
           aten.addbmm: (1, 2), aten.mv: (0, 1), aten.addmv: (1, 2), aten.dot: (0, 1),
           aten.vdot: (0, 1), aten.convolution: (0, 1), aten._convolution: (0, 1)}
# mode -> (explicit mantissa bits kept, float32 matmul precision, bf16 autocast)
MODES: dict[str, tuple[int, str, bool]] = {
    "tf32/hf32": (10, "high", False),
    "bf16 matmul": (7, "medium", False),
    "bf16 autocast": (7, "medium", True),
}


def round_mantissa(t: torch.Tensor, bits: int) -> torch.Tensor:
    """float32 ``t`` rounded to nearest (ties to even) with ``bits`` explicit mantissa bits."""
    drop = 23 - bits
    i = t.contiguous().view(torch.int32)
    lsb = (i >> drop) & 1
    rounded = (i + ((1 << (drop - 1)) - 1) + lsb) & ~((1 << drop) - 1)
    return rounded.view(torch.float32).view_as(t)


class ReducedPrecisionMatmul(TorchDispatchMode):
    """Rounds the float32 operands of every matmul/convolution to ``bits`` mantissa bits and
    counts them in ``seen``."""

    def __init__(self, bits: int) -> None:
        super().__init__()
        self.bits = bits
        self.seen: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        operands = MATMULS.get(func.overloadpacket)
        if operands is not None:
            self.seen[func.name()] += 1
            args = tuple(round_mantissa(a, self.bits)
                         if i in operands and isinstance(a, torch.Tensor)
                         and a.dtype == torch.float32 else a for i, a in enumerate(args))
        return func(*wrapped_numbers(func, args), **(kwargs or {}))


def wrapped_numbers(func: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``args`` with a Python number where ``func``'s schema wants a Tensor made a 0-dim
    tensor: torch 2.1 hands a dispatch mode ``x.bitwise_and_(int)`` as ``bitwise_and_.Tensor``
    with the bare number, which calling ``func`` again refuses."""
    schema = getattr(func, "_schema", None)
    if schema is None:
        return args
    return tuple(torch.tensor(a) if isinstance(a, int | float) and not isinstance(a, bool)
                 and i < len(schema.arguments) and str(schema.arguments[i].type) == "Tensor"
                 else a for i, a in enumerate(args))


@contextlib.contextmanager
def reduced_precision(mode: str, device: torch.device) -> Iterator[ReducedPrecisionMatmul]:
    """Run the block under ``mode`` (a key of :data:`MODES`) on ``device``: the real switches
    (``torch.set_float32_matmul_precision``, which sets cuBLAS's TF32 flag,
    ``torch.backends.cudnn.allow_tf32`` and ``torch.autocast(device.type, torch.bfloat16)``)
    plus the emulation. Only torch's legacy switches are set and restored (mixing them with
    the ``fp32_precision`` ones makes torch refuse to read either)."""
    if mode not in MODES:
        raise UserValueError(f"reduced_precision: mode must be one of {', '.join(MODES)}, "
                             f"got {mode!r}")
    bits, precision, autocast = MODES[mode]
    if autocast and not autocast_available(device.type):
        raise UserError(f"reduced_precision: torch has no autocast for {device.type} "
                        "devices; leave out the 'bf16 autocast' mode there")
    saved = (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32)
    torch.set_float32_matmul_precision(precision)
    torch.backends.cudnn.allow_tf32 = True
    try:
        with contextlib.ExitStack() as stack:
            if autocast:
                stack.enter_context(torch.autocast(device.type, dtype=torch.bfloat16))
            yield stack.enter_context(ReducedPrecisionMatmul(bits))
    finally:
        torch.set_float32_matmul_precision(saved[0])
        torch.backends.cudnn.allow_tf32 = saved[1]
