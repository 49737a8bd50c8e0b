"""The columns of a Hugging Face ``datasets`` table (parquet or arrow) and what each becomes in
a Label Studio task.

Roles, from the features ``datasets`` stores as JSON (schema metadata ``huggingface`` ->
``info.features``, or ``dataset_info.json``), else from the column types:

- the **image**: the first ``Image`` feature (arrow ``struct<bytes: binary, path: string>``; with
  no features, the first column of that shape, else a binary column named like an image
  extension, as img2dataset's parquet ``jpg``). Its bytes are written under the staging folder;
  a row with only a ``path`` reads that file, relative to the source's folder and never outside
  it. A row without an image is refused (one line naming the file and row).
- each **ClassLabel** column: a Choices control of that name whose labels are the feature's
  ``names`` in their order, and ``data.<column>`` = the row's label name (-1 or null: none).
- every other column of plain values (strings, numbers, booleans, dates, lists and structs of
  them): ``data.<column>`` as ``datasets`` returns it, so the caption is the import's rule
  (``caption_field``, else ``caption`` / ``text`` / ``prompt``). Other columns (more images,
  binary, decimals, audio) are left out and named in a note.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from npu_data.common.paths import UnsafeName, inside
from npu_data.errors import UserError
from npu_data.formats.tasks import (
    IMAGE_EXTENSIONS,
    choice_result,
    image_task,
    media_path,
    write_media,
)

IMAGE_NAMES = {e.lstrip(".") for e in IMAGE_EXTENSIONS}
_MAGIC = ((b"\xff\xd8\xff", "jpg"), (b"\x89PNG\r\n\x1a\n", "png"), (b"GIF8", "gif"),
          (b"BM", "bmp"), (b"II*\x00", "tif"), (b"MM\x00*", "tif"))


def pyarrow() -> Any:
    """The ``pyarrow`` module, or one line saying how to install it."""
    try:
        import pyarrow as pa
    except ImportError:
        raise UserError("reading Hugging Face parquet / arrow files needs pyarrow — "
                        "pip install 'npu-data[hf]'") from None
    return pa


def features_of(schema: Any, fallback: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``datasets`` features stored in ``schema``'s metadata, else ``fallback``, else {}."""
    raw = (schema.metadata or {}).get(b"huggingface")
    if raw:
        try:
            feats = orjson.loads(raw).get("info", {}).get("features")
        except (orjson.JSONDecodeError, AttributeError):
            feats = None
        if isinstance(feats, dict):
            return feats
    return fallback or {}


@dataclass
class Columns:
    """What each column of a table becomes (module doc)."""

    image: str
    struct: bool  # the image is an Image struct (else a binary column)
    labels: dict[str, list[str]] = field(default_factory=dict)
    data: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def _kind(feature: Any) -> str | None:
    return feature.get("_type") if isinstance(feature, dict) else None


def _is_image_struct(t: Any) -> bool:
    pa = pyarrow()
    if not pa.types.is_struct(t) or {t.field(i).name for i in range(t.num_fields)} != {
            "bytes", "path"}:
        return False
    b, p = t.field("bytes").type, t.field("path").type
    return (pa.types.is_binary(b) or pa.types.is_large_binary(b)) and (
        pa.types.is_string(p) or pa.types.is_large_string(p))


def _plain(t: Any) -> bool:
    """Whether values of arrow type ``t`` come out of ``to_pylist`` as JSON orjson writes."""
    pa = pyarrow()
    if (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t)
            or pa.types.is_boolean(t) or pa.types.is_null(t) or pa.types.is_timestamp(t)
            or pa.types.is_date(t)):
        return True
    if pa.types.is_floating(t):
        return not pa.types.is_float16(t)
    if pa.types.is_dictionary(t):
        return _plain(t.value_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _plain(t.value_type)
    if pa.types.is_struct(t):
        return all(_plain(t.field(i).type) for i in range(t.num_fields))
    return False


def columns_of(schema: Any, features: dict[str, Any], where: str) -> Columns:
    """The roles of ``schema``'s columns (module doc); UserError when none holds images."""
    pa = pyarrow()
    names = list(schema.names)
    types = {n: schema.field(n).type for n in names}
    images = [n for n in names if _kind(features.get(n)) == "Image" and _is_image_struct(types[n])]
    if not images and not any(_kind(f) == "Image" for f in features.values()):
        images = [n for n in names if _is_image_struct(types[n])]
    struct = bool(images)
    if not images:
        images = [n for n in names if n.lower() in IMAGE_NAMES and (
            pa.types.is_binary(types[n]) or pa.types.is_large_binary(types[n]))]
    if not images:
        raise UserError(f"{where}: no image column (a datasets Image feature, a struct of "
                        f"bytes and path, or a binary jpg/png column) among {', '.join(names)}"
                        " — cast the image column with datasets.Image() and write it again")
    cols = Columns(images[0], struct)
    for n in names:
        if n == cols.image:
            continue
        feat = features.get(n)
        if _kind(feat) == "ClassLabel" and pa.types.is_integer(types[n]):
            labels = feat.get("names") if isinstance(feat, dict) else None
            if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
                raise UserError(f"{where}: ClassLabel column {n!r} has no names list — write "
                                "the dataset again with datasets, which stores them")
            cols.labels[n] = labels
        elif n != "image" and _plain(types[n]):
            cols.data.append(n)
        else:  # a second image, binary or an unsupported type, or a column named "image"
            cols.skipped.append(n)
    return cols


def image_ext(data: bytes, path: str | None) -> str:
    """The image's extension: its path's when that is an image one, else from its bytes."""
    suffix = Path(path).suffix.lower().lstrip(".") if path else ""
    if suffix in IMAGE_NAMES:
        return suffix
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return next((ext for magic, ext in _MAGIC if data.startswith(magic)), "img")


def path_bytes(root: Path, path: str, where: str) -> bytes:
    """The bytes of the image file ``path`` (relative to ``root``, or absolute inside it)."""
    rel = Path(path)
    if rel.is_absolute():
        try:
            rel = rel.resolve().relative_to(root.resolve())
        except ValueError:
            raise UserError(f"{where}: image path {path!r} is outside {root} — refused (an "
                            "image path is read only under the dataset's folder); embed the "
                            "images (datasets' embed_table_storage) or move them there"
                            ) from None
    try:
        file = inside(root, *[p for p in rel.as_posix().split("/") if p != "."], where=where)
        return file.read_bytes()
    except UnsafeName as exc:
        raise UserError(str(exc)) from None
    except OSError as exc:
        raise UserError(f"{where}: image {path!r} cannot be read under {root} "
                        f"({exc.strerror or exc}) — put it there or embed the images") from None


class Rows:
    """Turns record batches of one source into tasks: images written under ``stage/media``,
    labels and data as the module doc says. ``count`` tasks so far (their ids)."""

    def __init__(self, stage: Path, out: Any) -> None:
        self.stage, self.out = stage, out
        self.labels: dict[str, list[str]] | None = None

    def check(self, cols: Columns, where: str) -> None:
        """The label lists of every file must be the first file's (one config for all)."""
        if self.labels is None:
            self.labels = cols.labels
        elif self.labels != cols.labels:
            raise UserError(f"{where}: ClassLabel columns {cols.labels} differ from the first "
                            f"file's {self.labels} — import files of one dataset together")

    def add(self, batch: Any, cols: Columns, root: Path, where: str, first: int) -> None:
        """The tasks of ``batch`` (rows ``first``... of the file ``where``)."""
        img = batch.column(cols.image)
        if cols.struct:
            raw, paths = img.field("bytes").to_pylist(), img.field("path").to_pylist()
            valid = img.is_valid().to_pylist()
        else:
            raw, paths = img.to_pylist(), [None] * len(img)
            valid = [r is not None for r in raw]
        data = {n: batch.column(n).to_pylist() for n in cols.data}
        labels = {n: batch.column(n).to_pylist() for n in cols.labels}
        for i in range(batch.num_rows):
            row = f"{where} row {first + i}"
            blob, path = raw[i], paths[i]
            if not valid[i] or (blob is None and not path):
                raise UserError(f"{row}: no image (the {cols.image!r} value is empty) — drop "
                                f"such rows first (ds.filter(lambda r: r[{cols.image!r}] is "
                                "not None))")
            if blob is None:
                blob = path_bytes(root, path, row)
            name = Path(path).stem if path else "image"
            file = media_path(self.stage, self.out.count, name, image_ext(blob, path), row)
            write_media(file, blob)
            row_data = {n: v[i] for n, v in data.items()}
            results = []
            for n, values in labels.items():
                v = values[i]
                if v is None or v == -1:  # datasets' "no label"
                    continue
                names = cols.labels[n]
                if not 0 <= v < len(names):
                    raise UserError(f"{row}: {n} = {v} is not one of the {len(names)} "
                                    f"ClassLabel names — fix the row or the feature's names")
                row_data[n] = names[v]
                results.append(choice_result(names[v], n))
            self.out.add(image_task(self.out.count, f"media/{file.name}", results, row_data))
