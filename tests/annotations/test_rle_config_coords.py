"""Brush RLE against label-studio-sdk, labeling-config label maps, percent->pixel geometry."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from label_studio_sdk.converter.brush import decode_rle as sdk_decode
from label_studio_sdk.converter.brush import encode_rle, mask2rle

from npu_data.annotations import decode_rle, label_map_from_config, rle_to_mask
from npu_data.annotations.coords import box_corners, box_envelope, keypoint_pixels
from npu_data.annotations.rle import RLEError
from npu_data.errors import UserError

SAMPLE = Path(__file__).parent / "data" / "labelstudio-export-sample.json"
CONFIG = """<View><Image name="image" value="$image"/>
<RectangleLabels name="bbox" toName="image"><Label value="cat"/><Label value="dog"/></RectangleLabels>
<PolygonLabels name="poly" toName="image"><Label value="cat"/></PolygonLabels>
<KeyPointLabels name="kp" toName="image"><Label value="eye"/></KeyPointLabels>
<BrushLabels name="brush" toName="image"><Label value="cat"/></BrushLabels>
<Choices name="cls" toName="image"><Choice value="outdoor"/><Choice value="indoor"/></Choices>
<TextArea name="caption" toName="image"/><Rating name="rate" toName="image"/>
</View>"""


def test_rle_matches_sdk_on_sample_and_encoded_masks() -> None:
    tasks = json.loads(SAMPLE.read_text())
    rles = [r["value"]["rle"] for t in tasks for a in t["annotations"] for r in a["result"]
            if r.get("type") == "brushlabels"]
    assert rles
    for rle in rles:
        np.testing.assert_array_equal(decode_rle(rle), sdk_decode(rle))
    rng = np.random.default_rng(0)
    for shape in ((37, 53), (1, 1), (300, 17)):
        m = (rng.random(shape) < 0.3).astype(np.uint8) * 255
        m[: shape[0] // 2, : shape[1] // 2] = 255
        rle = mask2rle(m)
        np.testing.assert_array_equal(decode_rle(rle), sdk_decode(rle))
        np.testing.assert_array_equal(rle_to_mask(rle, *shape), m > 0)
    arr = rng.integers(0, 256, 5000).astype(np.uint8)
    arr[100:90000 // 20] = 9
    np.testing.assert_array_equal(decode_rle(encode_rle(arr)), arr)
    with pytest.raises(RLEError):
        decode_rle(rles[0][: len(rles[0]) // 2])
    with pytest.raises(RLEError, match="expected"):
        rle_to_mask(rles[0], 10, 10)


def test_label_map_sdk_and_etree_agree() -> None:
    sdk = label_map_from_config(CONFIG)
    tree = label_map_from_config(CONFIG, use_sdk=False)
    assert sdk == tree
    assert tree["cls"] == ["outdoor", "indoor"] and tree["bbox"] == ["cat", "dog"]
    assert tree["caption"] == [] and set(tree) == {"bbox", "poly", "kp", "brush", "cls",
                                                   "caption", "rate"}
    with pytest.raises(UserError, match="proj.xml"):
        label_map_from_config("<View><Image", name="proj.xml")


def test_rotated_box_corners_by_hand() -> None:
    w_img, h_img = 640.0, 480.0
    corners = box_corners(np.array([[10, 20, 30, 40, 30]]), w_img, h_img)[0]
    x, y, w, h = 64.0, 96.0, 192.0, 192.0  # pixels before rotating
    c, s = math.cos(math.radians(30)), math.sin(math.radians(30))
    expect = [(x, y), (x + w * c, y + w * s), (x + w * c - h * s, y + w * s + h * c),
              (x - h * s, y + h * c)]
    np.testing.assert_allclose(corners, expect, atol=1e-9)
    env = box_envelope(corners[None])[0]
    np.testing.assert_allclose(env, [x - h * s, y, x + w * c, y + w * s + h * c], atol=1e-9)
    flat = box_corners(np.array([[0, 0, 50, 50, 0]]), 100, 200)[0]
    np.testing.assert_allclose(flat, [(0, 0), (50, 0), (50, 100), (0, 100)], atol=1e-12)
    xy, size = keypoint_pixels(np.array([[50.0, 25.0]]), np.array([1.0]), 200, 100)
    np.testing.assert_allclose(xy, [[100.0, 25.0]])
    np.testing.assert_allclose(size, [2.0])
