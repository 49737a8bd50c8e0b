"""Batched pixel kernels behind :mod:`npu_data.transforms.functional`.

The rules these kernels keep on every device (issue 13; checked on the CPU by
``tests/transforms/test_device_rules.py``): no float64 tensor (what Pillow computes in double
is tabulated on the host), no host sync (no ``.item()``, ``.tolist()``, ``nonzero`` or other
data-dependent shape), no matmul (products are integers, exact whatever the user's matmul
precision: TF32/HF32/bf16 cannot reach them). A value may be read only from a host tensor,
through :func:`host_values`, and only to validate arguments or to pick a cheaper path.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Hashable, Iterator

import torch

from npu_data.common.compat import is_compiling

_STATE = threading.local()


# whether ``torch.compile`` is tracing: the torch function, resolved once (common.compat)
compiling = is_compiling


def on_host(*tensors: torch.Tensor) -> bool:
    """Whether every tensor lives on the host (CPU tensors): where a kernel makes its tables
    from them (a value is read only if :func:`host_values` says so)."""
    return all(t.device.type == "cpu" for t in tensors)


def host_values(t: torch.Tensor) -> bool:
    """Whether a kernel may read ``t``'s values on the host: ``t`` is a CPU tensor (no device
    queue to stall), :func:`accelerator_path` is not active and no ``torch.compile`` trace
    runs (a read would be a data-dependent guard there)."""
    return (t.device.type == "cpu" and not getattr(_STATE, "accelerator", False)
            and not compiling())


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A (host) parameter tensor on the batch's ``device``, queued without waiting: a
    blocking host-to-device copy would make the host wait for the device's queue."""
    return t.to(device, non_blocking=True)


class DeviceTables:
    """Constant tables a kernel reads: each made once on the host (``make()``, on first use)
    and copied once per device; never made inside a ``torch.compile`` trace (run the op once
    eagerly first). Not to be written."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._on: dict[tuple[Hashable, str], torch.Tensor] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, device: torch.device,
            make: Callable[[], torch.Tensor]) -> torch.Tensor:
        """The table ``key`` on ``device``."""
        got = self._on.get((key, str(device)))
        if got is not None:
            return got
        if compiling():
            raise RuntimeError(f"{self.what} is made on first use, not inside a torch.compile "
                               "trace: run the transform once eagerly first")
        with self._lock:
            host = self._on.get((key, "cpu"))
            if host is None:
                host = self._on[(key, "cpu")] = make()
            got = host if device.type == "cpu" else to_device(host, device)
            self._on[(key, str(device))] = got
        return got


@contextlib.contextmanager
def accelerator_path() -> Iterator[None]:
    """Run CPU tensors exactly down the code path of CUDA/NPU tensors: the pure-torch kernels
    (the compiled CPU kernels off) and no reads of values (:func:`host_values` is False)."""
    from npu_data.transforms import _native

    before = getattr(_STATE, "accelerator", False)
    _STATE.accelerator = True
    try:
        with _native.disabled():
            yield
    finally:
        _STATE.accelerator = before
