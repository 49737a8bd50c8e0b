"""Structural checks of a shard's files, run when a shard is opened (and by ``verify``).

Nothing here trusts a file: an ``.npy`` is opened only as a regular file inside the dataset,
its header is parsed with numpy's bounded reader and must give the dtype and trailing shape
of the format (``format.column_schema``), the file exactly as long as the header says and as
the manifest says; the index's records must lie inside ``data.bin`` (raw ones exactly
``height * width * 3`` bytes), claim at most ``max_pixels`` pixels and 3 channels; every
group's offsets must be ``ragged.offsets_problem``-clean against its values, and each kind's
own rule (``Kind.stored_problem``: mask bits exactly the image's size) must hold. Each check
raises a ``Damaged`` with the reason; the callers add the file and the fix
(docs/format.md, "Validation").
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from npu_data.common.paths import open_regular
from npu_data.common.ragged import offsets_problem
from npu_data.kinds.base import Kind
from npu_data.shards.format import (
    ALIGN,
    ENC_LATENTS,
    ENC_RAW,
    ENCODINGS,
    ORIGINAL_SIZE,
    column_file,
    column_schema,
)

MAX_HEADER = 10_000  # bytes an .npy header may claim (numpy's own default bound)


class Damaged(ValueError):
    """A shard file fails a structural check (the message says which and why)."""

    def __init__(self, fname: str, reason: str) -> None:
        super().__init__(f"{fname}: {reason}")
        self.fname, self.reason = fname, reason


def open_npy(path: Path, dtype: np.dtype, trailing: tuple[int, ...],
             size: int | None = None, copy: bool = False) -> np.ndarray:
    """A read-only memory map (a plain ndarray view) of ``.npy`` file ``path`` holding
    ``dtype`` rows of shape ``trailing``, or (``copy``) its rows read into memory, which a
    file shrunk later cannot take away; ``Damaged`` unless the file is exactly that (and
    ``size`` bytes, when given); ``OSError`` if it cannot be opened."""
    name = path.name
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as fh:
        total = os.fstat(fh.fileno()).st_size
        if size is not None and total != size:
            raise Damaged(name, f"has {total} bytes, the manifest says {size}")
        try:
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, fortran, got = np.lib.format.read_array_header_1_0(
                    fh, max_header_size=MAX_HEADER)  # type: ignore[call-arg]
            elif version == (2, 0):
                shape, fortran, got = np.lib.format.read_array_header_2_0(
                    fh, max_header_size=MAX_HEADER)  # type: ignore[call-arg]
            else:
                raise ValueError(f"npy format version {version} is not one npu-data writes")
        except (ValueError, SyntaxError, TypeError, EOFError) as exc:
            raise Damaged(name, f"not a readable .npy file ({' '.join(str(exc).split())[:160]})"
                          ) from None
        offset = fh.tell()
        want = np.dtype(dtype)
        if got != want or got.hasobject:
            raise Damaged(name, f"holds dtype {got}, the format stores {want}")
        if len(shape) != 1 + len(trailing) or tuple(shape[1:]) != tuple(trailing) or (
                fortran and len(shape) > 1):
            raise Damaged(name, f"has shape {tuple(shape)}, the format stores (rows, "
                          f"{', '.join(map(str, trailing))}{',' if len(trailing) == 1 else ''})"
                          if trailing else f"has shape {tuple(shape)}, the format stores (rows,)")
        nbytes = int(np.prod(shape, dtype=np.int64)) * want.itemsize
        if offset + nbytes != total:
            raise Damaged(name, f"has {total} bytes, its header says {offset + nbytes}")
        if nbytes == 0:
            return np.zeros(shape, want)
        if copy:
            out = np.empty(shape, want)
            got_bytes = fh.readinto(out.reshape(-1).view(np.uint8).data)
            if got_bytes != nbytes:
                raise Damaged(name, f"shrank to {offset + got_bytes} bytes while read")
            out.flags.writeable = False
            return out
        return np.memmap(fh, dtype=want, mode="r", offset=offset, shape=tuple(shape)
                         ).view(np.ndarray)


def mapped_size(arr: np.ndarray) -> Callable[[], int] | None:
    """What tells the size of the file ``arr`` maps now (``fstat`` on the map's own
    descriptor: the file it maps, whatever its path names since), or None when ``arr`` is
    in memory."""
    base: Any = arr
    while base is not None:
        if isinstance(base, np.memmap):
            mm = getattr(base, "_mmap", None)
            return mm.size if mm is not None else None
        base = getattr(base, "base", None)
    return None


def check_index(index: np.ndarray, samples: int, data_size: int, max_pixels: int,
                latents: tuple[int, int] | None = None) -> None:
    """``Damaged`` unless ``index`` has ``samples`` records, each inside a ``data.bin`` of
    ``data_size`` bytes, aligned, 3 channels, a known encoding, 1 to ``max_pixels`` pixels
    and, raw, exactly ``height * width * 3`` bytes long. ``latents``: a latents store's
    ``(factor, bytes per latent cell)``: every record is then a latents payload of exactly
    ``(height / factor) * (width / factor)`` cells; without it a latents payload is
    refused."""
    if len(index) != samples:
        raise Damaged("index.npy", f"holds {len(index)} samples, the manifest says {samples}")
    if not samples:
        return
    off, length = np.asarray(index["offset"]), np.asarray(index["length"])
    h = np.asarray(index["height"]).astype(np.uint64)
    w = np.asarray(index["width"]).astype(np.uint64)
    pixels = h * w  # < 2**64: two uint32
    enc = np.asarray(index["encoding"])
    rules = (
        ((h == 0) | (w == 0), "claims an empty image"),
        (pixels > np.uint64(max_pixels), f"claims more than {max_pixels} pixels (raise "
                                         "max_pixels if such images are genuine)"),
        (np.asarray(index["channels"]) != 3, "claims other than 3 channels"),
        (enc >= len(ENCODINGS), "has an unknown encoding"),
        ((enc == ENC_LATENTS) != (latents is not None),
         "is a latents payload in an image store" if latents is None else
         "is an image in a latents store"),
        (length > np.uint64(data_size), "runs past the end of data.bin"),
        (off > np.uint64(data_size) - np.minimum(length, np.uint64(data_size)),
         "runs past the end of data.bin"),
        (off % np.uint64(ALIGN) != 0, f"starts off the {ALIGN}-byte alignment"),
    )
    for bad, why in rules:
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            raise Damaged("index.npy", f"sample {j} {why} ({_record(index[j])})")
    if latents is not None:
        f, cell = (np.uint64(v) for v in latents)
        wrong = (h % f != 0) | (w % f != 0) | (length != (h // f) * (w // f) * cell)
        if wrong.any():
            j = int(np.flatnonzero(wrong)[0])
            raise Damaged("index.npy", f"sample {j} is not a latents payload of its size "
                          f"(height and width multiples of {int(f)}, {int(cell)} bytes per "
                          f"latent cell) ({_record(index[j])})")
    raw = (enc == ENC_RAW) & (length != pixels * np.uint64(3))
    if raw.any():
        j = int(np.flatnonzero(raw)[0])
        raise Damaged("index.npy", f"sample {j} stores raw pixels whose length is not height "
                      f"x width x 3 ({_record(index[j])})")


def _record(rec: Any) -> str:
    return ", ".join(f"{n} {int(rec[n])}" for n in ("offset", "length", "height", "width",
                                                    "channels", "encoding"))


@functools.cache
def group_columns(group: str) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """The stored columns of ``group`` (a kind's name, or a per-sample text column such as
    ``image_ref``): column -> (dtype, trailing shape); cached, not to be changed."""
    schema = column_schema()
    return {c: (np.dtype(s["dtype"]), tuple(s["shape"])) for c, s in schema.items()
            if c.split(".", 1)[0] == group}


def absent_added(kind: Kind | None, files: Any) -> set[str]:
    """The ``added`` columns of ``kind`` that a shard whose manifest lists ``files`` was
    written without (before they existed): not opened, read as their default
    (``open_group``)."""
    if kind is None:
        return set()
    return {f"{kind.name}.{c}" for c in kind.added if column_file(f"{kind.name}.{c}") not in files}


def open_group(group: str, kind: Kind | None, files: Any,
               opener: Any) -> dict[str, np.ndarray]:
    """The columns of ``group`` (``group_columns``), each opened by ``opener(column, dtype,
    trailing shape)``; a kind's ``added`` columns the manifest's ``files`` do not list filled
    with their default, one per row of the group's first column."""
    skip = absent_added(kind, files)
    cols = {c: opener(c, dt, shape) for c, (dt, shape) in group_columns(group).items()
            if c not in skip}
    if skip and kind is not None:
        kind.fill_added(cols, len(cols[f"{kind.name}.{next(iter(kind.fixed))}"]))
    return cols


def check_text(cols: dict[str, np.ndarray], name: str, runs: int) -> None:
    """``Damaged`` unless text column ``name`` (``.bytes`` + ``.offsets``) holds ``runs``
    strings."""
    why = offsets_problem(cols[f"{name}.offsets"], runs, len(cols[f"{name}.bytes"]))
    if why is not None:
        raise Damaged(column_file(f"{name}.offsets"), f"the offsets {why}")


Vocab = tuple[list[str], dict[str, list[str]]]  # the manifest's controls and labels


def check_group(group: str, kind: Kind | None, cols: dict[str, np.ndarray], samples: int,
                sizes: np.ndarray, vocab: Vocab | None = None) -> None:
    """``Damaged`` unless the columns ``cols`` of ``group`` fit together for ``samples``
    samples of image sizes ``sizes`` ((samples, 2) height, width): offsets, row counts,
    text and nested offsets, control and label ids inside the manifest's ``vocab``
    (controls, labels per control), and the kind's own rule (``Kind.stored_problem``)."""
    if group == ORIGINAL_SIZE:  # per sample: the photo's (height, width), at least 1x1
        arr = cols[ORIGINAL_SIZE]
        if len(arr) != samples or (len(arr) and int(arr.min()) < 1):
            raise Damaged(column_file(ORIGINAL_SIZE), f"holds {len(arr)} sizes for {samples} "
                          "samples, or a side below 1")
        return
    if kind is None:  # a per-sample text column (image_ref, data_json)
        check_text(cols, group, samples)
        return
    n = kind.name
    fixed = [f"{n}.{c}" for c in kind.row_columns()]
    rows = len(cols[fixed[0]]) if fixed else 0
    why = offsets_problem(cols[f"{n}.offsets"], samples, rows)
    if why is not None:
        raise Damaged(column_file(f"{n}.offsets"), f"the offsets {why}")
    for c in fixed:
        if len(cols[c]) != rows:
            raise Damaged(column_file(c), f"holds {len(cols[c])} rows, "
                          f"{column_file(fixed[0])} holds {rows}")
    for t in kind.text:
        check_text(cols, f"{n}.{t}", rows)
    for nest in kind.nested:
        why = offsets_problem(cols[f"{n}.{nest.offsets}"], rows, len(cols[f"{n}.{nest.values}"]))
        if why is not None:
            raise Damaged(column_file(f"{n}.{nest.offsets}"), f"the offsets {why}")
    if vocab is not None:
        _check_ids(n, cols, vocab)
    why = kind.stored_problem(lambda c: cols[c], sizes)
    if why is not None:
        raise Damaged(column_file(f"{n}.*"), why)


def _check_ids(n: str, cols: dict[str, np.ndarray], vocab: Vocab) -> None:
    """Control ids name one of the manifest's controls (or -1: none); label ids one of that
    control's labels (or -1)."""
    controls, labels = vocab
    if f"{n}.control" not in cols:
        return
    ctrl = np.asarray(cols[f"{n}.control"], np.int64)
    bad = (ctrl < -1) | (ctrl >= len(controls))
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        raise Damaged(column_file(f"{n}.control"), f"row {r} names control {int(ctrl[r])}, "
                      f"the manifest lists {len(controls)}")
    if f"{n}.label" not in cols:
        return
    lab = np.asarray(cols[f"{n}.label"], np.int64)
    known = [len(labels[c]) if c in labels else np.iinfo(np.int64).max for c in controls]
    limit = np.asarray([*known, 0], np.int64)[ctrl]  # control -1: no labels
    bad = (lab < -1) | ((lab >= 0) & (lab >= limit))
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        raise Damaged(column_file(f"{n}.label"), f"row {r} names label {int(lab[r])}, its "
                      "control has fewer")

