"""The two run-length formats the COCO source converts between: COCO's RLE read as
pycocotools reads it, Label Studio's brush RLE written byte for byte as Label Studio's own
converter writes it, and each round trip exact."""

from __future__ import annotations

import numpy as np
import pytest
from label_studio_sdk.converter.brush import encode_rle as sdk_encode_rle
from label_studio_sdk.converter.brush import mask2rle as sdk_mask2rle
from pycocotools import mask as mask_api

from npu_data.annotations.brush_rle import decode_rle, encode_rle, mask_to_rle, rle_to_mask
from npu_data.formats.coco.rle import (
    CocoRLEError,
    counts_from_string,
    counts_to_string,
    rle_mask,
)


def _masks(seed: int, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        h, w = int(rng.integers(1, 70)), int(rng.integers(1, 70))
        if k % 3 == 0:  # noise: many short runs
            m = rng.random((h, w)) < rng.random()
        else:  # blobs: long runs, first pixel on or off
            m = np.zeros((h, w), bool)
            m[rng.integers(0, h):rng.integers(0, h + 1), rng.integers(0, w):] = True
            m[0, 0] = bool(k % 2)
        out.append(m.astype(np.uint8))
    out.append(np.ones((300, 400), np.uint8))  # one run of 120000 pixels
    return out


def test_coco_rle_reads_as_pycocotools() -> None:
    for m in _masks(0, 150):
        h, w = m.shape
        rle = mask_api.encode(np.asfortranarray(m))
        text = rle["counts"].decode("ascii")
        runs = counts_from_string(text)
        assert counts_to_string(runs) == text
        # the list form pycocotools turns into the same string
        assert mask_api.frPyObjects({"size": [h, w], "counts": runs}, h, w)["counts"] == (
            rle["counts"])
        for counts in (text, runs):
            got = rle_mask({"size": [h, w], "counts": counts}, h, w)
            assert got.dtype == bool and np.array_equal(got, mask_api.decode(rle).astype(bool))


@pytest.mark.parametrize("seg,why", [
    ({"size": [2, 3], "counts": [1, 2]}, "the runs cover 3 pixels, the 2x3 image has 6"),
    ({"size": [2, 3], "counts": [7, -1]}, "run 1 has a negative length -1"),
    ({"size": [2, 3], "counts": [1.5, 4.5]}, "counts is neither"),
    ({"size": [3, 2], "counts": [6]}, r"size \[3, 2\] is not the image's"),
    ({"size": [2, 3], "counts": "6P"}, "ends inside a run length"),
    ({"size": [2, 3], "counts": "6 "}, "character ' ' at 1"),
    ({"counts": [6]}, "size None is not"),
])
def test_bad_coco_rle_says_why(seg: dict, why: str) -> None:
    with pytest.raises(CocoRLEError, match=why):
        rle_mask(seg, 2, 3)


def test_brush_rle_is_label_studio_converters_bytes_and_round_trips() -> None:
    rng = np.random.default_rng(1)
    arrays = [np.zeros(1, np.uint8), np.array([7, 7], np.uint8),
              np.full(65536, 255, np.uint8), np.full(65537, 255, np.uint8),  # split runs
              np.full(2 * 65536 + 3, 9, np.uint8),
              np.repeat(np.array([0, 255, 0], np.uint8), [8, 9, 17]),  # each field size
              np.repeat(np.array([1, 2], np.uint8), [256, 257])]
    for _ in range(60):
        n = int(rng.integers(1, 200))
        arrays.append(np.repeat(rng.integers(0, 256, n).astype(np.uint8),
                                rng.integers(1, 300, n)))
    for a in arrays:
        rle = encode_rle(a)
        assert rle == list(sdk_encode_rle(a))
        assert np.array_equal(decode_rle(rle), a)
    for m in _masks(2, 40):
        rle = mask_to_rle(m)
        assert rle == list(sdk_mask2rle(m * np.uint8(255)))
        assert np.array_equal(rle_to_mask(rle, *m.shape), m.astype(bool))
