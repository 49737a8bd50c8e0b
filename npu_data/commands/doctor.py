"""``npu-data doctor``: what this machine runs npu-data with — host CPU and which compiled
kernel path it takes, torch / numpy / torch_npu / CANN / CUDA, and whether they fit."""

from __future__ import annotations

import argparse
import os
import platform
from importlib import metadata

import numpy as np

from npu_data import device as dev
from npu_data.common import compat
from npu_data.common.compiled import variant
from npu_data.errors import UserError

NAME = "doctor"
HELP = ("Report the host CPU, the compiled kernel path in use (AVX-512/AVX2/NEON/portable), "
        "torch, numpy, torch_npu, CANN and CUDA, and whether the versions fit.")

# /proc/cpuinfo's "CPU implementer" and "CPU part" of the ARM hosts users run
_ARM_PARTS = {("0x48", "0xd01"): "HiSilicon Kunpeng 920", ("0x48", "0xd02"): "HiSilicon Kunpeng",
              ("0x41", "0xd0c"): "Arm Neoverse N1", ("0x41", "0xd40"): "Arm Neoverse V1",
              ("0x41", "0xd49"): "Arm Neoverse N2", ("0x41", "0xd4f"): "Arm Neoverse V2"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``npu-data doctor``."""
    p.add_argument("--device", default=None,
                   help="also require this device (npu, cuda, cpu): exit 1 with the reason and "
                        "the fix when it cannot be used")


def cpu_name(cpuinfo: str) -> str:
    """The CPU's name from ``/proc/cpuinfo``'s text (x86 model name, or ARM implementer and
    part)."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    if fields.get("model name"):
        return fields["model name"]
    part = (fields.get("CPU implementer", ""), fields.get("CPU part", ""))
    if part != ("", ""):
        return _ARM_PARTS.get(part, f"ARM implementer {part[0]} part {part[1]}")
    return platform.processor() or "unknown"


def _host() -> list[tuple[str, str]]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            name = cpu_name(f.read())
    except OSError:
        name = platform.processor() or "unknown"
    return [("host", f"{platform.machine()}, {name}, {os.cpu_count()} cores"),
            ("python", platform.python_version())]


def _kernels() -> list[tuple[str, str]]:
    from npu_data.codecs import jpeg_ops
    from npu_data.transforms import backends

    path = backends.simd_paths() or "unavailable: pure-torch kernels on the CPU"
    return [("compiled kernels", f"{path} (NPU_DATA_SIMD={variant()})"),
            ("JPEG regions", "libjpeg-turbo" if jpeg_ops() is not None
             else "unavailable: Pillow decodes whole images"),
            ("batch buffer reuse", "on" if compat.has_storage_use_count()
             else "off (this torch build cannot count storage owners)")]


def _versions() -> list[tuple[str, str]]:
    supported = compat.TORCH >= compat.OLDEST
    oldest = ".".join(map(str, compat.OLDEST))
    return [("npu-data", metadata.version("npu-data")), ("numpy", np.__version__),
            ("torch support", "ok" if supported else f"torch {oldest} or newer is needed")]


def run(args: argparse.Namespace) -> int:
    """Print the report; exit 1 when ``--device`` cannot be used or torch is too old."""
    rows = _host() + _versions() + dev.stack_report() + _kernels()
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    if args.device is not None:
        dev.resolve_device(args.device)  # raises UserError with the fix
        print(f"device {args.device!r}: usable")
    problem = dev.npu_pairing_problem()
    if problem is not None and args.device == "npu":
        raise UserError(problem)
    return 0 if compat.TORCH >= compat.OLDEST else 1
