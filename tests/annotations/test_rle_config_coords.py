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
from npu_data.annotations.brush_rle import RLEError
from npu_data.errors import UserError
from npu_data.kinds.boxes import box_pixels

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
    w_img, h_img = np.array([640.0]), np.array([480.0])
    px, corners, env = box_pixels(np.array([[10.0, 20, 30, 40, 30]]), w_img, h_img)
    x, y, w, h = 64.0, 96.0, 192.0, 192.0  # pixels before rotating
    c, s = math.cos(math.radians(30)), math.sin(math.radians(30))
    expect = [(x, y), (x + w * c, y + w * s), (x + w * c - h * s, y + w * s + h * c),
              (x - h * s, y + h * c)]
    np.testing.assert_allclose(corners[0], expect, atol=1e-4)
    np.testing.assert_allclose(env[0], [x - h * s, y, x + w * c, y + w * s + h * c], atol=1e-4)
    np.testing.assert_allclose(px[0], [x, y, w, h, 30.0], atol=1e-4)
    _, flat, _ = box_pixels(np.array([[0.0, 0, 50, 50, 0]]), np.array([100.0]), np.array([200.0]))
    np.testing.assert_allclose(flat[0], [(0, 0), (50, 0), (50, 100), (0, 100)], atol=1e-12)


# --- the vectorised decoder against the record-by-record one it replaced -------------------

def _reference_decode(rle: list[int]) -> np.ndarray:
    """The decoder before vectorising (one Python step per record), kept verbatim as the
    reference: same bytes out, same RLEError messages."""
    data = np.asarray(rle, dtype=np.int64)
    if data.size and (data.min() < 0 or data.max() > 255):
        raise RLEError("RLE values must be bytes (0..255)")
    bits = (np.unpackbits(data.astype(np.uint8)) + 48).tobytes()
    nbits = len(bits)
    if nbits < 53:
        raise RLEError("RLE stream shorter than its header")
    num = int(bits[0:32], 2)
    word = int(bits[32:37], 2) + 1
    sizes = [int(bits[37 + 4 * k: 41 + 4 * k], 2) + 1 for k in range(4)]
    pos, out_i = 53, 0
    seg_vals: list[int] = []
    seg_lens: list[int] = []
    while out_i < num:
        size = sizes[int(bits[pos + 1: pos + 3], 2)] if pos + 3 <= nbits else 0
        end = pos + 3 + size
        if size == 0 or end > nbits:
            raise RLEError(f"RLE stream truncated after {out_i} of {num} values")
        n = int(bits[pos + 3: end], 2) + 1
        stop = end + (word if bits[pos] == 49 else word * n)
        if stop > nbits:
            raise RLEError(f"RLE stream truncated after {out_i} of {num} values")
        if bits[pos] == 49:
            seg_vals.append(int(bits[end:stop], 2))
            seg_lens.append(n)
        else:
            seg_vals.extend(int(bits[p: p + word], 2) for p in range(end, stop, word))
            seg_lens.extend([1] * n)
        pos = stop
        out_i += n
    vals = np.asarray(seg_vals, dtype=np.int64) & 0xFF
    return np.repeat(vals.astype(np.uint8), np.asarray(seg_lens, dtype=np.int64))[:num]


def _pack(rng: np.random.Generator, records: int) -> list[int]:
    """A random stream in the general format: any word size (1..32 bits), any four run-length
    field sizes, repeat and multi-word literal records mixed, ``num`` at or below the total."""
    word = int(rng.integers(1, 33))
    sizes = [int(s) for s in rng.integers(1, 17, 4)]
    body, total = [], 0
    for _ in range(records):
        k = int(rng.integers(0, 4))
        n = int(rng.integers(1, min(1 << sizes[k], 40) + 1))
        repeat = bool(rng.random() < 0.5)
        words = 1 if repeat else n
        body.append(f"{int(repeat)}{k:02b}{n - 1:0{sizes[k]}b}")
        body.extend(f"{int(v):0{word}b}" for v in rng.integers(0, 1 << word, words, np.uint64))
        total += n
    num = int(rng.integers(max(total - 3, 0), total + 1))  # the last run may overshoot num
    text = f"{num:032b}{word - 1:05b}" + "".join(f"{s - 1:04b}" for s in sizes) + "".join(body)
    text += "0" * (-len(text) % 8)
    return [int(text[i:i + 8], 2) for i in range(0, len(text), 8)]


def _same(rle: list[int]) -> str | None:
    """Both decoders give the same bytes, or the same RLEError message (returned)."""
    try:
        want = _reference_decode(rle)
    except RLEError as e:
        with pytest.raises(RLEError) as got:
            decode_rle(rle)
        assert str(got.value) == str(e)
        return str(e)
    out = decode_rle(rle)
    assert out.dtype == np.uint8 and out.shape == want.shape
    assert out.tobytes() == want.tobytes()
    return None


@pytest.mark.parametrize("block", [None, 1, 3])  # 1, 3: many vectorised passes per stream
def test_rle_same_as_reference_on_random_masks_streams_and_truncations(
        block: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    from npu_data.annotations import brush_rle as rle_mod
    from npu_data.tools.sample_data import encode_rle as ours_encode

    if block is not None:
        monkeypatch.setattr(rle_mod, "_BLOCK", block)
    rng = np.random.default_rng(15)
    errors = set()
    for trial in range(40 if block is None else 8):
        h, w = (int(v) for v in rng.integers(1, 40, 2))
        m = (rng.random((h, w)) < rng.random()).astype(np.uint8) * 255
        streams = [mask2rle(m),  # the SDK's encoder: literal records for runs of one
                   ours_encode(np.repeat(m.ravel(), 4)),
                   encode_rle(rng.integers(0, 256, int(rng.integers(1, 400))).astype(np.uint8)),
                   _pack(rng, int(rng.integers(0, 30)))]
        for k, rle in enumerate(streams):
            assert _same(rle) is None, (trial, k)
            if k < 2:
                np.testing.assert_array_equal(rle_to_mask(rle, h, w), m > 0)
            for cut in {0, 6, 7, len(rle) - 1, *rng.integers(0, len(rle), 4).tolist()}:
                msg = _same(rle[:cut])
                if msg:
                    errors.add(msg.split(" after")[0])
            bad = list(rle)
            for i in rng.integers(7, len(rle), 3) if len(rle) > 7 else []:
                bad[i] = int(rng.integers(0, 256))  # a corrupted record header or payload
            _same(bad)
        _same(rng.integers(0, 256, int(rng.integers(0, 60))).tolist())  # noise
    assert errors == {"RLE stream shorter than its header", "RLE stream truncated"}


def test_rle_errors_and_edges_unchanged() -> None:
    for rle in ([], [0] * 6, [1, 2, -1, 4, 5, 6, 7], [0, 0, 0, 4, 256, 0, 0, 0]):
        _same(rle)
    with pytest.raises(RLEError, match=r"must be bytes \(0\.\.255\)"):
        decode_rle([0, 0, 0, 4, 300, 0, 0, 0])
    empty = [0, 0, 0, 0, 0x38, 0x10, 0x20] + [0xFF] * 5  # num = 0: nothing is read after it
    assert _same(empty) is None and decode_rle(empty).size == 0
    rle = encode_rle(np.full(4 * 6, 255, np.uint8))
    for arr in (np.asarray(rle), np.asarray(rle, np.uint8), tuple(rle), [float(v) for v in rle]):
        assert decode_rle(arr).tobytes() == _reference_decode(list(arr)).tobytes()
    assert rle_to_mask(rle, 2, 3).all()
    with pytest.raises(RLEError, match=r"decodes to 24 values, expected 3x3x4 = 36"):
        rle_to_mask(rle, 3, 3)
    with pytest.raises(RLEError, match="truncated after 0 of 24 values"):
        rle_to_mask(rle[:8], 2, 3)
