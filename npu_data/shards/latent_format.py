"""The on-disk layout of a latents store (docs/format.md, "Latents stores", written by
``npu_data.latents``): dtypes, the per-sample array columns, the dataset-level empty-prompt
files, and the checks of the manifest's ``latents`` record.

Arrays are stored little-endian as ``float32`` (``<f4``), ``float16`` (``<f2``) or
``bfloat16``; NumPy has no bfloat16, so a bfloat16 array is stored as ``<u2`` holding each
value's 16 bits (the upper half of its float32), exactly torch's ``bfloat16`` bytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from npu_data.common.ragged import offsets_problem
from npu_data.errors import UserValueError

# storage name -> (NumPy dtype of the file, torch dtype of the values)
DTYPES: dict[str, tuple[str, torch.dtype]] = {
    "float32": ("<f4", torch.float32),
    "float16": ("<f2", torch.float16),
    "bfloat16": ("<u2", torch.bfloat16),
}
SIZE_COLUMNS = ("original_size", "crop_top_left", "target_size")  # (2,) <i8: (y, x) order
EMPTY_PROMPT = ("prompt_embeds", "pooled_prompt_embeds")  # file empty_prompt.<name>.npy
GROUP = "latent"  # the columns' group: ann.latent.<name>.npy
NPY_HEADER_MAX = 4096  # bytes an .npy file of the store may hold beyond its array
MAX_ROOT_BYTES = 256 << 20  # the most a dataset-level file may claim (a reader fetches it whole)
# (samples + 1,) <i8: sample j's captions are rows [o[j], o[j + 1]) of the per-caption columns
# (stores written before several captions per sample were stored have no such column: one row
# per sample)
CAPTION_ROWS = f"{GROUP}.caption_rows"
PER_CAPTION = (f"{GROUP}.caption", f"{GROUP}.prompt_embeds", f"{GROUP}.pooled_prompt_embeds")


def dtype_name(dtype: torch.dtype) -> str:
    """The storage name of ``dtype`` (a key of ``DTYPES``); ValueError for others."""
    for name, (_, t) in DTYPES.items():
        if t == dtype:
            return name
    raise ValueError(f"{dtype} is not a stored dtype: use {', '.join(DTYPES)}")


def to_numpy(t: torch.Tensor, name: str) -> np.ndarray:
    """``t`` cast to storage dtype ``name``, as the NumPy array that is written; a one-line
    ``UserValueError`` when a value is NaN or infinite there (nothing non-finite is stored)."""
    npd, td = DTYPES[name]
    host = t.detach().to(td).contiguous().cpu()
    if td == torch.bfloat16:
        out = host.view(torch.int16).numpy().view("<u2")
    else:
        out = host.numpy().astype(npd, copy=False)
    bad = nonfinite(out, name)
    if bad:
        raise UserValueError(f"{bad} of {out.size} values to store are NaN or infinite in "
                             f"{name} — refused; check the encoder's weights and scaling "
                             "factor, or encode in float32 if it overflowed")
    return out


def nonfinite(a: np.ndarray, name: str) -> int:
    """How many values of stored array ``a`` (storage dtype ``name``) are NaN or infinite."""
    if name == "bfloat16":  # the top 16 bits of a float32: exponent all ones
        return int(np.count_nonzero((np.asarray(a).view("<u2") & 0x7F80) == 0x7F80))
    return int(a.size - np.count_nonzero(np.isfinite(a)))


def to_torch(a: np.ndarray, name: str) -> torch.Tensor:
    """A stored array (a copy of ``a``) as a torch tensor of storage dtype ``name``."""
    npd, td = DTYPES[name]
    host = torch.from_numpy(np.array(a, dtype=npd))
    return host.view(torch.bfloat16) if td == torch.bfloat16 else host


def column_spec(record: dict[str, Any]) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """Every ``ann.latent.<name>.npy`` of a shard of a store with ``record`` (the manifest's
    ``latents``): column -> (dtype, trailing shape)."""
    i8 = np.dtype("<i8")
    cols: dict[str, tuple[np.dtype, tuple[int, ...]]] = {
        f"{GROUP}.{n}": (i8, (2,)) for n in SIZE_COLUMNS}
    if record["flip"]:
        cols[f"{GROUP}.crop_top_left_flipped"] = (i8, (2,))
    if record.get("caption_rows"):
        cols[CAPTION_ROWS] = (i8, ())
    cols[f"{GROUP}.caption.bytes"] = (np.dtype("u1"), ())
    cols[f"{GROUP}.caption.offsets"] = (i8, ())
    text = record.get("text")
    if text:
        npd = np.dtype(DTYPES[record["dtype"]][0])
        cols[f"{GROUP}.prompt_embeds"] = (npd, (text["tokens"], text["dim"]))
        cols[f"{GROUP}.pooled_prompt_embeds"] = (npd, (text["pooled"],))
    return dict(sorted(cols.items()))


def expected_rows(cols: dict[str, np.ndarray], samples: int) -> dict[str, int]:
    """How many rows (strings, for a text column named without ``.offsets``) each opened
    column of a shard of ``samples`` samples must hold: the per-caption columns one per
    caption (``CAPTION_ROWS``' last offset; one per sample without it), the others one per
    sample. ValueError (the reason, for a one-line message) when ``CAPTION_ROWS`` cannot index
    the shard: not ``samples + 1`` non-decreasing offsets from 0, or a sample without a row."""
    total = samples
    off = cols.get(CAPTION_ROWS)
    if off is not None:
        total = int(off[-1]) if len(off) else 0
        why = offsets_problem(off, samples, total)
        if why is None and samples and bool((np.diff(off) < 1).any()):
            why = f"give sample {int(np.flatnonzero(np.diff(off) < 1)[0])} no caption row"
        if why is not None:
            raise ValueError(f"the offsets {why}")
    out = {}
    for c in cols:
        if c == CAPTION_ROWS or c.endswith(".bytes"):
            continue
        name = c[:-len(".offsets")] if c.endswith(".offsets") else c
        out[name] = total if name in PER_CAPTION else samples
    return out


def empty_prompt_spec(record: dict[str, Any]) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """The dataset-level files of the empty prompt's embeddings (text encoders only):
    file name -> (dtype, shape without the leading 1)."""
    text = record.get("text")
    if not text:
        return {}
    npd = np.dtype(DTYPES[record["dtype"]][0])
    return {"empty_prompt.prompt_embeds.npy": (npd, (text["tokens"], text["dim"])),
            "empty_prompt.pooled_prompt_embeds.npy": (npd, (text["pooled"],))}


def root_files(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The dataset-level files of a store beyond the shard format (a latents store's empty
    prompt): file name -> {size, sha256} as the manifest lists them; empty for others."""
    if manifest.get("store") != "latents":
        return {}
    return dict(manifest["latents"].get("empty_prompt") or {})


def cell_bytes(record: dict[str, Any]) -> int:
    """Bytes of one latent cell of a payload: ``channels`` values of the stored dtype, twice
    with the flipped variant."""
    item = np.dtype(DTYPES[record["dtype"]][0]).itemsize
    return int(record["channels"]) * item * (2 if record["flip"] else 1)


def layout(manifest: dict[str, Any]) -> tuple[int, int] | None:
    """``(factor, bytes per latent cell)`` of a latents store (``checks.check_index``);
    None for an image store."""
    if manifest.get("store") != "latents":
        return None
    record = manifest["latents"]
    return int(record["factor"]), cell_bytes(record)


def _count(v: Any, low: int = 1) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and low <= v <= 1 << 30


def record_problem(record: Any) -> str | None:
    """What is wrong with a manifest's ``latents`` record (None: usable)."""
    if not isinstance(record, dict):
        return "is not an object"
    if not _count(record.get("channels")) or not _count(record.get("factor")):
        return "needs positive integers 'channels' and 'factor'"
    if record.get("dtype") not in DTYPES:
        return f"has dtype {record.get('dtype')!r}, not one of {', '.join(DTYPES)}"
    if not isinstance(record.get("flip"), bool):
        return "needs a boolean 'flip'"
    text = record.get("text")
    if text is not None and not (isinstance(text, dict) and all(
            _count(text.get(k)) for k in ("tokens", "dim", "pooled"))):
        return "has a 'text' that is not {tokens, dim, pooled} positive integers"
    files = record.get("empty_prompt")
    want = set(empty_prompt_spec(record))
    if not isinstance(files, dict) or set(files) != want:
        return f"lists empty-prompt files {sorted(files) if isinstance(files, dict) else files}" \
               f", the store has {sorted(want)}"
    for fname, (dt, shape) in empty_prompt_spec(record).items():
        meta = files[fname]
        if not isinstance(meta, dict) or not _count(meta.get("size"), 0) \
                or not isinstance(meta.get("sha256"), str):
            return "has an empty-prompt file without an integer size and a sha256"
        most = min(dt.itemsize * int(np.prod(shape, dtype=object)) + NPY_HEADER_MAX,
                   MAX_ROOT_BYTES)
        if meta["size"] > most:
            return f"lists {fname} at {meta['size']} bytes, more than its array needs ({most})"
    return None
