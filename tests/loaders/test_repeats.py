"""kohya's ``num_repeats``: a sample of an ``N_name`` folder is served N times an epoch by
NpuDistributedSampler and BucketBatchSampler, each repeat with its own keyed augmentation,
and resume stays exact (shards.repeats)."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from npu_data.common.ragged import encode_texts
from npu_data.errors import DataCorruption, UserError
from npu_data.formats.sources import SourceOptions, convert
from npu_data.loaders import DataLoader
from npu_data.loaders.bucket_sampler import BucketBatchSampler
from npu_data.loaders.sampler import NpuDistributedSampler
from npu_data.shards.importer import import_dataset
from npu_data.shards.reader import ShardDataset
from npu_data.shards.repeats import read_counts, tasks_with_key
from npu_data.transforms import Compose, RandomHorizontalFlip, RandomResizedCrop, draws

# folder -> (images, (height, width)): 3 repeats of 3 images, 1 of 2 images of another shape
SUBSETS = {"3_cat": (3, (20, 24)), "1_dog": (2, (24, 18))}


def _folder(root: Path, subsets: dict[str, tuple[int, tuple[int, int]]]) -> Path:
    for folder, (count, (h, w)) in subsets.items():
        d = root / folder
        d.mkdir(parents=True)
        for j in range(count):
            pixels = (np.arange(h * w * 3).reshape(h, w, 3) * (j + 3)) % 251
            Image.fromarray(pixels.astype(np.uint8)).save(d / f"img{j}.png")
            (d / f"img{j}.txt").write_text(f"{folder} photo {j}\n")
    return root


def _import(tmp: Path, fmt: str, src: Path, **options: Any) -> ShardDataset:
    stage = tmp / f"stage-{src.name}"
    stage.mkdir()
    conv = convert(fmt, [str(src)], stage, SourceOptions())
    out = tmp / f"ds-{src.name}"
    import_dataset(conv.export, out, images_root=str(conv.images_root), **options)
    return ShardDataset(out)


@pytest.fixture(scope="module")
def kohya(tmp_path_factory: pytest.TempPathFactory) -> ShardDataset:
    tmp = tmp_path_factory.mktemp("kohya")
    return _import(tmp, "kohya", _folder(tmp / "train", SUBSETS), shard_size=3)


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> ShardDataset:
    """The same images as a torchvision ImageFolder: no task holds ``repeats``."""
    tmp = tmp_path_factory.mktemp("plain")
    return _import(tmp, "imagefolder", _folder(tmp / "classes", SUBSETS), shard_size=3)


def _expected(ds: ShardDataset) -> list[int]:
    """Each sample's repeat count from its caption's folder (what the kohya folder says)."""
    return [int(ds[i]["caption"].split("_", 1)[0]) for i in range(len(ds))]


def _served(indices: list[int], n: int) -> list[int]:
    """How many times each sample was served by ``indices`` (virtual ids)."""
    counts = Counter(int(v) % n for v in indices)
    return [counts[i] for i in range(n)]


def test_the_dataset_keeps_each_samples_repeat_count(kohya: ShardDataset) -> None:
    assert kohya.repeats is not None and kohya.repeats.dtype == np.int64
    assert kohya.repeats.tolist() == _expected(kohya) and sorted(set(_expected(kohya))) == [1, 3]
    assert kohya.manifest["counts"]["repeats"] == len(kohya)
    n = len(kohya)
    rep = int(np.flatnonzero(kohya.repeats == 3)[0])
    once = int(np.flatnonzero(kohya.repeats == 1)[0])
    assert kohya[rep + 2 * n]["index"] == rep  # a repeat reads its sample
    assert np.array_equal(kohya[rep + n]["image"], kohya[rep]["image"])
    cols = kohya.__getitems__([rep + n, once]).columns()
    assert cols.ints["index"].tolist() == [rep, once]
    for bad in (once + n, rep + 3 * n):  # a repeat the sample does not have
        with pytest.raises(IndexError, match="nor a repeat"):
            kohya[bad]
        with pytest.raises(IndexError, match="nor a repeat"):
            kohya.__getitems__([bad]).columns()


def test_a_remote_dataset_reads_its_repeats_without_the_images(kohya: ShardDataset,
                                                                tmp_path: Path) -> None:
    remote = ShardDataset(f"file://{kohya.path}", cache_dir=tmp_path / "cache")
    assert remote.repeats is not None and remote.repeats.tolist() == _expected(kohya)
    assert not list((tmp_path / "cache").rglob("data.bin"))  # no shard downloaded whole
    assert list(NpuDistributedSampler(remote, num_replicas=1, rank=0)) == \
        list(NpuDistributedSampler(kohya, num_replicas=1, rank=0))


@pytest.mark.parametrize("world", [1, 2])
@pytest.mark.parametrize("kw", [{}, {"shuffle": False}, {"shard_window": 1}])
def test_distributed_sampler_serves_each_sample_its_repeats(kohya: ShardDataset, world: int,
                                                           kw: dict[str, Any]) -> None:
    n, total = len(kohya), int(kohya.repeats.sum())  # type: ignore[union-attr]
    served: list[int] = []
    for rank in range(world):
        s = NpuDistributedSampler(kohya, num_replicas=world, rank=rank, seed=3, **kw)
        s.set_epoch(1)
        mine = list(s)
        assert len(mine) == len(s) == -(-total // world)
        served += mine
    assert len(served) == total + (-total % world)  # padded as torch pads
    assert _served(served[:total] if world == 1 else sorted(set(served)), n) == _expected(kohya)
    assert len(set(served)) == total  # every repeat is its own virtual id


@pytest.mark.parametrize("world", [1, 2])
def test_bucket_sampler_serves_each_sample_its_repeats(kohya: ShardDataset, world: int) -> None:
    served: list[int] = []
    for rank in range(world):
        s = BucketBatchSampler(kohya, 2, [(20, 24), (24, 18)], num_replicas=world, rank=rank,
                               seed=5)
        batches = list(s)
        assert len(batches) == len(s)
        for b in batches:  # one bucket per batch
            assert len({tuple(kohya.sizes()[v % len(kohya)]) for v in b}) == 1
        served += [v for b in batches for v in b]
    assert _served(sorted(set(served)), len(kohya)) == _expected(kohya)
    assert len(set(served)) == int(kohya.repeats.sum())  # type: ignore[union-attr]


def _augment() -> Compose:
    return Compose([RandomResizedCrop(16), RandomHorizontalFlip()])


def _rows(loader: DataLoader, limit: int | None = None) -> list[tuple[int, dict[str, torch.Tensor]]]:
    """(index, that row's parameters) of every sample the loader served, in order."""
    out = []
    for k, batch in enumerate(loader, 1):
        for j, i in enumerate(batch["index"].tolist()):
            out.append((i, {p: v[j].clone() for p, v in batch["aug"].items()}))
        if k == limit:
            break
    return out


def test_each_repeat_gets_its_own_keyed_augmentation(kohya: ShardDataset) -> None:
    sampler = NpuDistributedSampler(kohya, num_replicas=1, rank=0, seed=11)
    loader = DataLoader(kohya, batch_size=4, sampler=sampler, transform=_augment(),
                        device="cpu", seed=7)
    epoch = loader.epoch
    rows = _rows(loader)
    sampler.set_epoch(epoch)
    order = list(sampler)  # the virtual ids the pass served, in order
    assert [i for i, _ in rows] == [v % len(kohya) for v in order]
    t = _augment()
    for v, (i, params) in zip(order, rows, strict=True):
        want = draws.sample_params(t, 7, epoch, [v], kohya.sizes()[[i]])
        for p, value in params.items():  # keyed by the virtual id: repeat 0 by the index
            assert torch.equal(value, torch.as_tensor(want[p])[0]), (v, p)
    for i in np.flatnonzero(kohya.repeats == 3).tolist():  # type: ignore[union-attr]
        boxes = [p["0.boxes"] for j, p in rows if j == i]  # RandomResizedCrop's box
        assert len(boxes) == 3
        assert len({tuple(b.reshape(-1).tolist()) for b in boxes}) == 3


def test_the_loaders_own_order_repeats_alike_in_workers(kohya: ShardDataset) -> None:
    def rows(**kw: Any) -> list[tuple[int, dict[str, torch.Tensor]]]:
        return _rows(DataLoader(kohya, batch_size=3, shuffle=True, transform=_augment(),
                                device="cpu", seed=7, **kw))

    here = rows()
    assert _served([i for i, _ in here], len(kohya)) == _expected(kohya)
    there = rows(num_workers=2)
    assert [i for i, _ in there] == [i for i, _ in here]
    for (_, p), (_, q) in zip(here, there, strict=True):
        assert all(torch.equal(p[k], q[k]) for k in p)


def test_without_repeats_nothing_changes(plain: ShardDataset) -> None:
    assert plain.repeats is None and "repeats" not in plain.manifest["counts"]
    n = len(plain)
    ours = NpuDistributedSampler(plain, num_replicas=2, rank=1, seed=3)
    torchs = torch.utils.data.DistributedSampler(plain, num_replicas=2, rank=1, seed=3)
    for e in (0, 1):
        ours.set_epoch(e)
        torchs.set_epoch(e)
        assert list(ours) == list(torchs)
    rows = _rows(DataLoader(plain, batch_size=4, shuffle=True, transform=_augment(),
                            device="cpu", seed=7))
    assert sorted(i for i, _ in rows) == list(range(n))
    t = _augment()
    for i, params in rows:  # keyed by the dataset index, as before repeats existed
        want = draws.sample_params(t, 7, 0, [i], plain.sizes()[[i]])
        assert all(torch.equal(v, torch.as_tensor(want[p])[0]) for p, v in params.items())
    buckets = BucketBatchSampler(plain, 2, [(20, 24), (24, 18)], seed=5)
    assert sorted(v for b in buckets for v in b) == list(range(n))


def test_torch_dataloader_reads_repeats_as_their_samples(kohya: ShardDataset) -> None:
    sampler = NpuDistributedSampler(kohya, num_replicas=1, rank=0, seed=2)
    loader = torch.utils.data.DataLoader(kohya, batch_size=3, sampler=sampler,
                                         collate_fn=lambda b: [s["index"] for s in b])
    served = [i for batch in loader for i in batch]
    assert served == [v % len(kohya) for v in sampler]
    assert _served(served, len(kohya)) == _expected(kohya)


def test_mid_epoch_resume_serves_exactly_the_rest(kohya: ShardDataset) -> None:
    def loader() -> DataLoader:
        return DataLoader(kohya, batch_size=2, transform=_augment(), device="cpu", seed=7,
                          sampler=NpuDistributedSampler(kohya, num_replicas=1, rank=0, seed=4))

    whole = _rows(loader())
    first = loader()
    head = _rows(first, limit=3)
    state = first.state_dict()
    again = loader()
    again.load_state_dict(state)
    rest = _rows(again)
    assert len(head) == 6 and len(head) + len(rest) == len(whole)
    for (i, p), (j, q) in zip(head + rest, whole, strict=True):
        assert i == j and all(torch.equal(p[k], q[k]) for k in p)


def test_bucket_and_elastic_resume_with_repeats(kohya: ShardDataset) -> None:
    total = int(kohya.repeats.sum())  # type: ignore[union-attr]
    b0 = BucketBatchSampler(kohya, 2, [(20, 24), (24, 18)], seed=5)
    batches = list(b0)
    b0 = BucketBatchSampler(kohya, 2, [(20, 24), (24, 18)], seed=5)
    it = iter(b0)
    head = [next(it), next(it)]
    b1 = BucketBatchSampler(kohya, 2, [(20, 24), (24, 18)], seed=5)
    b1.load_state_dict(b0.state_dict())
    assert head + list(b1) == batches
    # elastic: two ranks each consume 2 samples, one rank serves every virtual id left
    ranks = [NpuDistributedSampler(kohya, num_replicas=2, rank=r, seed=9) for r in (0, 1)]
    seen = []
    for s in ranks:
        it2 = iter(s)
        seen += [next(it2), next(it2)]
    one = NpuDistributedSampler(kohya, num_replicas=1, rank=0, seed=9)
    one.load_state_dict(ranks[0].state_dict())
    assert len(one) == total - len(seen)
    rest = list(one)
    assert len(set(seen + rest)) == len(seen) + len(rest) == total
    assert _served(seen + rest, len(kohya)) == _expected(kohya)


class _NoRepeats:
    """The kohya dataset with its repeats hidden (the same manifest)."""

    def __init__(self, ds: ShardDataset) -> None:
        self.ds, self.manifest, self.repeats = ds, ds.manifest, None

    def __len__(self) -> int:
        return len(self.ds)


def test_a_state_without_repeats_is_refused_with_them_and_the_reverse(
        kohya: ShardDataset) -> None:
    hidden = _NoRepeats(kohya)
    with_reps = NpuDistributedSampler(kohya, num_replicas=1, rank=0)
    without = NpuDistributedSampler(hidden, num_replicas=1, rank=0)
    for src, dst in ((with_reps, without), (without, with_reps)):
        with pytest.raises(UserError, match="fingerprint"):
            dst.load_state_dict(src.state_dict())
    old = with_reps.state_dict()
    old.update(version=1)
    del old["fingerprint"]
    with pytest.raises(UserError, match="repeats"):
        NpuDistributedSampler(kohya, num_replicas=1, rank=0).load_state_dict(old)


def test_kohya_ignores_a_folder_of_0_repeats_and_refuses_too_many(tmp_path: Path) -> None:
    src = _folder(tmp_path / "zero", {"0_none": (1, (8, 8)), "2_two": (1, (8, 8))})
    stage = tmp_path / "stage"
    stage.mkdir()
    conv = convert("kohya", [str(src)], stage, SourceOptions())
    assert any("0_none" in note and "ignored" in note for note in conv.notes)
    ds = _import(tmp_path, "kohya", src)
    assert len(ds) == 1 and ds.repeats is not None and ds.repeats.tolist() == [2]
    only = _folder(tmp_path / "only", {"0_none": (1, (8, 8))})
    with pytest.raises(UserError, match=r"folders of 0 repeats are skipped, as kohya does "
                                        r"\(0_none: rename it 1_<name>\)"):
        convert("kohya", [str(only)], stage, SourceOptions())
    many = _folder(tmp_path / "many", {"10001_x": (1, (8, 8))})
    with pytest.raises(UserError, match="10001 repeats an epoch, npu-data serves at most 10000"):
        convert("kohya", [str(many)], stage, SourceOptions())


@pytest.mark.parametrize("value", ["null", "true", '"3"', "2.0", "-1", "10001"])
def test_each_wrong_repeat_value_is_one_line(value: str) -> None:
    blob, offsets = encode_texts(['{"image": "a.png"}', '{"image": "b.png", "repeats": '
                                  + value + "}"])
    assert tasks_with_key(blob.tobytes(), offsets) == 1
    with pytest.raises(UserError, match=r"^shard-x: sample 1 \(dataset index 8\): task data "
                                        r"'repeats' is .* — fix"):
        read_counts(blob.tobytes(), offsets, "shard-x", 7)
    good, offsets = encode_texts(['{"image": "a.png", "caption": "\\"repeats\\""}',
                                  '{"repeats": 4}'])
    assert read_counts(good.tobytes(), offsets, "shard-x", 0).tolist() == [1, 4]


def test_task_data_that_is_not_json_is_a_damaged_shard(kohya: ShardDataset,
                                                       tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(kohya.path, copy)
    column = copy / kohya.manifest["shards"][0]["name"] / "ann.data_json.bytes.npy"
    raw = column.read_bytes()
    column.write_bytes(raw.replace(b'"repeats"', b'"repeats"#', 1)[:len(raw)])
    with pytest.raises(DataCorruption, match=r"sample 0: its task data \(data_json\) is not "
                                             "JSON"):
        ShardDataset(copy).repeats  # noqa: B018
