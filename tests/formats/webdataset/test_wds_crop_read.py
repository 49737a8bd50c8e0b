"""Crop at read for WebDataset streams (loaders.request, loaders.assemble): batches, key for key and bit for
bit, equal to decoding every JPEG whole and cropping after — in workers 0 and 2, persistent
ones included, over several epochs and repeats."""

from __future__ import annotations

import gc
import io
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
import torch

from npu_data import codecs
from npu_data.annotations.images import ImageOptions
from npu_data.batch import BatchRequest, HostBatch
from npu_data.cli import main
from npu_data.errors import UserError
from npu_data.formats.webdataset import stages
from npu_data.formats.webdataset.stream import WebDatasetStream
from npu_data.loaders import DataLoader, collate_samples
from npu_data.shards.writer import WriteOptions, write_dataset
from npu_data.transforms import RandomHorizontalFlip, RandomResizedCrop, _native
from tests.support.compare import same_loader_batch
from tests.support.pipelines import crop_pipeline
from tests.support.stores import import_sample


@pytest.fixture(scope="module")
def tars(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """3 tars (4, 4, 1 samples) of JPEGs (landscape and portrait) with every geometry kind:
    boxes, rotated boxes, polygons, keypoints, ellipses, masks."""
    tmp = tmp_path_factory.mktemp("wds_crop")
    ds = import_sample(tmp, "encoded")
    assert main(["export-wds", str(ds), "--out", str(tmp / "t" / "p-%03d.tar"),
                 "--maxcount", "4"]) == 0
    return sorted(str(p) for p in (tmp / "t").glob("p-*.tar"))


def _xmp_rotated(jpeg: bytes, orientation: int) -> bytes:
    """``jpeg`` with an XMP packet (no EXIF) holding ``tiff:Orientation`` (Pillow applies it)."""
    xmp = (b'http://ns.adobe.com/xap/1.0/\x00<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF '
           b'xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"><rdf:Description '
           b'xmlns:tiff="http://ns.adobe.com/tiff/1.0/" tiff:Orientation="'
           + str(orientation).encode() + b'"/></rdf:RDF></x:xmpmeta>')
    return jpeg[:2] + b"\xff\xe1" + (len(xmp) + 2).to_bytes(2, "big") + xmp + jpeg[2:]


@pytest.fixture(scope="module")
def odd_tars(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Tars of JPEGs as cameras and tools write them — 4:2:0 (most), 4:4:4, progressive,
    greyscale, CMYK, EXIF-rotated (180 and 90 degrees), XMP-rotated — and one PNG."""
    from PIL import Image

    from npu_data.tools.sample_data import make_bench_images

    tmp = tmp_path_factory.mktemp("wds_crop_odd")
    project = make_bench_images(tmp / "proj", n=14, width=97, height=61)
    files = sorted(project.images_dir.glob("*.jpg"))
    rgb = [Image.open(f).convert("RGB") for f in files]
    rgb[1].save(files[1], quality=85, subsampling=0)
    rgb[2].save(files[2], quality=85, progressive=True)
    rgb[3].convert("L").save(files[3], quality=85)
    rgb[4].convert("CMYK").save(files[4], quality=85)
    for i, orientation in ((5, 3), (6, 6)):
        exif = Image.Exif()
        exif[0x0112] = orientation
        rgb[i].save(files[i], quality=85, exif=exif.tobytes())
    buf = io.BytesIO()
    rgb[7].save(buf, "JPEG", quality=85)
    files[7].write_bytes(_xmp_rotated(buf.getvalue(), 3))
    write_dataset(project.export_path, tmp / "enc",
                  WriteOptions(store="encoded", shard_size=7,
                               images=ImageOptions(images_root=project.export_path.parent)))
    assert main(["export-wds", str(tmp / "enc"), "--out", str(tmp / "t" / "o-%03d.tar"),
                 "--maxcount", "5"]) == 0
    out = sorted(str(p) for p in (tmp / "t").glob("o-*.tar"))
    _to_png(out[2], 0)  # the first sample of the last tar (a plain JPEG) becomes a PNG
    return out


def _to_png(path: str, which: int) -> None:
    from PIL import Image

    with tarfile.open(path) as t:
        members = [(m, t.extractfile(m).read()) for m in t.getmembers()]  # type: ignore[union-attr]
    key = sorted({m.name.split(".", 1)[0] for m, _ in members})[which]
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
        for m, data in members:
            if m.name == f"{key}.jpg":
                png = io.BytesIO()
                Image.fromarray(stages.decode_image(data)).save(png, "PNG")
                m, data = tarfile.TarInfo(f"{key}.png"), png.getvalue()
            elif m.name == f"{key}.json":
                ann = orjson.loads(data)
                ann["image_ext"] = "png"
                data = orjson.dumps(ann, option=orjson.OPT_SORT_KEYS)
                m = tarfile.TarInfo(m.name)
            m.size = len(data)
            t.addfile(m, io.BytesIO(data))


def _passes(urls: list[str], read_crop: bool, kind: str = "pipeline", **kw: Any
            ) -> list[dict[str, Any]]:
    """Two epochs (set_epoch), then a pass that repeats the last epoch (new augmentation)."""
    stream = WebDatasetStream(urls, shuffle=True, seed=5, buffer=3, rank=0, world_size=1)
    args: dict[str, Any] = {"batch_size": 4, "seed": 3, "device": "cpu",
                            "transform": crop_pipeline(kind), "read_crop": read_crop}
    args.update(kw)
    loader = DataLoader(stream, **args)
    out = []
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        out += list(loader)
    return out + list(loader)


@pytest.fixture()
def cropped(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each batch the main process got was cropped while read."""
    seen: list[bool] = []
    real = DataLoader._host_request

    def spy(self: DataLoader, host: Any, epoch: int) -> Any:
        seen.append(isinstance(host, HostBatch) and host.cropped)
        return real(self, host, epoch)

    monkeypatch.setattr(DataLoader, "_host_request", spy)
    return seen


@pytest.mark.parametrize("workers", [0, 2])
def test_stream_crop_at_read_equals_full_decode(tars: list[str], workers: int,
                                                cropped: list[bool]) -> None:
    kw = {"num_workers": workers, "persistent_workers": workers > 0}
    after = _passes(tars, False, **kw)
    assert not any(cropped)
    cropped.clear()
    during = _passes(tars, True, **kw)
    assert len(after) == len(during) >= 9  # 3 passes of 9 samples in batches of 4
    assert cropped == [True] * len(during)  # every batch was cropped in the stream
    for a, b in zip(after, during, strict=True):
        same_loader_batch(a, b)  # every key: image, sizes, boxes, polygons, masks, ..., aug
    assert not torch.equal(after[0]["image"], after[len(after) // 3]["image"])


@pytest.mark.slow
def test_stream_crop_at_read_in_fresh_workers_and_every_pipeline(tars: list[str]) -> None:
    for a, b in zip(_passes(tars, False, num_workers=2), _passes(tars, True, num_workers=2),
                    strict=True):
        same_loader_batch(a, b)
    for kind in ("rrc", "resize", "center", "resize_crop", "resize_int", "center_pad"):
        for a, b in zip(_passes(tars, False, kind), _passes(tars, True, kind), strict=True):
            same_loader_batch(a, b)
    with _native.disabled():  # the pure-torch crop, JPEGs decoded whole
        torch_kernels = _passes(tars, True, "rrc")
    for a, b in zip(_passes(tars, False, "rrc"), torch_kernels, strict=True):
        same_loader_batch(a, b)


def test_only_plain_jpegs_skip_the_full_decode(odd_tars: list[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    whole: list[tuple[int, ...]] = []
    real = stages.decode_image

    def spy(data: bytes) -> np.ndarray:
        whole.append(real(data).shape)
        return real(data)

    monkeypatch.setattr(stages, "decode_image", spy)
    after = _passes(odd_tars, False, batch_size=5)
    assert len(whole) == 3 * 14 and (97, 61, 3) in whole  # the 90-degree EXIF turn
    whole.clear()
    during = _passes(odd_tars, True, batch_size=5)
    for a, b in zip(after, during, strict=True):
        same_loader_batch(a, b)
    # CMYK, the EXIF- and XMP-rotated JPEGs and the PNG decode whole, in every pass; every
    # JPEG where libjpeg-turbo's region decoder is missing
    assert len(whole) == 3 * (5 if codecs.jpeg_ops() is not None else 14), whole


def test_persistent_workers_started_before_the_transform_changed(tars: list[str],
                                                                 cropped: list[bool]) -> None:
    def run(read_crop: bool) -> list[dict[str, Any]]:
        stream = WebDatasetStream(tars, shuffle=True, seed=5, buffer=3, rank=0, world_size=1)
        loader = DataLoader(stream, batch_size=4, seed=3, device="cpu", num_workers=2,
                            persistent_workers=True, transform=crop_pipeline("pipeline"),
                            read_crop=read_crop)
        out = list(loader)
        loader.transform = RandomResizedCrop(16)  # the started workers keep the old crop
        out += list(loader)
        return out

    after = run(False)
    cropped.clear()
    during = run(True)
    assert cropped == [True] * 3 + [False] * 3  # then cropped in the main process
    for a, b in zip(after, during, strict=True):
        same_loader_batch(a, b)
    assert during[-1]["image"].shape[2:] == (16, 16)


def test_other_readers_of_the_stream_get_full_samples(tars: list[str]) -> None:
    stream = WebDatasetStream(tars, rank=0, world_size=1)
    loader = DataLoader(stream, batch_size=4, device="cpu", transform=crop_pipeline("rrc"))
    assert [b["image"].shape[2:] for b in loader] == [(24, 24)] * 3  # on by default on CPU
    batch = next(iter(loader))  # a pass left early is disarmed when dropped
    gc.collect()
    assert batch["image"].shape[2:] == (24, 24) and "__stored_sizes__" not in batch
    for s in stream:
        assert isinstance(s["image"], np.ndarray) and "__read_crop__" not in s
    torch_loader = torch.utils.data.DataLoader(stream, batch_size=4, num_workers=1,
                                               collate_fn=collate_samples)
    assert all(b["image"].shape[2] in (72, 96) for b in torch_loader)


def test_read_crop_true_on_a_stream_says_why_it_cannot(tars: list[str]) -> None:
    stream = WebDatasetStream(tars, rank=0, world_size=1)
    with pytest.raises(UserError, match="no batches"):
        DataLoader(stream, batch_size=None, read_crop=True, transform=crop_pipeline("rrc"))
    with pytest.raises(UserError, match="collate_fn gets the full samples"):
        DataLoader(stream, batch_size=2, read_crop=True, transform=crop_pipeline("rrc"),
                   collate_fn=list)
    with pytest.raises(UserError, match="does not start with an npu_data crop"):
        DataLoader(stream, batch_size=2, read_crop=True, transform=RandomHorizontalFlip())


def test_a_batch_cropped_for_another_pass_is_refused(tars: list[str]) -> None:
    loader = DataLoader(WebDatasetStream(tars, rank=0, world_size=1), batch_size=1, seed=3,
                        device="cpu", transform=crop_pipeline("rrc"))
    request = BatchRequest((0,), np.zeros(1, np.int64), seed=3, epoch=1)
    host = HostBatch.of({"sizes": torch.ones(1, 2, dtype=torch.int64)}, None, request)
    assert loader._host_request(host, 1)[0].keys() == {"sizes"}
    with pytest.raises(UserError, match="two loaders at once"):
        loader._host_request(host, 2)


def test_decode_fast_reaches_the_stream(tmp_path: Path) -> None:
    """decode="fast" DCT-scales a stream's JPEG boxes as it does a ShardDataset's: the same
    pixels per sample as the shards the tars came from, not those of the exact decode."""
    from npu_data.shards.reader import ShardDataset

    ds = import_sample(tmp_path, "encoded")
    assert main(["export-wds", str(ds), "--out", str(tmp_path / "f-%03d.tar")]) == 0
    urls = sorted(str(p) for p in tmp_path.glob("f-*.tar"))

    def per_sample(dataset: Any, decode: str) -> dict[int, torch.Tensor]:
        loader = DataLoader(dataset, batch_size=4, seed=3, device="cpu", decode=decode,
                            transform=RandomResizedCrop(12, scale=(0.5, 1.0)))
        return {int(i): b["image"][j] for b in loader for j, i in enumerate(b["index"])}

    shards = per_sample(ShardDataset(ds), "fast")
    stream = per_sample(WebDatasetStream(urls, rank=0, world_size=1), "fast")
    exact = per_sample(WebDatasetStream(urls, rank=0, world_size=1), "exact")
    assert shards.keys() == stream.keys() == exact.keys()
    assert all(torch.equal(shards[i], stream[i]) for i in shards)
    assert not all(torch.equal(exact[i], stream[i]) for i in shards)


def test_a_cut_off_jpeg_is_refused_not_filled_grey(tars: list[str], tmp_path: Path) -> None:
    """A tar member JPEG that ends early: Pillow refuses it ("image file is truncated"); the
    region decoder must not hand back grey rows instead (libjpeg fills them and only warns)."""
    src = tmp_path / "cut.tar"
    with tarfile.open(tars[0]) as old, tarfile.open(src, "w") as new:
        cut = None
        for m in old.getmembers():
            data = old.extractfile(m).read()  # type: ignore[union-attr]
            if cut is None and m.name.endswith(".jpg"):
                cut, data = m.name.split(".")[0], data[:len(data) // 3]
                m.size = len(data)
            new.addfile(m, io.BytesIO(data))
    assert cut is not None
    for read_crop in (False, True):
        stream = WebDatasetStream([str(src)], shuffle=False, rank=0, world_size=1)
        loader = DataLoader(stream, batch_size=4, device="cpu", read_crop=read_crop,
                            transform=RandomResizedCrop(16, scale=(0.9, 1.0)))
        with pytest.raises(UserError) as info:
            list(loader)
        assert cut in str(info.value) and "truncated" in str(info.value), str(info.value)


def test_a_stream_batch_calls_two_transforms_functions(tars: list[str]) -> None:
    """A stream's path: its request drawn where the batch is assembled (``Pipeline.draw_for``,
    its sample ids known there), the crop applied by the reader (``readers.read_crop``), the
    rest run after it (``Pipeline.finish``) — the loaders call these two transforms functions
    and no other, batch after batch."""
    from npu_data.bench.batch_path import trace

    stream = WebDatasetStream(tars, shuffle=False, rank=0, world_size=1)
    loader = DataLoader(stream, batch_size=4, seed=3, device="cpu",
                        transform=crop_pipeline("pipeline"))
    assert len(list(loader)) == 3  # warm-up: compiled kernels, caches, lazy imports
    batches: list[Any] = []
    summary = trace(lambda: batches.extend(loader)).summary()
    assert len(batches) == 3 and batches[0]["image"].shape[-2:] == (24, 24)
    assert summary["loaders_transforms_function_names"] == [
        "npu_data.transforms.pipeline:Pipeline.draw_for",
        "npu_data.transforms.pipeline:Pipeline.finish"]
    assert summary["loaders_transforms_calls"] == 2 * len(batches)
    assert "npu_data.readers.read_crop" in summary["module_names"]
