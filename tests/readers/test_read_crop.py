"""The reader's crop at read (``npu_data.readers.read_crop``): a batch read through the plan
its request carries is the batch the crop makes of the full images — pixels, geometry and
micro-conditioning bit for bit —, from arrays and from JPEGs decoded only in their boxes."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from npu_data import codecs
from npu_data.batch import Batch, EncodedImage
from npu_data.readers import read_crop
from npu_data.transforms import CenterCrop, RandomResizedCrop, Resize, ResizeCrop
from npu_data.transforms.pipeline import Pipeline
from tests.support.geometry import geometry_batch

CROPS = {
    "rrc": lambda: RandomResizedCrop(24, scale=(0.05, 1.0)),
    "resize_crop": lambda: ResizeCrop((24, 32), crop="random"),  # windows of a whole resize
    "center": lambda: CenterCrop(40),  # larger than some images: padded
    "resize_int": lambda: Resize(20),  # each sample its own size
}


def _buffer(batch: Batch, shape: tuple[int, ...]) -> torch.Tensor:
    return torch.full(shape, 7, dtype=torch.uint8)  # every byte is written by the reader


def _split(full: Batch) -> tuple[Batch, list[np.ndarray]]:
    """The batch as the assembler hands it to the reader (no ``image``) and its images."""
    sizes = full["sizes"].tolist()
    images = [np.ascontiguousarray(full["image"][i, :, :h, :w].permute(1, 2, 0).numpy())
              for i, (h, w) in enumerate(sizes)]
    return {k: v for k, v in full.items() if k != "image"}, images


def _same(expected: Batch, got: Batch) -> None:
    assert set(got) == set(expected)
    for key, value in expected.items():
        other = got[key]
        assert (value.dtype, value.shape) == (other.dtype, other.shape), key
        assert torch.equal(value.nan_to_num(), other.nan_to_num()), key


@pytest.mark.parametrize("kind", sorted(CROPS))
def test_reading_through_the_plan_is_the_crop_of_the_full_batch(kind: str) -> None:
    crop = CROPS[kind]()
    full = geometry_batch(b=6, h=48, w=64, seed=2)
    batch, images = _split(full)
    pipeline = Pipeline(crop)
    ids = np.arange(6, dtype=np.int64)
    request = pipeline.draw(range(6), ids, full["sizes"].numpy(), 3, 1, crop=True)
    assert request.crop is not None and request.params is not None
    params = {k: torch.from_numpy(v) for k, v in request.params.items()}
    expected = crop.apply(dict(full), params)
    got = read_crop.read(batch, images, request.crop, _buffer)
    _same(expected, got)
    # and the pipeline's finish runs nothing more on it: the crop was the whole transform
    _same(expected, pipeline.finish(got, request, cropped=True))


def _jpeg(image: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(image).save(out, format="JPEG", quality=90)
    return out.getvalue()


class _Store:
    """What an ``EncodedImage`` decodes whole from (a shard store's ``image``), counted."""

    def __init__(self, blobs: list[bytes]) -> None:
        self.blobs, self.whole = blobs, 0

    def image(self, shard: int, local: int) -> np.ndarray:
        self.whole += 1
        return np.asarray(Image.open(io.BytesIO(self.blobs[local])).convert("RGB"))


@pytest.mark.parametrize("kind", ["rrc", "resize_crop"])
def test_jpegs_decoded_in_their_boxes_read_as_the_full_decode(kind: str) -> None:
    """Boxes (``rrc``) and the pixels a window reads (``resize_crop``: ``CropPlan.regions``)
    decode to the full decode's pixels; no JPEG is decoded whole where libjpeg-turbo's
    region decoder is built."""
    full = geometry_batch(b=5, h=48, w=64, seed=4)
    batch, arrays = _split(full)
    store = _Store([_jpeg(a) for a in arrays])
    decoded = [store.image(0, i) for i in range(len(arrays))]
    store.whole = 0
    encoded = [EncodedImage(np.frombuffer(blob, np.uint8), (a.shape[0], a.shape[1], 3), store,
                            0, i) for i, (blob, a) in enumerate(zip(store.blobs, arrays,
                                                                     strict=True))]
    request = Pipeline(CROPS[kind]()).draw(range(5), np.arange(5, dtype=np.int64),
                                           full["sizes"].numpy(), 5, 0, crop=True)
    assert request.crop is not None
    if kind == "resize_crop":
        assert request.crop.regions is not None
    expected = read_crop.read(dict(batch), decoded, request.crop, _buffer)
    got = read_crop.read(dict(batch), encoded, request.crop, _buffer)
    _same(expected, got)
    assert store.whole == (0 if codecs.jpeg_ops() is not None else len(encoded))


def test_dct_scales_keep_each_box_at_least_the_output() -> None:
    boxes = np.array([[0, 0, 61, 97], [3, 5, 16, 40], [10, 20, 15, 15]])
    assert read_crop.dct_scales(boxes, (8, 8)).tolist() == [4, 2, 1]
    assert read_crop.scaled_regions(boxes, np.array([4, 2, 1])).tolist() == [
        [0, 0, 16, 25], [1, 2, 9, 21], [10, 20, 15, 15]]

