"""Latents stores on object storage (issue 38): ``encode_latents(..., out="s3://...")`` and
``npu-data encode --out s3://...`` upload through the import's staging, lease and conditional
writes; ``ShardDataset(url)`` reads the store through the node-local cache (the empty prompt's
files fetched and checked, the latent columns valid across eviction); a killed encode resumes
to the bytes of a local one. Moto's S3 server on 127.0.0.1 (``tests/support/s3_server.py``)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import torch

from npu_data import BucketBatchSampler, DataLoader, ShardDataset, cli
from npu_data.errors import DataCorruption, UserError
from npu_data.latents import empty_prompt, encode_latents
from npu_data.shards.storage import RemoteFolder
from npu_data.transforms import Compose, LatentCaptionDropout, RandomLatentFlip
from tests.support import kernels
from tests.support.latents import encode_kwargs
from tests.support.launchers import ROOT, two_nodes
from tests.support.s3_server import BUCKET, KEY, SECRET


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """In-process encodes at the subprocesses' one thread (OMP_NUM_THREADS=1): a CPU encode's
    bytes depend on its thread count, which it records; a resume refuses another one."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the subprocesses load the kernels built already, not build them into the empty cache
    monkeypatch.setenv("NPU_DATA_CACHE", str(kernels.seed(tmp_path / "cache")))
    monkeypatch.setenv("NPU_DATA_QUIET", "1")


def _local_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not any(part.startswith(".")
                                       for part in p.relative_to(root).parts)}


def _remote_files(s3: dict[str, Any], prefix: str) -> dict[str, bytes]:
    fs = s3["fs"]
    fs.invalidate_cache()
    base = f"{BUCKET}/{prefix}"
    return {p[len(base) + 1:]: fs.cat_file(p) for p in sorted(fs.find(base))}


def _no_secret(text: str) -> None:
    assert SECRET not in text and KEY not in text and "fAkEsEcReT" not in text


def _batches(ds: ShardDataset, workers: int) -> list[dict[str, Any]]:
    assert ds.latents is not None
    sampler = BucketBatchSampler(ds, 3, [tuple(b) for b in ds.latents["buckets"]], seed=5)
    pipeline = Compose([RandomLatentFlip(0.5), LatentCaptionDropout(0.5, empty_prompt(ds))])
    return list(DataLoader(ds, batch_sampler=sampler, transform=pipeline, device="cpu",
                           seed=5, num_workers=workers))


def _same_batches(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    assert len(a) == len(b) > 0
    for x, y in zip(a, b, strict=True):
        assert x["index"].tolist() == y["index"].tolist()
        for key in ("latents", "crop_top_left", "prompt_embeds", "pooled_prompt_embeds",
                    "original_size", "target_size"):
            assert torch.equal(x[key], y[key]), key
        assert x["caption"] == y["caption"]


def test_encode_to_s3_reads_back_like_the_local_store(
        s3: dict[str, Any], models: dict[str, Path], pixels: Path, store: Path,
        tmp_path: Path) -> None:
    url = f"s3://{BUCKET}/lat/one"
    ds = encode_latents(pixels, url, models["vae"], **encode_kwargs(models))
    assert _remote_files(s3, "lat/one") == _local_files(store)  # every object, byte for byte
    assert not list((tmp_path / "cache" / "upload").glob("*/*"))  # staging removed
    assert isinstance(ds, ShardDataset) and ds._remote is not None and len(ds) == 10
    local = ShardDataset(store)
    remote = ShardDataset(url, cache_dir=tmp_path / "read")
    # the empty prompt: fetched into the cache, checked, the local store's tensors
    for got, want in zip(empty_prompt(remote), empty_prompt(local), strict=True):
        assert torch.equal(got, want)
    assert sorted(p.name for p in remote.path.glob("empty_prompt.*")) == [
        "empty_prompt.pooled_prompt_embeds.npy", "empty_prompt.prompt_embeds.npy"]
    # the same batches (bucketed, flipped, captions dropped to the fetched empty prompt)
    want = _batches(local, 0)
    _same_batches(_batches(remote, 1), want)  # a worker: the store pickles, fetches there
    empty_embeds, _ = empty_prompt(local)
    dropped = [t for b in want for t, c in enumerate(b["caption"]) if c == ""]
    assert dropped and all(torch.equal(b["prompt_embeds"][t], empty_embeds)
                           for b in want for t, c in enumerate(b["caption"]) if c == "")


def test_cli_encode_to_s3_and_verify(s3: dict[str, Any], models: dict[str, Path],
                                     pixels: Path, store: Path, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    url = f"s3://{BUCKET}/lat/cli"
    assert cli.main(_args(pixels, models, url)) == 0
    out = capsys.readouterr()
    _no_secret(out.out + out.err)
    assert out.out.startswith(f"{url}: 10 samples, 3 shard(s)")
    assert _remote_files(s3, "lat/cli") == _local_files(store)
    assert cli.main(["verify", url]) == 0
    assert f"{url}: ok" in capsys.readouterr().out
    # a second encode onto the same prefix: refused unless resuming, one line
    assert cli.main(_args(pixels, models, url)) == 1
    err = capsys.readouterr().err
    assert "already holds" in err and "--resume" in err and err.count("\n") == 1
    # a rotten empty-prompt object: verify names it, exit 1; the reader refuses it
    fs = s3["fs"]
    name = "empty_prompt.pooled_prompt_embeds.npy"
    data = bytearray(fs.cat_file(f"{BUCKET}/lat/cli/{name}"))
    data[-1] ^= 0xFF
    fs.pipe_file(f"{BUCKET}/lat/cli/{name}", bytes(data))
    assert cli.main(["verify", url, "--cache-dir", str(tmp_path / "fresh")]) == 1
    err = capsys.readouterr().err
    assert f"{url}/{name}" in err and "sha256 differs" in err
    with pytest.raises(DataCorruption) as exc:
        empty_prompt(ShardDataset(url, cache_dir=store.parent / "fresh2"))
    assert f"{url}/{name}" in str(exc.value) and "\n" not in str(exc.value)


def test_latent_columns_stay_valid_when_the_cache_evicts(
        s3: dict[str, Any], store: Path, tmp_path: Path) -> None:
    url = f"s3://{BUCKET}/lat/evict"
    s3["fs"].put(str(store) + "/", f"{BUCKET}/lat/evict", recursive=True)
    cache = tmp_path / "small"
    local = ShardDataset(store)
    a = ShardDataset(url, cache_dir=cache, cache_limit=1)
    a.shard(0)  # opened (index, data), its latent columns not yet
    b = ShardDataset(url, cache_dir=cache, cache_limit=1)  # another process of the node
    b[5]  # shard 1 fetched: shard 0's files evicted (unlinked) from the cache
    assert not (a.path / "shard-00000").exists()
    for i in (0, 3, 5, 9, 1):
        s, want = a[i], local[i]
        for key in ("latents", "latents_flipped", "prompt_embeds", "pooled_prompt_embeds"):
            assert torch.equal(s[key], want[key]), key
        assert s["caption"] == want["caption"]
        assert s["crop_top_left"].tolist() == want["crop_top_left"].tolist()


def _upload_with(s3: dict[str, Any], store: Path, prefix: str,
                 change: Any) -> str:
    manifest = orjson.loads((store / "manifest.json").read_bytes())
    change(manifest["latents"]["empty_prompt"])
    fs = s3["fs"]
    for p in store.glob("empty_prompt.*"):
        fs.pipe_file(f"{BUCKET}/{prefix}/{p.name}", p.read_bytes())
    fs.pipe_file(f"{BUCKET}/{prefix}/manifest.json", orjson.dumps(manifest))
    return f"s3://{BUCKET}/{prefix}"


def test_hostile_root_files_are_refused(s3: dict[str, Any], store: Path,
                                        tmp_path: Path) -> None:
    def rename(files: dict[str, Any]) -> None:
        files["../../outside.npy"] = files.pop("empty_prompt.prompt_embeds.npy")

    def oversize(files: dict[str, Any]) -> None:
        files["empty_prompt.prompt_embeds.npy"]["size"] = 10**8  # far above its array's

    for prefix, change, what in (("lat/hostile", rename, "../../outside.npy"),
                                 ("lat/huge", oversize, "more than its array needs")):
        url = _upload_with(s3, store, prefix, change)
        with pytest.raises(DataCorruption) as exc:
            ShardDataset(url, cache_dir=tmp_path / "c")
        msg = str(exc.value)
        assert what in msg and f"{url}/manifest.json" in msg and "\n" not in msg
    assert not (tmp_path / "outside.npy").exists()
    assert not list((tmp_path / "c").rglob("*.npy"))  # nothing fetched


def _args(pixels: Path, models: dict[str, Path], out: str) -> list[str]:
    return ["encode", str(pixels), "--vae", str(models["vae"]), "--out", out,
            "--text-encoder", str(models["text_encoder"]), "--tokenizer",
            str(models["tokenizer"]), "--text-encoder-2", str(models["text_encoder_2"]),
            "--tokenizer-2", str(models["tokenizer_2"]), "--buckets", "64x64,48x80,80x48",
            "--device", "cpu", "--dtype", "float32", "--batch-size", "3", "--shard-size", "4"]


ONE = ["--batch-size", "1", "--shard-size", "2"]  # one sample per VAE call


@pytest.fixture(scope="module")
def whole(models: dict[str, Path], pixels: Path, tmp_path_factory: pytest.TempPathFactory
          ) -> Path:
    """The store of one uninterrupted process on disk (ONE's settings, one thread)."""
    out = tmp_path_factory.mktemp("whole") / "out"
    with one_thread():
        assert cli.main([*_args(pixels, models, str(out)), *ONE]) == 0
    return out


def test_killed_s3_encode_resumes_to_identical_bytes(
        s3: dict[str, Any], models: dict[str, Path], pixels: Path, whole: Path,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"s3://{BUCKET}/lat/killed"
    staging = tmp_path / "cache" / "upload" / RemoteFolder(url).ident()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "npu_data.cli",
                             *_args(pixels, models, url), *ONE],
                            env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while not (staging / "shard-00000").is_dir() and proc.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate()
    assert proc.returncode == -signal.SIGKILL, err.decode()[-2000:]
    left = _remote_files(s3, "lat/killed")
    assert "manifest.json" not in left  # no half store for a reader
    with pytest.raises(UserError):
        ShardDataset(url, cache_dir=tmp_path / "r")
    # the killed encode's lease (its process is gone) is taken over; its shards are kept
    with one_thread():
        assert cli.main([*_args(pixels, models, url), *ONE, "--resume"]) == 0
    _no_secret("".join(capsys.readouterr()))
    assert _remote_files(s3, "lat/killed") == _local_files(whole)
    assert not list((tmp_path / "cache" / "upload").glob("*/*"))  # staging removed


def test_bad_urls_fail_with_one_line_before_the_models_load(
        s3: dict[str, Any], models: dict[str, Path], pixels: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    cases = {"s3://no-such-bucket-npu/lat": "not found",
             f"s3://{KEY}:{SECRET}@{BUCKET}/lat": "credentials do not belong in the URL",
             "nosuchscheme://bucket/lat": "Protocol not known: nosuchscheme — use an fsspec URL"}
    for url, what in cases.items():
        assert cli.main(_args(pixels, models, url)) == 1
        out = capsys.readouterr()
        assert what in out.err and out.err.count("\n") == 1, out.err
        assert "Loading" not in out.err  # refused before any model was read
        _no_secret(out.out + out.err)


def test_two_nodes_upload_the_bytes_of_one_process(
        s3: dict[str, Any], models: dict[str, Path], pixels: Path, whole: Path,
        tmp_path: Path) -> None:
    url = f"s3://{BUCKET}/lat/nodes"
    envs = [{**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
             "NPU_DATA_CACHE": str(tmp_path / f"node{i}"),  # no shared disk
             # the torch kernels (bytes equal to the compiled ones: parity), not two builds of
             # the compiled kernels into empty caches, which took minutes on a loaded machine
             "NPU_DATA_NATIVE": "0"} for i in range(2)]
    done = two_nodes(["-m", "npu_data.cli", *_args(pixels, models, url), *ONE], envs,
                     timeout=500)
    for rc, out, err in done:
        assert rc == 0, err[-3000:]
        _no_secret(out + err)
    assert _remote_files(s3, "lat/nodes") == _local_files(whole)
    staged = [p.relative_to(tmp_path).as_posix() for p in tmp_path.glob("node*/upload/*/*")]
    assert not staged  # each node's staging folder removed


def test_a_url_source_encodes_like_its_local_copy(s3: dict[str, Any], models: dict[str, Path],
                                                  tmp_path: Path) -> None:
    kw = encode_kwargs(models, text_encoders=None, tokenizers=None, shard_size=5)
    encode_latents(s3["url"], tmp_path / "from-url", models["vae"], **kw)
    encode_latents(s3["local"].path, tmp_path / "from-disk", models["vae"], **kw)
    assert _local_files(tmp_path / "from-url") == _local_files(tmp_path / "from-disk")
