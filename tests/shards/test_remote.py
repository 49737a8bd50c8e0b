"""Remote datasets (issue 16.1): a real S3-compatible server (moto's standalone server on
127.0.0.1), reached through s3fs as a user would, read through the node-local cache."""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from npu_data.errors import DataCorruption, UserError
from npu_data.loaders import collate_samples
from npu_data.shards import remote, storage
from npu_data.shards.reader import ShardDataset
from tests.support.compare import same_nested
from tests.support.s3_server import BUCKET, KEY, SECRET, N


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache folder shared by the tests that read every shard (filled by the first)."""
    return tmp_path_factory.mktemp("warm")


def _open(s3: dict[str, Any], cache: Path, **kw: Any) -> ShardDataset:
    return ShardDataset(s3["url"], cache_dir=cache, **kw)


def _data_files(ds: ShardDataset) -> list[str]:
    return sorted(p.parent.name for p in ds.path.glob("shard-*/data.bin"))


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_samples_equal_local(s3: dict[str, Any], warm: Path) -> None:
    ds, local = _open(s3, warm), s3["local"]
    assert len(ds) == len(local) == N and ds.manifest == local.manifest
    assert ds.path.parent == warm and (ds.path / "manifest.json").is_file()
    for i in range(N):
        same_nested(local[i], ds[i], f"sample {i}")
    for idx in ([8, 0, 5, 3, 3, 6, 1], list(range(N)), [4], [6, -1, 2, -9]):
        same_nested(collate_samples(local.__getitems__(idx)), collate_samples(ds.__getitems__(idx)))
    np.testing.assert_array_equal(ds.sizes(), local.sizes())
    np.testing.assert_array_equal(ds.task_ids(), local.task_ids())


def test_only_needed_shards_downloaded(s3: dict[str, Any], tmp_path: Path) -> None:
    ds = _open(s3, tmp_path)
    assert _data_files(ds) == [] and not list(ds.path.glob("shard-*"))  # opening: manifest only
    ds[0]
    ds[1]
    assert _data_files(ds) == ["shard-00000"]
    listing = ds.manifest["shards"][0]["files"]
    assert sorted(p.name for p in (ds.path / "shard-00000").iterdir()) == sorted(listing)
    ds[8]
    assert _data_files(ds) == ["shard-00000", "shard-00002"]
    ds.sizes()  # only index.npy of the other shard
    assert _data_files(ds) == ["shard-00000", "shard-00002"]
    assert sorted(p.name for p in (ds.path / "shard-00001").iterdir()) == ["index.npy"]
    # a second dataset object (another process) on the same cache downloads nothing
    calls: list[str] = []
    orig = remote.RemoteStore._write
    try:
        remote.RemoteStore._write = lambda self, n, f, b: calls.append(f) or orig(self, n, f, b)  # type: ignore[method-assign]
        again = _open(s3, tmp_path)
        same_nested(s3["local"][8], again[8])
        same_nested(s3["local"][0], again[0])
    finally:
        remote.RemoteStore._write = orig  # type: ignore[method-assign]
    assert calls == []


def _index_of(batch: list[dict[str, Any]]) -> list[int]:
    return [int(s["index"]) for s in batch]


def test_dataloader_two_workers_and_pickle(s3: dict[str, Any], warm: Path) -> None:
    ds = _open(s3, warm)
    ds[0]  # a used dataset: its maps and file system must stay out of the pickle
    state = pickle.dumps(ds)
    assert b"S3FileSystem" not in state and b"memmap" not in state
    clone = pickle.loads(state)
    assert clone._shards == {} and clone._remote._fs is None
    same_nested(s3["local"][5], clone[5])
    loader = torch.utils.data.DataLoader(ds, batch_size=2, shuffle=True, num_workers=2,
                                         collate_fn=_index_of,
                                         generator=torch.Generator().manual_seed(0))
    seen = [i for batch in loader for i in batch]
    assert sorted(seen) == list(range(N))
    assert _data_files(ds) == [f"shard-{k:05d}" for k in range(3)]


def _read_in_child(url: str, cache: str, log: str, barrier: Any) -> None:
    orig = remote.RemoteStore._write

    def logged(self: remote.RemoteStore, name: str, fname: str, blocks: Any) -> bool:
        with open(log, "a") as fh:
            fh.write(f"{os.getpid()} {name}/{fname}\n")
        return orig(self, name, fname, blocks)

    remote.RemoteStore._write = logged  # type: ignore[method-assign]
    ds = ShardDataset(url, cache_dir=cache)
    barrier.wait()
    ds[3]
    ds[5]


def test_one_download_per_shard_per_node(s3: dict[str, Any], tmp_path: Path) -> None:
    ctx = mp.get_context("fork")
    log = tmp_path / "downloads.log"
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_read_in_child, args=(s3["url"], str(tmp_path / "cache"),
                                                      str(log), barrier)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    lines = log.read_text().splitlines()
    files = sorted(line.split()[1] for line in lines)
    listing = s3["local"].manifest["shards"][1]["files"]
    assert files == sorted(f"shard-00001/{f}" for f in listing)  # each file once, by anyone
    assert len({line.split()[0] for line in lines}) == 1  # by one process


def test_cache_limit_evicts_lru(s3: dict[str, Any], tmp_path: Path) -> None:
    probe = _open(s3, tmp_path / "probe")
    per = [probe._remote.shard_bytes(k) for k in range(3)]  # type: ignore[union-attr]
    limit = per[0] + per[1] + per[2] // 2  # room for two full shards
    ds = _open(s3, tmp_path / "c", cache_limit=str(limit))
    for i in [8, 3, 4, 0]:
        same_nested(s3["local"][i], ds[i], f"sample {i}")
        assert ds._remote.cached_bytes() <= limit  # type: ignore[union-attr]
    assert _data_files(ds) == ["shard-00000", "shard-00001"]  # the two most recent
    assert len(ds._shards) <= 2  # the process let go of the evicted maps too
    assert remote.parse_bytes("50GB") == 50 * 10**9 and remote.parse_bytes("1.5KiB") == 1536
    with pytest.raises(UserError, match="cache_limit='lots'"):
        _open(s3, tmp_path / "c", cache_limit="lots")


@pytest.mark.parametrize("check", ["sha256", "size"])
def test_corrupted_cached_file_fetched_again(s3: dict[str, Any], tmp_path: Path,
                                             check: str) -> None:
    ds = _open(s3, tmp_path, cache_check=check)
    ds[4]
    data = ds.path / "shard-00001" / "data.bin"
    want = ds.manifest["shards"][1]["files"]["data.bin"]["sha256"]
    raw = bytearray(data.read_bytes())
    if check == "sha256":  # same size, flipped bytes: only the checksum sees it
        raw[10:20] = bytes(255 - b for b in raw[10:20])
        corrupt = bytes(raw)
    else:
        corrupt = bytes(raw[:-64])
    data.write_bytes(corrupt)
    again = _open(s3, tmp_path, cache_check=check)  # another process: first open checks
    same_nested(s3["local"][4], again[4])
    assert _sha(data) == want
    col = ds.path / "shard-00001" / "ann.boxes.label.npy"
    col.write_bytes(col.read_bytes()[:-1])
    third = _open(s3, tmp_path, cache_check=check)
    same_nested(s3["local"][5], third[5])
    assert _sha(col) == ds.manifest["shards"][1]["files"]["ann.boxes.label.npy"]["sha256"]


def _killed_download(url: str, cache: str) -> None:
    def dies(self: remote.RemoteStore, name: str, fname: str, blocks: Any) -> bool:
        folder = self.root / name
        (folder / f".{fname}.{os.getpid()}.tmp").write_bytes(b"half a file")
        os._exit(3)  # killed midway, holding the shard's lock

    orig = remote.RemoteStore._write
    state = {"n": 0}

    def some_then_die(self: remote.RemoteStore, name: str, fname: str, blocks: Any) -> bool:
        state["n"] += 1
        return (orig if state["n"] <= 2 else dies)(self, name, fname, blocks)

    remote.RemoteStore._write = some_then_die  # type: ignore[method-assign]
    ShardDataset(url, cache_dir=cache)[0]


def test_killed_download_does_not_poison_cache(s3: dict[str, Any], tmp_path: Path) -> None:
    ctx = mp.get_context("fork")
    p = ctx.Process(target=_killed_download, args=(s3["url"], str(tmp_path)))
    p.start()
    p.join(60)
    assert p.exitcode == 3
    ds = _open(s3, tmp_path)
    folder = ds.path / "shard-00000"
    assert list(folder.glob(".*.tmp")) and not (ds.path / ".state" / "shard-00000.json").exists()
    kept = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
    assert len(kept) == 2  # the two files finished before the kill are whole
    (folder / "index.npy").unlink(missing_ok=True)
    (folder / "index.npy").write_bytes(b"\x93NUMPY partial")  # a torn file left in place
    calls: list[str] = []
    orig = remote.RemoteStore._write
    try:
        remote.RemoteStore._write = lambda self, n, f, b: calls.append(f) or orig(self, n, f, b)  # type: ignore[method-assign]
        for i in range(3):
            same_nested(s3["local"][i], ds[i])
    finally:
        remote.RemoteStore._write = orig  # type: ignore[method-assign]
    assert not list(folder.glob(".*.tmp"))
    listing = ds.manifest["shards"][0]["files"]
    resumed = {f for f in kept if f != "index.npy"}
    assert sorted(calls) == sorted(set(listing) - resumed)  # resumed file by file
    for fname, meta in listing.items():
        assert _sha(folder / fname) == meta["sha256"]


def test_errors_name_url_never_credentials(s3: dict[str, Any], tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    cases = {"s3://no-such-bucket-npu/ds": "not found",
             f"s3://{BUCKET}/no/such/prefix": "not found"}
    for url, what in cases.items():
        with pytest.raises(UserError) as err:
            ShardDataset(url, cache_dir=tmp_path)
        msg = str(err.value)
        assert "\n" not in msg and url in msg and what in msg and "bucket and prefix" in msg
        assert KEY not in msg and SECRET not in msg and "fAkE" not in msg
        assert err.value.__cause__ is None and err.value.__suppress_context__
    # keys passed as storage_options are blanked too, even where the server echoes them
    with pytest.raises(UserError) as err:
        ShardDataset("s3://no-such-bucket-npu/ds", cache_dir=tmp_path,
                     storage_options={"key": KEY, "secret": SECRET})
    assert KEY not in str(err.value) and SECRET not in str(err.value)
    # a wrong endpoint (nothing listens there): named, with the fix, still no keys
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    monkeypatch.setenv("NPU_DATA_S3_ENDPOINT", dead)
    with pytest.raises(UserError) as err:
        ShardDataset(s3["url"], cache_dir=tmp_path / "dead",  # no retries: a quick test
                     storage_options={"retries": 1, "config_kwargs": {"retries": {"max_attempts": 1}}})
    msg = str(err.value)
    assert "\n" not in msg and dead in msg and "check the endpoint" in msg
    assert KEY not in msg and SECRET not in msg and not (tmp_path / "dead").exists()
    # the endpoint from storage_options instead of the environment
    monkeypatch.delenv("NPU_DATA_S3_ENDPOINT")
    ds = ShardDataset(s3["url"], cache_dir=tmp_path,
                      storage_options={"client_kwargs": {"endpoint_url": s3["endpoint"]}})
    same_nested(s3["local"][3], ds[3])
    store = remote.RemoteStore.__new__(remote.RemoteStore)
    store.storage_options = {"secret": SECRET}
    assert SECRET not in store._clean(RuntimeError(f"signature {SECRET} {KEY} bad"))


def test_any_fsspec_url_and_a_corrupt_remote_file(s3: dict[str, Any], tmp_path: Path) -> None:
    import shutil

    src = tmp_path / "origin"
    shutil.copytree(s3["local"].path, src)
    ds = ShardDataset(f"file://{src}", cache_dir=tmp_path / "cache")
    same_nested(s3["local"][7], ds[7])
    with open(src / "shard-00000" / "data.bin", "r+b") as fh:  # the stored copy itself rots
        fh.seek(5)
        fh.write(b"\xff\x00")
    with pytest.raises(DataCorruption) as err:
        ShardDataset(f"file://{src}", cache_dir=tmp_path / "cache2")[0]
    msg = str(err.value)
    assert f"file://{src}/shard-00000/data.bin" in msg and "upload the dataset" in msg
    assert not list((tmp_path / "cache2").glob("*/shard-00000/data.bin"))
    assert not list((tmp_path / "cache2").glob("*/shard-00000/.*.tmp"))


def test_prefetch_downloads_the_next_shard_before_it_is_read(s3: dict[str, Any],
                                                             tmp_path: Path) -> None:
    from npu_data.loaders import NpuDistributedSampler

    ds = _open(s3, tmp_path, prefetch=1)
    store = ds._remote
    assert store is not None
    writes: list[tuple[str, str]] = []  # (thread, shard) of every downloaded file
    opened: list[int] = []  # shards opened by reads
    orig_write, orig_shard = remote.RemoteStore._write, ShardDataset.shard

    def write(self: remote.RemoteStore, name: str, fname: str, blocks: Any) -> bool:
        import threading

        writes.append((threading.current_thread().name, name))
        return orig_write(self, name, fname, blocks)

    def shard(self: ShardDataset, k: int) -> Any:
        opened.append(k)
        return orig_shard(self, k)

    sampler = NpuDistributedSampler(ds, 1, 0, shuffle=False)
    loader = torch.utils.data.DataLoader(ds, batch_size=3, sampler=sampler,
                                         collate_fn=_index_of)
    try:
        remote.RemoteStore._write = write  # type: ignore[method-assign]
        ShardDataset.shard = shard  # type: ignore[method-assign]
        it = iter(loader)
        assert next(it) == [0, 1, 2]
        store.wait_prefetch()
        assert set(opened) == {0}  # shard 1 not read yet ...
        assert _data_files(ds) == ["shard-00000", "shard-00001"]  # ... but already here
        assert (ds.path / ".state" / "shard-00001.json").is_file()
        assert "shard-00002" not in {n for _, n in writes}  # bounded: one shard ahead
        ahead = [t for t, n in writes if n == "shard-00001"]
        assert ahead and all(t.startswith("npu-data-prefetch") for t in ahead)
        before = len(writes)
        assert next(it) == [3, 4, 5]  # read from the cache: nothing downloaded for it
        assert all(n != "shard-00001" for _, n in writes[before:])
        assert [i for b in it for i in b] == [6, 7, 8]
        store.wait_prefetch()
    finally:
        remote.RemoteStore._write = orig_write  # type: ignore[method-assign]
        ShardDataset.shard = orig_shard  # type: ignore[method-assign]
    assert _data_files(ds) == [f"shard-{k:05d}" for k in range(3)]
    assert len([1 for _, n in writes if n == "shard-00002"]) == len(
        ds.manifest["shards"][2]["files"])  # one download per file, prefetch or read
    clone = pickle.loads(pickle.dumps(ds))
    assert clone._remote._pool is None and clone._remote._pending == {}  # type: ignore[union-attr]
    with pytest.raises(UserError, match="prefetch=-1"):
        _open(s3, tmp_path, prefetch=-1)


def test_prefetch_with_forked_workers_and_locality(s3: dict[str, Any], tmp_path: Path) -> None:
    """Workers fork while prefetch threads hold shard locks: no inherited lock stays held (the
    epoch finishes), every sample comes once per rank, and rank 1 downloads only its shards."""
    from npu_data.loaders import NpuDistributedSampler

    seen: list[int] = []
    for rank in range(3):
        ds = _open(s3, tmp_path / f"node{rank}", prefetch=2)
        sampler = NpuDistributedSampler(ds, 3, rank, seed=1, shard_window=1)
        loader = torch.utils.data.DataLoader(ds, batch_size=1, sampler=sampler, num_workers=2,
                                             collate_fn=_index_of, timeout=60)
        mine = [i for batch in loader for i in batch]
        ds._remote.wait_prefetch()  # type: ignore[union-attr]
        assert sorted(mine) == sorted(sampler)
        assert _data_files(ds) == sorted({f"shard-{i // 3:05d}" for i in mine})
        seen += mine
    assert sorted(seen) == list(range(N))  # 9 samples, 3 ranks of one shard each


def _try_lock(store: remote.RemoteStore, released: Any, got: Any) -> None:
    import fcntl

    released.wait(30)
    with store._lock("shard-00000", fcntl.LOCK_EX | fcntl.LOCK_NB) as ok:
        got.value = int(ok)


def test_forked_child_does_not_keep_a_parent_lock(s3: dict[str, Any], tmp_path: Path) -> None:
    """A worker forked while the parent (e.g. a prefetch thread) holds a shard's lock must not
    keep that lock held once the parent lets go."""
    import fcntl

    store = _open(s3, tmp_path)._remote
    assert store is not None
    ctx = mp.get_context("fork")
    released, got = ctx.Event(), ctx.Value("i", -1)
    with store._lock("shard-00000", fcntl.LOCK_EX):
        child = ctx.Process(target=_try_lock, args=(store, released, got))
        child.start()  # forked while the lock is held
    released.set()
    child.join(60)
    assert child.exitcode == 0 and got.value == 1


def test_prefetch_is_bounded(s3: dict[str, Any], tmp_path: Path) -> None:
    """A shuffled order enters a new shard at every sample: never more than ``prefetch``
    shards queued, the entered one left to its read."""
    import threading

    store = _open(s3, tmp_path, prefetch=1)._remote
    assert store is not None
    go, started = threading.Event(), []

    def slow(k: int) -> None:
        started.append(k)
        go.wait(30)

    store._prefetch_one = slow  # type: ignore[method-assign]
    for order in ([0, 1, 2], [2, 0, 1], [1, 2, 0], [0, 2, 1]):
        store.prefetch(order)
        assert len(store._pending) == 1  # bounded while the first is still running
    go.set()
    store.wait_prefetch()
    assert started == [1]
    store.prefetch([1, 2, 0])
    store.wait_prefetch()
    assert started == [1, 2]


# --- credentials in URLs, options and endpoints never shown (issue 15) ----------------------
PW, OPT_KEY, OPT_SECRET = "Pw" + "Secret1", "AKIA" + "OPTKEY22", "Opt" + "Secret33"
SIG, TOKEN = "Sig" + "Secret44", "Tok" + "Secret55"  # written apart: no traceback line holds one


def _assert_clean(fail: Any, kind: type[UserError] = UserError) -> UserError:
    """``fail()`` raises a one-line ``kind`` whose text, repr, printed chain of causes and
    the warnings meanwhile hold no credential."""
    import traceback
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(kind) as err:
            fail()
    exc = err.value
    for text in (str(exc), repr(exc), "".join(traceback.format_exception(exc)),
                 *(str(w.message) for w in seen)):
        for secret in (PW, OPT_KEY, OPT_SECRET, SIG, TOKEN, KEY, SECRET, "fAkE"):
            assert secret not in text, (secret, text)
    assert "\n" not in str(exc)
    return exc


def _dead_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _opts(endpoint: str) -> dict[str, Any]:
    return {"key": OPT_KEY, "secret": OPT_SECRET, "client_kwargs": {"endpoint_url": endpoint},
            "config_kwargs": {"retries": {"max_attempts": 1}}}


def test_s3_errors_show_no_credentials(s3: dict[str, Any], tmp_path: Path) -> None:
    fs = s3["fs"]
    # a missing object, the keys given as storage_options
    exc = _assert_clean(lambda: ShardDataset(f"s3://{BUCKET}/no-such-ds", cache_dir=tmp_path,
                                             storage_options=_opts(s3["endpoint"])))
    assert "not found" in str(exc) and f"s3://{BUCKET}/no-such-ds/manifest.json" in str(exc)
    # a file whose bytes differ from the manifest: DataCorruption, still clean
    fs.copy(f"{BUCKET}/ds", f"{BUCKET}/ds-rotten", recursive=True)
    fs.pipe(f"{BUCKET}/ds-rotten/shard-00000/data.bin", b"rotten")
    ds = ShardDataset(f"s3://{BUCKET}/ds-rotten", cache_dir=tmp_path / "rot",
                      storage_options=_opts(s3["endpoint"]))
    exc = _assert_clean(lambda: ds[0], DataCorruption)
    assert f"s3://{BUCKET}/ds-rotten/shard-00000/data.bin" in str(exc)
    # nothing listens at the endpoint; an endpoint with a password in it
    dead = f"http://127.0.0.1:{_dead_port()}"
    exc = _assert_clean(lambda: ShardDataset(s3["url"], cache_dir=tmp_path / "dead",
                                             storage_options=_opts(dead)))
    assert dead in str(exc) and "check the endpoint" in str(exc)
    ep = s3["endpoint"].replace("//", f"//alice:{PW}@") + f"/?X-Amz-Security-Token={TOKEN}"
    _assert_clean(lambda: ShardDataset(s3["url"], cache_dir=tmp_path / "ep",
                                       storage_options=_opts(ep)))
    # keys written into the URL itself are refused before anything echoes them
    exc = _assert_clean(lambda: ShardDataset(f"s3://{OPT_KEY}:{OPT_SECRET}@{BUCKET}/ds",
                                             cache_dir=tmp_path / "url"))
    assert "credentials do not belong in the URL" in str(exc)
    # a secret holding "/" (as AWS secrets may): refused whole, never cut at its "/"
    exc = _assert_clean(lambda: ShardDataset(f"s3://{OPT_KEY}:ab/{OPT_SECRET}@{BUCKET}/ds",
                                             cache_dir=tmp_path / "slash"))
    assert "credentials do not belong in the URL" in str(exc) and "ab/" not in str(exc)
    storage.RemoteFolder(f"s3://{BUCKET}/a:b@c/ds")  # ":" and "@" inside a key: a path


def test_http_dataset_errors_show_no_credentials(s3: dict[str, Any], tmp_path: Path) -> None:
    """A dataset served over http(s) with basic auth in the URL (fsspec's HTTPFileSystem)."""
    import functools
    import http.server
    import shutil
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

    class Server(http.server.ThreadingHTTPServer):
        request_queue_size = 256  # ~100 files of a shard requested at once
        daemon_threads = True

    served = tmp_path / "www"
    shutil.copytree(s3["local"].path, served / "ds")
    srv = Server(("127.0.0.1", 0), functools.partial(Quiet, directory=str(served)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = f"http://alice:{PW}@127.0.0.1:{srv.server_address[1]}"
    try:
        ds = ShardDataset(f"{base}/ds", cache_dir=tmp_path / "ok")
        same_nested(s3["local"][4], ds[4])  # it reads: the failures below are the URL's
        exc = _assert_clean(lambda: ShardDataset(f"{base}/nope", cache_dir=tmp_path / "c1"))
        assert "not found" in str(exc) and "/nope/manifest.json" in str(exc)
        with open(served / "ds" / "shard-00001" / "index.npy", "r+b") as fh:
            fh.seek(100)
            fh.write(b"\xff\xfe")
        ds = ShardDataset(f"{base}/ds", cache_dir=tmp_path / "c2")
        exc = _assert_clean(lambda: ds[3], DataCorruption)
        assert "/ds/shard-00001/index.npy" in str(exc) and "REDACTED@127.0.0.1" in str(exc)
    finally:
        srv.shutdown()
        srv.server_close()
    dead = f"http://alice:{PW}@127.0.0.1:{_dead_port()}/ds?X-Amz-Signature={SIG}&sig={SIG}"
    exc = _assert_clean(lambda: ShardDataset(dead, cache_dir=tmp_path / "c3"))
    assert "cannot read" in str(exc) or "not found" in str(exc)
