"""LabelStudioDataset: a Label Studio export served as ShardDataset samples via a shard cache.

The first use imports the export into ``<cache_dir>/<key>`` where ``key`` is the sha256 of
the export bytes and the import options; later runs open that folder instantly. The import
writes into ``<key>.partial`` under an exclusive file lock and renames it into place when
complete, so a concurrent import waits and a killed one is resumed, never served half-done.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from pathlib import Path
from typing import Any

import orjson

from npu_data.errors import UserError

_IMAGE_KEYS = ("ls_data_dir", "local_files_root", "allow_download")
_WRITE_KEYS = ("reencode", "shard_size", "annotations", "with_predictions", "config",
               "reject_out_of_range", "strict", "workers")


def default_cache_dir() -> Path:
    """``$NPU_DATA_CACHE`` or ``~/.cache/npu-data``."""
    env = os.environ.get("NPU_DATA_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "npu-data"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class LabelStudioDataset:
    """Samples of a Label Studio export (``ShardDataset`` dicts), imported once and cached.

    ``transform`` is a device batch transform the DataLoader applies (not per sample).
    Import options: ``store`` ("raw"/"encoded"), ``max_side``, ``images_root`` and any of
    ``ls_data_dir``, ``local_files_root``, ``allow_download``, ``reencode``, ``shard_size``,
    ``annotations``, ``with_predictions``, ``config``, ``reject_out_of_range``, ``strict``,
    ``workers`` (as for ``npu-data import``).
    """

    def __init__(self, json_file: str | os.PathLike[str],
                 images_root: str | os.PathLike[str] | None = None, transform: Any = None,
                 cache_dir: str | os.PathLike[str] | None = None, store: str = "raw",
                 max_side: int | None = None, **options: Any) -> None:
        unknown = sorted(set(options) - set(_IMAGE_KEYS) - set(_WRITE_KEYS))
        if unknown:
            raise UserError(f"LabelStudioDataset: unknown option(s) {', '.join(unknown)} — use "
                            f"{', '.join(_IMAGE_KEYS + _WRITE_KEYS)}")
        self.json_file = Path(json_file)
        if not self.json_file.is_file():
            raise UserError(f"{self.json_file}: export not found — pass the path of a Label "
                            "Studio JSON export (Export > JSON)")
        self.transform = transform
        self.images_root = Path(images_root).resolve() if images_root else None
        self.store, self.max_side, self.options = store, max_side, options
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.key = self._key()
        self.path = self.cache_dir / self.key
        self._ds: Any = None

    def _key(self) -> str:
        record = {"export_sha256": _sha256(self.json_file), "store": self.store,
                  "max_side": self.max_side,
                  "images_root": os.fspath(self.images_root or self.json_file.resolve().parent),
                  **{k: (os.fspath(Path(v).resolve()) if k in ("ls_data_dir", "local_files_root",
                                                                "config") else v)
                     for k, v in sorted(self.options.items()) if k != "workers"}}
        return hashlib.sha256(orjson.dumps(record, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]

    def _import(self) -> None:
        from npu_data.shards.source import image_options
        from npu_data.shards.writer import WriteOptions, write_dataset

        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with (self.cache_dir / f"{self.key}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent import finishes first
            if (self.path / "manifest.json").is_file():
                return
            images = image_options(self.json_file, images_root=self.images_root,
                                   **{k: self.options[k] for k in _IMAGE_KEYS
                                      if k in self.options})
            write_kw = {k: self.options[k] for k in _WRITE_KEYS if k in self.options}
            partial = self.cache_dir / f"{self.key}.partial"
            opts = WriteOptions(store=self.store, max_side=self.max_side, images=images,
                                resume=partial.exists(), **write_kw)
            write_dataset(self.json_file, partial, opts)
            os.replace(partial, self.path)

    @property
    def dataset(self) -> Any:
        """The underlying ``ShardDataset`` (imports the export on first use)."""
        if self._ds is None:
            from npu_data.shards.reader import ShardDataset

            if not (self.path / "manifest.json").is_file():
                self._import()
            self._ds = ShardDataset(self.path)
        return self._ds

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.dataset[i]

    def __getitems__(self, indices: list[int]) -> Any:
        """A whole batch read column-wise (what torch's DataLoader asks a worker for)."""
        return self.dataset.__getitems__(indices)

    def __getstate__(self) -> dict[str, Any]:
        self.dataset  # noqa: B018 - import in the parent, never in each worker
        return dict(self.__dict__)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.dataset, name)  # labels, controls, sizes(), ...
