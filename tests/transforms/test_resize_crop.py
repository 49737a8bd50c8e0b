"""Resize-then-crop transforms, exact to Pillow and to torchvision's PIL path (issues 29, 31).

torchvision does not import next to the CPU torch wheel here (PyPI's torchvision is built
for CUDA torch), so its PIL path is reproduced below from Pillow itself, following
torchvision 0.28's source line for line:

- ``Resize(int)``: torchvision/transforms/functional.py 353-384
  (``_compute_resized_output_size``: short side -> size, long -> ``int(size * long / short)``),
  470-476 (no resize when the size is unchanged; else ``_functional_pil.resize`` 242-253:
  ``img.resize(size[::-1], BILINEAR)``);
- ``CenterCrop``: torchvision/transforms/v2/functional/_geometry.py 2564-2578 (padding
  ``(crop - side) // 2`` before, ``(crop - side + 1) // 2`` after, fill 0; anchor
  ``int(round((side - crop) / 2.0))``) as used by ``_center_crop_image_pil`` 2602-2616, and
  ``_functional_pil.crop`` 227-238 (``img.crop((left, top, left + w, top + h))``).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch
from PIL import Image

from npu_data.errors import UserError
from npu_data.transforms import (
    CenterCrop,
    Compose,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    ResizeCenterCrop,
    ResizeCrop,
    reference,
    sample_image,
)
from npu_data.transforms import functional as F
from npu_data.transforms._kernels import accelerator_path
from npu_data.transforms.resize import cover_sizes
from tests.support.batches import edge_images, padded
from tests.support.device_audit import DeviceRulesAudit


def tv_resize(img: Image.Image, size: int) -> Image.Image:
    """torchvision's ``Resize(size)`` on a PIL image (functional.py 353-384, 470-476)."""
    w, h = img.size
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = size, int(size * long / short)
    new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
    if (new_h, new_w) == (h, w):
        return img
    return img.resize((new_w, new_h), Image.BILINEAR)


def tv_center_crop(img: Image.Image, crop_h: int, crop_w: int) -> Image.Image:
    """torchvision's ``CenterCrop`` on a PIL image (v2 _geometry.py 2564-2578, 2602-2616)."""
    w, h = img.size
    if crop_h > h or crop_w > w:
        left = (crop_w - w) // 2 if crop_w > w else 0
        top = (crop_h - h) // 2 if crop_h > h else 0
        right = (crop_w - w + 1) // 2 if crop_w > w else 0
        bottom = (crop_h - h + 1) // 2 if crop_h > h else 0
        padded = Image.new(img.mode, (w + left + right, h + top + bottom), 0)
        padded.paste(img, (left, top))
        img = padded
        w, h = img.size
        if (crop_w, crop_h) == (w, h):
            return img
    top = int(round((h - crop_h) / 2.0))
    left = int(round((w - crop_w) / 2.0))
    return img.crop((left, top, left + crop_w, top + crop_h))


SIZES = [(37, 50), (50, 37), (20, 90), (64, 64), (120, 31), (9, 200), (300, 280), (5, 7)]


def _run_all_backends(t: object, batch: dict[str, torch.Tensor], params: dict[str, torch.Tensor]
                      ) -> list[dict[str, torch.Tensor]]:
    out = [t.apply(batch, params)]  # type: ignore[attr-defined]
    with accelerator_path():
        out.append(t.apply(batch, params))  # type: ignore[attr-defined]
    cl = dict(batch, image=batch["image"].contiguous(memory_format=torch.channels_last))
    out.append(t.apply(cl, params))  # type: ignore[attr-defined]
    return out


@pytest.mark.parametrize(("resize_size", "crop"), [(34, (30, 30)), (30, (30, 60)), (96, (96, 96)),
                                                   (110, (96, 80)), (12, (16, 16))])
def test_resize_center_crop_equals_torchvision_pil_to_the_level(resize_size: int,
                                                                crop: tuple[int, int]) -> None:
    rng = np.random.default_rng(resize_size)
    imgs = edge_images(rng, SIZES)
    t = ResizeCenterCrop(crop, resize_size=resize_size)
    batch = padded(imgs)
    params = t.get_params(batch)
    for out in _run_all_backends(t, batch, params):
        for i, img in enumerate(imgs):
            want = np.asarray(tv_center_crop(tv_resize(Image.fromarray(img), resize_size),
                                             *crop))
            assert np.array_equal(sample_image(out, i), want), (SIZES[i], resize_size, crop)


def test_the_level_zero_preset_and_center_crop_pad_as_torchvision() -> None:
    rng = np.random.default_rng(0)
    imgs = edge_images(rng, SIZES)
    batch = padded(imgs)
    for t, ref in [(CenterCrop(40), lambda im: tv_center_crop(im, 40, 40)),
                   (CenterCrop((8, 60)), lambda im: tv_center_crop(im, 8, 60))]:
        out = t(batch)
        for i, img in enumerate(imgs):
            assert np.array_equal(sample_image(out, i), np.asarray(ref(Image.fromarray(img))))


def test_resize_int_is_torchvisions_shorter_side_resize() -> None:
    rng = np.random.default_rng(1)
    imgs = edge_images(rng, SIZES)
    batch = padded(imgs)
    t = Resize(25)
    for out in _run_all_backends(t, batch, t.get_params(batch)):
        for i, img in enumerate(imgs):
            want = np.asarray(tv_resize(Image.fromarray(img), 25))
            assert tuple(out["sizes"][i].tolist()) == want.shape[:2]
            assert np.array_equal(sample_image(out, i), want)
        h, w = out["image"].shape[2:]
        assert (h, w) == tuple(out["sizes"].amax(0).tolist())  # padded to the largest
        # (5, 7) -> (25, 35): 0 around it
        assert int(out["image"][7, :, 25:].sum()) == 0 and int(out["image"][7, :, :, 35:].sum()) == 0


def _pillow_resize_crop(img: np.ndarray, th: int, tw: int, top: int | None = None,
                        left: int | None = None) -> tuple[np.ndarray, tuple[int, int]]:
    """ResizeCrop's contract computed independently: exact fractions for the scale, the
    covering size, Pillow's resize of the whole image, then Pillow's crop."""
    h, w = img.shape[:2]
    scale = max(Fraction(th, h), Fraction(tw, w))
    if Fraction(th, h) >= Fraction(tw, w):
        nh, nw = th, max(tw, int(w * scale + Fraction(1, 2)))
    else:
        nh, nw = max(th, int(h * scale + Fraction(1, 2))), tw
    resized = Image.fromarray(img).resize((nw, nh), Image.BILINEAR)
    if top is None or left is None:
        top, left = int(round((nh - th) / 2.0)), int(round((nw - tw) / 2.0))
    return np.asarray(resized.crop((left, top, left + tw, top + th))), (nh, nw)


@pytest.mark.parametrize("crop", ["center", "random"])
@pytest.mark.parametrize("target", [(24, 32), (32, 24), (48, 48), (96, 64), (7, 150)])
def test_resize_crop_is_pillows_resize_then_crop(crop: str, target: tuple[int, int]) -> None:
    rng = np.random.default_rng(sum(target))
    imgs = edge_images(rng, SIZES)
    t = ResizeCrop(target, crop=crop)
    batch = padded(imgs)
    params = t.get_params(batch, torch.Generator().manual_seed(3))
    for out in _run_all_backends(t, batch, params):
        assert out["image"].shape[2:] == target
        for i, img in enumerate(imgs):
            top, left = (int(v) for v in out["crop_top_left"][i])
            want, full = _pillow_resize_crop(img, *target, top, left)
            assert tuple(params["windows"][i, 2:].tolist()) == full
            if crop == "center":
                assert (top, left) == (round((full[0] - target[0]) / 2),
                                       round((full[1] - target[1]) / 2))
            assert 0 <= top <= full[0] - target[0] and 0 <= left <= full[1] - target[1]
            assert np.array_equal(sample_image(out, i), want), (SIZES[i], target)


def test_random_offsets_cover_the_room_and_follow_the_keys() -> None:
    sizes = np.array([[100, 300]] * 400)
    t = ResizeCrop((50, 50), crop="random")
    keys = np.arange(400, dtype=np.uint64)
    a = t.draw_keyed(sizes, keys)
    b = t.draw_keyed(sizes, keys)
    assert torch.equal(a["windows"], b["windows"])  # keyed: the same every time
    lefts = a["crop_top_left"][:, 1].numpy()
    assert lefts.min() == 0 and lefts.max() == 100 and len(np.unique(lefts)) > 80
    assert (a["crop_top_left"][:, 0] == 0).all()


def test_cover_sizes_rule() -> None:
    sizes = np.array([[1200, 1600], [1600, 1200], [1000, 1000], [3, 1000], [101, 202]])
    targets = np.array([[896, 1152]] * 4 + [[64, 64]])
    got = cover_sizes(sizes, targets)
    # 1200x1600 -> scale max(896/1200, 1152/1600) = 0.74666: height 896, width round(1194.67)
    assert got.tolist() == [[896, 1195], [1536, 1152], [1152, 1152], [896, 298667], [64, 128]]
    # a half rounds up: 3 x 5 to cover 2 x 2 -> scale 2/3, width 10/3 -> 3; 2 x 5 -> 5
    assert cover_sizes(np.array([[6, 9]]), np.array([[4, 4]])).tolist() == [[4, 6]]
    assert cover_sizes(np.array([[4, 10]]), np.array([[2, 2]])).tolist() == [[2, 5]]
    assert cover_sizes(np.array([[4, 9]]), np.array([[2, 2]])).tolist() == [[2, 5]]  # 4.5 up


def test_windows_of_the_functional_op_match_the_reference_with_padding() -> None:
    rng = np.random.default_rng(5)
    imgs = edge_images(rng, SIZES)
    batch = padded(imgs)
    boxes = torch.tensor([[0, 0, h, w] for h, w in SIZES])
    windows = torch.tensor([[-3, 5, 40, 31], [2, -7, 16, 90], [0, 0, 300, 20], [10, 10, 20, 20],
                            [-1, -1, 3, 3], [50, 0, 60, 60], [0, 0, 33, 41], [4, 4, 1, 1]])
    outs = [F.resized_crop(batch["image"], batch["sizes"], boxes, (30, 30), windows=windows)]
    with accelerator_path():
        outs.append(F.resized_crop(batch["image"], batch["sizes"], boxes, (30, 30),
                                   windows=windows))
    for out in outs:
        for i, img in enumerate(imgs):
            ref = reference.resized_window(img, boxes[i].tolist(), windows[i].tolist(), 30)
            assert np.array_equal(out[i].permute(1, 2, 0).numpy(), ref), i
    with pytest.raises(UserError, match="windows"):
        F.resized_crop(batch["image"], batch["sizes"], boxes, 30, windows=windows[:2])


def test_geometry_follows_the_window() -> None:
    img = np.zeros((100, 200, 3), np.uint8)
    batch = padded([img])
    batch["boxes.xyxy"] = torch.tensor([[[60.0, 20.0, 100.0, 60.0]]])
    batch["boxes.valid"] = torch.tensor([[True]])
    batch["keypoints.xy"] = torch.tensor([[[100.0, 50.0]]])
    batch["keypoints.valid"] = torch.tensor([[True]])
    mask = torch.zeros((1, 1, 100, 200), dtype=torch.uint8)
    mask[0, 0, 20:60, 60:100] = 1
    batch["masks.mask"] = mask
    batch["masks.valid"] = torch.tensor([[True]])
    # 100 x 200 -> cover 50 x 50: 50 x 100, centre window left 25: x' = x / 2 - 25, y' = y / 2
    out = ResizeCrop((50, 50))(batch)
    assert out["boxes.xyxy"][0, 0].tolist() == pytest.approx([5.0, 10.0, 25.0, 30.0])
    assert out["keypoints.xy"][0, 0].tolist() == pytest.approx([25.0, 25.0])
    want = np.zeros((50, 50), np.uint8)
    want[10:30, 5:25] = 1
    assert np.array_equal(out["masks.mask"][0, 0].numpy(), want)
    # a padded centre crop: 100 x 200 in 120 x 120 -> y' = y + 10, x' = x - 40; 0 mask in pad
    out = CenterCrop(120)(batch)
    assert out["boxes.xyxy"][0, 0].tolist() == pytest.approx([20.0, 30.0, 60.0, 70.0])
    assert int(out["masks.mask"][0, 0, :10].sum()) == 0
    assert int(out["masks.mask"][0, 0].sum()) == 40 * 40


def test_micro_conditioning_keys() -> None:
    imgs = [np.zeros((100, 200, 3), np.uint8), np.zeros((90, 60, 3), np.uint8)]
    batch = padded(imgs)
    out = ResizeCrop((50, 50))(batch)
    assert out["original_size"].tolist() == [[100, 200], [90, 60]]
    assert out["crop_top_left"].tolist() == [[0, 25], [12, 0]]  # 90x60 -> 75x50: 12.5 to even
    assert out["target_size"].tolist() == [[50, 50], [50, 50]]
    for key in ("original_size", "crop_top_left", "target_size"):
        assert out[key].dtype == torch.int64 and out[key].shape == (2, 2)
    # RandomResizedCrop: the box's corner in the image scaled by the crop's own factors
    rrc = RandomResizedCrop((30, 40))
    boxes = torch.tensor([[10, 20, 60, 80], [3, 5, 9, 7]])
    out = rrc.apply(batch, {"boxes": boxes})
    assert out["crop_top_left"].tolist() == [[5, 10], [10, 29]]  # 3*30/9 = 10, 5*40/7 = 28.6
    drawn = rrc.draw_keyed(np.array([[100, 200], [90, 60]]), np.array([1, 2], np.uint64))
    kept = rrc.apply(batch, drawn)["crop_top_left"]
    again = rrc.apply(batch, {"boxes": drawn["boxes"]})["crop_top_left"]
    assert torch.equal(kept, again)
    # a later crop keeps the stored image's size; a flip before a crop: the crop's frame
    pipe = Compose([Resize((80, 80)), RandomHorizontalFlip(1.0), CenterCrop(40)])
    out = pipe(batch)
    assert out["original_size"].tolist() == [[100, 200], [90, 60]]
    assert out["crop_top_left"].tolist() == [[20, 20], [20, 20]]


def test_size_none_takes_each_batchs_bucket() -> None:
    t = ResizeCrop(None, buckets=[(32, 32), (24, 48), (48, 24)])
    wide = padded([np.zeros((100, 210, 3), np.uint8), np.zeros((50, 90, 3), np.uint8)])
    out = t(wide)
    assert out["image"].shape[2:] == (24, 48)
    assert out["target_size"].tolist() == [[24, 48]] * 2
    mixed = padded([np.zeros((100, 210, 3), np.uint8), np.zeros((90, 50, 3), np.uint8)])
    with pytest.raises(UserError, match="BucketBatchSampler"):
        t(mixed)


@pytest.mark.parametrize("make", [lambda: ResizeCrop((48, 64), crop="random"),
                                  lambda: ResizeCenterCrop((40, 40), resize_size=44),
                                  lambda: Resize(30)])
def test_window_crops_make_no_device_sync_and_no_float64_tensor(make: object) -> None:
    """Down the CUDA/NPU path the window's tables are made from host parameters (numpy on
    host tensors, as the keyed draws are); no aten op waits for data or makes float64."""
    rng = np.random.default_rng(2)
    imgs = edge_images(rng, SIZES)
    batch = padded(imgs)
    t = make()  # type: ignore[operator]
    params = t.draw_keyed(batch["sizes"].numpy(), np.arange(len(imgs), dtype=np.uint64))
    mode = DeviceRulesAudit()
    with accelerator_path(), mode:
        out = t.apply(batch, params)
    assert sum(mode.ops.values()) > 0
    assert not mode.float64 and not mode.syncs, mode.summary()
    assert torch.equal(out["image"], t.apply(batch, params)["image"])  # = compiled kernels


def test_a_window_reads_only_its_support_and_runs_on_that_region_alone() -> None:
    """What crop at read does with a JPEG: decode only the pixels a window reads, move the
    box by the region's origin (it then extends past the region) — the same output."""
    from npu_data.transforms._kernels.crop import window_regions

    rng = np.random.default_rng(9)
    img = rng.integers(0, 256, (90, 240, 3), dtype=np.uint8)
    box = np.array([[0, 0, 90, 240]])
    for window, out in [((0, 37, 30, 80), (30, 30)), ((3, 0, 60, 160), (40, 60)),
                        ((-4, 100, 45, 120), (50, 30))]:
        win = np.array([window])
        region = window_regions(box, win, *out)[0]
        top, left, h, w = (int(v) for v in region)
        assert w < 240  # only part of the width is read
        whole = reference.resized_window(img, box[0].tolist(), list(window), out)
        part = img[top:top + h, left:left + w]
        shifted = torch.tensor([[-top, -left, 90, 240]])
        images = torch.from_numpy(part.transpose(2, 0, 1).copy())[None]
        sizes = torch.tensor([[h, w]])
        wins = torch.tensor([window])
        got = F.resized_crop(images, sizes, shifted, out, windows=wins)
        assert np.array_equal(got[0].permute(1, 2, 0).numpy(), whole)
        with accelerator_path():
            got = F.resized_crop(images, sizes, shifted, out, windows=wins)
        assert np.array_equal(got[0].permute(1, 2, 0).numpy(), whole)
        narrower = torch.from_numpy(part[:, 1:].transpose(2, 0, 1).copy())[None]
        with pytest.raises(UserError, match="outside"):  # one column short of the support
            F.resized_crop(narrower, torch.tensor([[h, w - 1]]),
                           torch.tensor([[-top, -left - 1, 90, 240]]), out,
                           windows=torch.tensor([window]))
