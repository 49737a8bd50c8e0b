"""A picture of a latents store's sample: decoded with the store's VAE when one is given,
else its latent channels side by side (each stretched to its own min..max, grey), enlarged
for legibility; the caption below either."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from PIL import Image

from npu_data.previews.canvas import caption_band


@torch.no_grad()
def decoded(latents: torch.Tensor, vae: Any) -> np.ndarray:
    """(H, W, 3) uint8: ``vae.decode(latents / scaling_factor)`` mapped from [-1, 1]."""
    param = next(vae.parameters())
    z = latents.to(param.device, param.dtype)[None] / vae.config.scaling_factor
    x = vae.decode(z).sample[0].float().clamp(-1, 1)
    return ((x + 1) * 127.5).round().to(torch.uint8).permute(1, 2, 0).cpu().numpy()


def channels(latents: torch.Tensor) -> np.ndarray:
    """(h, C * (w + 1) - 1) uint8: each channel stretched to 0..255, a 1-pixel gap between."""
    lat = latents.float().cpu().numpy()
    c, h, w = lat.shape
    out = np.zeros((h, c * (w + 1) - 1), np.uint8)
    for i, ch in enumerate(lat):
        lo, hi = float(ch.min()), float(ch.max())
        span = hi - lo if np.isfinite(hi - lo) and hi > lo else 1.0
        out[:, i * (w + 1):i * (w + 1) + w] = np.clip((ch - lo) / span * 255, 0, 255)
    return out


def latent_picture(sample: dict[str, Any], vae: Any = None, min_side: int = 384
                   ) -> Image.Image:
    """An RGB picture of latents sample ``sample`` (see the module doc)."""
    pixels = decoded(sample["latents"], vae) if vae is not None else channels(
        sample["latents"])
    image = Image.fromarray(pixels).convert("RGB")
    scale = max(1, min_side // max(1, max(image.size)))
    if scale > 1:
        image = image.resize((image.width * scale, image.height * scale),
                             Image.Resampling.NEAREST)
    return caption_band(image, str(sample.get("caption", "")))
