"""The torch kernels dispatch only the aten ops of a documented allow-list (issue 13).

``docs/device-ops.md`` has one row per aten op (overload packet) that the torch kernels and
their geometry companions dispatch on the CUDA/NPU code path, over every case of
``tests/support/device_cases.py``' ``CASES``: the op, the modules that dispatch it, the dtypes it touches and
the evidence that Ascend's torch_npu runs it. These tests parse that table, so the doc and the
kernels cannot drift: an op outside it fails, and so does a row no kernel uses any more, a
module or a dtype the row does not name (a new dtype needs its Ascend dtype list checked).

Run ``python -m tests.transforms.test_device_ops`` to print the rows as the kernels use them
now.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import npu_data.transforms as T
from tests.support.batches import mixed_levels
from tests.support.device_cases import CASES, pixel_cases
from tests.support.device_ops import DOC, HOST_ONLY, ROW, OpUse, allow_list, collect, problems


def augment_cases() -> dict[str, Callable[[], Any]]:
    """The augmentation kernels of issue 39: the pixel ops (``pixel_cases``,
    RandomErasing's noise among them), the auto-augment policies (nearest and bilinear),
    GaussianBlur and MixUp / CutMix, each applied with keyed parameters."""
    import numpy as np

    from npu_data.transforms.draws import sample_keys

    _, x, sizes = mixed_levels(6)
    cases: dict[str, Callable[[], Any]] = {
        k: (lambda fn=fn: fn(x, sizes)) for k, fn in pixel_cases().items()}
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
    assert len(table) == len(allow_list()), [ln for ln in table if not ROW.match(ln)]


if __name__ == "__main__":
    found = collect(CASES)
    for op in sorted(found.modules):
        mods = ", ".join(f"`{m}`" for m in sorted(found.modules[op]))
        print(f"| `{op}` | {mods} | {', '.join(sorted(found.dtypes[op])) or '-'} |")
