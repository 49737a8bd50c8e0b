"""The kinds' seam: every hook is typed with a ``kinds.protocols`` Protocol, and what the
callers hand over has every member the Protocol names (mypy checks the signatures: the
modules are passed by name, ``kind.extract(ctx, b, results)``)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from PIL import Image

from npu_data.annotations import checks, results
from npu_data.kinds import protocols as P
from npu_data.kinds.base import Kind
from npu_data.kinds.registry import KINDS
from npu_data.previews.canvas import Canvas
from npu_data.transforms import geometry

# hook -> its parameter typed by a Protocol, and the Protocol
TYPED = {"check": ("c", "ValueChecks"), "extract": ("R", "Extraction[RowsT]"),
         "resized_crop": ("G", "GeometryKernels"), "hflip": ("G", "GeometryKernels"),
         "paint": ("canvas", "Canvas")}


def _members(proto: type) -> set[str]:
    """The names a Protocol declares: its methods, properties and annotated attributes."""
    return {n for n in [*vars(proto), *proto.__annotations__]
            if not n.startswith("_") or n == "__len__"}


@pytest.mark.parametrize("kind", [Kind("k", (), {}), *KINDS], ids=lambda k: k.name)
def test_every_hook_is_typed_with_a_protocol(kind: Kind) -> None:
    for hook, (param, proto) in TYPED.items():
        sig = inspect.signature(getattr(type(kind), hook))
        assert sig.parameters[param].annotation == proto, (kind.name, hook)
    assert "ModuleType" not in inspect.getsource(inspect.getmodule(type(kind)))


@pytest.mark.parametrize(("proto", "provider"), [
    (P.Extraction, results), (P.GeometryKernels, geometry), (P.ResultBatch, results.Batch),
    (P.ExtractionContext, results.Context(lambda c, n: 0, lambda cs, ns: [], clip=True)),
    (P.ValueChecks, checks.Check([], [], [], True, lambda i, m: None)),
    (P.ExtractedRows, results.common("boxes", results.Batch(*([np.zeros(0)] * 5),
                                                             [], [], [], []), None)),
    (P.Canvas, Canvas(Image.new("RGBA", (4, 4)), 1, {}, [])), (P.CheckedKind, KINDS[0]),
], ids=lambda x: getattr(x, "__name__", type(x).__name__))
def test_what_the_callers_hand_over_has_every_member(proto: type, provider: object) -> None:
    missing = sorted(m for m in _members(proto) if not hasattr(provider, m)
                     and m not in getattr(provider, "__slots__", ()))
    assert missing == [], f"{proto.__name__}: {provider!r} lacks {missing}"
    assert len(_members(proto)) >= 2
