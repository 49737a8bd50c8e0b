"""`npu-data bench` writes well-formed results (not a speed test); its pipelines carry boxes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from npu_data.bench import bench_data as datasets
from npu_data.bench import chart, extras, suite
from npu_data.bench import pillow_baseline as baseline
from npu_data.bench import stage_times as stages
from npu_data.cli import main
from npu_data.transforms import geometry

PIPELINES = {"baseline", "npu_data_raw", "npu_data_encoded", "webdataset"}


def test_bench_writes_well_formed_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                        ) -> None:
    out = tmp_path / "out"
    rc = main(["bench", "--quick", "--sweep", "--images", "8", "--width", "64", "--height", "48",
               "--crop", "32", "--batch-size", "8", "--epochs", "1", "--device", "cpu",
               "--threads", "1", "--out", str(out), "--data-dir", str(tmp_path / "data")])
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["images"] == 8 and res["config"]["crop"] == 32
    assert res["machine"]["torch_threads"] == 1
    ok = {p["name"]: p for p in res["pipelines"] if p["status"] == "ok"}
    assert PIPELINES <= set(ok)  # + Kornia where it is installed
    for p in ok.values():
        assert len(p["epochs_img_s"]) == 1 and p["median_img_s"] > 0
        assert p["min_img_s"] <= p["median_img_s"] <= p["max_img_s"]
        assert p["peak_memory_mib"]["total"] >= p["peak_memory_mib"]["main"] > 10
        (main_anon, workers_anon), = p["peak_anon_mib_epochs"]  # one measured epoch
        assert 10 < main_anon <= p["peak_memory_mib"]["main"]
        assert 0 <= workers_anon <= p["peak_memory_mib"]["workers"]
        st = p["stages_ms_per_img"]
        if p["name"] == "dali":  # where installed: its stages run inside DALI, not apart
            assert st == {} and p["bound_by"] is None
            continue
        assert {"read", "collate", "h2d"} <= set(st) <= set(stages.STAGES)
        assert p["bound_by"] in st and p["bound_kind"] in {"IO", "memory", "compute"}
        assert all(v >= 0 for v in st.values()) and p["stage_img_s"] > 0
        roof = p["ceilings"]  # the row's ceilings from its stages on one thread
        assert roof["combined_ms"] == pytest.approx(
            roof["read_ms"] + roof["decode_ms"] + roof["kernels_ms"])
        assert roof["ceiling_img_s"] == pytest.approx(roof["cores"] * 1000 / roof["combined_ms"])
        assert p["pct_of_ceiling"] == pytest.approx(
            100 * p["median_img_s"] / roof["ceiling_img_s"])
    assert {"decode", "augment_cpu"} <= set(ok["baseline"]["stages_ms_per_img"])
    for name in PIPELINES - {"baseline"}:
        assert "augment" in ok[name]["stages_ms_per_img"]
    assert ok["baseline"]["ratio_to_baseline"] == 1.0
    assert all(p["reason"] for p in res["pipelines"] if p["status"] == "skipped")
    sweeps = res["sweeps"]
    assert set(sweeps) == {"workers", "batch_size", "crop", "image"}
    assert [r["value"] for r in sweeps["workers"]] == [0, 1]
    assert [r["value"] for r in sweeps["image"]] == ["64x48", "128x96"]
    assert (tmp_path / "data" / "bench_8_128x96_s0" / "wds" / "tars.json").is_file()
    for rows in sweeps.values():
        for row in rows:
            assert set(row["img_s"]) == set(res["sweep_pipelines"]) == set(suite.SWEEP_PIPELINES)
            assert all(v > 0 for v in row["img_s"].values())
    md = (out / "results.md").read_text()
    assert "vs baseline" in md and "WebDataset tars" in md
    assert all(f"- {p['label']}: " in md for p in ok.values())  # memory per epoch
    # main table, stage and ceiling tables (when it has stages)
    assert all(md.count(f"\n| {p['label']} |") == 1 + 2 * bool(p["stages_ms_per_img"])
               for p in ok.values())
    assert "combined ceiling img/s" in md
    skipped = [p for p in res["pipelines"] if p["status"] == "skipped"]
    assert all(md.count(f"| {p['label']} | skipped: {p['reason']} |") == 1 for p in skipped)
    assert all(f"Sweep over {chart.SWEEP_TITLES[k]} (" in md for k in sweeps)
    with Image.open(out / "chart.png") as im:
        assert im.format == "PNG" and im.width >= 600 and im.height > suite_chart_bars(len(ok))
    # the generated dataset (JPEGs, shards, tars) is reused on the next run
    stamp = tmp_path / "data" / "bench_8_64x48_s0" / "bench-dataset.json"
    assert stamp.is_file()
    data = datasets.ensure(tmp_path / "data", 8, 64, 48)
    assert data.tars and data.tars[0].name == "bench-0000.tar"
    before = [t.stat().st_mtime_ns for t in data.tars]
    assert [t.stat().st_mtime_ns for t in datasets.ensure(tmp_path / "data", 8, 64, 48).tars
            ] == before
    assert len(data.tars) == min(8, datasets.TARS)


def suite_chart_bars(rows: int) -> int:
    """Height of the chart without sweep panels (the sweeps add a panel row below)."""
    return 70 + rows * 50 + 50


def test_every_pipeline_carries_boxes(tmp_path: Path) -> None:
    cfg = suite.BenchConfig.quick(images=8, width=64, height=48, crop=32, batch_size=4)
    data = datasets.ensure(tmp_path, cfg.images, cfg.width, cfg.height)
    runs, skipped = suite.pipelines(data, cfg, torch.device("cpu"))
    assert PIPELINES <= {p.name for p in runs}
    if extras.installed("nvidia.dali"):  # the bench venv: measured, without boxes
        assert "dali" in {p.name for p in runs}
    else:  # the dev venv
        assert {x["name"]: x["reason"] for x in skipped}["dali"] == "not installed"
    for p in (p for p in runs if p.name in PIPELINES):
        b = next(iter(p.make()))
        assert tuple(b["image"].shape) == (4, 3, 32, 32), p.name
        xyxy, valid = b["boxes.xyxy"], b["boxes.valid"]
        assert xyxy.shape[:2] == valid.shape and xyxy.shape[0] == 4, p.name
        kept = xyxy[valid]
        assert len(kept) > 0 and bool(((kept >= 0) & (kept <= 32)).all()), p.name
        assert bool((kept[:, 2:] >= kept[:, :2]).all()), p.name


def test_pipelines_with_workers_also_run_in_process(tmp_path: Path) -> None:
    """Each own pipeline that uses workers has an in-process twin (num_workers=0, the
    DataLoader's read thread) with the same batches; a worker-less run has no twins."""
    cfg = suite.BenchConfig.quick(images=8, width=64, height=48, crop=32, batch_size=4,
                                  workers=1)
    data = datasets.ensure(tmp_path, cfg.images, cfg.width, cfg.height)
    runs = {p.name: p for p in suite.pipelines(data, cfg, torch.device("cpu"))[0]}
    for name in ("npu_data_raw", "npu_data_encoded", "webdataset"):
        twin = runs[f"{name}_in_process"]
        assert not twin.timed and "in-process" in twin.label
        a, b = twin.make(), runs[name].make()
        assert (a.num_workers, b.num_workers) == (0, 1) and a._reads_ahead()
        for x, y in zip(a, b, strict=True):
            assert torch.equal(x["image"], y["image"]), name
    cfg0 = suite.BenchConfig.quick(images=8, width=64, height=48, crop=32, batch_size=4)
    assert not [p for p in suite.pipelines(data, cfg0, torch.device("cpu"))[0]
                if p.name.endswith("_in_process")]


def test_baseline_boxes_follow_the_crop_and_flip_like_the_device_geometry() -> None:
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 400, (6, 2)).astype(np.float32)
    xyxy = np.concatenate([xy, xy + rng.uniform(1, 120, (6, 2)).astype(np.float32)], 1)
    t = baseline.Target(xyxy, np.arange(6))
    crop = [40, 25, 200, 260]  # top, left, height, width
    got = baseline.crop_boxes(t, crop, (64, 96), 0.25)
    want, keep = geometry.resized_crop_xyxy(torch.from_numpy(xyxy)[None],
                                            torch.ones(1, 6, dtype=torch.bool),
                                            torch.tensor([crop]), (64, 96), 0.25)
    assert 0 < int(keep.sum()) < 6  # some boxes dropped, some kept: both paths exercised
    np.testing.assert_allclose(got.xyxy, want[0][keep[0]].numpy(), rtol=1e-5, atol=1e-4)
    assert got.label.tolist() == torch.arange(6)[keep[0]].tolist()
    flipped = baseline.flip_boxes(got, 96)
    ref = geometry.hflip_xyxy(torch.from_numpy(got.xyxy)[None], torch.tensor([96]),
                              torch.tensor([True]))
    np.testing.assert_allclose(flipped.xyxy, ref[0].numpy(), rtol=1e-6)


def test_baseline_reads_boxes_from_the_export(tmp_path: Path) -> None:
    data = datasets.ensure(tmp_path, 3, 64, 48)
    got = baseline.targets(data.export, data.files)
    tasks = json.loads(data.export.read_text())
    rects = [[r for r in t["annotations"][0]["result"] if r["type"] == "rectanglelabels"]
             for t in tasks]
    assert [len(g.label) for g in got] == [len(r) for r in rects]
    v = rects[0][0]["value"]
    np.testing.assert_allclose(got[0].xyxy[0], [v["x"] * 0.64, v["y"] * 0.48,
                                                (v["x"] + v["width"]) * 0.64,
                                                (v["y"] + v["height"]) * 0.48], rtol=1e-5)


class _Sizes(baseline.JpegDataset):
    """A baseline dataset of its own stages: the image's size as its only pixel values."""

    pipeline = staticmethod(lambda crop: crop)

    def read(self, i: int) -> tuple[int, Path]:
        return i, self.files[i]

    def decode(self, item: tuple[int, Path]) -> tuple[int, Image.Image]:
        with Image.open(item[1]) as im:
            return item[0], im.copy()

    def augment(self, item: tuple[int, Image.Image]) -> dict[str, object]:
        i, im = item
        t = self.boxes[i]
        image = torch.full((3, self.augmentation, self.augmentation), im.width % 256)
        return {"image": image.to(torch.uint8), "boxes.xyxy": torch.from_numpy(t.xyxy),
                "boxes.label": torch.from_numpy(t.label)}


def test_one_baseline_dataset_class_serves_every_baseline_loader(tmp_path: Path) -> None:
    data = datasets.ensure(tmp_path, 4, 64, 48)
    ds = baseline.JpegReference(data.files, baseline.targets(data.export, data.files), 32)
    assert len(ds) == 4 and tuple(ds[1]["image"].shape) == (3, 32, 32)  # read, decode, augment
    batches = list(baseline.loader(data.files, 2, 0, 16, dataset=_Sizes))
    assert [tuple(b["image"].shape) for b in batches] == [(2, 3, 16, 16)] * 2
    assert all(bool((b["image"] == 64).all()) for b in batches)
    counts = sorted(int(v.sum()) for b in batches for v in b["boxes.valid"])
    assert counts == sorted(len(t.label) for t in baseline.targets(data.export, data.files))
    with pytest.raises(ValueError, match="4 files but 3 box lists"):
        _Sizes(data.files, baseline.targets(data.export, data.files)[:3])


def test_optional_frameworks_say_whether_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def absent(name: str, *args: object) -> object:
        if "." in name and name.split(".")[0] == "nvidia":
            raise ModuleNotFoundError(name)  # what find_spec does when the parent is missing
        if name in {"kornia", "ffcv"}:
            return None
        return real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(extras.importlib.util, "find_spec", absent)
    assert {x["name"]: x["reason"] for x in extras.status()} == {
        "kornia": "not installed", "dali": "not installed", "ffcv": "not installed"}
    monkeypatch.setattr(extras.importlib.util, "find_spec", lambda name, *a: object())
    reasons = {x["name"]: x["reason"] for x in extras.status()}
    assert reasons["kornia"] is None and reasons["dali"] is None  # measured when installed
    assert "installed, but" in reasons["ffcv"]


def test_dali_pipeline_takes_its_arguments_from_the_suite_augmentation(tmp_path: Path) -> None:
    """The DALI ops' arguments come from the Compose the other pipelines run (no DALI here)."""
    from npu_data.transforms import ColorJitter, Compose, RandomHorizontalFlip, RandomResizedCrop

    files = [tmp_path / "b.jpg", tmp_path / "a.jpg"]
    s = extras.dali_settings(baseline.augmentation(64), files, 16, 0, seed=3)
    assert s["pipeline"] == {"batch_size": 16, "num_threads": 2, "device_id": None,
                             "prefetch_queue_depth": 2, "seed": 3}  # 0 workers: 2 threads
    assert s["reader"] == {"files": [str(f) for f in files], "shuffle_after_epoch": True,
                           "shuffle_after_epoch_seed": 3, "pad_last_batch": True,
                           "name": extras.DALI_READER}
    assert s["decode"]["device"] == "cpu" and s["decode"]["num_attempts"] == 10
    assert s["decode"]["random_area"] == pytest.approx([0.08, 1.0])
    assert s["decode"]["random_aspect_ratio"] == pytest.approx([3 / 4, 4 / 3])
    assert s["resize"] == {"resize_y": 64, "resize_x": 64, "antialias": True}
    for k in ("brightness", "contrast", "saturation"):
        assert s["twist"][k] == pytest.approx((0.6, 1.4)), k
    assert s["twist"]["hue"] == pytest.approx((-36.0, 36.0))  # 0.1 of the circle, in degrees
    assert s["flip"] == {"probability": 0.5}
    assert "2 threads" in extras.dali_label(0) and "3 threads" in extras.dali_label(3)
    other = Compose([RandomResizedCrop((48, 32), scale=(0.5, 1.0), ratio=(0.5, 2.0)),
                     ColorJitter(hue=0.05), RandomHorizontalFlip(0.25)])
    s = extras.dali_settings(other, files, 4, 3)
    assert s["pipeline"]["num_threads"] == 3 and s["pipeline"]["batch_size"] == 4
    assert (s["resize"]["resize_y"], s["resize"]["resize_x"]) == (48, 32)
    assert s["decode"]["random_area"] == [0.5, 1.0]
    assert s["decode"]["random_aspect_ratio"] == [0.5, 2.0]
    assert s["twist"]["hue"] == pytest.approx((-18.0, 18.0))
    assert all(s["twist"][k] == (1.0, 1.0) for k in ("brightness", "contrast", "saturation"))
    assert s["flip"] == {"probability": 0.25}


def test_bound_stage_weighs_worker_stages_by_the_worker_count() -> None:
    st = {"read": 1.0, "decode": 3.0, "collate": 1.0, "h2d": 0.5, "augment": 2.0}
    assert stages.bound(st, 0)["bound_by"] == "decode"  # one process: the costliest stage
    assert stages.bound(st, 0)["stage_img_s"] == pytest.approx(1000 / 7.5)
    two = stages.bound(st, 2)  # workers: (1+3+1)/2 = 2.5 ms vs main 2.5 ms -> workers
    assert two["bound_by"] == "decode" and two["bound_kind"] == "compute"
    four = stages.bound(st, 4)  # 1.25 ms in workers vs 2.5 ms on the main process
    assert four["bound_by"] == "augment" and four["stage_img_s"] == pytest.approx(400)


def test_ceilings_spread_the_one_core_costs_over_the_cores() -> None:
    st = {"read": 0.5, "decode": 1.5, "augment_cpu": 0.5, "collate": 1.0, "h2d": 0.5,
          "augment": 0.5}
    cpu = stages.ceilings(st, 4, host_augment=True)  # collate and the copy are not counted
    assert (cpu["read_ms"], cpu["decode_ms"], cpu["kernels_ms"]) == (0.5, 1.5, 1.0)
    assert cpu["ceiling_img_s"] == pytest.approx(4 * 1000 / 3.0)
    assert cpu["decode_img_s"] == pytest.approx(4 * 1000 / 1.5)
    accel = stages.ceilings(st, 4, host_augment=False)  # the device runs the augmentation
    assert accel["kernels_ms"] == 0.5 and accel["ceiling_img_s"] == pytest.approx(1600)
    assert stages.ceilings({}, 4, True) == {}  # no stages (DALI): no ceilings


def test_bench_rejects_bad_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--images", "0", "--out", str(tmp_path)]) == 1
    assert "--images must be at least 1" in capsys.readouterr().err


def test_kernel_bench_rows_cover_every_kernel_and_both_cpu_implementations() -> None:
    import math

    from npu_data.bench import kernels

    rows = kernels.run("cpu", batch=2, repeats=1)
    names = [r["kernel"] for r in rows]
    assert names[0].startswith("resized_crop") and "adjust_hue" in names
    assert names[-2].startswith("Compose") and any(n.startswith("ColorJitter") for n in names)
    assert names[-1].startswith("keyed host draw")
    for r in rows:
        assert r["batch_ms_per_image"] > 0 and r["torch_kernels_ms_per_image"] > 0, r
        if r["kernel"] not in kernels._NO_REFERENCE:  # those rows have no per-sample Pillow op
            assert math.isfinite(r["reference_ms_per_image"]) and r["speedup"] > 0, r


def test_bench_fails_when_an_own_pipeline_cannot_be_built(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = suite.pipelines

    def without_raw(data, cfg, device):  # type: ignore[no-untyped-def]
        runs, skipped = real(data, cfg, device)
        keep = [r for r in runs if r.name != "npu_data_raw"]
        return keep, skipped + [{"name": "npu_data_raw", "label": "npu-data, raw shards",
                                 "reason": "import failed: test"}]

    monkeypatch.setattr(suite, "pipelines", without_raw)
    rc = main(["bench", "--quick", "--images", "4", "--width", "32", "--height", "24",
               "--crop", "16", "--batch-size", "4", "--epochs", "1", "--device", "cpu",
               "--threads", "1", "--out", str(tmp_path / "out"),
               "--data-dir", str(tmp_path / "data")])
    assert rc == 1
    err = capsys.readouterr().err
    assert "npu-data, raw shards" in err and "import failed: test" in err


def test_bench_import_subcommand_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "import", "--n", "4"]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith("store=")]
    assert len(lines) == 4 and all("images/s" in ln and "(4 images" in ln for ln in lines)


def test_bench_parse_subcommand_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["bench", "parse", "--tasks", "200", "--parsers", "npu_data,stdlib",
               "--out", str(tmp_path)])
    assert rc == 0
    out = capsys.readouterr().out
    assert "npu_data" in out and "stdlib" in out


def test_bench_import_and_parse_brush_heavy(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                            ) -> None:
    assert main(["bench", "import", "--n", "2", "--brush", "3", "--stores", "raw",
                 "--workers", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("export: 2 images 500x375, 3 brush masks each; parse ")
    assert out[0].endswith("(6 masks decoded)")
    assert len(out) == 2 and out[1].startswith("store=raw      workers=1") and "(2 images" in out[1]
    rc = main(["bench", "parse", "--tasks", "6", "--brush", "2", "--parsers", "npu_data",
               "--out", str(tmp_path)])
    assert rc == 0
    assert "export: 6 tasks, 2 brush masks each" in capsys.readouterr().out
    res = json.loads((tmp_path / "parse.json").read_text())
    assert res["brush"] == 2 and [r["samples"] for r in res["results"]] == [6]
    from npu_data.annotations import parse_export

    t = parse_export(tmp_path / "export-6-brush2.json").table
    assert t.count("masks") == 12 and t.count("boxes") == 30


def test_bench_masks_are_label_studio_brush_rle() -> None:
    from label_studio_sdk.converter.brush import decode_rle as sdk_decode

    from npu_data.bench import brush

    pool = brush.rle_pool(40, 30, n=3)
    assert len({tuple(r) for r in pool}) == 3
    for rle in pool:
        alpha = sdk_decode(rle).reshape(30, 40, 4)[:, :, 3]
        assert 0 < (alpha == 255).sum() < alpha.size and set(np.unique(alpha)) <= {0, 255}


def test_memory_bench_reports_each_epoch_and_a_verdict(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from npu_data.bench import memory

    for store in ("raw", "wds"):
        assert memory.main(["--store", store, "--epochs", "2", "--images", "8",
                            "--data-dir", str(tmp_path)]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert [x.split(":")[0] for x in lines[:2]] == ["epoch 0", "epoch 1"]
        assert "(anonymous)" in lines[0] and lines[2].startswith(f"{store}, 0 worker(s)")
        assert lines[2].endswith(("(flat)", "(GROWING)"))
    with pytest.raises(SystemExit):
        memory.main(["--epochs", "1", "--data-dir", str(tmp_path)])
