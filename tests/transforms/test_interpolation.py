"""Bicubic and Lanczos resizing: every resize transform, the functional op and crop at read
equal to Pillow's ``Image.resize`` (+ crop) with that filter, 0 levels, on the torch kernels
(CUDA's and the NPU's code, run on the CPU) and the compiled CPU kernels alike."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from npu_data.annotations.images import ImageOptions
from npu_data.errors import UserError
from npu_data.loaders import DataLoader
from npu_data.shards.reader import ShardDataset
from npu_data.shards.writer import WriteOptions, write_dataset
from npu_data.tools.sample_data import make_bench_images
from npu_data.transforms import (
    CenterCrop,
    Compose,
    NpuPreprocessor,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    ResizeCenterCrop,
    ResizeCrop,
    Trait,
    reference,
)
from npu_data.transforms import functional as F
from npu_data.transforms._kernels import accelerator_path
from npu_data.transforms._kernels.crop import window_regions
from npu_data.transforms.draws import sample_keys
from tests.support.batches import edge_images, padded

FILTERS = {"bicubic": Image.Resampling.BICUBIC, "lanczos": Image.Resampling.LANCZOS}
# (height, width): odd sizes, 1-px lines, extreme aspects, up- and downscales of 64 px outputs
SIZES = [(37, 50), (50, 37), (20, 90), (64, 64), (121, 31), (9, 200), (300, 280), (5, 7),
         (1, 40), (33, 1)]


def _pil_box(img: np.ndarray, box: list[int], size: tuple[int, int], name: str) -> np.ndarray:
    """torchvision's PIL resized_crop: ``crop(box).resize(size, filter)``."""
    top, left, h, w = box
    crop = Image.fromarray(img).crop((left, top, left + w, top + h))
    return np.asarray(crop.resize((size[1], size[0]), FILTERS[name]))


def _pil_window(img: np.ndarray, box: list[int], window: list[int], size: tuple[int, int],
                name: str) -> np.ndarray:
    """``resize(full, filter)`` of the box, then the window (0 outside: CenterCrop's pad)."""
    top, left, fh, fw = window
    resized = _pil_box(img, box, (fh, fw), name)
    out = np.zeros((*size, 3), np.uint8)
    y0, x0, y1, x1 = max(top, 0), max(left, 0), min(top + size[0], fh), min(left + size[1], fw)
    if y1 > y0 and x1 > x0:
        out[y0 - top:y1 - top, x0 - left:x1 - left] = resized[y0:y1, x0:x1]
    return out


def _pil_of(params: dict[str, torch.Tensor], imgs: list[np.ndarray], i: int,
            size: tuple[int, int] | None, name: str) -> np.ndarray:
    box = [int(v) for v in params["boxes"][i]]
    if "windows" not in params:
        assert size is not None
        return _pil_box(imgs[i], box, size, name)
    valid = tuple(int(v) for v in params["out"][i])
    return _pil_window(imgs[i], box, [int(v) for v in params["windows"][i]], valid, name)


def _both_paths(fn: Any) -> list[Any]:
    """``fn()`` on the compiled CPU kernels, then on the torch kernels (the accelerators')."""
    first = fn()
    with accelerator_path():
        return [first, fn()]


@pytest.mark.parametrize("name", list(FILTERS))
@pytest.mark.parametrize("out", [(64, 64), (17, 93), (301, 5)])
def test_functional_boxes_and_windows_are_pillows(name: str, out: tuple[int, int]) -> None:
    rng = np.random.default_rng(len(name) * 100 + out[1])
    imgs = edge_images(rng, SIZES)
    batch = padded(imgs)
    boxes = []
    for j, (h, w) in enumerate(SIZES):
        ch, cw = (h, w) if j % 3 == 0 else (int(rng.integers(1, h + 1)),
                                            int(rng.integers(1, w + 1)))
        boxes.append((int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1)), ch, cw))
    bx = torch.tensor(boxes)
    full = torch.from_numpy(rng.integers(1, 350, (len(SIZES), 2)))
    windows = torch.cat([torch.from_numpy(rng.integers(-6, 60, (len(SIZES), 2))), full], 1)
    whole = torch.cat([torch.zeros(len(SIZES), 2, dtype=torch.int64), batch["sizes"]], 1)
    flip = torch.arange(len(SIZES)) % 2 == 0
    cl = batch["image"].contiguous(memory_format=torch.channels_last)
    for got in _both_paths(lambda: F.resized_crop(batch["image"], batch["sizes"], bx, out,
                                                  interpolation=name)):
        for i, img in enumerate(imgs):
            want = _pil_box(img, boxes[i], out, name)
            assert np.array_equal(got[i].permute(1, 2, 0).numpy(), want), (name, i)
    for got in _both_paths(lambda: F.resized_crop(cl, batch["sizes"], bx, out, flip=flip,
                                                  interpolation=name)):
        for i, img in enumerate(imgs):
            want = _pil_box(img, boxes[i], out, name)
            want = want[:, ::-1] if flip[i] else want
            assert np.array_equal(got[i].permute(1, 2, 0).numpy(), want), (name, i, "flip")
    for got in _both_paths(lambda: F.resized_crop(batch["image"], batch["sizes"], whole, out,
                                                  windows=windows, interpolation=name)):
        for i, img in enumerate(imgs):
            want = _pil_window(img, whole[i].tolist(), windows[i].tolist(), out, name)
            assert np.array_equal(got[i].permute(1, 2, 0).numpy(), want), (name, i, "window")


def test_the_filters_differ_and_the_clip_is_reached() -> None:
    """The filter reaches the kernels (bilinear, bicubic and Lanczos give three different
    results), and hard edges overshoot: Pillow's clip to 0..255 decides pixels."""
    img = np.zeros((40, 60, 3), np.uint8)
    img[:, ::4] = 255
    batch = padded([img])
    box = torch.tensor([[0, 0, 40, 60]])
    outs = {n: F.resized_crop(batch["image"], batch["sizes"], box, (57, 83), interpolation=n)
            for n in ("bilinear", *FILTERS)}
    assert not torch.equal(outs["bilinear"], outs["bicubic"])
    assert not torch.equal(outs["bicubic"], outs["lanczos"])
    # Pillow's float resize of one channel overshoots 255 and undershoots 0 here
    f = np.asarray(Image.fromarray(img[..., 0].astype(np.float32), "F").resize(
        (83, 57), Image.Resampling.LANCZOS))
    assert f.max() > 255.5 and f.min() < -0.5
    for n in FILTERS:
        want = _pil_box(img, [0, 0, 40, 60], (57, 83), n)
        for got in _both_paths(partial(F.resized_crop, batch["image"], batch["sizes"], box,
                                       (57, 83), interpolation=n)):
            assert np.array_equal(got[0].permute(1, 2, 0).numpy(), want)


def _transforms(name: str) -> dict[str, Any]:
    return {
        "Resize(h, w)": Resize((45, 23), interpolation=name),
        "Resize(int)": Resize(20, max_size=40, interpolation=name),
        "CenterCrop pad": CenterCrop((40, 70), interpolation=name),
        "ResizeCenterCrop": ResizeCenterCrop((30, 44), resize_size=31, interpolation=name),
        "ResizeCrop center": ResizeCrop((24, 33), interpolation=name),
        "ResizeCrop random": ResizeCrop((71, 19), crop="random", interpolation=name),
        "RandomResizedCrop": RandomResizedCrop((29, 41), scale=(0.05, 1.0),
                                               interpolation=name),
        "NpuPreprocessor 0": NpuPreprocessor(35, augment_level=0, interpolation=name),
        "NpuPreprocessor 1": NpuPreprocessor(35, augment_level=1, interpolation=name),
    }


@pytest.mark.parametrize("name", list(FILTERS))
@pytest.mark.parametrize("kind", list(_transforms("bilinear")))
def test_every_resize_transform_is_pillows(name: str, kind: str) -> None:
    t = _transforms(name)[kind]
    first = next(s for s in t.transforms if Trait.CROP in s.traits) if isinstance(t, Compose) \
        else t
    assert first.interpolation == name
    at = f"{t.transforms.index(first)}." if isinstance(t, Compose) else ""
    rng = np.random.default_rng(7)
    imgs = edge_images(rng, SIZES)
    batch = padded(imgs)
    params = t.draw_keyed(batch["sizes"].numpy(), sample_keys(5, 1, np.arange(len(SIZES))))
    crop_params = {k[len(at):]: v for k, v in params.items() if k.startswith(at)}
    for got in _both_paths(lambda: t.apply(batch, params)):
        for i in range(len(SIZES)):
            want = _pil_of(crop_params, imgs, i, first.size, name)
            if len(getattr(t, "transforms", ())) > 1:  # the stages after: the reference's
                want = t.reference(imgs[i], params, i)
            h, w = (int(v) for v in got["sizes"][i])
            assert np.array_equal(got["image"][i, :, :h, :w].permute(1, 2, 0).numpy(), want), \
                (kind, name, i)


def test_the_filter_widens_the_pixels_a_window_reads() -> None:
    """Lanczos reads 3x the scale around each output, bicubic 2x, bilinear 1x: the region of a
    window grows with the support, and that region alone gives the whole image's pixels."""
    rng = np.random.default_rng(3)
    img = rng.integers(0, 256, (90, 240, 3), dtype=np.uint8)
    box = np.array([[0, 0, 90, 240]])
    win = np.array([[3, 40, 45, 120]])  # a 2x downscale, a window in the middle
    out = (30, 40)
    regions = {n: window_regions(box, win, *out, n)[0] for n in ("bilinear", *FILTERS)}
    spans = {n: (r[0], r[1], r[0] + r[2], r[1] + r[3]) for n, r in regions.items()}
    assert spans["lanczos"][0] < spans["bicubic"][0] < spans["bilinear"][0]
    assert spans["lanczos"][1] < spans["bicubic"][1] < spans["bilinear"][1]
    assert spans["lanczos"][3] > spans["bicubic"][3] > spans["bilinear"][3]
    assert spans["bilinear"][1] - spans["lanczos"][1] == 4  # 2 more pixels of support x 2
    for name in FILTERS:
        top, left, h, w = (int(v) for v in regions[name])
        whole = _pil_window(img, box[0].tolist(), win[0].tolist(), out, name)
        part = img[top:top + h, left:left + w]
        images = torch.from_numpy(part.transpose(2, 0, 1).copy())[None]
        shifted = torch.tensor([[-top, -left, 90, 240]])
        run = partial(F.resized_crop, images, torch.tensor([[h, w]]), shifted, out,
                      windows=torch.tensor(win), interpolation=name)
        for got in _both_paths(run):
            assert np.array_equal(got[0].permute(1, 2, 0).numpy(), whole), name
        # the bilinear region is too small for this filter: refused, not wrong pixels
        btop, bleft, bh, bw = (int(v) for v in regions["bilinear"])
        small = torch.from_numpy(img[btop:btop + bh, bleft:bleft + bw].transpose(2, 0, 1)
                                 .copy())[None]
        moved = torch.tensor([[-btop, -bleft, 90, 240]])
        with pytest.raises(UserError, match="outside"):
            F.resized_crop(small, torch.tensor([[bh, bw]]), moved, out,
                           windows=torch.tensor(win), interpolation=name)
        # the list form (crop at read's): refused on both paths, never left 0
        hwc = small[0].permute(1, 2, 0).contiguous()
        buf = torch.zeros((1, 3, *out), dtype=torch.uint8)
        with pytest.raises(UserError, match="outside the .* image"):
            F.resized_crop_list([hwc], moved, buf, torch.tensor(win), interpolation=name)
        with accelerator_path(), pytest.raises(UserError, match="outside"):
            F.resized_crop_list([hwc], moved, buf, torch.tensor(win), interpolation=name)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ShardDataset]:
    """Raw shards and JPEG shards (whose windows decode only the pixels they read)."""
    tmp = tmp_path_factory.mktemp("interpolation")
    project = make_bench_images(tmp / "proj", n=13, width=97, height=61)
    out = {}
    for store in ("raw", "encoded"):
        opts = WriteOptions(store=store, shard_size=5,
                            images=ImageOptions(images_root=project.export_path.parent))
        write_dataset(project.export_path, tmp / store, opts)
        out[store] = ShardDataset(tmp / store)
    return out


def _loader_batches(ds: ShardDataset, transform: Any, read_crop: bool) -> list[dict[str, Any]]:
    loader = DataLoader(ds, batch_size=5, shuffle=True, seed=4, device="cpu",
                        transform=transform, read_crop=read_crop)
    return [b for _ in range(2) for b in loader]


@pytest.mark.parametrize("store", ["raw", "encoded"])
@pytest.mark.parametrize("name", list(FILTERS))
@pytest.mark.parametrize("kind", ["ResizeCrop", "RandomResizedCrop", "ResizeCenterCrop"])
def test_crop_at_read_equals_no_read_crop(stores: dict[str, ShardDataset], store: str,
                                          name: str, kind: str) -> None:
    """Through a ShardDataset and the DataLoader, the leading crop applied while reading
    (JPEG regions widened by the filter's support) gives the batches of reading whole images
    and cropping after, key for key."""
    def make() -> Any:
        if kind == "ResizeCrop":
            return Compose([ResizeCrop((16, 22), crop="random", interpolation=name),
                            RandomHorizontalFlip()])
        if kind == "RandomResizedCrop":
            return RandomResizedCrop(19, scale=(0.05, 1.0), interpolation=name)
        return ResizeCenterCrop((14, 18), resize_size=15, interpolation=name)

    after = _loader_batches(stores[store], make(), False)
    during = _loader_batches(stores[store], make(), True)
    assert len(after) == len(during) == 6
    for a, b in zip(after, during, strict=True):
        for key in ("image", "sizes", "index", "crop_top_left", "original_size"):
            assert torch.equal(a[key], b[key]), (key, kind, name, store)


def test_crop_plans_carry_the_filter(stores: dict[str, ShardDataset]) -> None:
    from npu_data.transforms.pipeline import ReadCrop, read_regions

    for name in ("bilinear", *FILTERS):
        rc = ReadCrop.of(ResizeCrop((16, 22), crop="random", interpolation=name))
        assert rc is not None
        plan = rc.at(1, 0).plan(np.array([[40, 30], [32, 48]]), np.arange(2))
        assert plan.interpolation == name
        regions = read_regions(plan)
        assert regions is not None
        assert (regions == window_regions(plan.boxes, plan.windows, *plan.size, name)).all()


@pytest.mark.slow
@pytest.mark.newest_torch
@pytest.mark.parametrize("name", list(FILTERS))
def test_torch_compile_fullgraph_equals_eager(name: str) -> None:
    """The torch kernel with each filter is captured whole by ``torch.compile(fullgraph=True)``
    and gives the eager pixels."""
    import torch._dynamo

    rng = np.random.default_rng(5)
    batch = padded(edge_images(rng, [(32, 40), (20, 30), (32, 1), (1, 40)]))
    boxes = torch.tensor([[0, 0, 20, 1], [3, 2, 17, 28], [0, 0, 32, 1], [0, 5, 1, 30]])

    def fn(images: torch.Tensor, sizes: torch.Tensor, bx: torch.Tensor) -> torch.Tensor:
        return F.resized_crop(images, sizes, bx, (24, 16), interpolation=name)

    torch._dynamo.reset()
    try:
        with accelerator_path():
            expected = fn(batch["image"], batch["sizes"], boxes)  # the host tables, eagerly
            got = torch.compile(fn, fullgraph=True, backend="aot_eager")(
                batch["image"], batch["sizes"], boxes)
    finally:
        torch._dynamo.reset()
    assert torch.equal(expected, got)
    for i, (top, left, h, w) in enumerate(boxes.tolist()):
        img = batch["image"][i].permute(1, 2, 0).numpy()
        assert np.array_equal(expected[i].permute(1, 2, 0).numpy(),
                              _pil_box(img, [top, left, h, w], (24, 16), name))


@pytest.mark.parametrize("make", [
    lambda: Resize(20, interpolation="cubic"),
    lambda: CenterCrop(20, interpolation="nearest"),
    lambda: ResizeCenterCrop(20, interpolation="LANCZOS"),
    lambda: ResizeCrop(20, interpolation=3),
    lambda: RandomResizedCrop(20, interpolation="area"),
    lambda: NpuPreprocessor(64, interpolation="lanczos4"),
    lambda: F.resized_crop(torch.zeros(1, 3, 4, 4, dtype=torch.uint8), torch.tensor([[4, 4]]),
                           torch.tensor([[0, 0, 4, 4]]), 2, interpolation="hamming"),
    lambda: F.resized_crop_list([torch.zeros(4, 4, 3, dtype=torch.uint8)],
                                torch.tensor([[0, 0, 4, 4]]),
                                torch.zeros(1, 3, 2, 2, dtype=torch.uint8), interpolation="box"),
    lambda: reference.resized_crop(np.zeros((4, 4, 3), np.uint8), (0, 0, 4, 4), 2, "bicubik"),
])
def test_an_unknown_interpolation_is_refused_in_one_line(make: Any) -> None:
    with pytest.raises(UserError) as info:
        make()
    message = str(info.value)
    assert "\n" not in message
    assert "interpolation must be one of 'bilinear', 'bicubic', 'lanczos'" in message


def test_parity_rows_for_bicubic_and_lanczos_are_exact() -> None:
    """``npu-data parity`` has rows for both filters (boxes, windows, ResizeCrop), on the
    compiled and the torch kernels, at 0 levels."""
    from npu_data.parity.runner import run_parity_suite
    from npu_data.transforms.oracle.measures import TOLERANCES

    names = [f"{op} {n}" for n in FILTERS for op in ("resized_crop", "resized_window",
                                                     "resize_crop")]
    assert all(TOLERANCES[k] == (0, 0.0) for k in names)
    rows = {r.kernel: r for r in run_parity_suite("cpu", seed=3, batches=1, batch_size=4,
                                                  precision=False)}
    for k in names + [f"{k} (torch)" for k in names]:
        assert rows[k].passed and rows[k].max == 0 and rows[k].samples == 4, rows[k]
        assert rows[k].tolerance == "exact"
