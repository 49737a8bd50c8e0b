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
from collections.abc import Callable, Hashable, Iterator, Mapping
from contextvars import ContextVar

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


# --- one host-to-device copy per batch ---------------------------------------------------------
_ALIGN = 16  # bytes: every part starts where a view of its dtype may start


class _Riders:
    """Host tensors that travel with the next :func:`upload` (``sent``: their device views,
    once it ran)."""

    def __init__(self, parent: _Riders | None = None) -> None:
        self.parent = parent  # an enclosing block's, already sent
        self.host: dict[str, torch.Tensor] = {}
        self.sent: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self.done = False


_RIDERS: ContextVar[_Riders | None] = ContextVar("npu_data_riders", default=None)


@contextlib.contextmanager
def riding(host: Mapping[str, torch.Tensor]) -> Iterator[None]:
    """Within the block, the first :func:`upload` to a device also carries ``host`` (named
    host tensors a later step needs there: :func:`take` gets them back), so a batch's
    parameters reach the device in one copy. Nested blocks add to the pending set while it
    is not sent yet; inside a ``torch.compile`` trace nothing rides."""
    if compiling():  # a trace copies as it goes (no context variables in a graph)
        yield
        return
    host = {k: v for k, v in host.items() if v.device.type == "cpu"}  # never read back
    current = _RIDERS.get()
    if current is not None and not current.done:
        current.host.update(host)
        yield
        return
    riders = _Riders(current)
    riders.host.update(host)
    token = _RIDERS.set(riders)
    try:
        yield
    finally:
        _RIDERS.reset(token)


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def pack_upload(parts: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """``parts`` (host tensors of any dtypes) on ``device`` by ONE copy: their bytes in one
    host buffer (pinned where ``device`` has pinned memory), copied without waiting, each
    returned as a view of the device buffer with its own dtype and shape."""
    from npu_data import device as dev

    offsets, total = [], 0
    for t in parts:
        offsets.append(total)
        total += -(-t.numel() * t.element_size() // _ALIGN) * _ALIGN
    buf = dev.empty_pinned((max(total, _ALIGN),), torch.uint8, device)
    for t, off in zip(parts, offsets, strict=True):
        n = t.numel() * t.element_size()
        if n:
            buf[off:off + n].copy_(_as_bytes(t))
    on = buf.to(device, non_blocking=True)
    out = []
    for t, off in zip(parts, offsets, strict=True):
        n = t.numel() * t.element_size()
        out.append(on[off:off + n].view(t.dtype).view(t.shape))
    return out


def copied(device: torch.device) -> bool:
    """Whether host tensors are copied to ``device`` (not the host, unless
    :func:`copies_on_host` pretends so) outside a ``torch.compile`` trace."""
    return (device.type != "cpu" or getattr(_STATE, "host_copies", False)) and not compiling()


@contextlib.contextmanager
def copies_on_host() -> Iterator[None]:
    """Run the one-copy packing (:func:`riding`, :func:`upload`, :func:`take`) for the host as
    for a device, so tests can check its views byte for byte on the CPU."""
    before = getattr(_STATE, "host_copies", False)
    _STATE.host_copies = True
    try:
        yield
    finally:
        _STATE.host_copies = before


def upload(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host table of a batch on ``device`` (:func:`to_device`), carrying the pending
    :func:`riding` tensors in the same copy."""
    if not copied(device) or t.device.type != "cpu":
        return to_device(t, device)
    riders = _RIDERS.get()
    if riders is None or riders.done or not riders.host:
        return to_device(t, device)
    names = list(riders.host)
    got = pack_upload([t, *(riders.host[k] for k in names)], device)
    riders.sent = {k: (riders.host[k], v) for k, v in zip(names, got[1:], strict=True)}
    riders.done = True
    return got[0]


def take(name: str, host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``host`` on ``device``: the view that rode with an earlier :func:`upload` under
    ``name`` when it holds the same values (compared on the host), else an upload."""
    if not copied(device):
        return to_device(host, device)
    riders = _RIDERS.get()
    while riders is not None and host.device.type == "cpu":
        if name in riders.sent:
            src, view = riders.sent[name]
            if (view.device == device and src.dtype == host.dtype and src.shape == host.shape
                    and torch.equal(src, host)):
                return view
        riders = riders.parent
    return upload(host, device)


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
