"""Donated images (``transforms.base``): the compiled kernels write into a donated batch
with the values they would allocate, and nothing writes into an image nobody donated."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from npu_data.transforms import (
    ColorJitter,
    Compose,
    RandomHorizontalFlip,
    RandomResizedCrop,
    _native,
)
from npu_data.transforms import functional as F
from npu_data.transforms.base import donated, donating, fresh
from npu_data.transforms.draws import sample_keys
from tests.support.batches import random_padded


@pytest.mark.parametrize("b", [1, 3, 16])  # 1 and 3: row blocks on several threads
@pytest.mark.parametrize("seed", [0, 1])
def test_in_place_colour_ops_give_the_allocated_values(b: int, seed: int) -> None:
    assert _native.available()
    x = random_padded(seed, b, (1, 22), (1, 27), hw=(21, 26))[1]
    rng = np.random.default_rng(seed + 10)
    order = torch.from_numpy(np.stack([rng.permutation(4) for _ in range(b)]).astype(np.int64))
    f = [torch.from_numpy(rng.uniform(0.6, 1.4, b).astype(np.float32)) for _ in range(3)]
    hue = torch.from_numpy(rng.uniform(-0.1, 0.1, b).astype(np.float32))
    args = (x["sizes"], (0, 1, 2, 3), order, *f, hue)
    expected = F.color_jitter(x["image"], *args)
    was = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            image = x["image"].clone()
            with donating(image):
                got = F.color_jitter(image, *args)
            assert got is image  # written in place
            assert torch.equal(got, expected)
    finally:
        torch.set_num_threads(was)
    flip = torch.from_numpy(rng.random(b) < 0.5)
    want = F.hflip(expected, x["sizes"], flip)
    with donating(expected):
        got = F.hflip(expected, x["sizes"], flip)
    assert got is expected and torch.equal(got, want)


def test_without_donation_nothing_is_overwritten() -> None:
    x = random_padded(3, 8, (1, 22), (1, 27), hw=(21, 26))[1]
    keep = x["image"].clone()
    for t in (Compose([ColorJitter(0.4, 0.4, 0.4, 0.1), RandomHorizontalFlip()]),
              Compose([RandomResizedCrop(12), ColorJitter(0.4, 0.4, 0.4, 0.1),
                       RandomHorizontalFlip()]),
              ColorJitter(0.4, 0.4, 0.4, 0.1), RandomHorizontalFlip(p=1.0)):
        params = t.draw_keyed(x["sizes"].numpy(), sample_keys(0, 0, np.arange(8)))
        out = t.apply(x, params)
        assert torch.equal(x["image"], keep), t  # the caller's image is untouched
        assert out["image"].untyped_storage().data_ptr() != keep.untyped_storage().data_ptr()
        with _native.disabled():  # the torch kernels never write in place: the same values
            assert torch.equal(t.apply(x, params)["image"], out["image"])


def test_compose_writes_later_stages_into_the_image_an_earlier_stage_allocated(
        monkeypatch: pytest.MonkeyPatch) -> None:
    x = random_padded(4, 8, (1, 22), (1, 27), hw=(21, 26))[1]
    t = Compose([ColorJitter(0.4, 0.4, 0.4, 0.1), RandomHorizontalFlip(p=1.0)])
    params = t.draw_keyed(x["sizes"].numpy(), sample_keys(0, 0, np.arange(8)))
    seen: list[tuple[int, bool]] = []
    real = F.hflip

    def spy(images: torch.Tensor, sizes: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        seen.append((images.untyped_storage().data_ptr(), donated(images)))
        return real(images, sizes, mask)

    monkeypatch.setattr("npu_data.transforms.flip.F.hflip", spy)
    out = t.apply(x, params)
    (ptr, was_donated), = seen
    assert was_donated and ptr == out["image"].untyped_storage().data_ptr()  # no new batch
    image = x["image"].clone()
    with donating(image):  # a donated input: the whole chain stays in it
        again = t.apply({**x, "image": image}, params)
    assert again["image"] is image and torch.equal(image, out["image"])


def test_fresh_tells_new_memory_from_views() -> None:
    a = torch.zeros(2, 3, 4, 4, dtype=torch.uint8)
    assert fresh(a.clone(), a) and not fresh(a, a) and not fresh(a[:, :, 1:], a)
    assert not fresh(None, a) and not fresh(a.clone(), None)
    assert not donated(a)
    with donating(a):
        assert donated(a) and not donated(a.clone())
        assert not donated(a.permute(0, 2, 3, 1))  # not the donated object
    assert not donated(a)
