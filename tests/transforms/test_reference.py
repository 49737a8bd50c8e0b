"""The Pillow CPU versions against direct Pillow calls and independent numpy formulas."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image, ImageEnhance

from npu_data.errors import UserError
from npu_data.transforms.oracle import pillow as R

SHAPES = [(1, 1), (1, 37), (41, 1), (23, 64), (97, 80)]


def _img(shape: tuple[int, int], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (*shape, 3), dtype=np.uint8)


def _blend(in1: np.ndarray, img: np.ndarray, factor: float) -> np.ndarray:
    """Pillow's blend: float32 ``in1 + f * (img - in1)``, 0 / 255 clamps, else truncation."""
    a, b = in1.astype(np.float32), img.astype(np.float32)
    t = a + np.float32(factor) * (b - a)
    out = np.where(t <= 0, 0, np.where(t >= 255, 255, np.trunc(t)))
    return out.astype(np.uint8)


def _gray(img: np.ndarray) -> np.ndarray:
    rgb = img.astype(np.int64)
    gray = (rgb[..., 0] * 19595 + rgb[..., 1] * 38470 + rgb[..., 2] * 7471 + 0x8000) >> 16
    return gray.astype(np.uint8)


FACTORS = [0.0, 0.3, 0.77, 1.0, 1.5, 2.0]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("factor", FACTORS)
def test_brightness_is_a_float32_truncating_blend_with_black(shape, factor) -> None:
    img = _img(shape)
    assert np.array_equal(R.adjust_brightness(img, factor), _blend(np.zeros_like(img), img,
                                                                   factor))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("factor", FACTORS)
def test_saturation_blends_with_the_integer_grayscale(shape, factor) -> None:
    img = _img(shape, 1)
    gray = np.repeat(_gray(img)[..., None], 3, axis=2)
    assert np.array_equal(R.adjust_saturation(img, factor), _blend(gray, img, factor))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("factor", FACTORS)
def test_contrast_blends_with_the_rounded_grayscale_mean(shape, factor) -> None:
    img = _img(shape, 2)
    mean = int(_gray(img).astype(np.float64).mean() + 0.5)
    assert np.array_equal(R.adjust_contrast(img, factor),
                          _blend(np.full_like(img, mean), img, factor))


def test_grayscale_formula_is_pillows() -> None:
    img = _img((64, 64), 3)
    assert np.array_equal(_gray(img), np.asarray(Image.fromarray(img).convert("L")))


def test_enhance_ops_match_imageenhance_directly() -> None:
    img = _img((31, 45), 4)
    pil = Image.fromarray(img)
    for fn, enh in ((R.adjust_brightness, ImageEnhance.Brightness),
                    (R.adjust_contrast, ImageEnhance.Contrast),
                    (R.adjust_saturation, ImageEnhance.Color)):
        assert np.array_equal(fn(img, 1.23), np.asarray(enh(pil).enhance(1.23)))


@pytest.mark.parametrize("shape", SHAPES)
def test_hflip_mirrors_columns_and_copies(shape) -> None:
    img = _img(shape, 5)
    out = R.hflip(img)
    assert np.array_equal(out, img[:, ::-1])
    assert np.array_equal(out, np.asarray(Image.fromarray(img).transpose(
        Image.Transpose.FLIP_LEFT_RIGHT)))
    same = R.hflip(img, False)
    assert np.array_equal(same, img) and same is not img
    same[0, 0] = ~same[0, 0]
    assert not np.array_equal(same, img)  # a copy, not a view


@pytest.mark.parametrize("box,size", [
    ((0, 0, 97, 80), 224), ((5, 7, 40, 30), (17, 45)), ((96, 79, 1, 1), 224),
    ((10, 3, 1, 70), (9, 3)), ((0, 0, 97, 80), (97, 80)), ((20, 20, 60, 50), 1),
])
def test_resized_crop_is_pillow_crop_then_bilinear_resize(box, size) -> None:
    img = _img((97, 80), 6)
    top, left, h, w = box
    out_h, out_w = (size, size) if isinstance(size, int) else size
    expected = np.asarray(Image.fromarray(img).crop((left, top, left + w, top + h)).resize(
        (out_w, out_h), Image.BILINEAR))
    out = R.resized_crop(img, box, size)
    assert out.shape == (out_h, out_w, 3) and out.dtype == np.uint8
    assert np.array_equal(out, expected)


def test_resized_crop_of_one_pixel_is_that_pixel_everywhere() -> None:
    img = _img((13, 17), 7)
    out = R.resized_crop(img, (4, 9, 1, 1), (7, 11))
    assert np.array_equal(out, np.broadcast_to(img[4, 9], (7, 11, 3)))


def test_resized_crop_same_size_is_the_crop() -> None:
    img = _img((30, 40), 8)
    assert np.array_equal(R.resized_crop(img, (3, 4, 20, 25), (20, 25)), img[3:23, 4:29])


def _torchvision_hue(img: np.ndarray, hue: float) -> np.ndarray:
    """torchvision's PIL adjust_hue, literally (well defined for hue >= 0)."""
    h, s, v = Image.fromarray(img).convert("HSV").split()
    np_h = np.array(h, dtype=np.uint8)
    with np.errstate(over="ignore"):
        np_h += np.array(hue * 255).astype(np.uint8)
    return np.asarray(Image.merge("HSV", (Image.fromarray(np_h, "L"), s, v)).convert("RGB"))


@pytest.mark.parametrize("hue", [0.0, 0.01, 0.1, 0.25, 0.4999, 0.5])
def test_hue_matches_torchvision_for_positive_shifts(hue) -> None:
    img = _img((37, 29), 9)
    assert np.array_equal(R.adjust_hue(img, hue), _torchvision_hue(img, hue))


@pytest.mark.parametrize("hue", [-0.5, -0.3, -0.1, -0.0039, -1e-6])
def test_negative_hue_is_the_wrapped_truncated_shift(hue) -> None:
    shift = int(hue * 255) % 256  # Python's int() truncates toward zero
    assert R.hue_shift(hue) == shift
    img = _img((21, 33), 10)
    h, s, v = Image.fromarray(img).convert("HSV").split()
    np_h = ((np.asarray(h).astype(np.int64) + shift) % 256).astype(np.uint8)
    expected = np.asarray(Image.merge("HSV", (Image.fromarray(np_h, "L"), s, v)).convert("RGB"))
    assert np.array_equal(R.adjust_hue(img, hue), expected)


def test_hue_shift_agrees_with_numpy_cast_where_defined() -> None:
    for hue in np.linspace(0.0, 0.5, 101):
        assert R.hue_shift(float(hue)) == int(np.array(float(hue) * 255).astype(np.uint8))


def test_hue_leaves_gray_pixels_unchanged() -> None:
    levels = np.arange(256, dtype=np.uint8)
    gray = np.repeat(levels.reshape(16, 16, 1), 3, axis=2)
    for hue in (-0.5, -0.2, 0.3, 0.5):
        assert np.array_equal(R.adjust_hue(gray, hue), gray)


def test_half_turn_hue_swaps_pure_colours() -> None:
    img = np.array([[[255, 0, 0], [0, 255, 0], [0, 0, 255]]], dtype=np.uint8)
    out = R.adjust_hue(img, 0.5).astype(int)
    # red (H=0) moves by 127/255 of a turn: to (almost) cyan
    assert out[0, 0, 0] < 10 and out[0, 0, 1] > 245 and out[0, 0, 2] > 245


@pytest.mark.parametrize("channels_last", [False, True])
def test_normalize_formula_and_layout(channels_last) -> None:
    img = _img((5, 7), 11)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    out = R.normalize(img, mean, std, channels_last=channels_last)
    assert out.dtype == np.float32
    hwc = out if channels_last else out.transpose(1, 2, 0)
    assert out.shape == ((5, 7, 3) if channels_last else (3, 5, 7))
    expected = (img.astype(np.float64) / 255.0 - np.array(mean)) / np.array(std)
    assert np.allclose(hwc, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("call,needle", [
    (lambda: R.adjust_brightness(np.zeros((4, 4, 3), np.float32), 1.0), "uint8"),
    (lambda: R.adjust_contrast(np.zeros((4, 4), np.uint8), 1.0), "HxWx3"),
    (lambda: R.adjust_saturation(np.zeros((0, 4, 3), np.uint8), 1.0), "empty"),
    (lambda: R.adjust_brightness(np.zeros((4, 4, 3), np.uint8), -0.1), "factor"),
    (lambda: R.adjust_contrast(np.zeros((4, 4, 3), np.uint8), float("nan")), "finite"),
    (lambda: R.adjust_hue(np.zeros((4, 4, 3), np.uint8), 0.6), "[-0.5, 0.5]"),
    (lambda: R.resized_crop(np.zeros((4, 4, 3), np.uint8), (2, 2, 3, 1), 8), "does not fit"),
    (lambda: R.resized_crop(np.zeros((4, 4, 3), np.uint8), (0, 0, 0, 2), 8), "does not fit"),
    (lambda: R.resized_crop(np.zeros((4, 4, 3), np.uint8), (0, 0, 2, 2), 0), "positive"),
    (lambda: R.resized_crop(np.zeros((4, 4, 3), np.uint8), (0, 0, 2), 8), "top, left"),
    (lambda: R.normalize(np.zeros((4, 4, 3), np.uint8), (0.5, 0.5), (1, 1, 1)), "3 values"),
    (lambda: R.normalize(np.zeros((4, 4, 3), np.uint8), (0.5,) * 3, (1, 0, 1)), "> 0"),
    (lambda: R.hflip([[1, 2, 3]]), "numpy array"),  # type: ignore[arg-type]
])
def test_bad_arguments_raise_user_errors(call, needle) -> None:
    with pytest.raises(UserError) as exc:
        call()
    assert needle in str(exc.value) and "reference." in str(exc.value)
    assert "\n" not in str(exc.value)
