"""What a latents store holds, in lines for people (``npu-data encode`` and ``inspect``):
its buckets and how many samples each holds, how many samples were upscaled to cover their
bucket and by how much, its dtype, encoders and captions."""

from __future__ import annotations

from typing import Any

import numpy as np

from npu_data.shards.latent_format import GROUP
from npu_data.shards.latent_read import captions_per_sample, latent_record, latent_shard


def sizes(ds: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(original (N, 2), target (N, 2))`` int64 (height, width) of every sample of latents
    store ``ds``, from its size columns."""
    record = latent_record(ds)
    orig, target = [], []
    for k in range(len(ds.manifest["shards"])):
        sh = latent_shard(ds, k, record)
        orig.append(np.asarray(sh.col(f"{GROUP}.original_size"), np.int64).reshape(-1, 2))
        target.append(np.asarray(sh.col(f"{GROUP}.target_size"), np.int64).reshape(-1, 2))
    if not orig:
        return np.zeros((0, 2), np.int64), np.zeros((0, 2), np.int64)
    return np.concatenate(orig), np.concatenate(target)


def upscale_line(original: np.ndarray, target: np.ndarray, no_upscale: bool,
                 flag: str = "no_upscale=True") -> str:
    """How many samples were resized up to cover their bucket (the cover scale
    ``max(bucket_h / h, bucket_w / w)`` above 1), and by how much; unless ``no_upscale``
    was given, the ``flag`` that stops it."""
    if not len(original):
        return "upscaled: no samples"
    scale = np.max(target / np.maximum(original, 1), axis=1)
    up = scale[scale > 1.0 + 1e-9]
    if not len(up):
        return f"upscaled: none of {len(scale)} samples (each covers its bucket)"
    hint = "" if no_upscale else f" — {flag} gives a small photo a bucket inside it, or " \
                                 "choose smaller buckets"
    return (f"upscaled: {len(up)} of {len(scale)} samples to cover their bucket, by "
            f"{up.min():.2f}x to {up.max():.2f}x (median {np.median(up):.2f}x){hint}")


def bucket_counts(target: np.ndarray) -> str:
    """``64x64: 6, 48x80: 4`` — the samples of each stored size, largest count first."""
    if not len(target):
        return "-"
    pairs, counts = np.unique(target, axis=0, return_counts=True)
    order = np.argsort(-counts, kind="stable")
    return ", ".join(f"{pairs[i][0]}x{pairs[i][1]}: {counts[i]}" for i in order)


def encoder_lines(record: dict[str, Any]) -> list[tuple[str, str]]:
    """(role, ``class config <sha256[:12]> weights <sha256[:12]>``) of each encoder."""
    out = []
    for role, meta in sorted(record.get("encoders", {}).items()):
        text = f"{meta.get('class')} config {str(meta.get('config_sha256'))[:12]}"
        if meta.get("weights_sha256"):
            text += f" weights {meta['weights_sha256'][:12]}"
        out.append((role, text))
    return out


def caption_line(record: dict[str, Any]) -> str:
    """Where the encoded captions came from (stores made before this was recorded: the
    count of samples with a stored caption is all there is)."""
    cap = record.get("captions")
    if not isinstance(cap, dict):
        return "not recorded (stored captions only)"
    field = f" (--caption-field {cap['field']})" if cap.get("field") else ""
    return f"{cap.get('sources')}{field}"


def rows_line(ds: Any) -> str:
    """``8 captions over 4 samples (per sample: 2 for 4)``: the captions latents store ``ds``
    holds (one embedding row each with text encoders) and how many each sample has."""
    counts = captions_per_sample(ds)
    values, many = np.unique(counts, return_counts=True)
    per = ", ".join(f"{v} for {m}" for v, m in zip(values.tolist(), many.tolist(),
                                                    strict=True))
    what = "embedded" if latent_record(ds).get("text") else "stored"
    return (f"{what} {int(counts.sum())} captions over {len(counts)} samples (captions per "
            f"sample: {per or '-'})")
