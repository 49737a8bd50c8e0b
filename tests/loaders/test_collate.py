"""collate_samples: padding, validity masks, dtypes, channels-last images copied once."""

from __future__ import annotations

import numpy as np
import torch

from npu_data.loaders import collate_samples


def _sample(i: int, h: int, w: int, nbox: int, poly_lens: list[int]) -> dict:
    rng = np.random.default_rng(i)
    img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    img.flags.writeable = False
    off = np.zeros(len(poly_lens) + 1, np.int64)
    off[1:] = np.cumsum(poly_lens)
    return {
        "image": img, "index": i, "task_id": 7 + i,
        "boxes.xyxy": rng.random((nbox, 4)).astype(np.float32),
        "boxes.corners": rng.random((nbox, 4, 2)).astype(np.float32),
        "boxes.label": np.arange(nbox, dtype=np.int32),
        "boxes.rid": [f"b{j}" for j in range(nbox)],
        "polygons.points": rng.random((int(off[-1]), 2)).astype(np.float32),
        "polygons.point_offsets": off,
        "polygons.label": np.full(len(poly_lens), 2, np.int32),
        "keypoints.xy": rng.random((1, 2)).astype(np.float32),
        "keypoints.label": np.zeros(1, np.int32),
        "masks.mask": (rng.random((1, h, w)) > 0.5).astype(np.uint8),
        "masks.label": np.zeros(1, np.int32),
        "texts.text": [f"caption {i}", "second"], "caption": f"caption {i}",
    }


def test_images_padded_channels_last_and_exact() -> None:
    samples = [_sample(0, 5, 9, 2, [3]), _sample(1, 8, 4, 0, [4, 5]), _sample(2, 3, 3, 1, [])]
    b = collate_samples(samples)
    img = b["image"]
    assert img.shape == (3, 3, 8, 9) and img.dtype == torch.uint8
    assert img.is_contiguous(memory_format=torch.channels_last)
    assert b["sizes"].tolist() == [[5, 9], [8, 4], [3, 3]]
    for i, s in enumerate(samples):
        h, w = s["image"].shape[:2]
        hwc = img[i].permute(1, 2, 0)
        assert np.array_equal(hwc[:h, :w].numpy(), s["image"])
        assert int(hwc[h:].sum()) == 0 and int(hwc[:, w:].sum()) == 0
    assert b["index"].tolist() == [0, 1, 2] and b["task_id"].tolist() == [7, 8, 9]
    assert b["caption"] == ["caption 0", "caption 1", "caption 2"]
    assert b["texts.text"][1] == ["caption 1", "second"]


def test_geometry_padded_with_valid_masks() -> None:
    samples = [_sample(0, 5, 9, 2, [3]), _sample(1, 8, 4, 0, [4, 5]), _sample(2, 3, 3, 1, [])]
    b = collate_samples(samples)
    assert b["boxes.xyxy"].shape == (3, 2, 4) and b["boxes.corners"].shape == (3, 2, 4, 2)
    assert b["boxes.valid"].tolist() == [[True, True], [False, False], [True, False]]
    assert b["boxes.label"].dtype == torch.int64
    assert b["boxes.label"].tolist() == [[0, 1], [-1, -1], [0, -1]]
    assert torch.equal(b["boxes.xyxy"][0], torch.from_numpy(samples[0]["boxes.xyxy"]))
    assert b["boxes.xyxy"][1].abs().sum() == 0
    assert b["boxes.rid"] == [["b0", "b1"], [], ["b0"]]
    pts = b["polygons.points"]
    assert pts.shape == (3, 2, 5, 2)
    assert b["polygons.valid"].tolist() == [[True, False], [True, True], [False, False]]
    assert b["polygons.vertex_valid"].sum(-1).tolist() == [[3, 0], [4, 5], [0, 0]]
    src = samples[1]["polygons.points"]
    assert torch.equal(pts[1, 1], torch.from_numpy(src[4:9]))
    assert torch.equal(pts[1, 0, :4], torch.from_numpy(src[:4]))
    assert b["polygons.label"].tolist() == [[2, -1], [2, 2], [-1, -1]]
    assert b["keypoints.xy"].shape == (3, 1, 2) and b["keypoints.valid"].all()
    m = b["masks.mask"]
    assert m.shape == (3, 1, 8, 9)
    assert np.array_equal(m[1, 0, :8, :4].numpy(), samples[1]["masks.mask"][0])
    assert int(m[1, 0, :, 4:].sum()) == 0


def test_pin_is_harmless_without_accelerator() -> None:
    b = collate_samples([_sample(0, 4, 4, 1, [3])], pin=True)
    assert b["image"].shape == (1, 3, 4, 4)


def test_groups_no_sample_uses_keep_their_shapes() -> None:
    b = collate_samples([_sample(0, 4, 4, 0, []), _sample(1, 5, 3, 0, [])])
    assert b["boxes.xyxy"].shape == (2, 0, 4) and b["boxes.corners"].shape == (2, 0, 4, 2)
    assert b["boxes.label"].dtype == torch.int64 and b["boxes.valid"].shape == (2, 0)
    assert b["polygons.points"].shape == (2, 0, 1, 2)
    assert b["polygons.vertex_valid"].shape == (2, 0, 1)
    assert b["boxes.rid"] == [[], []]
    assert b["masks.mask"].shape == (2, 1, 5, 4)


def test_values_columns_cannot_carry_keep_their_batch_form() -> None:
    """Sample dicts are made columns before the one assembler; what columns cannot carry
    (None rows, lists, ragged rows, mixed dtypes, float/array/object meta) keeps its form."""
    img = np.zeros((2, 2, 3), np.uint8)
    a = {"image": img, "index": 1, "score": 0.5, "shape": np.array([2, 2]), "obj": {"k": 1},
         "tags": ["x"], "mixed": 1,
         "boxes.xyxy": np.ones((2, 4), np.float32), "boxes.label": None,
         "boxes.rid": ["r0", "r1"], "boxes.extra": np.array([1, 2, 3], np.int64),
         "boxes.score": np.array([0.25, 0.5], np.float32)}
    b = {"image": img, "index": 2, "score": 1.5, "shape": np.array([3, 1]), "obj": None,
         "tags": ("y", "z"), "mixed": 2.9,
         "boxes.xyxy": np.full((1, 4), 2, np.float32), "boxes.label": np.array([7], np.int16),
         "boxes.rid": None, "boxes.extra": None,
         "boxes.score": np.array([0.75], np.float64)}
    out = collate_samples([a, b])
    assert out["score"].dtype == torch.float64 and out["score"].tolist() == [0.5, 1.5]
    assert out["shape"].tolist() == [[2, 2], [3, 1]]
    assert out["obj"] == [{"k": 1}, None] and out["tags"] == [["x"], ["y", "z"]]
    assert out["mixed"].dtype == torch.int64 and out["mixed"].tolist() == [1, 2]
    assert out["boxes.label"].dtype == torch.int64
    assert out["boxes.label"].tolist() == [[-1, -1], [7, -1]]
    assert out["boxes.rid"] == [["r0", "r1"], []]
    assert [None if t is None else t.tolist() for t in out["boxes.extra"]] == [[1, 2, 3], None]
    assert out["boxes.score"].dtype == torch.float32
    assert out["boxes.score"].tolist() == [[0.25, 0.5], [0.75, 0.0]]
    assert out["boxes.xyxy"].tolist() == [[[1.0] * 4] * 2, [[2.0] * 4, [0.0] * 4]]
    assert list(out)[:4] == ["image", "sizes", "index", "score"]
