"""Resume states read as hostile input: versions, types, ranges and a dataset fingerprint.

A state is plain data a user may have hand-edited, truncated or carried to another dataset.
``Fields`` reads it key by key: a missing key, a value of the wrong type (a float is never
truncated to an int, a bool is not an int) or out of range is one ``UserError`` naming the
key and the fix, raised before the sampler or loader changes anything.

``fingerprint`` ties a state to its dataset: a digest of the dataset's manifest (its shards'
names, sample counts and file digests: the ids and bytes of every sample) and of whatever
else decides the order (a bucket sampler's stored sizes), never only its length.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import orjson

from npu_data.errors import UserError, UserTypeError, UserValueError

SEED_MIN, SEED_MAX = -(1 << 63), (1 << 64) - 1  # what torch.Generator.manual_seed takes
MAX_EPOCH = (1 << 63) - 1
_LOW_63 = (1 << 63) - 1
MAX_LAYOUTS = 256  # elastic resumes one epoch may record (each replays the layout once)
_MISSING: Any = object()


class Fields:
    """Checked reads of one state (``who`` names it in every message)."""

    def __init__(self, state: Any, who: str, fix: str) -> None:
        if not isinstance(state, Mapping):
            raise UserError(f"{who}: the state is a {type(state).__name__}, not a dict — {fix}")
        self.state, self.who, self.fix = state, who, fix

    def fail(self, key: str, what: str) -> UserError:
        """The one-line error for ``key`` (``what``: ``=value ...`` or words)."""
        sep = "" if what.startswith("=") else " "
        return UserError(f"{self.who}: {key}{sep}{what} — {self.fix}")

    def get(self, key: str, default: Any = _MISSING) -> Any:
        if key not in self.state:
            if default is _MISSING:
                raise self.fail(key, "is missing")
            return default
        return self.state[key]

    def integer(self, key: str, lo: int | None = None, hi: int | None = None,
                default: Any = _MISSING) -> int:
        """``state[key]``: an int (not a bool, not a float) in ``[lo, hi]``."""
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise self.fail(key, f"={value!r} is not an integer")
        value = int(value)
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            bounds = (f"between {lo} and {hi}" if lo is not None and hi is not None else
                      f"at least {lo}" if lo is not None else f"at most {hi}")
            raise self.fail(key, f"={value} is out of range (must be {bounds})")
        return value

    def optional_integer(self, key: str, lo: int | None = None) -> int | None:
        return None if self.get(key, None) is None else self.integer(key, lo)

    def flag(self, key: str, default: Any = _MISSING) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(key, f"={value!r} is not true or false")
        return value

    def mapping(self, key: str) -> Mapping[str, Any]:
        value = self.get(key)
        if not isinstance(value, Mapping):
            raise self.fail(key, f"is a {type(value).__name__}, not a dict")
        return value

    def version(self, known: tuple[int, ...], default: Any = _MISSING) -> int:
        """The state's format version, one of ``known``."""
        value = self.integer("version", default=default)
        if value not in known:
            raise self.fail("version", f"={value} is not one this npu-data reads "
                            f"({', '.join(map(str, known))})")
        return value

    def same(self, key: str, mine: Any, what: str) -> None:
        """``state[key]`` (when present) equals this object's ``mine``."""
        if key in self.state and self.state[key] != mine:
            raise UserError(f"{self.who}: saved with {key}={self.state[key]!r} but this "
                            f"{what} has {key}={mine!r} — construct it as it was saved")

    def seed_and_epoch(self) -> tuple[int, int]:
        """(seed, epoch): the epoch's generator is seeded ``seed + epoch``."""
        epoch = self.integer("epoch", 0, MAX_EPOCH)
        seed = self.integer("seed", SEED_MIN, SEED_MAX - epoch)
        return seed, epoch

    def position(self, total: int, world: int, span: int) -> tuple[int, int]:
        """(start, consumed) of a layout over ``world`` ranks that begins at ``start`` of
        ``total`` items and lays out ``span`` of them (its padding included): ``start <=
        consumed <= start + span``, whole rounds of the world consumed."""
        start = self.integer("start", 0, total, default=0)
        consumed = self.integer("consumed", start)
        if start == total:  # nothing left to lay out: the epoch is over, whatever it says
            return start, start
        if consumed > start + span:
            raise self.fail("consumed", f"={consumed} is past the end of the epoch "
                            f"({start + span} from start={start})")
        if (consumed - start) % world:
            raise self.fail("consumed", f"={consumed} is not start={start} plus whole rounds "
                            f"of world_size={world}")
        return start, consumed

    def layouts(self) -> tuple[tuple[int, int], ...]:
        """The epoch's ``[[begin, world], ...]`` chain: the first begins at 0, each later one
        no earlier than the one before; at most ``MAX_LAYOUTS`` (where each ends is the
        sampler's to check: it replays them)."""
        value = self.get("layouts")
        if not isinstance(value, list) or not value:
            raise self.fail("layouts", "is not a non-empty list of [begin, world_size] pairs")
        if len(value) > MAX_LAYOUTS:
            raise self.fail("layouts", f"has {len(value)} entries (at most {MAX_LAYOUTS} "
                            "elastic resumes an epoch)")
        chain: list[tuple[int, int]] = []
        for i, pair in enumerate(value):
            if not (isinstance(pair, list | tuple) and len(pair) == 2 and all(
                    isinstance(v, int) and not isinstance(v, bool) for v in pair)):
                raise self.fail(f"layouts[{i}]", f"={pair!r} is not a [begin, world_size] pair "
                                "of integers")
            begin, world = int(pair[0]), int(pair[1])
            low = chain[-1][0] if chain else 0
            if world < 1 or begin < low or (not chain and begin):
                raise self.fail(f"layouts[{i}]", f"={pair!r} is out of range (the first begins "
                                f"at 0, this one at {low} or later; world_size at least 1)")
            chain.append((begin, world))
        return tuple(chain)


def digest(*parts: bytes) -> str:
    """A short hex digest of ``parts`` (blake2b, 128 bits)."""
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def manifest_bytes(dataset: Any) -> bytes:
    """The dataset's manifest as canonical JSON (its shard list: names, sample counts, file
    digests), or its length alone when it has none."""
    manifest = getattr(dataset, "manifest", None)
    if isinstance(manifest, Mapping):
        try:
            return orjson.dumps(manifest, option=orjson.OPT_SORT_KEYS)
        except TypeError:
            pass
    return f"len={len(dataset)}".encode()


def fingerprint(dataset: Any, sizes: np.ndarray | None = None,
                repeats: np.ndarray | None = None) -> str:
    """What ties a state to ``dataset``: the digest of its manifest (or length), of the
    stored ``sizes`` when they decide the order and of its samples' ``repeats`` when it has
    them (a state saved without repeats is refused with them, and the reverse)."""
    parts = [manifest_bytes(dataset)]
    if sizes is not None:
        parts.append(np.ascontiguousarray(sizes, dtype="<i8").tobytes())
    if repeats is not None:
        parts.append(b"repeats:" + np.ascontiguousarray(repeats, dtype="<i8").tobytes())
    return digest(*parts)


def check_fingerprint(fields: Fields, mine: str) -> None:
    """The state's ``fingerprint`` is ``mine``."""
    saved = fields.get("fingerprint")
    if not isinstance(saved, str):
        raise fields.fail("fingerprint", f"={saved!r} is not a digest string")
    if saved != mine:
        raise UserError(f"{fields.who}: saved for another dataset (fingerprint {saved[:12]}, "
                        f"this one {mine[:12]}: its manifest, image sizes or repeats differ) — resume "
                        "with the dataset the state was saved with")


def _power(bound: int) -> str:
    """``bound`` spelled as a power of two where it is one (``-2**63``, ``2**64 - 1``)."""
    names = {-(1 << 63): "-2**63", 0: "0", (1 << 64) - 1: "2**64 - 1"}
    return names.get(bound, str(bound))


LAST_EPOCH = MAX_EPOCH - 1  # the last a loader serves: a state saved at its end names the next


def checked_epoch(epoch: Any, who: str, last: int = LAST_EPOCH) -> int:
    """``epoch`` as an int from 0 to ``last`` (a loader's: ``LAST_EPOCH``, so the state it
    saves at the epoch's end, naming the next one, is one its ``load_state_dict`` takes; a
    sampler's: ``MAX_EPOCH``), else one line naming ``who``'s epoch and the range."""
    if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)):
        raise UserTypeError(f"{who}: epoch={str(epoch)[:40]!r} is not an integer — pass the "
                            "epoch number, 0 first")
    if not 0 <= int(epoch) <= last:
        raise UserValueError(f"{who}: epoch={epoch} is out of range — use an integer from 0 "
                             f"to {last}")
    return int(epoch)


def checked_seed(seed: Any, who: str, lo: int = SEED_MIN) -> int:
    """``seed`` as the int a generator is seeded from: an integer (not a bool, not a float)
    in ``[lo, SEED_MAX]``, else one line naming ``who``'s seed and the fix."""
    if isinstance(seed, bool | np.bool_) or not isinstance(seed, int | np.integer):
        raise UserTypeError(f"{who}: seed={seed!r} is a {type(seed).__name__}, not an integer "
                            "— pass a whole number, e.g. seed=0")
    value = int(seed)
    if not lo <= value <= SEED_MAX:
        raise UserValueError(f"{who}: seed={value} is out of range — use an integer from "
                             f"{_power(lo)} to {_power(SEED_MAX)}")
    return value


def loader_seed(seed: Any, who: str) -> int:
    """A DataLoader's seed: ``seed`` checked (``checked_seed``, from 0) and its low 63 bits
    kept, so ``seed + epoch`` is a generator seed for every epoch up to ``MAX_EPOCH``. The one
    rule for a seed passed, a generator's and a loaded state's."""
    return checked_seed(seed, who, lo=0) & _LOW_63
