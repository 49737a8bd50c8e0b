"""Keyed random draws: every random number of a sample is a pure function of
(seed, epoch, sample id, transform position, draw number).

A counter-based generator (SplitMix64's finaliser over those values, vectorised with numpy on
the host) replaces a stateful generator, so a sample's augmentation does not depend on the
batch it lands in, the batch size, the worker or rank that reads it, the prefetch depth or the
resume point. Sample ids are dataset indices; samples known only by a string key (WebDataset)
use a 64-bit hash of it. Everything here runs on the host in uint64/float64 and the results
are shipped as small float32/int64 tables.

Each transform has one parameter sampler, ``make_params(sizes, rng)`` (``Transform``), fed by
``rng``: the keyed :class:`Draws` here, or a torch generator through :class:`GeneratorDraws`
(``t(batch, generator)``, ``get_params``) — one formula, in float64 on the host, either way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import torch

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_KEY_TAG = np.uint64(0xD1B54A32D192ED03)  # string keys live apart from integer indices
_TO_UNIT = 1.0 / float(1 << 53)


def mix(z: np.ndarray | np.uint64) -> np.ndarray:
    """SplitMix64's finaliser, elementwise on uint64 (wrapping arithmetic)."""
    z = np.asarray(z, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
    return np.asarray(z ^ (z >> np.uint64(31)), dtype=np.uint64)


def _u64(value: int) -> np.uint64:
    return np.uint64(int(value) & 0xFFFFFFFFFFFFFFFF)


def _add(a: np.ndarray | np.uint64, b: np.ndarray | np.uint64) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.asarray(a, dtype=np.uint64) + np.asarray(b, dtype=np.uint64)


def epoch_key(seed: int, epoch: int) -> np.uint64:
    """The key of one (seed, epoch)."""
    return np.uint64(mix(mix(_add(_u64(seed), _GOLDEN)) ^ _add(_u64(epoch), _GOLDEN)))


def string_ids(keys: Sequence[str]) -> np.ndarray:
    """64-bit ids for samples known by a string key (a WebDataset ``__key__``)."""
    out = np.empty(len(keys), dtype=np.uint64)
    for i, k in enumerate(keys):
        out[i] = int.from_bytes(hashlib.blake2b(k.encode(), digest_size=8).digest(), "little")
    return out ^ _KEY_TAG


def sample_keys(seed: int, epoch: int, ids: np.ndarray | Sequence[int]) -> np.ndarray:
    """``(B,)`` uint64: the key of each sample id (a dataset index, or :func:`string_ids`)."""
    arr = np.asarray(ids)
    if arr.dtype.kind == "i":
        arr = arr.astype(np.int64).view(np.uint64)
    arr = arr.astype(np.uint64, copy=False).reshape(-1)
    return mix(epoch_key(seed, epoch) ^ mix(_add(arr, _GOLDEN)))


class Uniforms(Protocol):
    """What ``Transform.make_params`` draws from: ``B`` samples' uniform numbers."""

    def __len__(self) -> int: ...

    def uniform(self, n: int) -> np.ndarray:
        """``(B, n)`` float64 uniform in [0, 1): each sample's next ``n`` numbers."""
        ...


class Draws:
    """The uniform draws of one transform position for a batch of sample keys.

    Each call to :meth:`uniform` hands out the next ``n`` draw numbers, so a transform that
    always makes the same calls gets the same numbers for a sample whatever else is in the
    batch.
    """

    def __init__(self, keys: np.ndarray, position: int) -> None:
        self.keys = np.asarray(keys, dtype=np.uint64).reshape(-1)
        self._base = mix(self.keys ^ mix(_add(_u64(position), _M2)))
        self._next = 0

    def __len__(self) -> int:
        return int(self.keys.shape[0])

    def uniform(self, n: int) -> np.ndarray:
        """``(B, n)`` float64 uniform in [0, 1), 53 random bits each."""
        counters = np.arange(self._next, self._next + n, dtype=np.uint64)
        self._next += n
        with np.errstate(over="ignore"):
            z = mix(self._base[:, None] + (counters[None, :] + np.uint64(1)) * _GOLDEN)
        return (z >> np.uint64(11)).astype(np.float64) * _TO_UNIT


class GeneratorDraws:
    """A torch generator's uniforms in the form of :class:`Draws`: ``torch.rand`` float32
    numbers drawn with ``generator`` (None: torch's default) on ``device`` — the generator's
    own — and read back to the host as float64, one read per :meth:`uniform` call."""

    def __init__(self, batch: int, generator: torch.Generator | None,
                 device: torch.device) -> None:
        self.batch, self.generator, self.device = int(batch), generator, device

    def __len__(self) -> int:
        return self.batch

    def uniform(self, n: int) -> np.ndarray:
        """``(B, n)`` float64 uniform in [0, 1) (float32 draws, so on every device)."""
        u = torch.rand((self.batch, n), generator=self.generator, device=self.device,
                       dtype=torch.float32)
        return u.cpu().numpy().astype(np.float64)


def child_position(parent: int, index: int) -> int:
    """The position of child ``index`` of a pipeline at ``parent`` (0 is the top)."""
    return int(mix(_add(mix(_u64(parent)), _u64(index + 1))))


def sample_params(transform: Any, seed: int, epoch: int, ids: np.ndarray | Sequence[int],
                  sizes: np.ndarray | Sequence[Sequence[int]]) -> dict[str, Any]:
    """The parameters the DataLoader draws for some samples, without the loader: replay one
    sample's augmentation anywhere with ``transform.reference(image, params, 0)``.

    Args:
        transform: An npu_data ``Transform`` or ``Compose``.
        seed: The loader's seed.
        epoch: The epoch.
        ids: The samples' dataset indices.
        sizes: (B, 2) height, width of their stored images.

    Returns:
        The parameters ``transform`` applies to those samples, as ``get_params`` returns
        them for a batch.
    """
    keys = sample_keys(seed, epoch, ids)
    return transform.draw_keyed(np.asarray(sizes, dtype=np.int64).reshape(-1, 2), keys)
