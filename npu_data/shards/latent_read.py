"""Reading a latents store (``npu_data.latents`` writes them): the sample dicts
``ShardDataset`` gives for it and its empty-prompt embeddings.

A sample holds ``latents`` (C, h/f, w/f) and, when stored, ``latents_flipped``; ``sizes``
(the bucket, (2,) int64, what ``BucketBatchSampler`` and keyed draws read),
``original_size``, ``crop_top_left`` (and ``crop_top_left_flipped``), ``target_size``
((2,) int64, (y, x) / (height, width) order), ``caption``, and with text encoders
``prompt_embeds`` (S, D) and ``pooled_prompt_embeds`` (P,), tensors of the stored dtype.
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


def caption_counts(ds: Any) -> tuple[int, int]:
    """(samples with a non-empty stored caption, samples) of latents store ``ds``."""
    record = latent_record(ds)
    with_caption = total = 0
    for k in range(len(ds._names)):
        sh = latent_shard(ds, k, record)
        lengths = np.diff(np.asarray(sh.col(f"{GROUP}.caption.offsets"), np.int64))
        with_caption += int((lengths > 0).sum())
        total += sh.samples
    return with_caption, total


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
    off_col = sh.col(f"{GROUP}.caption.offsets")
    s["caption"] = bytes(sh.col(f"{GROUP}.caption.bytes")[off_col[j]:off_col[j + 1]]
                         ).decode("utf-8")
    if record.get("text"):
        for name in ("prompt_embeds", "pooled_prompt_embeds"):
            s[name] = to_torch(sh.col(f"{GROUP}.{name}")[j], record["dtype"])
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
