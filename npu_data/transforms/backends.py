"""Which kernels run, for tools outside ``transforms`` (``npu-data doctor``, parity, the kernel
digests, the benches): the compiled CPU library and the switch to the torch kernels — the
public face of ``_native`` and ``_dispatch``, which stay the only places that decide."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from npu_data.transforms import _dispatch, _native
from npu_data.transforms._kernels import accelerator_path
from npu_data.transforms._kernels.layout import normalize_table
from npu_data.transforms._kernels.pixel import blend_products
from npu_data.transforms._kernels.resample import vertical_first_rule
from npu_data.transforms._kernels.warp_tables import bilinear_tables, nearest_tables

__all__ = [
    "accelerator_path",
    "bilinear_tables",
    "blend_products",
    "compiled_for",
    "compiled_ops",
    "nearest_tables",
    "normalize_table",
    "simd_paths",
    "torch_kernels",
    "vertical_first_rule",
]

@contextlib.contextmanager
def torch_kernels() -> Iterator[None]:
    """Run the block with the pure-torch kernels on the CPU too (what CUDA and the NPU run;
    parity checks both).

    Yields:
        Nothing: the switch holds for the block, in this thread.
    """
    with _native.disabled():
        yield


def compiled_ops() -> Any | None:
    """``torch.ops.npu_data`` with the compiled CPU kernels, or None where they do not load.

    Returns:
        The op namespace, or None (no compiler, or ``NPU_DATA_NATIVE=0``).
    """
    return _native.ops()


def compiled_for(images: torch.Tensor) -> bool:
    """Whether the compiled kernels would run for ``images``.

    Args:
        images: A batch (its device decides).

    Returns:
        True on the CPU with the library loaded and not switched off.
    """
    return bool(_dispatch.compiled_for(images))


def simd_paths() -> str | None:
    """What the loaded compiled build has, e.g. ``"isa=neon build=native transpose=neon
    byte_tables=neon"``.

    Returns:
        The description, or None when the compiled kernels do not load.
    """
    ops = _native.ops()
    return None if ops is None else str(ops.simd_paths())
