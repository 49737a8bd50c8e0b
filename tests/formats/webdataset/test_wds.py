"""WebDataset export/import round trip and the streaming loader (local files and HTTP)."""

from __future__ import annotations

import functools
import http.server
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from npu_data.annotations import ImageOptions
from npu_data.cli import main
from npu_data.formats.webdataset import read_wds_samples, wds_to_table
from npu_data.formats.webdataset.stream import WebDatasetStream, assignment
from npu_data.loaders import collate_samples
from npu_data.shards.reader import ShardDataset
from npu_data.shards.writer import WriteOptions, write_dataset
from tests.support.compare import same_sample
from tests.support.local_http import serving
from tests.support.stores import import_sample


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    tmp = tmp_path_factory.mktemp("wds")
    ds = import_sample(tmp, "encoded")
    pattern = str(tmp / "tars" / "part-%06d.tar")
    assert main(["export-wds", str(ds), "--out", pattern, "--maxcount", "4"]) == 0
    tars = sorted(str(p) for p in (tmp / "tars").glob("part-*.tar"))
    assert len(tars) == 3
    return ds, tars


@pytest.mark.parametrize("store", ["raw", "encoded"])
def test_round_trip_is_lossless(tmp_path: Path, store: str,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NPU_DATA_QUIET", "1")
    src = import_sample(tmp_path, store)
    assert main(["export-wds", str(src), "--out", str(tmp_path / "w-%03d.tar")]) == 0
    tars = sorted(str(p) for p in tmp_path.glob("w-*.tar"))
    table = wds_to_table(tars, tmp_path / "media")
    back = tmp_path / "back"
    write_dataset(table, back, WriteOptions(store=store, images=ImageOptions(
        images_root=tmp_path / "media")))  # wds_to_table's refs: absolute, in the media folder
    a, b = ShardDataset(src), ShardDataset(back)
    assert len(a) == len(b) == 9
    assert a.labels == b.labels and a.controls == b.controls
    for i in range(len(a)):
        same_sample(a[i], b[i])
    if store == "encoded":  # the stored file bytes travel unchanged
        for smp, i in zip(read_wds_samples(tars), range(len(a)), strict=True):
            k, j = b.locate(i)
            rec = b.shard(k).index[j]
            stored = b.shard(k).data[int(rec["offset"]):int(rec["offset"]) + int(rec["length"])]
            assert stored.tobytes() == smp.image


def test_tars_are_plain_webdataset(exported: tuple[Path, list[str]]) -> None:
    import webdataset as wds

    ds_dir, tars = exported
    keys = [s["__key__"] for s in wds.WebDataset(tars, shardshuffle=False)]
    assert len(keys) == len(ShardDataset(ds_dir))
    with tarfile.open(tars[0]) as t:
        names = t.getnames()
    assert names[0].endswith(".jpg") and names[1].endswith(".json")


def test_stream_matches_shard_dataset(exported: tuple[Path, list[str]]) -> None:
    ds_dir, tars = exported
    ref = ShardDataset(ds_dir)
    got = list(WebDatasetStream(tars, rank=0, world_size=1))
    assert [s["index"] for s in got] == list(range(len(ref)))
    for s in got:
        same_sample(ref[s["index"]], s)


def test_stream_gets_the_same_keyed_augmentation_as_the_shards(
        exported: tuple[Path, list[str]]) -> None:
    from npu_data.loaders import DataLoader
    from npu_data.transforms import ColorJitter, Compose, RandomHorizontalFlip, RandomResizedCrop

    ds_dir, tars = exported

    def per_sample(dataset: object, batch_size: int) -> dict[int, torch.Tensor]:
        augment = Compose([RandomResizedCrop(32), ColorJitter(0.4, 0.4, 0.4, 0.1),
                           RandomHorizontalFlip()])
        out = {}
        for batch in DataLoader(dataset, batch_size=batch_size, device="cpu",
                                transform=augment, seed=3):
            assert "aug" in batch
            for j, i in enumerate(batch["index"].tolist()):
                out[i] = batch["image"][j].clone()
        return out

    ref = per_sample(ShardDataset(ds_dir), 4)
    got = per_sample(WebDatasetStream(tars, rank=0, world_size=1), 3)
    assert ref.keys() == got.keys() and ref
    for i in ref:
        assert torch.equal(ref[i], got[i]), i


@pytest.fixture()
def http_root(exported: tuple[Path, list[str]]) -> Iterator[str]:
    root = Path(exported[1][0]).parent
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a, **k: None  # type: ignore[attr-defined]
    with serving(handler) as port:
        yield f"http://127.0.0.1:{port}"


def test_http_two_workers_every_sample_once(exported: tuple[Path, list[str]],
                                            http_root: str) -> None:
    ds_dir, tars = exported
    urls = [f"{http_root}/{Path(t).name}" for t in tars]
    stream = WebDatasetStream(urls, shuffle=True, buffer=3, rank=0, world_size=1,
                              allow_download="127.0.0.1")
    loader = torch.utils.data.DataLoader(stream, batch_size=2, num_workers=2,
                                         collate_fn=collate_samples)
    for epoch in range(2):
        stream.set_epoch(epoch)
        seen = [int(i) for b in loader for i in b["index"]]
        assert sorted(seen) == list(range(len(ShardDataset(ds_dir))))


@pytest.mark.parametrize("world,workers", [(2, 2), (4, 1), (3, 2), (1, 1)])
def test_ranks_split_without_idle_consumers(exported: tuple[Path, list[str]], world: int,
                                            workers: int) -> None:
    ds_dir, tars = exported  # 3 tars of 4, 4, 1 samples
    n = len(ShardDataset(ds_dir))
    seen: list[int] = []
    for rank in range(world):
        stream = WebDatasetStream(tars, rank=rank, world_size=world)
        loader = torch.utils.data.DataLoader(stream, batch_size=None, num_workers=workers,
                                             collate_fn=lambda s: s)
        got = [int(s["index"]) for s in loader]
        assert got, f"rank {rank} of {world} got no samples"
        seen += got
    assert sorted(seen) == list(range(n))


def test_assignment_covers_every_consumer() -> None:
    for shards in (1, 2, 5, 8):
        for consumers in (1, 3, 8, 12):
            plans = [assignment(shards, c, consumers) for c in range(consumers)]
            assert all(plans)
            for k in range(shards):
                parts = [(o, s) for p in plans for (kk, o, s) in p if kk == k]
                strides = {s for _, s in parts}
                assert len(strides) == 1 and sorted(o for o, _ in parts) == list(
                    range(strides.pop()))


def test_errors_name_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.tar"
    bad.write_bytes(b"not a tar at all" * 10)
    with pytest.raises(Exception, match="bad.tar"):
        list(read_wds_samples([str(bad)]))
    assert main(["export-wds", str(tmp_path), "--out", str(tmp_path / "x.tar")]) == 1
    assert "shard number" in capsys.readouterr().err


def test_import_cli_reads_webdataset_tars(exported: tuple[Path, list[str]], tmp_path: Path) -> None:
    ds_path, tars = exported
    out = tmp_path / "from-tars"
    assert main(["import", *tars, "--out", str(out), "--store", "encoded", "--shard-size", "4"]) == 0
    a, b = ShardDataset(ds_path), ShardDataset(out)
    assert len(a) == len(b)
    for i in range(len(a)):
        same_sample(a[i], b[i])


def test_import_cli_refuses_mixed_sources(exported: tuple[Path, list[str]], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    _, tars = exported
    assert main(["import", tars[0], str(tmp_path / "export.json"), "--out",
                 str(tmp_path / "x")]) == 1
    err = capsys.readouterr().err
    assert "takes one source, got 2" in err and "all of one kind" in err


@pytest.mark.slow
def test_shuffle_is_the_same_in_every_process_and_follows_set_epoch_in_persistent_workers(
        exported: tuple[Path, list[str]]) -> None:
    import os
    import subprocess
    import sys

    _, tars = exported
    code = ("import sys; from npu_data.formats.webdataset import WebDatasetStream; "
            "s = WebDatasetStream(sys.argv[1:], shuffle=True, seed=3, buffer=5); s.set_epoch(2); "
            "print([x['task_id'] for x in s])")
    runs = {subprocess.run([sys.executable, "-c", code, *map(str, tars)], capture_output=True,
                           text=True, timeout=120, env={**os.environ, "PYTHONHASHSEED": seed}
                           ).stdout for seed in ("1", "2")}
    assert len(runs) == 1 and runs.pop().strip() != ""  # str hashes differ, the order does not

    stream = WebDatasetStream([str(t) for t in tars], shuffle=True, seed=3, buffer=5)
    loader = torch.utils.data.DataLoader(stream, batch_size=None, num_workers=1,
                                         persistent_workers=True)
    orders = []
    for epoch in range(3):
        stream.set_epoch(epoch)
        orders.append([int(s["task_id"]) for s in loader])
    assert len({tuple(o) for o in orders}) == 3  # the started worker saw every new epoch
    fresh = WebDatasetStream([str(t) for t in tars], shuffle=True, seed=3, buffer=5)
    fresh.set_epoch(2)
    assert orders[2] == [int(s["task_id"]) for s in fresh]


def test_npu_data_loader_streams_tars_and_passes_set_epoch_to_the_stream(
        exported: tuple[Path, list[str]]) -> None:
    from npu_data.loaders import DataLoader

    _, tars = exported
    stream = WebDatasetStream(tars, shuffle=True, seed=1, buffer=4, rank=0, world_size=1)
    loader = DataLoader(stream, batch_size=4, num_workers=2, persistent_workers=True,
                        device="cpu")
    seen = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        ids = [int(t) for batch in loader for t in batch["task_id"]]
        assert sorted(ids) == sorted(int(s["task_id"]) for s in ShardDataset(exported[0]))
        seen.append(ids)
    assert stream.epoch == 1 and seen[0] != seen[1]
