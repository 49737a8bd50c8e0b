"""Edge batches (no samples, 0x0 samples, 0x0 tensors, sizes past the tensor): every op gives
the same bytes or the same one-line error on the compiled and the torch kernels, and an empty
batch is a valid batch (the compiled colour kernel once divided by the batch size)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from npu_data.errors import UserError
from npu_data.transforms import ColorJitter, Compose, RandomPhotometricDistort, _native
from npu_data.transforms import functional as F

Op = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _ops(b: int) -> dict[str, Op]:
    """One call of each functional op with plain parameters for a batch of ``b``."""
    f = torch.full((b,), 1.3)
    on = torch.ones(b, dtype=torch.bool)
    box = torch.tensor([[0, 0, 2, 2]] * b, dtype=torch.int64).reshape(b, 4)
    window = torch.tensor([[0, 0, 6, 6]] * b, dtype=torch.int64).reshape(b, 4)
    order = torch.tensor([[3, 1, 0, 2]] * b, dtype=torch.int64).reshape(b, 4)
    perm = torch.tensor([[2, 0, 1]] * b, dtype=torch.int64).reshape(b, 3)
    mat = np.tile(np.array([1.0, 0.1, 0.0, 0.0, 1.0, 0.5]), (b, 1)).reshape(b, 6)
    return {
        "resized_crop": lambda x, s: F.resized_crop(x, s, box, (4, 5)),
        "resized_crop windows": lambda x, s: F.resized_crop(x, s, box, (4, 5), windows=window),
        "hflip": lambda x, s: F.hflip(x, s, on),
        "vflip": lambda x, s: F.vflip(x, s, on),
        "brightness": lambda x, s: F.adjust_brightness(x, s, f),
        "contrast": lambda x, s: F.adjust_contrast(x, s, f),
        "saturation": lambda x, s: F.adjust_saturation(x, s, f),
        "hue": lambda x, s: F.adjust_hue(x, s, torch.full((b,), 0.2)),
        "color_jitter": lambda x, s: F.color_jitter(x, s, [0, 1, 2, 3], order, f, f, f,
                                                    torch.full((b,), -0.1)),
        "normalize": lambda x, s: F.normalize(x, [0.5, 0.4, 0.3], [0.2, 0.2, 0.2]),
        "rgb_to_grayscale": lambda x, s: F.rgb_to_grayscale(x, s, on),
        "erase": lambda x, s: F.erase(x, s, box, 7),
        "posterize": lambda x, s: F.posterize(x, s, 3),
        "solarize": lambda x, s: F.solarize(x, s, 100.0),
        "invert": lambda x, s: F.invert(x, s),
        "equalize": lambda x, s: F.equalize(x, s),
        "autocontrast": lambda x, s: F.autocontrast(x, s),
        "sharpness": lambda x, s: F.adjust_sharpness(x, s, f),
        "gaussian_blur": lambda x, s: F.gaussian_blur(x, s, 3, 1.0),
        "permute_channels": lambda x, s: F.permute_channels(x, s, perm),
        "policy_step": lambda x, s: F.policy_step(x, s, torch.full((b,), 8), f,
                                                  torch.full((b,), 3)),
        "warp": lambda x, s: F.warp(x, s, mat, "bilinear"),
        "affine": lambda x, s: F.affine(x, s, torch.full((b,), 10.0), torch.zeros(b, 2),
                                        torch.ones(b), torch.zeros(b, 2)),
        "rotate": lambda x, s: F.rotate(x, s, torch.full((b,), 30.0)),
        "crop": lambda x, s: F.crop(x, s, box),
    }


def _random(b: int, h: int, w: int) -> torch.Tensor:
    return torch.randint(0, 256, (b, 3, h, w), dtype=torch.uint8,
                         generator=torch.Generator().manual_seed(b * 100 + h))


_EDGES = {
    "no samples": (_random(0, 8, 8), torch.zeros(0, 2, dtype=torch.int64)),
    "a 0x0 sample": (_random(2, 8, 8), torch.tensor([[0, 0], [8, 8]])),
    "0x0 tensors": (_random(2, 0, 0), torch.zeros(2, 2, dtype=torch.int64)),
    "a size past the tensor": (_random(2, 8, 8), torch.tensor([[20, 30], [8, 9]])),
    "a negative size": (_random(2, 8, 8), torch.tensor([[-1, 4], [8, 8]])),
}


def _outcome(op: Op, images: torch.Tensor, sizes: torch.Tensor) -> tuple[str, object]:
    try:
        return "ok", op(images.clone(), sizes.clone())
    except UserError as e:
        assert "\n" not in str(e)
        return "error", str(e)


@pytest.mark.parametrize("edge", list(_EDGES))
def test_both_backends_agree_on_every_op_for_edge_batches(edge: str) -> None:
    images, sizes = _EDGES[edge]
    names = list(_ops(images.shape[0]))
    for name in names:
        compiled = _outcome(_ops(images.shape[0])[name], images, sizes)
        with _native.disabled():
            torch_path = _outcome(_ops(images.shape[0])[name], images, sizes)
        assert compiled[0] == torch_path[0], (name, compiled, torch_path)
        if compiled[0] == "error":
            assert compiled[1] == torch_path[1], name
            continue
        a, t = compiled[1], torch_path[1]
        assert isinstance(a, torch.Tensor) and isinstance(t, torch.Tensor)
        assert a.shape == t.shape and a.dtype == t.dtype and torch.equal(a, t), name
        if edge == "no samples":  # an empty batch is valid for every op
            assert a.shape[0] == 0, name


@pytest.mark.parametrize("native", [True, False])
def test_colour_transforms_take_an_empty_batch(native: bool) -> None:
    pipe = Compose([ColorJitter(0.4, 0.4, 0.4, 0.1), RandomPhotometricDistort(p=1.0)])
    batch = {"image": _random(0, 16, 16), "sizes": torch.zeros(0, 2, dtype=torch.int64)}
    if native:
        out, _ = pipe.run(batch, torch.Generator().manual_seed(0))
    else:
        with _native.disabled():
            out, _ = pipe.run(batch, torch.Generator().manual_seed(0))
    assert out["image"].shape == (0, 3, 16, 16)


@pytest.mark.parametrize("native", [True, False])
def test_erase_boxes_past_the_image_are_cut_at_it_never_written_into_padding(
        native: bool) -> None:
    images, sizes = torch.zeros(2, 3, 8, 8, dtype=torch.uint8), torch.tensor([[4, 4], [8, 8]])
    boxes = torch.tensor([[2, 2, 6, 6], [7, 7, 0, 0]])  # past a 4x4 image; an empty box
    if native:
        out = F.erase(images, sizes, boxes, 7)
    else:
        with _native.disabled():
            out = F.erase(images, sizes, boxes, 7)
    want = torch.zeros_like(images)
    want[0, :, 2:4, 2:4] = 7  # torchvision's slice of the image, nothing in the padding
    assert torch.equal(out, want)
