"""The torch kernels dispatch only the aten ops of a documented allow-list (issue 13).

``docs/device-ops.md`` has one row per aten op (overload packet) that the torch kernels and
their geometry companions dispatch on the CUDA/NPU code path, over every case of
``test_device_rules.CASES``: the op, the modules that dispatch it, the dtypes it touches and
the evidence that Ascend's torch_npu runs it. These tests parse that table, so the doc and the
kernels cannot drift: an op outside it fails, and so does a row no kernel uses any more, a
module or a dtype the row does not name (a new dtype needs its Ascend dtype list checked).

Run this file as a script to print the rows as the kernels use them now.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from test_device_rules import CASES
from test_pixel_ops import _device_cases, padded
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import npu_data.transforms as T
from npu_data.parity.precision import wrapped_numbers
from npu_data.transforms._kernels import accelerator_path

DOC = Path(__file__).resolve().parents[2] / "docs" / "device-ops.md"
_ROOT = Path(T.__file__).resolve().parent
_ROW = re.compile(r"^\|\s*`([A-Za-z0-9_]+)`\s*\|(.*)\|\s*$")


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
    """Run each function down the CUDA/NPU code path under :class:`OpUse`."""
    use = OpUse()
    for fn in fns.values():
        with accelerator_path(), use:
            fn()
    return use


def _cells(text: str) -> list[str]:
    return [c.strip() for c in text.split("|")]


def _names(cell: str) -> set[str]:
    return {n.strip().strip("`") for n in cell.split(",") if n.strip() and n.strip() != "-"}


def allow_list(doc: Path = DOC) -> dict[str, tuple[set[str], set[str], str]]:
    """The table of ``doc``: op -> (modules, dtypes, evidence). Refuses a duplicate row."""
    rows: dict[str, tuple[set[str], set[str], str]] = {}
    for line in doc.read_text(encoding="utf-8").splitlines():
        m = _ROW.match(line)
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


def augment_cases() -> dict[str, Callable[[], Any]]:
    """The augmentation kernels of issue 39: the pixel ops (``test_pixel_ops``' device cases,
    RandomErasing's noise among them), the auto-augment policies (nearest and bilinear),
    GaussianBlur and MixUp / CutMix, each applied with keyed parameters."""
    import numpy as np

    from npu_data.transforms.draws import sample_keys

    _, x, sizes = padded(6)
    cases: dict[str, Callable[[], Any]] = {
        k: (lambda fn=fn: fn(x, sizes)) for k, fn in _device_cases().items()}
    batch = {"image": x, "sizes": sizes}
    g = torch.Generator().manual_seed(0)
    same = {"image": torch.randint(0, 256, (6, 3, 20, 24), dtype=torch.uint8, generator=g),
            "sizes": torch.tensor([[20, 24]] * 6), "label": torch.arange(6) % 4}
    for t, b in ((T.TrivialAugmentWide(), batch),
                 (T.TrivialAugmentWide(interpolation="bilinear"), batch),
                 (T.RandAugment(), batch), (T.AutoAugment(), batch),
                 (T.RandomErasing(1.0, value="random"), batch), (T.GaussianBlur(5), batch),
                 (T.MixUp(0.4, 4), same), (T.CutMix(1.0, 4), same)):
        params = t.draw_keyed(b["sizes"].numpy(), sample_keys(0, 0, np.arange(len(b["sizes"]))))
        cases[repr(t)] = lambda t=t, p=params, b=b: t.apply(b, p)
    return cases


def only(use: OpUse, ops: set[str]) -> OpUse:
    """``use`` restricted to ``ops``."""
    out = OpUse()
    for op in ops:
        out.modules[op], out.dtypes[op] = use.modules[op], use.dtypes[op]
    return out


@pytest.fixture(scope="module")
def use() -> OpUse:
    return collect(CASES)


@pytest.fixture(scope="module")
def augment_use() -> OpUse:
    return collect(augment_cases())


@pytest.mark.newest_torch
def test_the_kernels_dispatch_exactly_the_documented_ops(use: OpUse, augment_use: OpUse
                                                         ) -> None:
    """CASES match their rows exactly; the rows only the augmentation kernels dispatch match
    those kernels' use exactly (so no row is stale)."""
    rows = allow_list()
    assert len(rows) >= 40, f"{DOC.name}: the table did not parse ({len(rows)} rows)"
    augment_only = set(augment_use.modules) - set(use.modules) - HOST_ONLY
    found = problems(use, {op: r for op, r in rows.items() if op not in augment_only})
    found += problems(only(augment_use, augment_only & set(rows)),
                      {op: rows[op] for op in augment_only & set(rows)})
    assert not found, "\n".join(found)


@pytest.mark.newest_torch
def test_the_augmentation_kernels_dispatch_only_listed_ops(augment_use: OpUse) -> None:
    """Every aten op of the pixel ops, the policies, RandomErasing's noise and MixUp /
    CutMix has a row in docs/device-ops.md (where torch_npu's support is recorded)."""
    missing = sorted(set(augment_use.modules) - set(allow_list()) - HOST_ONLY)
    assert not missing, {op: sorted(augment_use.modules[op]) for op in missing}


def test_the_audit_catches_an_op_outside_the_list(use: OpUse) -> None:
    """Negative controls: an unlisted op, a stale row, a module and a dtype the row does not
    name are each reported."""
    rows = allow_list()
    assert "cumprod" not in rows
    extra = collect({"cumprod": lambda: torch.arange(6.0).cumprod(0)})
    found = problems(extra, {op: rows[op] for op in extra.modules if op in rows})
    assert any(f.startswith("cumprod: dispatched") for f in found), found
    stale = dict(rows, nonzero=({"_kernels/color"}, {"bool"}, "x"))
    assert any("nonzero: listed" in f for f in problems(use, stale))
    modules, dtypes, evidence = rows["where"]
    wrong = dict(rows, where=(modules - {"geometry"}, dtypes - {"uint8"}, evidence))
    found = problems(use, wrong)
    assert any(f.startswith("where: used by") for f in found), found
    assert any(f.startswith("where: dtypes") for f in found), found


def test_the_table_parses_every_row() -> None:
    """Each table row of the doc is an op row (a malformed one would silently drop out)."""
    text = DOC.read_text(encoding="utf-8")
    table = [ln for ln in text.splitlines() if ln.startswith("| `")]
    assert len(table) == len(allow_list()), [ln for ln in table if not _ROW.match(ln)]


if __name__ == "__main__":
    found = collect(CASES)
    for op in sorted(found.modules):
        mods = ", ".join(f"`{m}`" for m in sorted(found.modules[op]))
        print(f"| `{op}` | {mods} | {', '.join(sorted(found.dtypes[op])) or '-'} |")
