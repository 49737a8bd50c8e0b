"""Property-style fuzz of manifests and shard files (issue 30, class 6): seeded random
mutations of a real dataset — manifest values replaced, removed, duplicated, renamed to
hostile names; column, index and data files with flipped, cut or added bytes, with the
manifest left alone or rehashed to agree. Whatever the mutation, opening, reading every
sample and batch, `inspect`'s statistics and `verify` either work or stop with a one-line
``UserError``; never another exception, a hang, or a write outside the cache (a mutated
manifest is also read as a remote dataset through ``file://``).

Seeded, so a failure names a case that reproduces: ``CASE=<seed>:<i>``. A plain seeded loop
rather than hypothesis: the inputs are mutations of one valid dataset, and the seed already
names the failing case (no new dependency for it).
"""

from __future__ import annotations

import copy
import hashlib
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from npu_data.annotations.images import ImageOptions
from npu_data.errors import UserError
from npu_data.loaders import collate_samples
from npu_data.shards.reader import ShardDataset
from npu_data.shards.stats import dataset_stats
from npu_data.shards.verify import verify_dataset
from npu_data.shards.writer import WriteOptions, write_dataset
from tests.support.exports import make_export

HOSTILE: list[Any] = [None, -1, 0, 1, 3, 2**63, 1.5, True, "", ".", "..", "../x", "/etc/x",
                      "a\x00b", "x" * 300, [], {}, [0, 1], {"size": 1}, "shard-00001",
                      "index.npy", "0" * 64]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("fuzz")
    export = make_export(tmp / "proj", n=6)
    out = {}
    for store in ("raw", "encoded"):
        out[store] = tmp / store
        write_dataset(export, out[store], WriteOptions(
            store=store, shard_size=3, images=ImageOptions(images_root=tmp / "proj")))
    return out


class _Hang(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Hang()


def _exercise(path: str | Path, **kw: Any) -> None:
    """Open, read every sample and the whole batch, the statistics, verify (local)."""
    ds = ShardDataset(path, **kw)
    n = len(ds)
    for i in range(n):
        ds[i]
    if n:
        collate_samples(ds.__getitems__(list(range(n))[::-1]))
    dataset_stats(ds)
    if not isinstance(path, str):
        verify_dataset(path)


def _outcome(case: str, path: str | Path, **kw: Any) -> str:
    """"ok", or the one-line error; anything else fails the test naming ``case``."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(60)
    try:
        _exercise(path, **kw)
        return "ok"
    except UserError as exc:
        assert "\n" not in str(exc), (case, str(exc))
        return str(exc)
    except _Hang:
        raise AssertionError(f"{case}: hung") from None
    except Exception as exc:  # noqa: BLE001 - the failure this test exists to catch
        raise AssertionError(f"{case}: {type(exc).__name__}: {exc}") from exc
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _nodes(tree: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield at
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _nodes(v, (*at, k))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield from _nodes(v, (*at, i))


def _mutate(m: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    m = copy.deepcopy(m)
    paths = [p for p in _nodes(m) if p]
    for _ in range(int(rng.integers(1, 4))):
        path = paths[int(rng.integers(len(paths)))]
        parent: Any = m
        try:
            for k in path[:-1]:
                parent = parent[k]
            last = path[-1]
            parent[last]  # noqa: B018 - still there (an earlier mutation may have moved it)
        except (KeyError, IndexError, TypeError):
            continue
        how = int(rng.integers(5))
        if how == 0 and isinstance(parent, dict):
            del parent[last]
        elif how == 1 and isinstance(parent, dict):  # rename a key (file or field names)
            names = [h for h in HOSTILE if isinstance(h, str)]
            parent[names[int(rng.integers(len(names)))] if rng.random() < 0.5 else
                   f"{last}x"] = parent.pop(last)
        elif how == 2 and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[last]))
        elif how == 3:  # another node's value
            other = paths[int(rng.integers(len(paths)))]
            try:
                value: Any = m
                for k in other:
                    value = value[k]
                parent[last] = copy.deepcopy(value)
            except (KeyError, IndexError, TypeError):
                continue
        else:
            parent[last] = copy.deepcopy(HOSTILE[int(rng.integers(len(HOSTILE)))])
    return m


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_fuzzed_manifests(made: dict[str, Path], tmp_path: Path, seed: int) -> None:
    root = tmp_path / "ds"
    shutil.copytree(made["raw" if seed == 0 else "encoded"], root)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "keep.txt").write_text("precious")
    good = orjson.loads((root / "manifest.json").read_bytes())
    rng = np.random.default_rng(seed)
    refused = 0
    for i in range(60):
        case = f"CASE={seed}:{i}"
        bad = _mutate(good, rng)
        (root / "manifest.json").write_bytes(orjson.dumps(bad, option=orjson.OPT_NON_STR_KEYS))
        outside = _tree(tmp_path / "outside")
        refused += _outcome(case, root) != "ok"
        if i % 4 == 0:  # the same manifest from a "bucket", through the node-local cache
            cache = tmp_path / f"cache{i}"
            _outcome(case + " (file://)", f"file://{root}", cache_dir=cache, cache_limit=1)
            for p in tmp_path.rglob("*"):  # nothing written outside the dataset and caches
                top = p.relative_to(tmp_path).parts[0]
                assert top in {"ds", "outside"} or top.startswith("cache"), (case, p)
        assert _tree(tmp_path / "outside") == outside, case
    assert refused > 10  # most mutations are caught (some change nothing a reader uses)


def _rehash(root: Path) -> None:
    m = orjson.loads((root / "manifest.json").read_bytes())
    for sh in m["shards"]:
        for fname, meta in sh["files"].items():
            data = (root / sh["name"] / fname).read_bytes()
            meta["size"], meta["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    (root / "manifest.json").write_bytes(orjson.dumps(m))


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fuzzed_shard_files(made: dict[str, Path], tmp_path: Path, seed: int) -> None:
    root = tmp_path / "ds"
    shutil.copytree(made["raw" if seed != 1 else "encoded"], root)
    manifest = (root / "manifest.json").read_bytes()
    files = sorted(p for p in root.glob("shard-*/*") if p.name != "complete.json")
    rng = np.random.default_rng(100 + seed)
    refused = 0
    for i in range(60):
        case = f"CASE={seed}:{i}"
        target = files[int(rng.integers(len(files)))]
        original = target.read_bytes()
        data = bytearray(original)
        how = int(rng.integers(4))
        if how == 0 and data:  # flip bytes, the header's as likely as the body's
            for _ in range(int(rng.integers(1, 4))):
                at = int(rng.integers(min(len(data), 160))) if rng.random() < 0.5 else \
                    int(rng.integers(len(data)))
                data[at] ^= int(rng.integers(1, 256))
        elif how == 1:
            del data[int(rng.integers(len(data) + 1)):]
        elif how == 2:
            data += bytes(rng.integers(0, 256, int(rng.integers(1, 64)), dtype=np.uint8))
        elif target.suffix == ".npy":  # a well-formed file with other values or rows
            arr = np.load(target)
            if arr.size and arr.dtype.kind in "iuf" and arr.dtype.names is None:
                arr = arr.copy()
                flat = arr.reshape(-1)
                top = np.iinfo(arr.dtype).max if arr.dtype.kind in "iu" else 1e30
                low = np.iinfo(arr.dtype).min if arr.dtype.kind in "iu" else -1e30
                flat[int(rng.integers(flat.size))] = [low, 0, top, 7][int(rng.integers(4))]
            else:
                arr = arr[: int(rng.integers(len(arr) + 1))]
            target.unlink()
            np.save(target, arr)
            data = bytearray(target.read_bytes())
        target.write_bytes(bytes(data))
        if rng.random() < 0.6:
            _rehash(root)  # a self-consistent copy: only the structure can tell
        got = _outcome(case, root)
        refused += got != "ok"
        target.write_bytes(original)
        (root / "manifest.json").write_bytes(manifest)
    assert refused > 10
    assert _outcome("restored", root) == "ok"
