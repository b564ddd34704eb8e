"""A tiny numpy rasteriser for classic-control video frames (no pygame, no matplotlib).

Pixel coordinates are (x right, y down) with pixel centres at +0.5; drawing is by masks over
the whole frame, which is plenty fast for a 200x300 picture.
"""

from __future__ import annotations

import numpy as np

HEIGHT, WIDTH = 200, 300


def canvas(h: int = HEIGHT, w: int = WIDTH, color=(255, 255, 255)) -> np.ndarray:
    img = np.empty((h, w, 3), np.uint8)
    img[:] = color
    return img


def _grid(img: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    h, w = img.shape[:2]
    ys, xs = np.mgrid[0:h, 0:w]
    return xs + 0.5, ys + 0.5


def segment(img, p0, p1, width, color):
    """A thick line from p0 to p1 with round caps."""
    xs, ys = _grid(img)
    ax, ay = p0
    dx, dy = p1[0] - ax, p1[1] - ay
    length2 = dx * dx + dy * dy
    t = np.clip(((xs - ax) * dx + (ys - ay) * dy) / length2, 0.0, 1.0) if length2 > 0 else 0.0
    img[(xs - ax - t * dx) ** 2 + (ys - ay - t * dy) ** 2 <= (width / 2.0) ** 2] = color


def disc(img, centre, radius, color):
    xs, ys = _grid(img)
    img[(xs - centre[0]) ** 2 + (ys - centre[1]) ** 2 <= radius * radius] = color


def rect(img, x0, y0, x1, y1, color):
    """Axis-aligned filled rectangle; corners in any order, clipped to the frame."""
    xs, ys = _grid(img)
    img[(xs >= min(x0, x1)) & (xs <= max(x0, x1)) & (ys >= min(y0, y1)) & (ys <= max(y0, y1))] = color


def below(img, curve_y, color):
    """Fills every pixel under the per-column height `curve_y` (pixel rows, one per column)."""
    xs, ys = _grid(img)
    img[ys >= np.asarray(curve_y)[None, :]] = color
