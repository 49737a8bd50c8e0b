"""Draw a sample dict (docs/architecture.md) with its annotations, for previews: each kind
draws its own rows (``Kind.paint``) on a ``Canvas``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from npu_data.kinds.registry import KINDS

PALETTE = [(230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48),
           (145, 30, 180), (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 212)]
Colour = tuple[int, int, int]


@dataclass
class Canvas:
    """The RGBA picture being drawn (the image scaled by ``scale``) and the label maps."""

    image: Image.Image
    scale: int
    labels: Mapping[str, list[str]]
    controls: list[str]
    font: Any = field(default_factory=ImageFont.load_default)
    notes: int = 0  # text lines written in the top-left corner so far

    @property
    def width(self) -> int:
        """Line width in picture pixels."""
        return max(1, self.scale)

    @property
    def draw(self) -> ImageDraw.ImageDraw:
        """A drawing context on the current picture."""
        return ImageDraw.Draw(self.image)

    def points(self, xy: Iterable[Any]) -> list[tuple[float, float]]:
        """Image pixel points as picture points."""
        return [(float(x) * self.scale, float(y) * self.scale) for x, y in xy]

    @staticmethod
    def colour(label: Any) -> Colour:
        """The colour of label id ``label`` (white for none)."""
        return PALETTE[int(label) % len(PALETTE)] if int(label) >= 0 else (255, 255, 255)

    def name(self, sample: Mapping[str, Any], kind: str, j: int) -> str:
        """The label name of row ``j`` of ``kind`` ("" for none)."""
        lab, ctrl = int(sample[f"{kind}.label"][j]), int(sample[f"{kind}.control"][j])
        if lab < 0 or ctrl >= len(self.controls):
            return ""
        names = self.labels.get(self.controls[ctrl], [])
        return names[lab] if lab < len(names) else str(lab)

    def text(self, xy: tuple[float, float], label: str, colour: Colour) -> None:
        """``label`` on a dark band just above ``xy``."""
        if label:
            x, y = xy
            draw = self.draw
            draw.rectangle(draw.textbbox((x, y - 11), label, font=self.font), fill=(0, 0, 0, 160))
            draw.text((x, y - 11), label, fill=colour, font=self.font)

    def note(self, line: str, colour: Colour) -> None:
        """A line of text under the previous ones in the top-left corner."""
        self.notes += 1
        self.text((2.0, 12.0 * self.notes), line, colour)

    def control(self, sample: Mapping[str, Any], kind: str, j: int) -> str:
        """The control name of row ``j`` of ``kind`` ("" for none)."""
        ctrl = int(sample[f"{kind}.control"][j])
        return self.controls[ctrl] if 0 <= ctrl < len(self.controls) else ""

    def overlay(self, alpha: Image.Image, colour: Colour) -> None:
        """``colour`` over the picture with opacity ``alpha`` (an image-sized L image)."""
        if alpha.size != self.image.size:
            alpha = alpha.resize(self.image.size, Image.Resampling.NEAREST)
        layer = Image.new("RGBA", self.image.size, (*colour, 0))
        layer.putalpha(alpha)
        self.image = Image.alpha_composite(self.image, layer)


def draw_sample(sample: dict[str, Any], labels: dict[str, list[str]],
                controls: list[str] | None = None, min_side: int = 384) -> Image.Image:
    """An RGB picture of ``sample``: every kind's rows (translucent areas first), label names
    and the caption. Small images are scaled up to ``min_side`` (integer factor) so the
    drawing stays legible."""
    img = np.asarray(sample["image"])
    h, w = img.shape[:2]
    s = max(1, min_side // max(1, max(h, w)))
    base = Image.fromarray(np.ascontiguousarray(img)).convert("RGBA")
    if s > 1:
        base = base.resize((w * s, h * s), Image.Resampling.NEAREST)
    canvas = Canvas(base, s, labels, list(controls) if controls is not None else list(labels))
    for kind in sorted(KINDS, key=lambda k: not k.paint_first):
        kind.paint(canvas, sample)
    return caption_band(canvas.image.convert("RGB"), str(sample.get("caption", "")),
                        canvas.font)


def caption_band(out: Image.Image, caption: str, font: Any = None) -> Image.Image:
    """``out`` with ``caption`` (its first 200 characters) on a black band below it."""
    if not caption:
        return out
    band = Image.new("RGB", (out.width, out.height + 18), (0, 0, 0))
    band.paste(out, (0, 0))
    ImageDraw.Draw(band).text((4, out.height + 3), caption[:200], fill=(255, 255, 255),
                              font=font or ImageFont.load_default())
    return band
