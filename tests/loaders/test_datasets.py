"""LabelStudioDataset: import once into a keyed shard cache, reopen instantly, resume."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from npu_data.errors import UserError
from npu_data.loaders import DataLoader, LabelStudioDataset
from npu_data.tools.sample_data import make_sample_project
from tests.support.exports import make_export
from tests.support.local_http import serving


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory):
    return make_sample_project(tmp_path_factory.mktemp("proj"), n_images=6, width=96, height=72)


def _len(args: tuple[str, str]) -> int:
    return len(LabelStudioDataset(args[0], cache_dir=args[1]))


def test_imports_once_then_reopens(project, tmp_path: Path) -> None:
    ds = LabelStudioDataset(project.export_path, cache_dir=tmp_path)
    assert len(ds) >= 4 and ds.transform is None
    s = ds[0]
    assert s["image"].dtype == np.uint8 and s["image"].shape[2] == 3
    manifest = ds.path / "manifest.json"
    stamp = manifest.stat().st_mtime_ns
    again = LabelStudioDataset(project.export_path, cache_dir=tmp_path)
    assert again.path == ds.path and len(again) == len(ds)
    assert manifest.stat().st_mtime_ns == stamp  # opened, not re-imported
    other = LabelStudioDataset(project.export_path, cache_dir=tmp_path, max_side=48)
    assert other.path != ds.path and max(other[0]["image"].shape[:2]) <= 48
    assert not list(tmp_path.glob("*.partial"))


def test_a_transform_that_is_not_callable_is_a_clear_error(project, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="transform='t' is not callable"):
        LabelStudioDataset(project.export_path, cache_dir=tmp_path, transform="t")


def test_killed_import_is_resumed_not_served(project, tmp_path: Path) -> None:
    ds = LabelStudioDataset(project.export_path, cache_dir=tmp_path)
    len(ds)
    partial = tmp_path / f"{ds.key}.partial"
    shutil.move(ds.path, partial)
    (partial / "manifest.json").unlink()  # killed before the manifest: half a cache
    fresh = LabelStudioDataset(project.export_path, cache_dir=tmp_path)
    assert len(fresh) == len(ds)
    assert (fresh.path / "manifest.json").is_file() and not partial.exists()


@pytest.mark.slow
def test_concurrent_first_use(project, tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    with ctx.Pool(2) as pool:
        lens = pool.map(_len, [(str(project.export_path), str(tmp_path))] * 2)
    assert lens[0] == lens[1] > 0
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 1


def test_loader_uses_the_dataset_transform(project, tmp_path: Path) -> None:
    calls = []

    def mark(batch, generator=None):
        calls.append(batch["image"].shape[0])
        return batch

    ds = LabelStudioDataset(project.export_path, cache_dir=tmp_path, transform=mark)
    batches = list(DataLoader(ds, batch_size=4, num_workers=1, device="cpu"))
    assert sum(calls) == len(ds) == sum(int(b["image"].shape[0]) for b in batches)
    assert os.path.isdir(ds.path)


def test_the_articles_code_trains_with_torchs_own_dataloader(project, tmp_path: Path) -> None:
    """The article's code, as written (§5.1-5.2), with torch's DataLoader: the dataset
    applies its transform itself (on the host, exact) and torch's collate stacks the rows
    into the batch npu_data's loader makes."""
    from npu_data.loaders import NpuDistributedSampler, collate_samples
    from npu_data.transforms import NpuPreprocessor

    preprocessor = NpuPreprocessor(image_size=32, augment_level=2)
    dataset = LabelStudioDataset(json_file=project.export_path, transform=preprocessor,
                                 cache_dir=tmp_path)
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=2, pin_memory=True,
                                         prefetch_factor=2, persistent_workers=True,
                                         sampler=NpuDistributedSampler(dataset))
    model = torch.nn.Conv2d(3, 2, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    ours = next(iter(DataLoader(dataset, batch_size=4, device="cpu")))
    seen = []
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*pin_memory.*")  # no accelerator here
        for epoch in range(2):
            loader.sampler.set_epoch(epoch)
            for batch in loader:
                assert batch.keys() == ours.keys()  # the batch npu_data's loader makes
                assert batch["image"].shape[1:] == (3, 32, 32)
                loss = model(batch["image"].float() / 255).mean()
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                seen.append(batch)
    assert sorted(i for b in seen for i in b["index"].tolist()) == sorted(
        list(range(len(dataset))) * 2)
    # exact: the kernels npu_data's loader runs, on the same samples with the same parameters
    batch = seen[-1]
    raw = collate_samples(dataset.dataset.__getitems__(batch["index"].tolist()))
    assert torch.equal(preprocessor.apply(raw, batch["aug"])["image"], batch["image"])


def test_torchs_collate_of_transformed_rows_warns_only_once_and_never_of_arrays(
        project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from npu_data.loaders import epochs
    from npu_data.transforms import NpuPreprocessor

    monkeypatch.setattr(epochs, "_warned", set())
    dataset = LabelStudioDataset(project.export_path, cache_dir=tmp_path,
                                 transform=NpuPreprocessor(image_size=16, augment_level=2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            batches = list(torch.utils.data.DataLoader(dataset, batch_size=3))  # in-process
    messages = [str(w.message) for w in caught]
    assert len(batches) == 2 and not [m for m in messages if "not writable" in m]
    assert len([m for m in messages if "batches it on the device" in m]) == 1


def test_a_transformed_sample_outside_the_loader(project, tmp_path: Path) -> None:
    from npu_data.transforms import NpuPreprocessor

    ds = LabelStudioDataset(project.export_path, cache_dir=tmp_path,
                            transform=NpuPreprocessor(image_size=24))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = ds[1]
    raw = ds.dataset[1]  # the stored sample stays raw
    assert s["image"].shape == (3, 24, 24) and s["index"] == 1 and raw["image"].shape[2] == 3
    assert s["boxes.xyxy"].shape == (len(raw["boxes.xyxy"]), 4)  # one sample: no padding


def test_batches_are_read_column_wise_like_the_shards(project, tmp_path: Path) -> None:
    from npu_data.batch import HostBatch
    from npu_data.loaders import collate_samples

    ds = LabelStudioDataset(project.export_path, cache_dir=tmp_path)
    got = ds.__getitems__([3, 0, 2])
    assert isinstance(got, HostBatch)
    fast, slow = collate_samples(got), collate_samples([ds[3], ds[0], ds[2]])
    assert fast.keys() == slow.keys()
    for k in fast:
        if hasattr(fast[k], "shape"):
            torch.testing.assert_close(fast[k], slow[k], rtol=0, atol=0, equal_nan=True, msg=k)
        else:
            assert fast[k] == slow[k], k


def _local_files_export(root: Path, n: int = 3, keep: int = 0) -> Path:
    """An export whose tasks (all but the first ``keep``) name ``/data/local-files/?d=``."""
    path = make_export(root, n=n)
    tasks = json.loads(path.read_text())
    for i, task in enumerate(tasks[keep:], start=keep):
        task["data"]["image"] = f"/data/local-files/?d=img{i}.png"
    path.write_text(json.dumps(tasks))
    return path


def test_all_rejected_raises_with_reason_and_fix(tmp_path: Path) -> None:
    export = _local_files_export(tmp_path / "proj")
    cache = tmp_path / "cache"
    ds = LabelStudioDataset(export, cache_dir=cache)
    with pytest.raises(UserError) as exc:
        len(ds)
    msg = str(exc.value)
    assert "\n" not in msg and str(export) in msg and "3 of 3" in msg
    assert "a local file" in msg and "local_files_root=" in msg
    report = cache / f"{ds.key}.rejected.jsonl"
    assert str(report) in msg and len(report.read_text().splitlines()) == 3
    assert not ds.path.exists() and not list(cache.glob("*.partial"))  # no empty entry
    with pytest.raises(UserError, match="local_files_root="):  # still loud, not cached empty
        len(LabelStudioDataset(export, cache_dir=cache))
    fixed = LabelStudioDataset(export, cache_dir=cache, local_files_root=export.parent)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(fixed) == 3 and fixed.rejected == []


def test_some_rejected_warns_and_lists_them(tmp_path: Path) -> None:
    export = _local_files_export(tmp_path / "proj", n=4, keep=2)
    cache = tmp_path / "cache"
    ds = LabelStudioDataset(export, cache_dir=cache)
    with pytest.warns(UserWarning) as rec:
        assert len(ds) == 2
    msg = str(rec[0].message)
    assert "2 of 4 task(s) rejected" in msg and "2 sample(s) kept" in msg
    assert str(ds.path / "rejected.jsonl") in msg
    assert [(r["index"], r["task_id"]) for r in ds.rejected] == [(2, 102), (3, 103)]
    assert all("a local file" in r["reason"] for r in ds.rejected)
    stamp = (ds.path / "manifest.json").stat().st_mtime_ns
    again = LabelStudioDataset(export, cache_dir=cache)  # opened from the cache entry
    with pytest.warns(UserWarning, match="2 of 4"):
        assert again.rejected == ds.rejected
    assert len(again) == 2 and (again.path / "manifest.json").stat().st_mtime_ns == stamp


def test_none_rejected_no_warning(project, tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = LabelStudioDataset(project.export_path, cache_dir=tmp_path)
        assert len(ds) > 0 and ds.rejected == []
        again = LabelStudioDataset(project.export_path, cache_dir=tmp_path)
        assert again.rejected == [] and len(again) == len(ds)


# --- the CLI's import options, passed through -------------------------------------------

def _png(color: tuple[int, int, int]) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (6, 5), color).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture()
def image_server():
    """PNGs on 127.0.0.1: ``/img<i>.png`` is colour (i, 2i, 3i)."""
    import http.server

    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            hits.append(self.path)
            name = self.path.split("?")[0]
            ok = name.startswith("/img") and name.endswith(".png")
            body = _png((int(name[4:-4]),) * 3) if ok else b"no"
            self.send_response(200 if ok else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with serving(Handler) as port:
        yield f"127.0.0.1:{port}", hits


def _url_export(tmp_path: Path, host: str, n: int = 4) -> Path:
    path = tmp_path / "urls.json"
    path.write_text(json.dumps([{"id": i, "data": {"image": f"http://{host}/img{i}.png"},
                                 "annotations": []} for i in range(n)]))
    return path


def test_bad_import_options_are_the_clis_one_line_errors(tmp_path: Path) -> None:
    """The CLI's checks (``shards.importer``), naming keywords, as ValueError / TypeError."""
    export = make_export(tmp_path / "proj", n=2)
    cache = tmp_path / "cache"
    cases = [({"allow_download": True}, "name them", ValueError),
             ({"allow_download": ""}, "^allow_download= needs the hosts", ValueError),
             ({"allow_download": [" "]}, "^allow_download= needs the hosts", ValueError),
             ({"allow_download": [3]}, "^allow_download= 3: not a host name", TypeError),
             ({"allow_download": "http://cdn.example.com/x"}, "name a host", ValueError),
             ({"storage_endpoint": "ftp://obs.example.com"},
              r"^storage_endpoint=ftp://obs.example.com: expected http", ValueError),
             ({"storage_endpoint": "https://AKIAKEY:s3cretPw@obs.example.com"},
              "^storage_endpoint=: credentials do not belong in the URL", ValueError),
             ({"download_workers": 0}, r"^download_workers=0: must be at least 1", ValueError),
             ({"download_workers": "8"}, r"^download_workers='8': .* \(int\)", TypeError),
             ({"max_download_bytes": 0}, r"^max_download_bytes=0: must be positive",
              ValueError),
             ({"timeout": -1}, r"^timeout=-1: must be a positive number of seconds",
              ValueError),
             ({"shard_size": 0}, r"^shard_size=0: must be at least 1", ValueError),
             ({"workers": 0}, r"^workers=0: must be at least 1", ValueError),
             ({"reencode": "png:3"}, r"^reencode=png:3: expected jpeg:Q", ValueError),
             ({"restart_markers": False}, r"^restart_markers=False needs store=encoded",
              ValueError),
             ({"storage": "x"}, "^unknown option.* storage — use ", TypeError),
             ({"resume": True}, "^unknown option.* resume — use ", TypeError)]
    for kw, match, builtin in cases:
        with pytest.raises(UserError, match=match) as e:
            LabelStudioDataset(export, cache_dir=cache, **kw)
        assert isinstance(e.value, builtin), (kw, type(e.value))
        assert "\n" not in str(e.value) and "s3cretPw" not in str(e.value), kw
        assert "--" not in str(e.value), kw  # keywords for a Python caller, never flags
    with pytest.raises(ValueError, match="^store=x: unknown — use raw or encoded"):
        LabelStudioDataset(export, cache_dir=cache, store="x")
    with pytest.raises(FileNotFoundError, match="export not found"):
        LabelStudioDataset(tmp_path / "none.json", cache_dir=cache)
    assert not cache.exists()  # refused before anything was read or written


def test_download_options_reach_the_import(tmp_path: Path, image_server,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from npu_data.annotations import fetch

    host, hits = image_server
    monkeypatch.setenv("NPU_DATA_CACHE", str(tmp_path / "user-cache"))
    export = _url_export(tmp_path, host)
    threads: set[str] = set()
    real = fetch.download

    def download(*a, **kw):
        threads.add(threading.current_thread().name)
        return real(*a, **kw)

    monkeypatch.setattr(fetch, "download", download)
    ds = LabelStudioDataset(export, cache_dir=tmp_path / "c", allow_download=[host],
                            download_workers=3, timeout=5, max_download_bytes=1 << 20,
                            storage_endpoint="http://127.0.0.1:9")
    assert [ds[i]["image"][0, 0].tolist() for i in range(4)] == [[i] * 3 for i in range(4)]
    assert threads and all(t.startswith("npu-data-fetch") for t in threads)
    record = ds.manifest["options"]["images"]
    assert record["storage_endpoint"] == "http://127.0.0.1:9"
    assert (record["download_workers"], record["max_download_bytes"]) == (3, 1 << 20)
    # how many fetch at once is not what is imported: the same cache entry
    again = LabelStudioDataset(export, cache_dir=tmp_path / "c", allow_download=[host],
                               download_workers=1, timeout=9, max_download_bytes=1 << 20,
                               storage_endpoint="http://127.0.0.1:9")
    assert again.path == ds.path
    # the size cap is honoured: every image over it, nothing kept, the fix named
    with pytest.raises(UserError, match=r"larger than the download cap.*max_download_bytes="):
        len(LabelStudioDataset(export, cache_dir=tmp_path / "c", allow_download=host,
                               max_download_bytes=20))
    # strict: the first task that cannot be downloaded stops the import
    tasks = json.loads(export.read_text())
    tasks[2]["data"]["image"] = tasks[2]["data"]["image"].replace("127.0.0.1", "localhost")
    export.write_text(json.dumps(tasks))
    with pytest.raises(UserError, match=r"^task 2 \(#2\): .*host localhost is not one that "
                                        "allow_download= names .* drop strict= to skip it"):
        len(LabelStudioDataset(export, cache_dir=tmp_path / "c", allow_download=host,
                               strict=True))
    assert not any("localhost" in h for h in hits)
    lenient = LabelStudioDataset(export, cache_dir=tmp_path / "c", allow_download=host)
    with pytest.warns(UserWarning, match="1 of 4 task"):
        assert len(lenient) == 3


def test_images_root_confines_absolute_paths(tmp_path: Path) -> None:
    root = tmp_path / "images"
    root.mkdir()
    for i in range(2):
        (root / f"a{i}.png").write_bytes(_png((9, 9, 9)))
    export = tmp_path / "proj" / "abs.json"
    export.parent.mkdir()
    export.write_text(json.dumps([{"id": i, "data": {"image": str(root / f"a{i}.png")}}
                                  for i in range(2)]))
    with pytest.raises(UserError, match="outside the images root.*pass images_root="):
        len(LabelStudioDataset(export, cache_dir=tmp_path / "c"))
    ok = LabelStudioDataset(export, images_root=root, cache_dir=tmp_path / "c")
    assert len(ok) == 2 and ok[1]["image"][0, 0].tolist() == [9, 9, 9]


def test_default_cache_is_private(project, tmp_path: Path, monkeypatch) -> None:
    """Without cache_dir the imported images go to the user's cache, readable by them only."""
    import stat

    monkeypatch.setenv("NPU_DATA_CACHE", str(tmp_path / "user-cache"))
    ds = LabelStudioDataset(project.export_path)
    assert len(ds) > 0 and ds.cache_dir == tmp_path / "user-cache" / "datasets"
    assert stat.S_IMODE(ds.cache_dir.stat().st_mode) == 0o700
