"""What binds a latents store to its encoders beyond their configs: a digest of each model's
weights, and the check that a resumed encode runs the models (and the CPU thread count) the
store's kept shards were made with — before anything is deleted."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch

from npu_data.errors import UserError
from npu_data.shards.format import COMPLETE, MANIFEST
from npu_data.shards.writer import OWNER
from npu_data.shards.writer import json_record as _record

ROLES = {"vae": "VAE", "text_encoder": "text encoder", "text_encoder_2": "second text encoder",
         "tokenizer": "tokenizer", "tokenizer_2": "second tokenizer"}


@torch.no_grad()
def weights_sha256(model: Any) -> str:
    """sha256 of ``model``'s state dict: each entry's name, dtype and shape, then its values
    as little-endian float32 on the CPU (the same digest on every device and for any
    floating dtype that holds the same values; integer buffers keep their own bytes)."""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(f"{name}:{str(t.dtype).removeprefix('torch.')}:{list(t.shape)}\n".encode())
        host = t.detach().to("cpu")
        if host.is_floating_point() or host.is_complex():
            host = host.to(torch.float32)
        h.update(host.contiguous().numpy().tobytes())
    return h.hexdigest()


def _kept_records(out: Path) -> list[tuple[Path, dict[str, Any]]]:
    """(where, fingerprint-bearing record) of what an earlier encode left in ``out``."""
    found = []
    for path in (out / OWNER, out / MANIFEST, *sorted(out.glob(f"shard-*/{COMPLETE}"))):
        rec = _record(path)
        if rec is not None:
            found.append((path, rec))
    return found


def _encoders(rec: dict[str, Any]) -> dict[str, Any] | None:
    fp = rec.get("fingerprint", rec)  # a manifest holds the fingerprint's keys itself
    try:
        enc = fp["options"]["latents"]["encoders"]
    except (KeyError, TypeError):
        return None
    return enc if isinstance(enc, dict) else None


def check_resume(out: Path, encoders: dict[str, Any], threads: int | None) -> None:
    """Before a resumed encode deletes anything: a one-line ``UserError`` when what ``out``
    holds was encoded with other models (a role whose class, config or weights differ) or,
    on the CPU, another thread count (whose reductions give other bytes)."""
    fix = "resume with the same models and settings, or encode into an empty --out folder " \
          "(nothing was changed)"
    for path, rec in _kept_records(out):
        had = _encoders(rec)
        if had is not None:
            for role in sorted(set(had) | set(encoders)):
                was, now = had.get(role), encoders.get(role)
                if was == now:
                    continue
                what = ROLES.get(role, role)
                if not isinstance(was, dict) or now is None:
                    raise UserError(f"{path}: encoded {'with' if was else 'without'} a {what}, "
                                    f"this run {'has none' if now is None else 'has one'} — "
                                    f"{fix}")
                for key in ("class", "config_sha256", "weights_sha256"):
                    if was.get(key) != now.get(key):
                        raise UserError(
                            f"{path}: encoded with another {what} ({key} "
                            f"{str(was.get(key))[:16]}, this run's {str(now.get(key))[:16]}) "
                            f"— {fix}")
        was_threads = rec.get("threads")
        if path.name == COMPLETE and isinstance(was_threads, int) and threads is not None \
                and was_threads != threads:
            raise UserError(
                f"{path.parent}: encoded with {was_threads} CPU thread(s), this run has "
                f"{threads} — a CPU encode's bytes depend on the thread count: set "
                f"OMP_NUM_THREADS={was_threads} (torch.set_num_threads) to resume, or "
                "encode into an empty --out folder (nothing was changed)")
