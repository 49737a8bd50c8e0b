"""Reading a latents store (``npu_data.latents`` writes them): the sample dicts
``ShardDataset`` gives for it and its empty-prompt embeddings.

A sample holds ``latents`` (C, h/f, w/f) and, when stored, ``latents_flipped``; ``sizes``
(the bucket, (2,) int64, what ``BucketBatchSampler`` and keyed draws read),
``original_size``, ``crop_top_left`` (and ``crop_top_left_flipped``), ``target_size``
((2,) int64, (y, x) / (height, width) order), ``caption``, and with text encoders
``prompt_embeds`` (S, D) and ``pooled_prompt_embeds`` (P,), tensors of the stored dtype:
a sample's first caption's (several captions per sample are rows of the per-caption columns,
``CAPTION_ROWS``; ``RandomCaption`` picks one per epoch, :func:`chosen_captions`).
Samples of one bucket stack with torch's ``default_collate``.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import torch

from npu_data.common.oserrors import os_error
from npu_data.common.paths import inside, read_regular
from npu_data.errors import DataCorruption, UserError
from npu_data.shards import file_checks as checks
from npu_data.shards.latent_format import (
    CAPTION_ROWS,
    DTYPES,
    GROUP,
    SIZE_COLUMNS,
    column_spec,
    empty_prompt_spec,
    to_torch,
)


def latent_record(ds: Any) -> dict[str, Any]:
    """The manifest's ``latents`` record of ``ds``; a one-line UserError for an image store."""
    if getattr(ds, "latents", None) is None:
        raise UserError(f"{ds.path}: not a latents store — make one with `npu-data encode "
                        f"{ds.path} --vae DIR --out OUT` and read OUT")
    return dict(ds.latents)


def latent_shard(ds: Any, k: int, record: dict[str, Any]) -> Any:
    """Shard ``k`` of latents store ``ds`` with its latent columns mapped. Of a remote store
    they are opened under the cache's shard lock (fetched again if evicted since the shard
    was opened): a map, once open, stays valid after the cache unlinks its file."""
    sh = ds.shard(k)
    spec = column_spec(record)
    if ds._remote is not None and not all(c in sh._cols for c in spec):
        ds._remote.fetch(k, lambda folder: sh.open_columns(spec))
    else:
        sh.open_columns(spec)
    return sh


def caption_rows(sh: Any) -> np.ndarray:
    """(samples + 1,) int64: sample ``j`` of latents shard ``sh`` (columns opened) has caption
    rows ``[o[j], o[j + 1])`` (a store written before several captions were stored: one row
    per sample)."""
    if CAPTION_ROWS in sh._cols:
        return np.asarray(sh.col(CAPTION_ROWS), np.int64)
    return np.arange(sh.samples + 1, dtype=np.int64)


def caption_counts(ds: Any) -> tuple[int, int]:
    """(samples with a non-empty stored caption, samples) of latents store ``ds``."""
    record = latent_record(ds)
    with_caption = total = 0
    for k in range(len(ds._names)):
        sh = latent_shard(ds, k, record)
        lengths = np.diff(np.asarray(sh.col(f"{GROUP}.caption.offsets"), np.int64))
        first = caption_rows(sh)[:-1]  # a sample's caption is its first row's
        with_caption += int((lengths[first] > 0).sum())
        total += sh.samples
    return with_caption, total


def captions_per_sample(ds: Any) -> np.ndarray:
    """(N,) int64: how many captions each sample of latents store ``ds`` holds (embedding rows
    with text encoders); a sample without a caption counts 0."""
    record = latent_record(ds)
    out = []
    for k in range(len(ds._names)):
        sh = latent_shard(ds, k, record)
        rows = caption_rows(sh)
        lengths = np.diff(np.asarray(sh.col(f"{GROUP}.caption.offsets"), np.int64))
        counts = np.diff(rows)
        counts[lengths[rows[:-1]] == 0] = 0  # one empty row: no caption
        out.append(counts)
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def _caption_text(sh: Any, r: int) -> str:
    off = sh.col(f"{GROUP}.caption.offsets")
    return bytes(sh.col(f"{GROUP}.caption.bytes")[off[r]:off[r + 1]]).decode("utf-8")


def chosen_captions(ds: Any, ids: np.ndarray, picks: np.ndarray
                    ) -> tuple[list[str], torch.Tensor | None, torch.Tensor | None] | None:
    """Caption ``min(int(u * n), n - 1)`` of each sample ``ids`` of latents store ``ds``
    (``n`` its captions, ``u`` of ``picks``, uniform in [0, 1)): the texts and, with text
    embeddings, ``(prompt_embeds (B, S, D), pooled (B, P))`` host tensors of the stored
    dtype; None when every one is the sample's first caption (what the batch holds)."""
    record = latent_record(ds)
    where = []
    for i, u in zip(np.asarray(ids, np.int64).tolist(), np.asarray(picks).tolist(),
                    strict=True):
        k, j = ds.locate(int(i) % len(ds))
        sh = latent_shard(ds, k, record)
        rows = caption_rows(sh)
        n = int(rows[j + 1] - rows[j])
        where.append((sh, int(rows[j]) + min(int(u * n), n - 1), int(rows[j])))
    if all(r == first for _, r, first in where):
        return None
    texts = [_caption_text(sh, r) for sh, r, _ in where]
    if not record.get("text"):
        return texts, None, None
    embeds = np.stack([sh.col(f"{GROUP}.prompt_embeds")[r] for sh, r, _ in where])
    pooled = np.stack([sh.col(f"{GROUP}.pooled_prompt_embeds")[r] for sh, r, _ in where])
    return texts, to_torch(embeds, record["dtype"]), to_torch(pooled, record["dtype"])


def latent_sample(ds: Any, k: int, j: int, gi: int) -> dict[str, Any]:
    """Sample ``j`` of shard ``k`` (dataset index ``gi``) of latents store ``ds``."""
    record = latent_record(ds)
    sh = latent_shard(ds, k, record)
    rec = sh.index[j]
    th, tw = int(rec["height"]), int(rec["width"])
    f, c = int(record["factor"]), int(record["channels"])
    npd = np.dtype(DTYPES[record["dtype"]][0])
    n = c * (th // f) * (tw // f)
    off = int(rec["offset"])
    payload = sh.data[off:off + int(rec["length"])].view(npd)
    shape = (c, th // f, tw // f)
    s: dict[str, Any] = {"latents": to_torch(payload[:n].reshape(shape), record["dtype"])}
    if record["flip"]:
        s["latents_flipped"] = to_torch(payload[n:2 * n].reshape(shape), record["dtype"])
        s["crop_top_left_flipped"] = np.array(sh.col(f"{GROUP}.crop_top_left_flipped")[j])
    s.update({"index": gi, "task_id": int(rec["task_id"]),
              "sizes": np.array([th, tw], np.int64)})
    for name in SIZE_COLUMNS:
        s[name] = np.array(sh.col(f"{GROUP}.{name}")[j])
    r = int(caption_rows(sh)[j])  # the sample's first caption (RandomCaption picks others)
    s["caption"] = _caption_text(sh, r)
    if record.get("text"):
        for name in ("prompt_embeds", "pooled_prompt_embeds"):
            s[name] = to_torch(sh.col(f"{GROUP}.{name}")[r], record["dtype"])
    return s


def empty_prompt(ds: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The empty prompt's ``(prompt_embeds (S, D), pooled_prompt_embeds (P,))`` of latents
    store ``ds`` (for caption dropout), read and checked against the manifest."""
    record = latent_record(ds)
    spec = empty_prompt_spec(record)
    if not spec:
        raise UserError(f"{ds.path}: stored without text encoders, so it has no empty-prompt "
                        "embedding — encode it again with --text-encoder/--text-encoder-2, or "
                        "drop captions with CaptionDropout and your own encoders")
    out = []
    for fname, (dt, shape) in spec.items():  # a URL's: fetched into its cache, checked
        path = inside(ds.path, fname) if ds._remote is None else ds._remote.fetch_root(fname)
        meta = record["empty_prompt"][fname]
        try:  # a regular file (a FIFO never hangs), its size and header checked, then read
            arr = checks.open_npy(path, dt, shape, meta["size"], copy=True)
            data = read_regular(path, int(meta["size"]))
        except FileNotFoundError:
            raise DataCorruption(f"{path}: missing — encode the dataset again") from None
        except checks.Damaged as exc:
            raise DataCorruption(f"{path}: {exc.reason} — encode the dataset again") from None
        except OSError as exc:
            raise os_error(exc, path) from None
        if hashlib.sha256(data).hexdigest() != meta["sha256"]:
            raise DataCorruption(f"{path}: sha256 differs from the manifest — encode the "
                                 "dataset again")
        if len(arr) != 1:
            raise DataCorruption(f"{path}: holds {len(arr)} rows, not 1 — encode the dataset "
                                 "again")
        out.append(to_torch(arr[0], record["dtype"]))
    return out[0], out[1]
