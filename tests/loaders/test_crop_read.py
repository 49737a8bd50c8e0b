"""Crop at read (loaders.request, loaders.assemble): the leading crop applied while a batch is read gives the
same batches, key for key and bit for bit, as reading full images and cropping after."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from npu_data import codecs
from npu_data.annotations.images import ImageOptions
from npu_data.errors import UserError
from npu_data.loaders import DataLoader
from npu_data.readers import read_crop as reader
from npu_data.shards.reader import ShardDataset
from npu_data.shards.writer import WriteOptions, write_dataset
from npu_data.transforms import (
    RandomHorizontalFlip,
    RandomResizedCrop,
    ResizeCrop,
    _native,
)
from tests.support.compare import same_loader_batch
from tests.support.pipelines import crop_pipeline


def _batches(ds: ShardDataset, read_crop: bool, kind: str, **kw: Any) -> list[dict[str, Any]]:
    args: dict[str, Any] = {"batch_size": 6, "shuffle": True, "seed": 3, "device": "cpu",
                            "transform": crop_pipeline(kind), "read_crop": read_crop}
    args.update(kw)
    loader = DataLoader(ds, **args)
    return [b for _ in range(2) for b in loader]  # two epochs: new boxes in the second


@pytest.mark.parametrize("store", ["raw", "encoded"])
@pytest.mark.parametrize("kind", ["pipeline", "rrc", "resize", "center", "resize_crop",
                                  "resize_center", "resize_int", "resize_int_jitter",
                                  "center_pad"])
def test_crop_at_read_equals_crop_after_read(stores: dict[str, ShardDataset], store: str,
                                             kind: str) -> None:
    ds = stores[store]
    after = _batches(ds, False, kind)
    during = _batches(ds, True, kind)
    assert len(after) == len(during) == 8
    for a, b in zip(after, during, strict=True):
        same_loader_batch(a, b)  # every key: image, sizes, boxes, polygons, masks, ..., aug


def test_a_window_decodes_only_the_pixels_it_reads(jpegs: ShardDataset,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """ResizeCrop keeps one axis whole and crops the other: the JPEG region decoded is the
    window's support (Pillow's taps), narrower than the image, and the batch is unchanged
    (``test_jpeg_regions_decode_to_the_full_decode_cropped``)."""
    seen: list[tuple[np.ndarray, np.ndarray]] = []
    real = reader.decode_boxes

    def spy(images: Any, boxes: torch.Tensor, *rest: Any, **kw: Any) -> Any:
        if kw.get("regions") is not None:
            seen.append((kw["regions"].copy(), boxes.numpy().copy()))
        return real(images, boxes, *rest, **kw)

    monkeypatch.setattr(reader, "decode_boxes", spy)
    loader = DataLoader(jpegs, batch_size=6, device="cpu", seed=1,
                        transform=ResizeCrop((16, 16), crop="random"))
    batches = list(loader)
    assert seen and len(batches) == len(seen)
    for regions, boxes in seen:
        assert (regions[:, 2:] <= boxes[:, 2:]).all()  # never more than the image
        assert (regions[:, :2] >= 0).all()
        smaller = (regions[:, 2] < boxes[:, 2]) | (regions[:, 3] < boxes[:, 3])
        assert smaller.any()  # non-square images: the cropped axis is decoded in part


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


@pytest.mark.parametrize("read_crop", [True, False])
def test_every_batch_tensor_can_be_pinned(stores: dict[str, ShardDataset],
                                          read_crop: bool) -> None:
    """torch's pin-memory thread copies each tensor into a pinned one of the same strides,
    which raises for a view whose elements share memory (an ``expand``): seen on a GPU."""
    for kind in ("pipeline", "rrc", "resize", "center", "resize_crop", "resize_int"):
        for batch in _batches(stores["encoded"], read_crop, kind):
            for t in _tensors(batch):
                torch.empty_strided(t.shape, t.stride(), dtype=t.dtype).copy_(t)


def test_crop_at_read_in_workers_and_with_the_torch_kernels(
        stores: dict[str, ShardDataset]) -> None:
    ds = stores["raw"]
    after = _batches(ds, False, "pipeline")
    workers = _batches(ds, True, "pipeline", num_workers=2, persistent_workers=True)
    for a, b in zip(after, workers, strict=True):
        same_loader_batch(a, b)
    for kind in ("rrc", "resize_crop", "resize_int_jitter"):
        with _native.disabled():  # the pure-torch kernels: the crop one sample at a time
            torch_kernels = _batches(ds, True, kind)
        for a, b in zip(_batches(ds, False, kind), torch_kernels, strict=True):
            same_loader_batch(a, b)


def test_crop_at_read_is_the_default_on_the_cpu(stores: dict[str, ShardDataset],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, ...]] = []
    real = reader.read

    def spy(*args: Any) -> Any:
        out = real(*args)
        calls.append(tuple(out["image"].shape))
        return out

    monkeypatch.setattr(reader, "read", spy)
    batch = next(iter(DataLoader(stores["raw"], batch_size=4, device="cpu",
                                 transform=crop_pipeline("pipeline"))))
    assert calls and set(calls) == {(4, 3, 24, 24)} and batch["image"].shape == (4, 3, 24, 24)
    calls.clear()
    next(iter(DataLoader(stores["raw"], batch_size=4, device="cpu", read_crop=False,
                         transform=crop_pipeline("pipeline"))))
    assert calls == []


def test_read_crop_true_says_why_it_cannot(stores: dict[str, ShardDataset],
                                           tmp_path: Path) -> None:
    ds = stores["raw"]
    with pytest.raises(UserError, match="collate_fn gets the full samples"):
        DataLoader(ds, batch_size=2, read_crop=True, transform=crop_pipeline("rrc"),
                   collate_fn=list)
    with pytest.raises(UserError, match="does not start with an npu_data crop"):
        DataLoader(ds, batch_size=2, read_crop=True, transform=RandomHorizontalFlip())
    with pytest.raises(UserError, match="not a ShardDataset"):
        DataLoader(list(range(4)), batch_size=2, read_crop=True, transform=crop_pipeline("rrc"))
    with pytest.raises(UserError, match="must be True, False or None"):
        DataLoader(ds, batch_size=2, read_crop="yes")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="decode='quick' must be 'exact'"):
        DataLoader(ds, batch_size=2, decode="quick")


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory: pytest.TempPathFactory) -> ShardDataset:
    """Encoded shards of JPEGs as cameras and tools write them: 4:2:0 (most), 4:4:4,
    progressive, greyscale, CMYK, an EXIF-rotated and an XMP-rotated photo."""
    from PIL import Image

    from npu_data.tools.sample_data import make_bench_images

    tmp = tmp_path_factory.mktemp("crop_read_jpeg")
    project = make_bench_images(tmp / "proj", n=18, width=97, height=61)
    files = sorted(project.images_dir.glob("*.jpg"))
    rgb = [Image.open(f).convert("RGB") for f in files]
    rgb[1].save(files[1], quality=85, subsampling=0)           # 4:4:4
    rgb[2].save(files[2], quality=85, progressive=True)        # progressive
    rgb[3].convert("L").save(files[3], quality=85)             # greyscale
    rgb[4].convert("CMYK").save(files[4], quality=85)          # CMYK: decoded whole
    exif = Image.Exif()
    exif[0x0112] = 3                                           # upside down: decoded whole
    rgb[5].save(files[5], quality=85, exif=exif.tobytes())
    xmp = (b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/'
           b'02/22-rdf-syntax-ns#"><rdf:Description xmlns:tiff="http://ns.adobe.com/tiff/1.0/" '
           b'tiff:Orientation="3"/></rdf:RDF></x:xmpmeta>')
    rgb[6].save(files[6], quality=85, xmp=xmp)                 # XMP-rotated: decoded whole
    rgb[7].save(files[7], quality=85, xmp=xmp.replace(b'"3"', b'"1"'))  # XMP, upright
    write_dataset(project.export_path, tmp / "enc",
                  WriteOptions(store="encoded", shard_size=7,
                               images=ImageOptions(images_root=project.export_path.parent)))
    return ShardDataset(tmp / "enc")


def test_jpeg_regions_decode_to_the_full_decode_cropped(jpegs: ShardDataset,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from npu_data.batch import EncodedImage

    whole: list[int] = []
    real = EncodedImage.decode

    def spy(self: EncodedImage) -> Any:
        whole.append(self.local)
        return real(self)

    monkeypatch.setattr(EncodedImage, "decode", spy)
    for kind in ("pipeline", "rrc", "center", "resize_crop", "resize_center", "center_pad"):
        after = _batches(jpegs, False, kind, batch_size=5)
        assert not whole
        during = _batches(jpegs, True, kind, batch_size=5)
        for a, b in zip(after, during, strict=True):
            same_loader_batch(a, b)
        # only the CMYK, the EXIF-rotated and the XMP-rotated JPEG were decoded whole (twice:
        # two epochs); every JPEG where libjpeg-turbo's headers are missing (no region decoder)
        assert len(whole) == (6 if codecs.jpeg_ops() is not None else 2 * len(jpegs)), whole
        whole.clear()


def test_fast_decode_scales_big_boxes_and_keeps_everything_else(jpegs: ShardDataset) -> None:
    """decode="fast": a box at least twice the output is decoded DCT-scaled — close to the
    exact pixels, not equal; parameters and geometry unchanged; small boxes stay exact."""
    kw: dict[str, Any] = {"batch_size": 6, "transform": RandomResizedCrop(8, scale=(0.3, 1))}
    exact = _batches(jpegs, True, "rrc", **kw)
    fast = _batches(jpegs, True, "rrc", decode="fast", **kw)
    changed = 0
    for a, b in zip(exact, fast, strict=True):
        same_loader_batch({k: v for k, v in a.items() if k != "image"},
                    {k: v for k, v in b.items() if k != "image"})
        d = (a["image"].to(torch.int16) - b["image"].to(torch.int16)).abs()
        changed += int((d.flatten(1).amax(1) > 0).sum())
        assert float(d.float().mean()) < 8, float(d.float().mean())
    assert changed > 0


def test_batches_kept_by_the_caller_survive_later_epochs(stores: dict[str, ShardDataset],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The loader reuses batch buffers nothing holds any more (``buffers.reused_empty``):
    a batch the caller kept, or a numpy array of one, keeps its pixels over later epochs,
    and the batches are the same as with fresh buffers."""
    from npu_data import buffers

    fresh = _batches(stores["raw"], True, "pipeline")
    monkeypatch.setattr(buffers, "_REUSE_FROM", 0)
    buffers.release_reused()
    loader = DataLoader(stores["raw"], batch_size=6, shuffle=True, seed=3, device="cpu",
                        transform=crop_pipeline("pipeline"))
    first = [b for b in loader]
    n = len(first)
    for a, b in zip(fresh[:n], first, strict=True):
        same_loader_batch(a, b)
    kept, kept_np = first[0]["image"], first[1]["image"].numpy()
    want_kept, want_np = kept.clone(), kept_np.copy()
    ptrs = {b["image"].data_ptr() for b in first[2:]}
    del first
    second = [b for b in loader]
    for a, b in zip(fresh[n:], second, strict=True):
        same_loader_batch(a, b)
    assert torch.equal(kept, want_kept) and (kept_np == want_np).all()
    assert {b["image"].data_ptr() for b in second} & ptrs, "no buffer was reused"
    buffers.release_reused()


def test_collate_samples_as_collate_fn_crops_once(stores: dict[str, ShardDataset],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """``collate_fn=collate_samples`` is the loader's own assembler: the batches are those of
    the default collate (cropped while read, the rest of the pipeline after), and the crop's
    parameters are drawn once per batch."""
    from npu_data.loaders import collate_samples
    from npu_data.transforms.crop import RandomResizedCrop as Crop

    draws: list[int] = []
    real = Crop.make_params

    def spy(self: Any, sizes: Any, *rest: Any) -> Any:
        draws.append(len(sizes))
        return real(self, sizes, *rest)

    monkeypatch.setattr(Crop, "make_params", spy)
    ds = stores["encoded"]
    default = _batches(ds, True, "pipeline")
    draws.clear()
    given = _batches(ds, True, "pipeline", collate_fn=collate_samples)
    assert len(draws) == len(given)
    for a, b in zip(default, given, strict=True):
        same_loader_batch(a, b)


def test_a_request_is_read_into_one_host_batch(stores: dict[str, ShardDataset]) -> None:
    """The loader's batch sampler yields a ``BatchRequest`` (plain data: arrays, no tensor)
    with the whole pipeline's parameters and the crop's plan; the read batch is one
    ``HostBatch`` that says the crop is applied, keeps the stored sizes and hands the
    request's parameters to the rest of the pipeline; no hidden key in the batch."""
    import pickle

    from npu_data.batch import BatchRequest, HostBatch
    from npu_data.kinds.registry import PADDED_BY_NAME
    from npu_data.loaders.assemble import collate_host

    ds = stores["encoded"]
    loader = DataLoader(ds, batch_size=4, device="cpu", seed=5, transform=crop_pipeline("pipeline"))
    loader._requests.begin(loader, 0)
    request = next(iter(loader._index_sampler))
    assert isinstance(request, BatchRequest) and request.crop is not None
    assert request.params and all(isinstance(v, np.ndarray) for v in request.params.values())
    assert pickle.loads(pickle.dumps(request)).indices == request.indices
    host = collate_host(ds.__getitems__(request))
    assert isinstance(host, HostBatch) and host.cropped and host.request is request
    assert host.image is not None and host.image.shape == (4, 3, 24, 24)
    assert (host.stored_sizes == ds.sizes()[list(request.indices)]).all()
    assert host.params is not None and host.params.keys() == request.params.keys()
    assert {k.split(".")[0] for k in host.fields if "." in k} & set(PADDED_BY_NAME)
    assert {"index", "caption"} <= set(host.fields) and host.nbytes
    assert host.nbytes == sum(t.numel() * t.element_size() for t in host.as_dict().values()
                              if isinstance(t, torch.Tensor))
    batch = host.as_dict()
    assert not [k for k in batch if k.startswith("__")]
    assert list(next(iter(loader))) == [*batch, "aug"]
