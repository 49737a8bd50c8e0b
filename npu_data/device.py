"""The one place that knows NPU vs CUDA vs CPU.

Everything else in npu-data asks this module for devices, streams, events,
pinned memory, the distributed backend and the worker start method; nothing else
calls ``torch.cuda`` or ``torch.npu``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import torch

from npu_data.common.compat import release
from npu_data.common.dist import place
from npu_data.errors import UserError

DeviceLike = str | torch.device

_NPU_HELP = (
    "install torch-npu built for your torch (`pip install 'torch-npu=={torch}.*'`; "
    "`pip install 'npu-data[npu]'` never touches torch) and "
    "Ascend's CANN toolkit, then `source /usr/local/Ascend/ascend-toolkit/set_env.sh`"
)


@functools.lru_cache(maxsize=1)
def npu_import_error() -> str | None:
    """Why ``torch_npu`` cannot be used here, or None when it imports and sees a device."""
    try:
        import torch_npu  # noqa: F401
    except ModuleNotFoundError:
        return "torch_npu is not installed"
    except Exception as exc:  # CANN libraries missing: OSError, ImportError, RuntimeError
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"torch_npu is installed but cannot load Ascend's CANN libraries ({first})"
    npu = getattr(torch, "npu", None)
    try:
        if npu is None or not npu.is_available():
            return "torch_npu imported but no NPU device is visible"
    except Exception as exc:  # pragma: no cover - depends on the driver
        return f"torch_npu imported but the NPU driver failed ({exc})"
    return None


def npu_available() -> bool:
    """True when an Ascend NPU can be used through torch_npu."""
    return npu_import_error() is None


def cuda_available() -> bool:
    """True when a CUDA device can be used."""
    return bool(torch.cuda.is_available())


def best_device_type() -> str:
    """``"npu"``, then ``"cuda"``, then ``"cpu"``: the first one that works here."""
    if npu_available():
        return "npu"
    if cuda_available():
        return "cuda"
    return "cpu"


def resolve_device(spec: DeviceLike | None = "auto") -> torch.device:
    """Turn ``"auto"``, ``"npu"``, ``"cuda:1"``, ``"cpu"`` or a device into a usable device.

    Args:
        spec: ``"auto"`` or None (the first of npu, cuda, cpu that works here), a device
            type with an optional index (``"npu"``, ``"cuda:1"``, ``"cpu"``) or a
            ``torch.device``.

    Returns:
        The device, with the current index for npu and cuda when ``spec`` names none.

    Raises:
        UserError: ``spec`` is not a device, or the device it names is not usable here (the
            message says how to fix it: which ``torch_npu`` to install, ``--device cpu``).
    """
    if spec is None or (isinstance(spec, str) and spec == "auto"):
        kind = best_device_type()
        return _with_index(torch.device(kind))
    if device_type(spec) == "npu":
        reason = npu_import_error()
        if reason is not None:
            torch_xy = ".".join(map(str, release(torch.__version__)))
            raise UserError(f"device 'npu' requested but {reason}: "
                            + _NPU_HELP.format(torch=torch_xy))
    try:
        dev = torch.device(spec)
    except (RuntimeError, TypeError):
        raise UserError(f"unknown device {spec!r}: use auto, cpu, cuda[:N] or npu[:N]") from None
    if dev.type == "cuda" and not cuda_available():
        raise UserError(
            "device 'cuda' requested but no CUDA device is visible: use --device cpu or auto, "
            "or install a CUDA build of torch"
        )
    elif dev.type not in ("cpu", "cuda", "npu"):
        raise UserError(f"unsupported device {spec!r}: use auto, cpu, cuda[:N] or npu[:N]")
    return _with_index(dev)


def device_type(device: DeviceLike) -> str:
    """The type of ``device`` ("cpu", "cuda", "npu", ...) without needing torch_npu loaded."""
    if isinstance(device, torch.device):
        return device.type
    return str(device).split(":", 1)[0]


def _with_index(dev: torch.device) -> torch.device:
    if dev.type == "cpu" or dev.index is not None:
        return dev
    local_rank = place().local_rank
    count = device_count(dev.type)
    return torch.device(dev.type, local_rank % count if count else 0)


def _module(device_type: str) -> Any:
    if device_type == "cuda":
        return torch.cuda
    if device_type == "npu":
        return torch.npu  # type: ignore[attr-defined]
    return None


def device_count(device_type: str) -> int:
    """Number of visible devices of that type (CPU counts as one)."""
    if device_type == "cpu":
        return 1
    if device_type == "npu" and not npu_available():
        return 0
    mod = _module(device_type)
    return int(mod.device_count()) if mod is not None else 0


def is_accelerator(device: DeviceLike) -> bool:
    """True for NPU and CUDA devices (they have streams and pinned memory)."""
    return device_type(device) in ("cuda", "npu")


def set_device(device: DeviceLike) -> None:
    """Make ``device`` the current device of its type (no-op on CPU)."""
    dev = torch.device(device)
    mod = _module(dev.type)
    if mod is not None and dev.index is not None:
        mod.set_device(dev)


def synchronize(device: DeviceLike) -> None:
    """Wait for all work on ``device`` (benchmarks only: never on the hot path)."""
    dev = torch.device(device)
    mod = _module(dev.type)
    if mod is not None:
        mod.synchronize(dev)


def new_stream(device: DeviceLike) -> Any:
    """A new side stream on ``device``, or None on the CPU."""
    dev = torch.device(device)
    mod = _module(dev.type)
    return mod.Stream(device=dev) if mod is not None else None


def current_stream(device: DeviceLike) -> Any:
    """The current (consuming) stream of ``device``, or None on the CPU."""
    dev = torch.device(device)
    mod = _module(dev.type)
    return mod.current_stream(dev) if mod is not None else None


@contextlib.contextmanager
def stream_context(stream: Any) -> Iterator[None]:
    """Run the block on ``stream`` (a no-op when stream is None, i.e. on the CPU)."""
    if stream is None:
        yield
        return
    dev_type = stream.device.type
    mod = _module(dev_type)
    with mod.stream(stream):
        yield


def pin_memory_supported(device: DeviceLike) -> bool:
    """True when pinned host memory helps copies to ``device``."""
    return is_accelerator(device)


def pin(tensor: torch.Tensor, device: DeviceLike) -> torch.Tensor:
    """Page-lock ``tensor`` for fast non-blocking copies to ``device`` (no-op on CPU)."""
    if not pin_memory_supported(device) or tensor.is_pinned():
        return tensor
    return tensor.pin_memory()


def empty_pinned(shape: tuple[int, ...], dtype: torch.dtype, device: DeviceLike) -> torch.Tensor:
    """An empty host tensor, pinned when ``device`` is an accelerator."""
    return torch.empty(shape, dtype=dtype, pin_memory=pin_memory_supported(device))


def start_method(device: DeviceLike) -> str | None:
    """Multiprocessing start method DataLoader workers need for ``device``.

    An NPU cannot be re-initialised in a forked child, so NPU runs use ``spawn``;
    None means the platform default.
    """
    return "spawn" if device_type(device) == "npu" else None


def dist_backend(device: DeviceLike) -> str:
    """The torch.distributed backend for ``device``: hccl, nccl or gloo."""
    kind = device_type(device)
    return {"npu": "hccl", "cuda": "nccl"}.get(kind, "gloo")


def set_jit_compile(enabled: bool, device: DeviceLike) -> None:
    """Turn the NPU's ``jit_compile`` mode on or off (ignored on other devices)."""
    if device_type(device) != "npu":
        return
    torch.npu.set_compile_mode(jit_compile=enabled)  # type: ignore[attr-defined]


def manual_seed(seed: int, device: DeviceLike) -> torch.Generator:
    """A generator on ``device`` seeded with ``seed`` (CPU generator on the CPU)."""
    gen = torch.Generator(device=torch.device(device))
    gen.manual_seed(seed)
    return gen


def describe(device: DeviceLike) -> str:
    """A short human description, e.g. ``cuda:0 (NVIDIA H200)`` or ``cpu (2 threads)``."""
    dev = torch.device(device)
    mod = _module(dev.type)
    if mod is None:
        return f"cpu ({torch.get_num_threads()} threads)"
    try:
        name = mod.get_device_name(dev)
    except Exception:  # pragma: no cover - driver specific
        name = dev.type
    return f"{dev} ({name})"


def _torch_npu_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("torch-npu")
    except metadata.PackageNotFoundError:
        return None


def npu_pairing_problem() -> str | None:
    """Why the installed torch_npu cannot work with the installed torch (torch_npu X.Y is built
    for torch X.Y and nothing else), or None."""
    npu = _torch_npu_version()
    if npu is None or release(npu) == release(torch.__version__):
        return None
    want = ".".join(map(str, release(npu)))
    have = ".".join(map(str, release(torch.__version__)))
    return (f"torch_npu {npu} needs torch {want}.*, installed torch is {torch.__version__}: "
            f"`pip install 'torch-npu=={have}.*'` (or the torch {want} it was built for)")


def _cann_version() -> str:
    import os
    from pathlib import Path

    homes = [os.environ.get(k) for k in ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH")]
    for home in [h for h in homes if h] + ["/usr/local/Ascend/ascend-toolkit/latest"]:
        for name in ("version.cfg", "version.info", "compiler/version.info"):
            path = Path(home) / name
            if path.is_file():
                lines = path.read_text(errors="replace").splitlines()
                found = [ln.split("=", 1)[1].strip() for ln in lines if "version=" in ln.lower()]
                return f"{found[0] if found else 'unknown version'} ({home})"
    return "not found (source /usr/local/Ascend/ascend-toolkit/set_env.sh)"


def stack_report() -> list[tuple[str, str]]:
    """What this machine offers for each device type: torch's build, torch_npu and its torch
    pairing, CANN, CUDA, and the device ``"auto"`` picks (``npu-data doctor``)."""
    cuda = torch.version.cuda
    rows = [("torch", f"{torch.__version__} ({f'CUDA {cuda}' if cuda else 'CPU'} build)")]
    npu = _torch_npu_version()
    rows.append(("torch_npu", npu or "not installed (Ascend: pip install 'torch-npu==<your "
                                     "torch X.Y>.*')"))
    if npu is not None:
        rows += [("torch_npu pairing", npu_pairing_problem() or "ok (same torch release)"),
                 ("CANN", _cann_version()),
                 ("npu", npu_import_error() or f"{device_count('npu')} device(s)")]
    rows.append(("cuda", f"{device_count('cuda')} device(s)" if cuda_available()
                 else "not available"))
    rows.append(("device 'auto'", describe(resolve_device("auto"))))
    return rows
