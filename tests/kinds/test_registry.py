"""The kind registry is complete and the only list of kinds; datasets carry only their kinds."""

from __future__ import annotations

import ast
import json
import pkgutil
from pathlib import Path

import numpy as np
import pytest
import torch

import npu_data
import npu_data.kinds
from npu_data.annotations import results as R
from npu_data.annotations.images import ImageOptions
from npu_data.annotations.table import AnnotationTable, empty_table
from npu_data.errors import UserError
from npu_data.kinds.base import Kind
from npu_data.kinds.registry import BY_NAME, KINDS, OF_TYPE, PADDED
from npu_data.loaders import collate_samples
from npu_data.shards.format import column_schema, dataset_kinds, kinds_with_rows
from npu_data.shards.reader import ShardDataset
from npu_data.shards.writer import WriteOptions, write_dataset
from tests.support.docs import worked_example_code
from tests.support.exports import make_export

PACKAGE = Path(npu_data.__file__).parent
NAMES = {k.name for k in KINDS}
HOOKS = ("check", "extract", "stored_columns", "empty_columns", "row_columns", "to_pixels", "sample_keys",
         "read_sample", "nested_sample", "own_keys", "pad_samples", "pad_columns",
         "pad_empty", "resized_crop", "hflip", "json_columns", "json_part", "json_empty",
         "json_read", "json_sample", "json_v1", "json_check", "to_percent", "table_nested")
# Files allowed to compare against a kind name, and why.
ALLOWED = {
    "bench/pillow_baseline.py": "'boxes' there is RandomResizedCrop's crop-box parameter",
}
SAMPLE_KEYS = {"image", "sizes", "index", "task_id", "original_size", "caption"}


def test_every_kind_module_is_registered_once() -> None:
    modules = {m.name for m in pkgutil.iter_modules(npu_data.kinds.__path__)}
    assert modules - {"base", "geometry", "protocols", "registry"} == NAMES
    assert len(NAMES) == len(KINDS) and set(BY_NAME) == NAMES
    types = [t for k in KINDS for t in k.result_types]
    assert len(types) == len(set(types)) == len(OF_TYPE)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_every_kind_has_every_hook(kind: Kind) -> None:
    for hook in HOOKS:
        assert callable(getattr(kind, hook)), hook
    assert type(kind).extract is not Kind.extract  # every kind reads its own results
    assert kind.result_types and {"control", "annotation", "source"} <= set(kind.fixed)
    assert "rid" in kind.text
    values = {n.values for n in kind.nested}
    assert set(kind.pixel) <= set(kind.fixed) | values | set(kind.derived)
    stored = kind.stored_columns()
    assert all(f"{kind.name}.{c}" in stored for c in kind.row_columns())
    assert all(stored[f"{kind.name}.{c}"][0] == np.dtype("<f4") for c in kind.pixel)
    assert set(stored) <= set(column_schema())
    empty = kind.empty_columns()
    assert all(k.startswith(f"{kind.name}.") for k in [*stored, *empty])
    if kind.row_key is not None:
        assert f"{kind.name}.{kind.row_key}" in kind.sample_keys()
        assert set(kind.own_keys()) <= set(kind.sample_keys())


def _compares_kind_name(node: ast.AST) -> set[str]:
    def strings(n: ast.AST) -> set[str]:
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            return {n.value}
        if isinstance(n, (ast.Tuple, ast.List, ast.Set)):
            return set().union(*(strings(e) for e in n.elts)) if n.elts else set()
        return set()

    if not isinstance(node, ast.Compare):
        return set()
    return set().union(*(strings(x) for x in [node.left, *node.comparators])) & NAMES


def test_only_the_kinds_compare_against_kind_names() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("kinds/") or rel in ALLOWED:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if names := _compares_kind_name(node):
                found.append(f"{rel}:{node.lineno} compares against {sorted(names)}")
    assert not found, "\n".join(found)


def test_the_ast_check_sees_a_kind_branch() -> None:
    tree = ast.parse('if group == "polygons" or name in ("masks", "x"): pass')
    assert set().union(*map(_compares_kind_name, ast.walk(tree))) == {"polygons", "masks"}


def test_empty_table_has_every_kind() -> None:
    table = empty_table()
    table.validate()
    for kind in KINDS:
        assert table.count(kind.name) == 0
        assert set(kind.empty_columns()) <= set(table.columns)
    assert isinstance(table.select([]), AnnotationTable)


@pytest.fixture(scope="module")
def boxes_only(tmp_path_factory: pytest.TempPathFactory) -> ShardDataset:
    tmp = tmp_path_factory.mktemp("kinds")
    root = tmp / "proj"
    path = make_export(root, n=5)
    tasks = json.loads(path.read_text())
    for task in tasks:
        for ann in task["annotations"]:
            ann["result"] = [r for r in ann["result"] if r.get("type") == "rectanglelabels"]
    path.write_text(json.dumps(tasks), encoding="utf-8")
    opts = WriteOptions(images=ImageOptions(images_root=root), shard_size=2)
    write_dataset(path, tmp / "out", opts)
    return ShardDataset(tmp / "out")


def test_a_boxes_only_dataset_has_only_box_keys(boxes_only: ShardDataset) -> None:
    ds = boxes_only
    assert [k.name for k in ds.kinds] == ["boxes"]
    box_keys = set(BY_NAME["boxes"].sample_keys())
    assert set(ds[0]) == {"image", "index", "task_id", "original_size", "caption"} | box_keys
    per_sample = collate_samples([ds[i] for i in range(len(ds))])
    batched = collate_samples(ds.__getitems__(list(range(len(ds)))))
    want = SAMPLE_KEYS | box_keys | {"boxes.valid"}
    assert set(per_sample) == set(batched) == want
    assert batched["boxes.xyxy"].shape[:2] == batched["boxes.valid"].shape
    assert bool(batched["boxes.valid"].any())
    assert torch.equal(per_sample["boxes.xyxy"], batched["boxes.xyxy"])


def test_kinds_come_from_the_column_sizes(boxes_only: ShardDataset) -> None:
    manifest = dict(boxes_only.manifest)
    assert manifest["kinds"] == kinds_with_rows(manifest["shards"]) == ["boxes"]
    manifest["kinds"] = ["polygons", "boxes"]  # a manifest that lists them wins, in order
    assert [k.name for k in dataset_kinds(manifest)] == ["boxes", "polygons"]
    manifest.pop("kinds")
    assert [k.name for k in dataset_kinds(manifest)] == ["boxes"]
    manifest["kinds"] = ["boxes", "lines"]  # written by a newer npu-data with another kind
    with pytest.raises(UserError, match=r"\['lines'\] are unknown .* upgrade npu-data"):
        dataset_kinds(manifest)
    assert len(PADDED) < len(KINDS)  # some kinds are collated unpadded


def _worked_example() -> Kind:
    """The documented ``lines`` kind, run from the docs' own code block."""
    namespace: dict = {}
    exec(worked_example_code(), namespace)  # the repository's own docs
    return namespace["KIND"]


def test_the_documented_kind_works(monkeypatch: pytest.MonkeyPatch) -> None:
    from npu_data.loaders import collate as collate_module
    from npu_data.transforms import geometry

    lines = _worked_example()
    ctx = R.Context(lambda c, name: 7, lambda cs, names: [7] * len(names), clip=False)
    val = [{"points": [[10, 50], [50, 100]], "linelabels": ["a"]},
           {"points": [[1, 2]], "linelabels": ["a"]}]
    results = R.Batch(np.array([0, 1]), np.array([0, 1]), np.array([1, 2]), np.zeros(2, np.uint8),
                      np.zeros(2, np.int16), ["l0", "l1"], [{"type": "linelabels"}] * 2, val,
                      [None, None])
    rows = lines.extract(ctx, results, R)
    assert rows.fixed["points"].tolist() == [[[10, 50], [50, 100]]]
    assert rows.fixed["label"].tolist() == [7] and rows.sample.tolist() == [0]
    assert list(ctx.bad) == [1] and "a line has 2" in ctx.bad[1]
    assert lines.stored_columns()["lines.points"] == (np.dtype("<f4"), (2, 2))
    cols = lines.empty_columns()
    cols["lines.offsets"] = np.array([0, 1, 1], np.int64)
    cols["lines.points"] = np.array([[[10.0, 50.0], [50.0, 100.0]]])
    px = lines.to_pixels(cols, np.array([20.0, 10.0]), np.array([40.0, 30.0]))
    np.testing.assert_allclose(px["lines.points"], [[[4, 10], [20, 20]]])
    samples = [{"image": np.zeros((20, 40, 3), np.uint8), "lines.points": px["lines.points"],
                "lines.label": np.array([3], np.int32)},
               {"image": np.zeros((10, 30, 3), np.uint8),
                "lines.points": np.zeros((0, 2, 2), np.float32),
                "lines.label": np.zeros(0, np.int32)}]
    monkeypatch.setitem(collate_module.PADDED_BY_NAME, "lines", lines)
    batch = collate_samples(samples)
    assert batch["lines.points"].shape == (2, 1, 2, 2)
    assert batch["lines.valid"].tolist() == [[True], [False]]
    assert batch["lines.label"].tolist() == [[3], [-1]]
    crop = torch.tensor([[0, 0, 20, 40], [0, 0, 10, 30]])
    out = lines.resized_crop(batch, crop, (10, 20), 0.25, geometry)
    assert torch.allclose(out["lines.points"][0, 0], torch.tensor([[2.0, 5.0], [10.0, 10.0]]))
    flipped = lines.hflip(batch, torch.tensor([40, 30]), torch.tensor([True, False]), geometry)
    assert torch.allclose(flipped["lines.points"][0, 0], torch.tensor([[36.0, 10], [20, 20]]))


def test_a_boxes_only_webdataset_stream_carries_only_box_keys(
        boxes_only: ShardDataset, tmp_path: Path) -> None:
    from npu_data.cli import main
    from npu_data.formats.webdataset.stream import WebDatasetStream

    pattern = str(tmp_path / "part-%06d.tar")
    assert main(["export-wds", str(boxes_only.path), "--out", pattern]) == 0
    tars = sorted(str(p) for p in tmp_path.glob("part-*.tar"))
    got = list(WebDatasetStream(tars, rank=0, world_size=1))
    assert sorted(s["index"] for s in got) == list(range(len(boxes_only)))
    box_keys = set(BY_NAME["boxes"].sample_keys())
    for s in got:
        ref = boxes_only[s["index"]]
        assert set(s) == {"image", "index", "task_id", "original_size", "caption"} | box_keys == set(ref)
        for k, v in ref.items():
            if isinstance(v, np.ndarray):
                assert s[k].dtype == v.dtype and s[k].tobytes() == v.tobytes(), k
            else:
                assert s[k] == v, k
