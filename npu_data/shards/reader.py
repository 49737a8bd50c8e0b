"""``ShardDataset``: O(1) random access to a shard folder through lazy memory maps."""

from __future__ import annotations

import functools
import io
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from PIL import Image, ImageOps

from npu_data.batch import HostBatch
from npu_data.common.oserrors import os_error
from npu_data.common.paths import inside, open_regular
from npu_data.common.ragged import offsets_problem
from npu_data.errors import DataCorruption, UserError
from npu_data.kinds.base import Kind
from npu_data.kinds.registry import BY_NAME
from npu_data.kinds.texts import CAPTION_OF
from npu_data.shards import batch_read, repeats
from npu_data.shards import file_checks as checks
from npu_data.shards.batch_read import as_index, requested
from npu_data.shards.format import (
    DATA,
    ENC_RAW,
    INDEX,
    INDEX_DTYPE,
    MANIFEST,
    ORIGINAL_SIZE,
    column_file,
    dataset_kinds,
)
from npu_data.shards.image_payload import MAX_PIXELS
from npu_data.shards.schema import read_manifest


def latent_layout(manifest: dict[str, Any]) -> tuple[int, int] | None:
    """A latents store's payload layout (``npu_data.shards.latent_format.layout``), else None."""
    if manifest.get("store") != "latents":
        return None
    from npu_data.shards.latent_format import layout

    return layout(manifest)

T = TypeVar("T")


class _Shard:
    """Lazily opened arrays of one shard: read-only memory maps, held as plain ndarray views
    (slicing an ``np.memmap`` costs a subclass round trip per call), each file checked when
    it is opened (``shards.file_checks``): the index on opening the shard, a group's columns
    together on the first use of any of them. ``entry``: the shard's (validated) manifest
    entry; ``fix``: what a message tells the user to do about a damaged file."""

    def __init__(self, root: Path, entry: dict[str, Any], max_pixels: int = MAX_PIXELS,
                 fix: str = "", vocab: checks.Vocab | None = None,
                 latents: tuple[int, int] | None = None) -> None:
        self.root = root
        self.vocab = vocab
        self.files: dict[str, Any] = entry["files"]
        self.samples = int(entry["samples"])
        self.fix = fix or (f"run `npu-data verify {root.parent}` and import the dataset again")
        self._maps: dict[str, tuple[Path, Callable[[], int], int]] = {}  # see _alive
        self.index: np.ndarray = self._open(INDEX, INDEX_DTYPE, (), copy=True)
        data_size = int(self.files[DATA]["size"])
        self._checked(lambda: checks.check_index(self.index, self.samples, data_size,
                                                 max_pixels, latents))
        self._data: np.ndarray | None = None
        self._cols: dict[str, np.ndarray] = {}
        self._originals: np.ndarray | None = None

    def _checked(self, check: Callable[[], T]) -> T:
        try:
            return check()
        except checks.Damaged as exc:
            raise DataCorruption(f"{self.root / exc.fname}: {exc.reason} — {self.fix}"
                                 ) from None

    def _open(self, fname: str, dtype: np.dtype, trailing: tuple[int, ...],
              copy: bool = False, key: str | None = None) -> np.ndarray:
        path = inside(self.root, fname)
        size = self.files.get(fname, {}).get("size")
        try:
            arr = self._checked(lambda: checks.open_npy(path, dtype, trailing, size, copy))
        except FileNotFoundError:
            raise DataCorruption(f"{path}: missing — {self.fix}") from None
        except OSError as exc:
            raise os_error(exc, path) from None
        self._watch(key or fname, path, arr)  # a column's by its name: col() checks it
        return arr

    def _watch(self, key: str, path: Path, arr: np.ndarray) -> None:
        """Remember the size of the file ``arr`` maps, checked before each use (``_alive``)."""
        now = checks.mapped_size(arr)
        if now is not None:
            self._maps[key] = (path, now, now())

    def _alive(self, key: str) -> None:
        """A ``DataCorruption`` naming the file when the file mapped for ``key`` is shorter
        than when it was mapped: touching its lost pages would kill the process (SIGBUS)."""
        got = self._maps.get(key)
        if got is None:
            return
        path, now, size = got
        try:
            left = now()
        except (OSError, ValueError):
            left = -1
        if left < size:
            raise DataCorruption(f"{path}: shrank to {max(left, 0)} bytes while it was open "
                                 f"(it had {size}) — something truncated or rewrote it in "
                                 f"place; {self.fix}")

    @property
    def data(self) -> np.ndarray:
        if self._data is None:
            path = inside(self.root, DATA)
            try:
                fd = open_regular(path)
            except FileNotFoundError:
                raise DataCorruption(f"{path}: missing — {self.fix}") from None
            except OSError as exc:
                raise os_error(exc, path) from None
            with os.fdopen(fd, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size != int(self.files[DATA]["size"]):
                    raise DataCorruption(f"{path}: has {size} bytes, the manifest says "
                                         f"{self.files[DATA]['size']} — {self.fix}")
                self._data = (np.memmap(fh, dtype=np.uint8, mode="r").view(np.ndarray)
                              if size else np.zeros(0, np.uint8))
                self._watch(DATA, path, self._data)
        self._alive(DATA)
        return self._data

    def col(self, name: str) -> np.ndarray:
        arr = self._cols.get(name)
        if arr is not None:
            self._alive(name)
        else:
            self._open_group(name.split(".", 1)[0])
            arr = self._cols.get(name)
            if arr is None:
                raise DataCorruption(f"{self.root}: no column {name!r} in format version 1 "
                                     f"— {self.fix}")
        return arr

    def open_columns(self, spec: dict[str, tuple[np.dtype, tuple[int, ...]]]) -> None:
        """Open columns outside the annotation schema (a latents store's, ``spec``: column ->
        (dtype, trailing shape)), each file checked; a text column (``.bytes`` +
        ``.offsets``) must hold one string per sample (per caption row), any other column
        one row each (``latent_format.expected_rows``)."""
        if all(c in self._cols for c in spec):
            return
        from npu_data.shards.latent_format import CAPTION_ROWS, expected_rows

        cols = {c: self._open(column_file(c), dt, shape, key=c)
                for c, (dt, shape) in spec.items()}
        try:
            want = expected_rows(cols, self.samples)
        except ValueError as exc:
            raise DataCorruption(f"{self.root / column_file(CAPTION_ROWS)}: {exc} — "
                                 f"{self.fix}") from None
        for c, arr in cols.items():
            if c.endswith(".offsets"):
                name = c[:-len(".offsets")]
                self._checked(functools.partial(checks.check_text, cols, name, want[name]))
            elif c in want and len(arr) != want[c]:
                what = "caption rows" if want[c] != self.samples else "samples"
                raise DataCorruption(f"{self.root / column_file(c)}: holds {len(arr)} rows, "
                                     f"the shard has {want[c]} {what} — {self.fix}")
        self._cols.update(cols)

    def sizes(self) -> np.ndarray:
        """(samples, 2) int64 height, width of every stored image."""
        return np.stack([self.index["height"], self.index["width"]], axis=1).astype(np.int64)

    def data_json(self, j: int) -> bytes:
        """Sample ``j``'s task data, JSON bytes as the export had them."""
        off = self.col("data_json.offsets")
        return bytes(self.col("data_json.bytes")[int(off[j]):int(off[j + 1])])

    def text_rows(self) -> np.ndarray:
        """(samples,) how many TextArea texts each sample has (0 without the kind)."""
        if column_file("texts.offsets") not in self.files:
            return np.zeros(self.samples, np.int64)
        return np.diff(self.col("texts.offsets")).astype(np.int64)

    def originals(self) -> np.ndarray:
        """(samples, 2) int64 height, width of every photo before ``max_side`` (datasets
        written before it was recorded: the stored sizes)."""
        if self._originals is None:  # once per shard, not per batch
            stored = column_file(ORIGINAL_SIZE) in self.files
            self._originals = self.col(ORIGINAL_SIZE).astype(np.int64) if stored else self.sizes()
        return self._originals

    def _open_group(self, group: str) -> None:
        """Every column of ``group`` (a kind, or a per-sample text column) opened and
        checked together (``checks.check_group``)."""
        if not checks.group_columns(group):
            return
        kind = BY_NAME.get(group)
        cols = checks.open_group(group, kind, self.files,
                                 lambda c, dt, shape: self._open(column_file(c), dt, shape,
                                                                 key=c))
        self._checked(lambda: checks.check_group(group, kind, cols, self.samples,
                                                 self.sizes(), self.vocab))
        self._cols.update(cols)

    def preload(self, files: Sequence[str]) -> _Shard:
        """Map every file now: a remote cache may evict (unlink) them later, open maps stay."""
        self.data  # noqa: B018
        for fname in files:
            col = fname[len("ann."):-len(".npy")]
            if fname.startswith("ann.") and fname.endswith(".npy") \
                    and checks.group_columns(col.split(".", 1)[0]):
                self.col(col)
        return self


class ShardDataset:
    """A dataset folder written by ``npu-data import`` (see docs/format.md), or its URL.

    Opening reads only ``manifest.json``; each shard's files are memory-mapped on first use.
    ``ds[i]`` returns the sample dict of docs/architecture.md (with the keys of the kinds the
    dataset has rows of, ``ds.kinds``); ``ds.__getitems__(indices)``
    (called by torch's DataLoader, with a list of indices or the loader's ``BatchRequest``)
    a lazy ``HostBatch`` that the loaders' assembler (``collate_samples``) reads column-wise
    into the same batch as collating the ``ds[i]`` dicts.

    A latents store (``npu-data encode``, docs/format.md "Latents stores") gives the sample
    dicts of ``shards.latent_read`` instead (``latents``, ``latents_flipped``, the SDXL sizes,
    ``caption``, text embeddings), and ``__getitems__`` a list of them for torch's collate.

    A URL's shards are downloaded on first use into a node-local cache (see
    ``npu_data.shards.remote``) and ``self.path`` is that cache folder.

    Nothing on disk is trusted: the manifest is validated on opening (``shards.schema``) and
    each shard's files when the shard is opened (``shards.file_checks``); an image whose index
    claims more than ``max_pixels`` pixels, or a size its encoded header does not have, is a
    ``DataCorruption`` before any buffer of that size exists (docs/format.md, "Validation").

    Args:
        path: The dataset folder, or an fsspec URL of one (``s3://bucket/prefix``).
        cache_dir: A URL's node-local cache; default ``$NPU_DATA_CACHE/remote`` (else
            ``$XDG_CACHE_HOME/npu-data/remote``, else ``~/.cache/npu-data/remote``).
        cache_limit: Bytes of complete shards the cache keeps before evicting the least
            recently used: an int or a size such as ``"50GB"``, ``"1.5TiB"``; None: no limit.
        storage_options: Passed to fsspec (credentials, ``{"client_kwargs": {"endpoint_url":
            ...}}`` for MinIO, OBS and other S3-compatible stores).
        cache_check: How a cached shard is checked on its first open in a process:
            ``"sha256"`` re-hashes every file, ``"size"`` checks sizes only.
        prefetch: Shards downloaded ahead of the reads when the sampler announces them
            (``prefetch(shards)``); 0 turns prefetching off.
        max_pixels: The most pixels a stored image may claim before it is treated as
            corrupt.
        caption_field: The task data key holding each sample's caption; None: the first
            TextArea text, else the task data's ``caption``, ``text`` or ``prompt``
            (``shards.batch_read``).
        fix: What a message about a damaged file of a local folder tells the user to do
            (default: verify the folder and import it again).

    Raises:
        UserError: An argument out of range, or a folder, URL or manifest that cannot be
            read (``DataCorruption`` when its contents fail a check).
    """

    def __init__(self, path: str | os.PathLike[str], *, cache_dir: str | os.PathLike[str] | None = None,
                 cache_limit: int | str | None = None,
                 storage_options: dict[str, Any] | None = None,
                 cache_check: str = "sha256", prefetch: int = 2,
                 max_pixels: int = MAX_PIXELS, caption_field: str | None = None,
                 fix: str = "") -> None:
        from npu_data.shards import remote, storage

        self.caption_field = batch_read.check_field(caption_field, "ShardDataset")
        if isinstance(max_pixels, bool) or not isinstance(max_pixels, int) or max_pixels < 1:
            raise UserError(f"max_pixels={max_pixels!r}: the most pixels a stored image may "
                            "claim, a positive integer")
        self.max_pixels = max_pixels
        self._fix = fix  # what a damaged local file's message says to do ("": verify, import)

        self._remote: remote.RemoteStore | None = None
        if storage.is_url(path):
            self._remote = remote.RemoteStore(str(path), cache_dir, cache_limit,
                                              storage_options, cache_check, prefetch)
            self.path = self._remote.root
            self.manifest: dict[str, Any] = self._remote.manifest
        else:
            self.path = Path(path)
            self.manifest = read_manifest(self.path)
        self.labels: dict[str, list[str]] = self.manifest["labels"]
        self.controls: list[str] = self.manifest["controls"]
        self.store: str = self.manifest["store"]
        self._vocab: checks.Vocab = (self.controls, self.labels)
        # the kinds with rows: only these appear in samples and batches
        self.kinds: tuple[Kind, ...] = dataset_kinds(self.manifest, str(self.path / MANIFEST))
        counts = np.array([s["samples"] for s in self.manifest["shards"]], dtype=np.int64)
        self._starts = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=self._starts[1:])
        self._names: list[str] = [s["name"] for s in self.manifest["shards"]]
        self._shards: dict[int, _Shard] = {}
        self._sizes: np.ndarray | None = None
        # a latents store (``npu_data.latents``): its record, and its payloads' layout
        self.latents: dict[str, Any] | None = self.manifest.get("latents") \
            if self.store == "latents" else None
        self._layout = latent_layout(self.manifest)
        self._repeats: np.ndarray | None | bool = False  # False: not read yet

    # --- pickling: never ship memory maps to DataLoader workers --------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_shards"] = {}
        state["_sizes"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    # --- access --------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self._starts[-1])

    def locate(self, i: int) -> tuple[int, int]:
        """(shard number, index inside the shard) of sample ``i``."""
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"sample {i} out of range for {n} samples in {self.path}")
        i %= n
        k = int(np.searchsorted(self._starts, i, side="right")) - 1
        return k, i - int(self._starts[k])

    def shard(self, k: int) -> _Shard:
        """Shard ``k``'s lazily opened arrays."""
        sh = self._shards.get(k)
        if sh is None:
            entry = self.manifest["shards"][k]
            if self._remote is None:
                sh = self._shards[k] = _Shard(inside(self.path, self._names[k]), entry,
                                              self.max_pixels, self._fix, self._vocab,
                                              latents=self._layout)
            else:  # downloaded and checked into the node-local cache, then mapped
                files, fix = list(entry["files"]), self._remote_fix()
                sh = self._shards[k] = self._remote.fetch(
                    k, lambda p: _Shard(p, entry, self.max_pixels, fix, self._vocab,
                                        self._layout).preload(files))
                self._remote.trim(self._shards)
        return sh

    def _remote_fix(self) -> str:
        assert self._remote is not None
        return (f"the copy at {self._remote.shown} is damaged: upload the dataset folder "
                "again (manifest.json last)")

    def prefetch(self, shards: Sequence[int]) -> None:
        """Shards about to be read, in order (a remote dataset downloads the next ones in the
        background; a local folder has nothing to do)."""
        if self._remote is not None:
            self._remote.prefetch(shards)

    def _indices(self) -> list[np.ndarray]:
        """Every shard's index (of a remote dataset: only the index.npy files downloaded)."""
        ks = range(len(self._names))
        if self._remote is None:
            return [self.shard(k).index for k in ks]
        todo = [k for k in ks if k not in self._shards]
        got = self._remote.fetch_files(INDEX, todo, self._open_index)
        for k, index in zip(todo, got, strict=True):
            entry = self.manifest["shards"][k]
            try:
                checks.check_index(index, int(entry["samples"]), int(entry["files"][DATA]["size"]),
                                   self.max_pixels, self._layout)
            except checks.Damaged as exc:
                raise DataCorruption(f"{self.path / self._names[k] / exc.fname}: {exc.reason} "
                                     f"— {self._remote_fix()}") from None
        it = iter(got)
        return [self._shards[k].index if k in self._shards else next(it) for k in ks]

    def _open_index(self, path: Path) -> np.ndarray:
        """The index.npy at ``path`` (of a remote shard, downloaded alone), checked as a file."""
        try:
            return checks.open_npy(path, INDEX_DTYPE, ())
        except checks.Damaged as exc:
            raise DataCorruption(f"{path}: {exc.reason} — {self._remote_fix()}") from None

    def sizes(self) -> np.ndarray:
        """(N, 2) int64 (height, width) of every stored image, from the shard indices."""
        if self._sizes is None:
            parts = [np.stack([ix["height"], ix["width"]], axis=1).astype(np.int64)
                     for ix in self._indices()]
            self._sizes = np.concatenate(parts) if parts else np.zeros((0, 2), np.int64)
        return self._sizes

    @property
    def repeats(self) -> np.ndarray | None:
        """(N,) int64 how many times an epoch each sample is served (task data ``repeats``,
        kohya's ``num_repeats``; 1 where a task has none), read once; None for a dataset
        whose manifest counts no task with the key (``shards.repeats``)."""
        if self._repeats is False:
            found = None
            if self.manifest["counts"].get("repeats") and self.latents is None:
                parts = [repeats.read_counts(blob.tobytes(), off, str(self.path / self._names[k]),
                                             int(self._starts[k]))
                         for k, (blob, off) in enumerate(self._task_data())]
                found = np.concatenate(parts) if parts else np.zeros(0, np.int64)
            self._repeats = found  # a refused count is refused again on the next call
        return self._repeats  # type: ignore[return-value]

    def _task_data(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Every shard's task data column (bytes, offsets); of a remote dataset only those two
        files are downloaded (their offsets checked as the shard's own open checks them)."""
        ks = range(len(self._names))
        if self._remote is None:
            return [(self.shard(k).col("data_json.bytes"), self.shard(k).col("data_json.offsets"))
                    for k in ks]
        todo = [k for k in ks if k not in self._shards]
        spec = checks.group_columns("data_json")
        got = {}
        for col in ("data_json.bytes", "data_json.offsets"):
            dt, shape = spec[col]
            opener = functools.partial(self._open_column, dt=dt, shape=shape)
            got[col] = dict(zip(todo, self._remote.fetch_files(column_file(col), todo, opener),
                                strict=True))
        out = []
        for k in ks:
            if k in self._shards:
                out.append((self._shards[k].col("data_json.bytes"),
                            self._shards[k].col("data_json.offsets")))
                continue
            blob, off = got["data_json.bytes"][k], got["data_json.offsets"][k]
            why = offsets_problem(off, int(self.manifest["shards"][k]["samples"]), len(blob))
            if why is not None:
                raise DataCorruption(f"{self.path / self._names[k] / column_file('data_json.offsets')}"
                                     f": the offsets {why} — {self._remote_fix()}")
            out.append((blob, off))
        return out

    def _open_column(self, path: Path, dt: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """A column file at ``path`` (of a remote shard, downloaded alone), checked as a file."""
        try:
            return checks.open_npy(path, dt, shape)
        except checks.Damaged as exc:
            raise DataCorruption(f"{path}: {exc.reason} — {self._remote_fix()}") from None

    def physical(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """(B,) int64 dataset index of each of ``indices``: an index from ``-N`` to ``N - 1``,
        or a repeat's virtual id ``i + N * r`` (``shards.repeats``); IndexError otherwise."""
        idx = np.asarray(indices).astype(np.int64).reshape(-1)
        n = len(self)
        if idx.size and (int(idx.max()) >= n or int(idx.min()) < -n):  # a repeat, or a mistake
            reps = self.repeats if int(idx.max()) >= n else None
            return repeats.physical(idx, n, reps, self.path)
        return idx % n if n else idx

    def task_ids(self) -> np.ndarray:
        """(N,) int64 task id of every sample."""
        parts = [np.asarray(ix["task_id"]) for ix in self._indices()]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def __getitem__(self, i: int) -> dict[str, Any]:
        i = as_index(i)
        if i >= len(self):  # a repeat's virtual id (shards.repeats)
            i = int(self.physical([i])[0])
        k, j = self.locate(i)
        try:
            return self._sample(k, j, i % len(self))
        except UserError:
            raise
        except Exception as exc:
            fix = self._fix or f"run `npu-data verify {self.path}`"
            raise DataCorruption(f"{self.path / self._names[k]}: sample {j} (dataset index "
                                 f"{i % len(self)}) unreadable: {exc} — {fix}") from None

    def __getitems__(self, indices: Sequence[int]) -> HostBatch | list[dict[str, Any]]:
        """Samples ``indices`` (or a ``BatchRequest``) as one lazy ``HostBatch`` (read in one
        shot by the assembler, ``batch_read.requested``); a latents store's as a list of
        sample dicts (stacked by torch's collate)."""
        if self.latents is not None:
            return [self[i] for i in indices]
        return requested(self, indices)

    def image(self, k: int, j: int) -> np.ndarray:
        """The (H, W, 3) uint8 image of sample ``j`` of shard ``k``."""
        sh = self.shard(k)
        rec = sh.index[j]
        off, length = int(rec["offset"]), int(rec["length"])
        h, w, c = int(rec["height"]), int(rec["width"]), int(rec["channels"])
        buf = sh.data[off:off + length]
        if int(rec["encoding"]) == ENC_RAW:
            return buf.reshape(h, w, c)
        with Image.open(io.BytesIO(buf.tobytes())) as im:
            if im.size not in ((w, h), (h, w)):  # before decoding: the header's own size
                raise DataCorruption(f"{sh.root}: sample {j} is {im.size[0]}x{im.size[1]} "
                                     f"pixels, its index says {w}x{h} — {sh.fix}")
            out = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
        if out.shape != (h, w, c):
            raise DataCorruption(f"{sh.root}: sample {j} decodes to {out.shape}, index says "
                                 f"{(h, w, c)} — {sh.fix}")
        return out

    def _sample(self, k: int, j: int, gi: int) -> dict[str, Any]:
        if self.latents is not None:
            from npu_data.shards.latent_read import latent_sample

            return latent_sample(self, k, j, gi)
        sh = self.shard(k)
        rec = sh.index[j]
        s: dict[str, Any] = {"image": self.image(k, j), "index": gi,
                             "task_id": int(rec["task_id"])}
        hw = (int(rec["height"]), int(rec["width"]))
        s["original_size"] = sh.originals()[j].copy()  # not a view of the shared column
        for kind in self.kinds:
            s.update(kind.read_sample(sh.col, j, hw))
        s["caption"] = batch_read.pick(s.get(CAPTION_OF, []), sh.data_json(j), self.caption_field)
        return s

    def chosen_captions(self, ids: np.ndarray, picks: np.ndarray) -> Any:
        """A latents store's caption ``min(int(u * n), n - 1)`` of each sample ``ids``, ``u``
        of ``picks``: ``(texts, prompt_embeds, pooled)`` or None when each is the sample's
        first (``shards.latent_read.chosen_captions``; ``RandomCaption`` calls it)."""
        from npu_data.shards.latent_read import chosen_captions

        return chosen_captions(self, ids, picks)

    def caption_coverage(self) -> batch_read.Coverage:
        """Where the samples' captions come from (``shards.batch_read``), counted over the whole
        dataset (reads every sample's task data, not its pixels; once)."""
        known = self.__dict__.get("_coverage")
        if known is not None:
            return known  # type: ignore[no-any-return]
        if self.latents is not None:  # captions stored with the latents, as encoded
            from npu_data.shards.latent_read import caption_counts

            stored, total = caption_counts(self)
            self._coverage = batch_read.Coverage(data={}, none=total - stored, stored=stored)
            return self._coverage
        texts: list[list[str]] = []
        raws: list[bytes] = []
        for k in range(len(self._names)):
            sh = self.shard(k)
            rows = sh.text_rows()
            for j in range(sh.samples):
                texts.append(["x"] * int(rows[j]))
                raws.append(sh.data_json(j))
        self._coverage = batch_read.coverage(texts, raws, self.caption_field)
        return self._coverage

