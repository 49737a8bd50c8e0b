"""The annotation kinds, in table and extraction order: the only list of them.

Everything that handles annotations iterates ``KINDS`` (or looks a kind up in ``BY_NAME`` /
``OF_TYPE``). Adding a kind is one module in ``npu_data/kinds/`` and one line here
(docs/architecture.md, "Annotation kinds", works one through).
"""

from __future__ import annotations

from npu_data.kinds import (
    boxes,
    choices,
    ellipses,
    keypoints,
    masks,
    polygons,
    relations,
    scalars,
    taxonomy,
    texts,
)
from npu_data.kinds.base import Kind

KINDS: tuple[Kind, ...] = (
    boxes.KIND,
    polygons.KIND,
    keypoints.KIND,
    ellipses.KIND,
    masks.KIND,
    choices.KIND,
    texts.KIND,
    taxonomy.KIND,
    scalars.KIND,
    relations.KIND,
)
BY_NAME: dict[str, Kind] = {k.name: k for k in KINDS}
OF_TYPE: dict[str, Kind] = {t: k for k in KINDS for t in k.result_types}  # result type -> kind
PADDED: tuple[Kind, ...] = tuple(k for k in KINDS if k.row_key is not None)
PADDED_BY_NAME: dict[str, Kind] = {k.name: k for k in PADDED}  # kinds padded to (B, N, ...)


def kinds_named(names: list[str] | tuple[str, ...] | None) -> tuple[Kind, ...]:
    """The registered kinds among ``names`` in registry order (every kind for None)."""
    if names is None:
        return KINDS
    wanted = set(names)
    return tuple(k for k in KINDS if k.name in wanted)
