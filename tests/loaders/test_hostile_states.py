"""Resume states as hostile input (issue 36, bug 5 and the weak "States" cases): a
hand-edited, corrupt, foreign or old state is loaded exactly or refused with one line naming
the key and the fix, and a refused state changes nothing."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from npu_data.errors import UserError
from npu_data.loaders import BucketBatchSampler, DataLoader, NpuDistributedSampler

BUCKETS = [(64, 64), (48, 80), (80, 48)]
N = 60


class Sized(torch.utils.data.Dataset):
    """Samples that are their own index; stored sizes in three buckets; a manifest of shards
    of 8 samples whose file digest is ``tag`` (another tag: another dataset, same length)."""

    def __init__(self, seed: int = 0, tag: str = "a") -> None:
        kinds = np.random.default_rng(seed).integers(0, 3, N)
        self._sizes = np.asarray(BUCKETS, np.int64)[kinds]
        self.manifest = {"shards": [{"name": f"shard-{k:05d}", "samples": min(8, N - a),
                                     "files": {"data.bin": {"sha256": f"{tag}{k}"}}}
                                    for k, a in enumerate(range(0, N, 8))]}

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> int:
        return int(i)

    def sizes(self) -> np.ndarray:
        return self._sizes


DS = Sized()


def _bucket(world: int = 2, rank: int = 0, ds: Sized = DS) -> BucketBatchSampler:
    return BucketBatchSampler(ds, 4, BUCKETS, num_replicas=world, rank=rank, seed=3)


def _dist(world: int = 2, rank: int = 0, window: int | None = None,
          ds: Sized = DS) -> NpuDistributedSampler:
    return NpuDistributedSampler(ds, world, rank, seed=3, shard_window=window)


def _saved(sampler: Any, batches: int = 2) -> dict[str, Any]:
    it = iter(sampler)
    for _ in range(batches):
        next(it)
    return json.loads(json.dumps(sampler.state_dict()))


def _edit(state: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(state)
    for key, value in changes.items():
        if value is _DROP:
            del out[key]
        else:
            out[key] = value
    return out


_DROP = object()
Factory = Callable[[], Any]
SAMPLERS: dict[str, Factory] = {"buckets": _bucket, "distributed": _dist,
                                "window": lambda: _dist(window=2)}
# (edit, what the one line must say); consumed counts batches for buckets, samples otherwise
HOSTILE: dict[str, tuple[dict[str, Any], str]] = {
    "consumed<0": ({"consumed": -4}, r"consumed=-4 is out of range \(must be at least 0\)"),
    "start>consumed": ({"start": 8, "consumed": 2},
                       r"consumed=2 is out of range \(must be at least 8\)"),
    "version 99": ({"version": 99}, r"version=99 is not one this npu-data reads \(1, 2\)"),
    "float consumed": ({"consumed": 4.0}, r"consumed=4.0 is not an integer"),
    "bool world": ({"world_size": True}, r"world_size=True is not an integer"),
    "missing consumed": ({"consumed": _DROP}, r"consumed is missing"),
    "missing seed": ({"seed": _DROP}, r"seed is missing"),
    "seed 2**64": ({"seed": 2**64}, r"seed=18446744073709551616 is out of range"),
    "epoch<0": ({"epoch": -1}, r"epoch=-1 is out of range"),
    "epoch 2**63": ({"epoch": 2**63}, r"epoch=9223372036854775808 is out of range \(must be "
                                      r"between 0 and 9223372036854775807\)"),
    "world 0": ({"world_size": 0}, r"world_size=0 is out of range \(must be at least 1\)"),
    "past the end": ({"consumed": 10**30}, r"consumed=10{30} is past the end of the epoch"),
    "not whole rounds": ({"consumed": 3}, r"consumed=3 is not start=0 plus whole rounds of "
                                          r"world_size=2"),
    "no fingerprint": ({"fingerprint": _DROP}, r"fingerprint is missing"),
    "not a dict": ({}, r"the state is a list, not a dict"),
}


@pytest.mark.parametrize("name", list(SAMPLERS))
@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_sampler_state_is_refused_in_one_line_and_changes_nothing(
        name: str, case: str) -> None:
    make = SAMPLERS[name]
    edit, says = HOSTILE[case]
    state: Any = _edit(_saved(make()), **edit)
    if case == "not a dict":
        state = list(state.items())
    if name == "window" and case == "start>consumed":
        says = r"start=8 is not where the last layout begins \(0\)"
    target = make()
    before = list(target)
    with pytest.raises(UserError, match=says) as info:
        target.load_state_dict(state)
    line = str(info.value)
    assert "\n" not in line and "— pass the state_dict() this sampler saved" in line or \
        "resume with the dataset" in line
    assert list(target) == before  # nothing was loaded: the epoch as before


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_a_state_of_another_dataset_of_the_same_length_is_refused(name: str) -> None:
    """Only the length, batch size and buckets were compared: a different dataset of 60
    samples loaded and never served some of its samples."""
    state = _saved(SAMPLERS[name]())
    other = Sized(seed=0, tag="b")  # same sizes and length, other shard files
    for ds in (other, Sized(seed=1)):
        target = _bucket(ds=ds) if name == "buckets" else _dist(
            window=2 if name == "window" else None, ds=ds)
        if name != "buckets" and ds is not other:
            continue  # an order of indices depends on the manifest, not on image sizes
        with pytest.raises(UserError, match="saved for another dataset .* resume with the "
                                            "dataset the state was saved with"):
            target.load_state_dict(state)


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_a_checked_state_resumes_exactly(name: str) -> None:
    make = SAMPLERS[name]
    ref = make()
    whole = list(ref)
    state = _saved(make())
    assert state["version"] == 2 and isinstance(state["fingerprint"], str)
    again = make()
    again.load_state_dict(state)
    assert list(again) == whole[2:]


def test_shard_window_layouts_are_checked() -> None:
    state = _saved(_dist(window=2))
    cases = {
        "zero world": ([[0, 0]], r"layouts\[0\]=\[0, 0\] is out of range"),
        "first not at 0": ([[4, 2]], r"layouts\[0\]=\[4, 2\] is out of range"),
        "going back": ([[0, 3], [30, 1], [12, 2]], r"layouts\[2\]=\[12, 2\] is out of range"),
        "not pairs": ([[0, 2, 1]], r"layouts\[0\]=\[0, 2, 1\] is not a \[begin, world_size\]"),
        "floats": ([[0.0, 2]], r"layouts\[0\]=\[0.0, 2\] is not a \[begin, world_size\]"),
        "empty": ([], r"layouts is not a non-empty list"),
        "past the end": ([[0, 3], [200, 2]], r"layouts\[1\] begins 200 samples after "
                                             r"layouts\[0\], past its end \(60 samples\)"),
        "other world": ([[0, 3]], r"layouts ends with world_size 3, not the state's "
                                  r"world_size=2"),
        "20,000 entries": ([[0, 2]] * 20_000, r"layouts has 20000 entries \(at most 256"),
    }
    for name, (layouts, says) in cases.items():
        edited = _edit(state, layouts=layouts)
        if name == "past the end":
            edited.update(start=200, consumed=200)
        with pytest.raises(UserError, match=says):
            _dist(window=2).load_state_dict(edited)


def test_repeated_layouts_replay_once() -> None:
    """A layout followed by one that begins where it does served nothing: replaying the
    chain skips it (a chain is replayed once per layout that served samples)."""
    state = _saved(_dist(window=2))
    plain = _dist(window=2)
    plain.load_state_dict(state)
    padded = _dist(window=2)
    padded.load_state_dict(_edit(state, layouts=[[0, 2]] * 200))
    assert padded.state_dict()["layouts"] == [[0, 2]]
    assert list(padded) == list(plain)


def _v1(state: dict[str, Any]) -> dict[str, Any]:
    return _edit(state, version=1, fingerprint=_DROP)


def test_version_1_states_load_exactly_or_are_refused() -> None:
    """Version 1 (no fingerprint): a distributed sampler's loads exactly (its order depends
    on the length alone); a bucket sampler's loads at an epoch's start and is refused
    mid-epoch (its batches depend on every image's size, which it did not record)."""
    for window in (None, 2):
        whole = list(_dist(window=window))
        old = _dist(window=window)
        old.load_state_dict(_v1(_saved(_dist(window=window))))
        assert list(old) == whole[2:]
    with pytest.raises(UserError, match=r"version 1, saved mid-epoch \(consumed=4\), records no "
                                        r"fingerprint .* resume from the start of epoch 0 "
                                        r"\(set_epoch\(0\)\)"):
        _bucket().load_state_dict(_v1(_saved(_bucket())))
    fresh = _bucket()
    fresh.load_state_dict(_v1(_bucket().state_dict()))
    assert list(fresh) == list(_bucket())


def test_an_exhausted_layout_is_read_as_the_end_of_the_epoch() -> None:
    """An elastic resume after every sample was served (consumed past the dataset's end by
    the old world's padding) leaves a state whose start is the end: nothing left."""
    s = _dist(world=7)
    list(s)  # 63 of 60 served (3 padded)
    state = s.state_dict()
    assert state["consumed"] == 63
    two = _dist(world=2)
    two.load_state_dict(state)
    assert two.state_dict()["start"] == 60 and list(two) == []
    again = _dist(world=2)
    again.load_state_dict(json.loads(json.dumps(two.state_dict())))
    assert list(again) == []


# --- the DataLoader's state ----------------------------------------------------------------
def _loader(kind: str) -> DataLoader:
    if kind == "buckets":
        return DataLoader(DS, batch_sampler=_bucket(), device="cpu")
    return DataLoader(DS, batch_size=4, sampler=_dist(window=2 if kind == "window" else None),
                      device="cpu")


def _loader_state(kind: str) -> dict[str, Any]:
    loader = _loader(kind)
    it = iter(loader)
    next(it)
    next(it)
    return json.loads(json.dumps(loader.state_dict()))


LOADER_HOSTILE: dict[str, tuple[Callable[[dict[str, Any]], Any], str]] = {
    "batches<0": (lambda s: s.update(batches=-1), r"DataLoader state: batches=-1 is out of "
                                                  r"range .* — pass the state_dict\(\) this "
                                                  r"loader saved"),
    "version 99": (lambda s: s.update(version=99), r"DataLoader state: version=99"),
    "epoch a string": (lambda s: s.update(epoch="1"), r"DataLoader state: epoch='1' is not an "
                                                      r"integer"),
    "sampler a list": (lambda s: s.update(sampler=[1]), r"sampler is a list, not a dict"),
    "sampler consumed<0": (lambda s: s["sampler"].update(consumed=-1),
                           r"consumed=-1 is out of range"),
    "sampler start>consumed": (
        lambda s: s["sampler"].update(start=s["sampler"]["consumed"] + 2),
        r"(consumed=\d+ is out of range \(must be at least \d+\)|"
        r"start=\d+ is not where the last layout begins)"),
    "sampler of another epoch": (lambda s: s["sampler"].update(epoch=5),
                                 r"sampler is of epoch 5, the loader's of epoch 0"),
    "batches past the sampler's": (lambda s: s.update(batches=10**6),
                                   r"batches=1000000 is more than the sampler state's consumed="),
    "epoch 2**63": (lambda s: s.update(epoch=2**63), r"epoch=9223372036854775808 is out of "
                                                     r"range"),
    "no sampler mid-epoch": (lambda s: s.pop("sampler"),
                             r"has no sampler state, 2 batches into epoch 0 — resume from the "
                             r"start of that epoch \(set_epoch\(0\)\)"),
}


@pytest.mark.parametrize("kind", list(SAMPLERS))
@pytest.mark.parametrize("case", list(LOADER_HOSTILE))
def test_a_hostile_loader_state_is_refused_and_changes_nothing(kind: str, case: str) -> None:
    edit, says = LOADER_HOSTILE[case]
    state = _loader_state(kind)
    edit(state)
    target = _loader(kind)
    with pytest.raises(UserError, match=says):
        target.load_state_dict(state)
    assert [b.tolist() for b in target] == [b.tolist() for b in _loader(kind)]


def test_a_hostile_replay_snapshot_is_refused() -> None:
    """Any other sampler is resumed from a snapshot: its keys are checked too."""
    def make() -> DataLoader:
        g = torch.Generator().manual_seed(4)
        return DataLoader(DS, batch_size=4, sampler=torch.utils.data.RandomSampler(DS,
                                                                                  generator=g),
                          device="cpu")

    state = _loader_state_of(make())
    assert state["replay"]["type"] == "RandomSampler"
    edits = {"generator": ("not base64!", r"replay: generator is not a base64 generator state"),
             "epoch": (-2, r"replay: epoch=-2 is out of range"),
             "type": (3, r"replay: type=3 is not a class name")}
    for key, (value, says) in edits.items():
        bad = copy.deepcopy(state)
        bad["replay"][key] = value
        with pytest.raises(UserError, match=says):
            make().load_state_dict(bad)
    nested: dict[str, Any] = {"type": "RandomSampler"}
    for _ in range(10_000):
        nested = {"type": "DistributedSampler", "inner": nested}
    with pytest.raises(UserError, match=r"inner nests samplers deeper than a state_dict"):
        make().load_state_dict({**state, "replay": nested})
    with pytest.raises(UserError, match=r"batches=99 is past the end of the epoch \(15 "):
        make().load_state_dict({**state, "batches": 99})


def _loader_state_of(loader: DataLoader) -> dict[str, Any]:
    it = iter(loader)
    next(it)
    return json.loads(json.dumps(loader.state_dict()))


def test_a_state_of_another_kind_of_sampler_is_refused() -> None:
    with pytest.raises(UserError, match="saved with a BucketBatchSampler, this loader's order "
                                        "is a NpuDistributedSampler — construct the loader as"):
        _loader("distributed").load_state_dict(_loader_state("buckets"))
    with pytest.raises(UserError, match="saved with a NpuDistributedSampler, this loader's "
                                        "order is a BucketBatchSampler"):
        _loader("buckets").load_state_dict(_loader_state("window"))


def test_an_earlier_loader_state_loads_exactly_or_is_refused() -> None:
    """Version 2 replayed a bucket sampler's snapshot (refused mid-epoch, loaded at an
    epoch's start); version 1 had no version key and an NpuDistributedSampler state."""
    bucket_v2 = {"version": 2, "epoch": 0, "batches": 2, "repeat": 0, "seed": 0,
                 "batch_size": None,
                 "replay": {"type": "BucketBatchSampler", "state": _v1(_bucket().state_dict())}}
    with pytest.raises(UserError, match=r"saved by an earlier npu-data that replayed this "
                                        r"sampler's snapshot, 2 batches into epoch 0"):
        _loader("buckets").load_state_dict(bucket_v2)
    start = _loader("buckets")
    start.load_state_dict({**bucket_v2, "batches": 0, "epoch": 1})
    later = _loader("buckets")
    later.set_epoch(1)
    assert [b.tolist() for b in start] == [b.tolist() for b in later]

    ref = _loader("distributed")
    whole = [b.tolist() for b in ref]
    state = _loader_state("distributed")
    v1 = {"epoch": state["epoch"], "batches": state["batches"], "seed": state["seed"],
          "sampler": _v1(state["sampler"])}
    resumed = _loader("distributed")
    resumed.load_state_dict(v1)
    assert [b.tolist() for b in resumed] == whole[2:]


def test_an_epoch_out_of_range_is_one_line_and_the_last_saves_a_state_that_loads() -> None:
    """set_epoch takes 0..2**63 - 2 on a loader (the state saved at an epoch's end names the
    next one, which a state may hold) and 0..2**63 - 1 on a sampler; a state whose next
    epoch is past the last a loader serves is one line when served, never a traceback."""
    for make in (_bucket, _dist, lambda: DataLoader(DS, batch_size=4, device="cpu", seed=1)):
        for bad in (2**64, -1, True, 1.0):
            with pytest.raises(UserError, match="epoch=") as err:
                make().set_epoch(bad)  # type: ignore[arg-type]
            assert "\n" not in str(err.value)
    last = (1 << 63) - 2
    loader = DataLoader(DS, batch_size=4, device="cpu", seed=1)
    loader.set_epoch(last)
    assert len(list(loader)) == len(loader)
    state = json.loads(json.dumps(loader.state_dict()))
    assert state["epoch"] == last + 1
    again = DataLoader(DS, batch_size=4, device="cpu", seed=1)
    again.load_state_dict(state)  # what it saved, it loads
    with pytest.raises(UserError, match=rf"epoch={last + 1} is out of range .* to {last}"):
        next(iter(again))
