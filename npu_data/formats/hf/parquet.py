"""Hugging Face ``datasets`` parquet files and ``save_to_disk`` folders -> Label Studio tasks.

Read with pyarrow (the ``hf`` extra), a few rows at a time: parquet by row groups
(``iter_batches``), arrow files (``save_to_disk``'s ``data-*.arrow``, IPC streams) memory-mapped
batch by batch, so memory stays bounded whatever the dataset's size. Each column's role is
``formats.hf.columns``'.

Sources: parquet files (``Dataset.to_parquet``), or a folder of them (its ``*.parquet``, else
``data/*.parquet``, else any below it, as a hub repository holds them); a ``save_to_disk``
folder (``state.json`` names its ``data-*.arrow`` files) or one ``.arrow`` file. A folder whose
files are several splits (``train-00000-of-00002.parquet``, ``test-...``) or a DatasetDict
folder (``dataset_dict.json``, one folder per split) is refused with a line naming each split's
files or folder: a split is imported on its own, so train and test never mix by accident.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from npu_data.common.paths import UnsafeName, inside
from npu_data.errors import UserError
from npu_data.formats.hf.columns import Columns, Rows, columns_of, features_of, pyarrow
from npu_data.formats.tasks import Converted, TaskFile, label_config, write_config

BATCH_ROWS = 64  # rows converted at a time (a parquet row group is read as it goes)
_SPLIT_FILE = re.compile(r"^(?P<split>.+?)-\d{5}-of-\d{5}$")  # the hub's {split}-00000-of-00001


def parquet_files(sources: Sequence[str]) -> list[Path]:
    """The parquet files of ``sources`` (files, or one folder: module doc)."""
    if len(sources) == 1 and Path(sources[0]).is_dir():
        root = Path(sources[0])
        files = (sorted(root.glob("*.parquet")) or sorted(root.glob("data/*.parquet"))
                 or sorted(p for p in root.rglob("*.parquet")
                           if not any(s.startswith(".") for s in p.relative_to(root).parts)))
        if not files:
            raise UserError(f"{root}: no .parquet files in the folder or below it — pass the "
                            "parquet files, or --format for another layout")
        _one_split(root, files)
        return files
    files = [Path(s) for s in sources]
    for f in files:
        if not f.is_file():
            raise UserError(f"{f}: no such parquet file — check the path")
    return files


def _one_split(root: Path, files: list[Path]) -> None:
    """UserError when ``files`` hold several splits: the hub's ``{split}-00000-of-00002`` file
    names, or parquet files in several folders."""
    splits: dict[str, list[Path]] = {}
    for f in files:
        m = _SPLIT_FILE.match(f.stem)
        splits.setdefault(str(f.parent / (f"{m.group('split')}-*" if m else "*")) + ".parquet",
                          []).append(f)
    if len(splits) > 1:
        named = "; ".join(f"{pattern} ({len(fs)} file(s))" for pattern, fs in splits.items())
        raise UserError(f"{root}: holds {len(splits)} splits: {named} — import one split: pass "
                        "its files")


def _batches(path: Path, arrow: bool) -> Iterator[Any]:
    """The record batches of one file; a file pyarrow cannot read: one line naming it (a
    write into the staging folder failing in the caller is not caught here)."""
    pa = pyarrow()
    try:
        if arrow:
            with pa.memory_map(str(path)) as src:
                yield from pa.ipc.open_stream(src)
        else:
            import pyarrow.parquet as pq

            yield from pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS)
    except (pa.ArrowException, OSError) as exc:
        raise _unreadable(path, arrow, exc) from None


def _schema(path: Path, arrow: bool) -> Any:
    pa = pyarrow()
    try:
        if arrow:
            with pa.memory_map(str(path)) as src:
                return pa.ipc.open_stream(src).schema
        import pyarrow.parquet as pq

        return pq.read_schema(path)
    except (pa.ArrowException, OSError) as exc:
        raise _unreadable(path, arrow, exc) from None


def _unreadable(path: Path, arrow: bool, exc: BaseException) -> UserError:
    why = " ".join(str(exc).split())[:200]
    return UserError(f"{path}: not a readable {'arrow' if arrow else 'parquet'} file "
                     f"({type(exc).__name__}: {why}) — write it again with datasets")


def _convert(fmt: str, files: list[Path], roots: list[Path], stage: Path, arrow: bool,
             fallback: dict[str, Any] | None) -> Converted:
    """Write the tasks of ``files`` (each read relative to its root) into ``stage``."""
    first: Columns | None = None
    with TaskFile(stage / "export.json") as out:
        rows = Rows(stage, out)
        for path, root in zip(files, roots, strict=True):
            where = str(path)
            schema = _schema(path, arrow)
            cols = columns_of(schema, features_of(schema, fallback), where)
            rows.check(cols, where)
            first = first or cols
            n = 0
            for batch in _batches(path, arrow):
                rows.add(batch, cols, root, where, n)
                n += batch.num_rows
        count = out.count
    assert first is not None
    config = (write_config(stage, label_config({n: ("Choices", names) for n, names
                                                in first.labels.items()}))
              if first.labels else None)
    notes = [f"{fmt}: {count} rows from {len(files)} file(s); image column {first.image!r}"
             + (f"; labels from {', '.join(first.labels)}" if first.labels else "")]
    if first.skipped:
        notes.append(f"{fmt}: column(s) {', '.join(first.skipped)} not imported (a second "
                     "image, binary data or a type task data cannot hold)")
    return Converted(fmt, stage / "export.json", stage, config, notes)


def read_parquet(sources: list[str], stage: Path, options: Any) -> Converted:
    """Write the tasks of parquet ``sources`` to ``stage/export.json`` (module doc)."""
    pyarrow()
    files = parquet_files(sources)
    return _convert("hf-parquet", files, [f.resolve().parent for f in files], stage, False,
                    None)


def disk_files(source: Path) -> tuple[list[Path], dict[str, Any] | None]:
    """The arrow files of a ``save_to_disk`` folder (or one ``.arrow`` file) and the features
    its ``dataset_info.json`` holds."""
    if source.is_file():
        return [source], _info(source.parent)
    if (source / "dataset_dict.json").is_file():
        try:
            splits = orjson.loads((source / "dataset_dict.json").read_bytes())["splits"]
        except (orjson.JSONDecodeError, KeyError, TypeError, OSError):
            splits = sorted(p.name for p in source.iterdir() if (p / "state.json").is_file())
        raise UserError(f"{source}: a DatasetDict of {len(splits)} splits "
                        f"({', '.join(map(str, splits))}) — import one split: pass its folder, "
                        f"e.g. {source / str(splits[0]) if splits else source}")
    names: list[Any] = []
    if (source / "state.json").is_file():
        try:
            state = orjson.loads((source / "state.json").read_bytes())
            names = [d["filename"] for d in state["_data_files"]]
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise UserError(f"{source / 'state.json'}: not a datasets state file ({exc}) — "
                            "save the dataset again with save_to_disk") from None
    try:
        files = ([inside(source, n, where=str(source / "state.json")) for n in names]
                 or sorted(source.glob("data-*.arrow")))
    except UnsafeName as exc:
        raise UserError(str(exc)) from None
    if not files:
        raise UserError(f"{source}: no data-*.arrow files — a save_to_disk folder holds them "
                        "with state.json and dataset_info.json")
    return files, _info(source)


def _info(folder: Path) -> dict[str, Any] | None:
    """The features of ``folder/dataset_info.json`` (None: none there)."""
    try:
        feats = orjson.loads((folder / "dataset_info.json").read_bytes()).get("features")
    except (OSError, orjson.JSONDecodeError, AttributeError):
        return None
    return feats if isinstance(feats, dict) else None


def read_disk(sources: list[str], stage: Path, options: Any) -> Converted:
    """Write the tasks of a ``save_to_disk`` folder (or an ``.arrow`` file) to
    ``stage/export.json`` (module doc)."""
    pyarrow()
    if len(sources) != 1:
        raise UserError(f"--format hf-disk reads one save_to_disk folder, got {len(sources)}")
    source = Path(sources[0])
    if not source.exists():
        raise UserError(f"{source}: no such folder — pass the folder save_to_disk wrote")
    files, features = disk_files(source)
    root = (source.parent if source.is_file() else source).resolve()
    return _convert("hf-disk", files, [root] * len(files), stage, True, features)
