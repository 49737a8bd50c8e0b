"""Stages run in the order written (transforms.compose), as torchvision's Compose: a crop
then a flip is flip(crop(x)), a flip then a crop crop(flip(x)); and conditioning equals pixels
in diffusers' convention whatever the order: a flipped sample's pixels are the window at
``crop_top_left`` of its mirrored resize. Keyed or with a generator, through the loader's
crop at read too."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from npu_data.loaders import BucketBatchSampler, DataLoader, LabelStudioDataset
from npu_data.tools.sample_data import make_sample_project
from npu_data.transforms import (
    ColorJitter,
    Compose,
    RandomHorizontalFlip,
    RandomResizedCrop,
    ResizeCrop,
    Transform,
    draws,
)
from tests.support.batches import random_padded

B = 12


def _orders(crop: Transform) -> dict[str, list[Transform]]:
    flip = RandomHorizontalFlip(0.5)
    return {"crop, flip": [crop, flip], "flip, crop": [flip, crop],
            "crop, jitter, flip": [crop, ColorJitter(brightness=(1.0, 1.0)), flip],
            "crop, flip, flip": [crop, flip, RandomHorizontalFlip(0.5)]}


def _expected(im: np.ndarray, params: dict[str, torch.Tensor], crop_at: int, k: int,
              flipped: bool, top_left: list[int], out: tuple[int, int]) -> np.ndarray:
    """Pillow, as torchvision's PIL path: window crops resize the whole image, mirror it when
    flipped and keep the window at ``crop_top_left`` (diffusers' convention); box crops
    (RandomResizedCrop) crop the drawn box, then resize it, mirrored after when flipped — the
    box drawn in the mirrored image when the flip comes first."""
    pil = Image.fromarray(im)
    windows = params.get(f"{crop_at}.windows")
    if windows is not None:
        full_h, full_w = windows[k, 2:].tolist()
        r = pil.resize((full_w, full_h), Image.BILINEAR)
        if flipped:
            r = r.transpose(Image.FLIP_LEFT_RIGHT)
        t, left = top_left
        return np.asarray(r.crop((left, t, left + out[1], t + out[0])))
    top, left, h, w = params[f"{crop_at}.boxes"][k].tolist()
    if flipped:
        pil = pil.transpose(Image.FLIP_LEFT_RIGHT)
        if crop_at == 0:  # the crop came first: its box lies in the unmirrored image
            left = im.shape[1] - left - w
    return np.asarray(pil.crop((left, top, left + w, top + h)).resize((out[1], out[0]),
                                                                      Image.BILINEAR))


CROPS = {"centre": lambda: ResizeCrop((33, 31), crop="center"),
         "random": lambda: ResizeCrop((33, 31), crop="random"),
         "rrc": lambda: RandomResizedCrop((33, 31))}


@pytest.mark.parametrize("path", ["keyed", "generator"])
@pytest.mark.parametrize("kind", list(CROPS))
@pytest.mark.parametrize("order", list(_orders(RandomResizedCrop(8))))
def test_pixels_and_crop_top_left_are_crop_of_flip_of_resize(order: str, kind: str,
                                                             path: str) -> None:
    imgs, batch = random_padded(0, B, (40, 90), (40, 90))
    crop = CROPS[kind]()
    stages = _orders(crop)[order]
    pipe = Compose(stages)
    if path == "keyed":
        params = pipe.draw_keyed(batch["sizes"].numpy(), draws.sample_keys(0, 0, np.arange(B)))
        out = pipe.apply(dict(batch), params)
    else:
        out, params = pipe.run(dict(batch), torch.Generator().manual_seed(3))
    at = stages.index(crop)
    flips = [params[f"{i}.flip"] for i, t in enumerate(stages)
             if isinstance(t, RandomHorizontalFlip)]
    flipped = torch.stack(flips).sum(0) % 2 == 1
    assert 0 < int(flipped.sum()) < B  # both kinds of sample are checked
    for k, im in enumerate(imgs):
        top_left = out["crop_top_left"][k].tolist()
        want = _expected(im, params, at, k, bool(flipped[k]), top_left, (33, 31))
        assert np.array_equal(out["image"][k].permute(1, 2, 0).numpy(), want), (order, k)
        if kind == "centre":  # round((W - tw) / 2) in the frame the crop ran in
            full_h, full_w = params[f"{at}.windows"][k, 2:].tolist()
            left = round((full_w - 31) / 2)
            mirrored = bool(flipped[k]) and at == 0  # a flip after: the output's frame
            assert top_left == [round((full_h - 33) / 2),
                                full_w - 31 - left if mirrored else left]


def test_boxes_follow_the_mirrored_crop() -> None:
    """A box drawn on the image lands where its pixels went: crop then flip, any order."""
    _, batch = random_padded(1, B, (40, 90), (40, 90))
    sizes = batch["sizes"]
    # a bright box in every image: its geometry must cover the bright output pixels
    image = batch["image"].clone()
    boxes = torch.zeros(B, 1, 4)
    for k in range(B):
        h, w = sizes[k].tolist()
        x0, x1, y0, y1 = w // 8, w // 3, h // 4, h // 2
        image[k, :, :h, :w] = 0
        image[k, :, y0:y1, x0:x1] = 255
        boxes[k, 0] = torch.tensor([x0, y0, x1, y1], dtype=torch.float32)
    batch = {"image": image, "sizes": sizes, "boxes.xyxy": boxes,
             "boxes.valid": torch.ones(B, 1, dtype=torch.bool)}
    pipe = Compose([ResizeCrop((40, 36), crop="center"), RandomHorizontalFlip(0.5)])
    out = pipe(batch, torch.Generator().manual_seed(5))
    for k in range(B):
        x0, y0, x1, y1 = out["boxes.xyxy"][k, 0].round().to(torch.int64).tolist()
        bright = out["image"][k, 0] > 127
        ys, xs = torch.nonzero(bright, as_tuple=True)
        assert abs(int(xs.min()) - x0) <= 1 and abs(int(xs.max()) + 1 - x1) <= 1, k
        assert abs(int(ys.min()) - y0) <= 1 and abs(int(ys.max()) + 1 - y1) <= 1, k


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> LabelStudioDataset:
    root = tmp_path_factory.mktemp("flips")
    project = make_sample_project(root / "proj", n_images=14, width=161, height=97)
    return LabelStudioDataset(project.export_path, cache_dir=root / "cache")


@pytest.mark.parametrize("flip_first", [False, True])
@pytest.mark.parametrize("read_crop", [None, False])
def test_loader_batches_follow_the_convention(photos: LabelStudioDataset,
                                              read_crop: bool | None, flip_first: bool) -> None:
    """Through the DataLoader (crop at read on and off): each sample's pixels are the window
    at ``crop_top_left`` of its mirrored resize; written flip first (diffusers' order, as
    NpuPreprocessor), the reader still crops at read and the centre window is diffusers'."""
    from npu_data.transforms import ReadCrop

    buckets = [(64, 64), (48, 80), (80, 48)]
    sampler = BucketBatchSampler(photos, 4, buckets, num_replicas=1, rank=0, seed=2)
    stages: list[Transform] = [ResizeCrop(None, crop="center"), RandomHorizontalFlip(0.5)]
    pipe = Compose(stages[::-1] if flip_first else stages)
    assert ReadCrop.of(pipe) is not None
    loader = DataLoader(photos, batch_sampler=sampler, device="cpu", transform=pipe, seed=2,
                        read_crop=read_crop)
    flipped = 0
    for batch in loader:
        th, tw = batch["target_size"][0].tolist()
        for k, i in enumerate(batch["index"].tolist()):
            im = photos[i]["image"]
            h, w = im.shape[:2]
            scale = max(th / h, tw / w)
            full = (max(th, int(h * scale + 0.5)), max(tw, int(w * scale + 0.5)))
            full = (th, full[1]) if th / h >= tw / w else (full[0], tw)
            r = Image.fromarray(im).resize((full[1], full[0]), Image.BILINEAR)
            t, left = batch["crop_top_left"][k].tolist()
            got = batch["image"][k].permute(1, 2, 0).numpy()
            plain = np.asarray(r.crop((left, t, left + tw, t + th)))
            mirrored = np.asarray(r.transpose(Image.FLIP_LEFT_RIGHT).crop(
                (left, t, left + tw, t + th)))
            assert np.array_equal(got, mirrored) or np.array_equal(got, plain)
            if not np.array_equal(got, plain):
                flipped += 1
            centre = round((full[1] - tw) / 2)
            assert t == round((full[0] - th) / 2)
            assert left == centre or (not flip_first and left == full[1] - tw - centre)
    assert flipped > 0


def test_a_drawn_output_size_reaches_the_next_stage_with_a_generator() -> None:
    """Compose draws every stage before applying any: a stage whose output size is drawn
    (zoom-out, scale jitter) hands it to the next stage's draw, with a generator too."""
    from npu_data.transforms import RandomZoomOut, ScaleJitter

    image = torch.randint(0, 255, (4, 3, 40, 50), dtype=torch.uint8)
    sizes = torch.tensor([[40, 50]] * 4)
    out, _ = Compose([RandomZoomOut(), RandomHorizontalFlip()]).run(
        {"image": image, "sizes": sizes}, torch.Generator().manual_seed(0))
    assert (out["sizes"] >= sizes).all() and len({tuple(s) for s in out["sizes"].tolist()}) > 1
    out, _ = Compose([Compose([ScaleJitter((40, 50))]), ResizeCrop((20, 20))]).run(
        {"image": image, "sizes": sizes}, torch.Generator().manual_seed(0))
    assert out["image"].shape == (4, 3, 20, 20)


@pytest.mark.parametrize("path", ["keyed", "generator"])
def test_a_crop_then_a_flip_is_torchvisions_flip_of_the_crop(path: str) -> None:
    """[CenterCrop, RandomHorizontalFlip] gives flip(crop(x)) exactly, an odd margin
    included (the crop is not moved), and reports the window mirrored."""
    from npu_data.transforms import CenterCrop

    imgs, batch = random_padded(2, B, (40, 90), (40, 90))
    pipe = Compose([CenterCrop((31, 30)), RandomHorizontalFlip(0.5)])
    if path == "keyed":
        params = pipe.draw_keyed(batch["sizes"].numpy(), draws.sample_keys(0, 0, np.arange(B)))
        out = pipe.apply(dict(batch), params)
    else:
        out, params = pipe.run(dict(batch), torch.Generator().manual_seed(1))
    flipped = params["1.flip"]
    odd = [(im.shape[1] - 30) % 2 == 1 for im in imgs]
    assert any(bool(f) and o for f, o in zip(flipped, odd, strict=True))
    for k, im in enumerate(imgs):
        h, w = im.shape[:2]
        top, left = int(round((h - 31) / 2)), int(round((w - 30) / 2))
        crop = im[top:top + 31, left:left + 30]
        want = crop[:, ::-1] if flipped[k] else crop
        assert np.array_equal(out["image"][k].permute(1, 2, 0).numpy(), want), k
        reported = w - 30 - left if flipped[k] else left
        assert out["crop_top_left"][k].tolist() == [top, reported], k


@pytest.mark.parametrize("path", ["keyed", "generator"])
def test_a_flip_before_a_crop_after_a_resize_is_the_reference(path: str) -> None:
    """[Resize, flip, RandomResizedCrop]: the crop runs before the flip (its box mirrored in
    the resized image, not the stored one) and gives crop(flip(resize(x))) exactly."""
    from npu_data.transforms import Resize

    imgs, batch = random_padded(3, B, (40, 90), (40, 90))
    pipe = Compose([Resize((50, 61)), RandomHorizontalFlip(0.5), RandomResizedCrop((21, 17))])
    if path == "keyed":
        params = pipe.draw_keyed(batch["sizes"].numpy(), draws.sample_keys(0, 0, np.arange(B)))
        out = pipe.apply(dict(batch), params)
    else:
        out, params = pipe.run(dict(batch), torch.Generator().manual_seed(2))
    assert 0 < int(params["1.flip"].sum()) < B
    for k, im in enumerate(imgs):
        want = pipe.reference(im, params, k)
        assert np.array_equal(out["image"][k].permute(1, 2, 0).numpy(), want), k
