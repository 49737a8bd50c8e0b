"""Whole-dataset statistics from the shard columns (no per-sample decoding)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from npu_data.kinds.registry import KINDS
from npu_data.shards.format import ENCODINGS
from npu_data.shards.reader import ShardDataset

LABELLED = tuple(k.name for k in KINDS if "label" in k.fixed)


@dataclass
class DatasetStats:
    """Counts and histograms of a dataset."""

    samples: int
    shards: int
    bytes: int
    store: str
    rejected: int
    results: dict[str, int] = field(default_factory=dict)  # group -> rows
    labels: dict[str, dict[str, int]] = field(default_factory=dict)  # control -> label -> n
    sizes: dict[str, Any] = field(default_factory=dict)
    captions: int = 0  # samples with at least one text
    encodings: dict[str, int] = field(default_factory=dict)


def dataset_stats(ds: ShardDataset) -> DatasetStats:
    """Statistics of ``ds`` read from its indices and annotation columns."""
    m = ds.manifest
    total = sum(int(f["size"]) for s in m["shards"] for f in s.get("files", {}).values())
    st = DatasetStats(len(ds), len(m["shards"]), total, ds.store, int(m["counts"]["rejected"]))
    hist = {c: np.zeros(len(ds.labels.get(c, [])) + 1, np.int64) for c in ds.controls}
    n_enc = len(ENCODINGS)
    enc = np.zeros(n_enc, np.int64)
    for k in range(len(m["shards"])):
        sh = ds.shard(k)
        enc += np.bincount(np.asarray(sh.index["encoding"]), minlength=n_enc)[:n_enc]
        for kind in KINDS:
            g = kind.name
            st.results[g] = st.results.get(g, 0) + int(sh.col(f"{g}.offsets")[-1])
        for g in LABELLED:
            ctrl = np.asarray(sh.col(f"{g}.control"), dtype=np.int64)
            lab = np.asarray(sh.col(f"{g}.label"), dtype=np.int64)
            for c in np.unique(ctrl):
                name = ds.controls[int(c)]
                counts = np.bincount(lab[ctrl == c] + 1, minlength=len(hist[name]))
                hist[name][: len(counts)] += counts[: len(hist[name])]
        st.captions += int(np.count_nonzero(np.diff(np.asarray(sh.col("texts.offsets")))))
    for c, h in hist.items():
        names = ["(none)", *ds.labels.get(c, [])]
        row = {names[i]: int(v) for i, v in enumerate(h) if v}
        if row:
            st.labels[c] = row
    sizes = ds.sizes()
    if len(sizes):
        st.sizes = {"height": _summary(sizes[:, 0]), "width": _summary(sizes[:, 1])}
    st.encodings = {n: int(v) for n, v in zip(ENCODINGS, enc, strict=True)
                    if v}
    return st


def _summary(v: np.ndarray) -> dict[str, float]:
    return {"min": int(v.min()), "median": float(np.median(v)), "mean": float(v.mean()),
            "max": int(v.max())}
