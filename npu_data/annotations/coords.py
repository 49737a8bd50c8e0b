"""Percent -> pixel conversions (vectorised numpy) used when writing shards."""

from __future__ import annotations

import numpy as np


def to_pixels_xy(xy_percent: np.ndarray, width: float, height: float) -> np.ndarray:
    """(..., 2) percent x, y -> pixels."""
    xy = np.asarray(xy_percent, np.float64)
    return xy * (np.array([width, height], np.float64) / 100.0)


def box_corners(xywhr_percent: np.ndarray, width: float, height: float) -> np.ndarray:
    """(N, 5) percent boxes -> (N, 4, 2) pixel corners; the top-left corner stays fixed
    and the box turns clockwise by ``rotation`` degrees, after conversion to pixels."""
    b = np.asarray(xywhr_percent, np.float64).reshape(-1, 5)
    x, y = b[:, 0] * width / 100.0, b[:, 1] * height / 100.0
    w, h = b[:, 2] * width / 100.0, b[:, 3] * height / 100.0
    t = np.deg2rad(b[:, 4])
    c, s = np.cos(t), np.sin(t)
    cx = np.stack([x, x + w * c, x + w * c - h * s, x - h * s], axis=1)
    cy = np.stack([y, y + w * s, y + w * s + h * c, y + h * c], axis=1)
    return np.stack([cx, cy], axis=2)


def box_envelope(corners: np.ndarray) -> np.ndarray:
    """(N, 4, 2) corners -> (N, 4) axis-aligned x0, y0, x1, y1."""
    c = np.asarray(corners, np.float64).reshape(-1, 4, 2)
    return np.concatenate([c.min(axis=1), c.max(axis=1)], axis=1)


def box_xywhr_pixels(xywhr_percent: np.ndarray, width: float, height: float) -> np.ndarray:
    """(N, 5) percent boxes -> pixels (rotation unchanged)."""
    b = np.asarray(xywhr_percent, np.float64).reshape(-1, 5).copy()
    b[:, [0, 2]] *= width / 100.0
    b[:, [1, 3]] *= height / 100.0
    return b


def ellipse_pixels(params_percent: np.ndarray, width: float, height: float) -> np.ndarray:
    """(N, 5) percent cx, cy, rx, ry, rotation -> pixels (rx by width, ry by height)."""
    return box_xywhr_pixels(params_percent, width, height)


def keypoint_pixels(xy_percent: np.ndarray, size_percent: np.ndarray, width: float,
                    height: float) -> tuple[np.ndarray, np.ndarray]:
    """Keypoints to pixels; the size is a percent of the image width."""
    return to_pixels_xy(xy_percent, width, height), np.asarray(size_percent) * width / 100.0
