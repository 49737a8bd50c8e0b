"""docs/device-ops.md's allow-list of aten ops and what the torch kernels dispatch (issue 13):
``allow_list`` parses the table, ``collect`` runs functions down the CUDA/NPU code path under
``OpUse``, ``problems`` says where the two disagree. tests/transforms/test_device_ops.py holds
the checks."""

from __future__ import annotations

import contextlib
import re
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import npu_data.transforms as T
from npu_data.parity.precision import wrapped_numbers
from npu_data.transforms._kernels import accelerator_path

DOC = Path(__file__).resolve().parents[2] / "docs" / "device-ops.md"
_ROOT = Path(T.__file__).resolve().parent
ROW = re.compile(r"^\|\s*`([A-Za-z0-9_]+)`\s*\|(.*)\|\s*$")


class OpUse(TorchDispatchMode):
    """Per aten op (overload packet): the transforms modules that dispatch it and the dtypes
    of the tensors it takes and returns."""

    def __init__(self) -> None:
        super().__init__()
        self.modules: dict[str, set[str]] = defaultdict(set)
        self.dtypes: dict[str, set[str]] = defaultdict(set)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        out = func(*wrapped_numbers(func, args), **(kwargs or {}))
        op = func.overloadpacket.__name__
        self.modules[op].add(_caller())
        for t in tree_flatten((args, kwargs, out))[0]:
            if isinstance(t, torch.Tensor):
                self.dtypes[op].add(str(t.dtype).removeprefix("torch."))
        return out


def _caller() -> str:
    """The innermost ``npu_data/transforms`` module on the stack, e.g. ``_kernels/color``."""
    frame = sys._getframe(2)
    while frame is not None:
        path = Path(frame.f_code.co_filename)
        if path.is_relative_to(_ROOT):
            return path.relative_to(_ROOT).with_suffix("").as_posix()
        frame = frame.f_back  # type: ignore[assignment]
    return "(outside npu_data.transforms)"


def collect(fns: dict[str, Callable[[], Any]]) -> OpUse:
    """Run each function down the CUDA/NPU code path under :class:`OpUse`, the resize's
    made-on-first-use weight tables emptied first (:func:`first_use`)."""
    use = OpUse()
    with first_use():
        for fn in fns.values():
            with accelerator_path(), use:
                fn()
    return use


@contextlib.contextmanager
def first_use() -> Iterator[None]:
    """Within the block the resize's weight tables (``resample._TABLES``, made on a size's
    first resize) are made again, whatever earlier tests of this process made: the ops are
    those of a fresh process, in any test order; restored after."""
    from npu_data.transforms._kernels import resample

    caches: list[dict[Any, Any]] = [resample._TABLES, resample._NEEDED]
    saved = [dict(c) for c in caches]
    for c in caches:
        c.clear()
    try:
        yield
    finally:
        for c, old in zip(caches, saved, strict=True):
            c.clear()
            c.update(old)


def _cells(text: str) -> list[str]:
    return [c.strip() for c in text.split("|")]


def _names(cell: str) -> set[str]:
    return {n.strip().strip("`") for n in cell.split(",") if n.strip() and n.strip() != "-"}


def allow_list(doc: Path = DOC) -> dict[str, tuple[set[str], set[str], str]]:
    """The table of ``doc``: op -> (modules, dtypes, evidence). Refuses a duplicate row."""
    rows: dict[str, tuple[set[str], set[str], str]] = {}
    for line in doc.read_text(encoding="utf-8").splitlines():
        m = ROW.match(line)
        if not m:
            continue
        cells = _cells(m.group(2))
        assert len(cells) == 3, f"{doc.name}: the row of {m.group(1)} needs 4 cells"
        assert m.group(1) not in rows, f"{doc.name}: two rows for {m.group(1)}"
        used_by, dtypes, evidence = cells
        rows[m.group(1)] = (_names(used_by), _names(dtypes), evidence)
    return rows


def problems(use: OpUse, rows: dict[str, tuple[set[str], set[str], str]]) -> list[str]:
    """Every way the dispatched ops and the table disagree, one line each."""
    out = []
    for op in sorted(set(use.modules) - set(rows)):
        out.append(f"{op}: dispatched by {sorted(use.modules[op])} but not in {DOC.name}")
    for op in sorted(set(rows) - set(use.modules)):
        out.append(f"{op}: listed in {DOC.name} but no kernel dispatches it (stale row)")
    for op in sorted(set(rows) & set(use.modules)):
        modules, dtypes, evidence = rows[op]
        if modules != use.modules[op]:
            out.append(f"{op}: used by {sorted(use.modules[op])}, the row says {sorted(modules)}")
        if dtypes != use.dtypes[op]:
            out.append(f"{op}: dtypes {sorted(use.dtypes[op])}, the row says {sorted(dtypes)}")
        if not evidence:
            out.append(f"{op}: no Ascend evidence in the row")
    return out


# host work, no device op: parameters read on the host (detach and .numpy() of the policies'
# float64 maps, a host parameter's truth value, a pick copied into host parameters)
HOST_ONLY = frozenset({"detach", "copy_", "_local_scalar_dense"})
