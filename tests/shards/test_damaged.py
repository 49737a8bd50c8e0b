"""Damaged and hostile shard folders (issue 30, classes 3-5): every bad manifest, column file
or index gives a one-line error naming the file (never a traceback, a hang, garbage or an
allocation the data did not pay for), and `verify` finds it even in a copy whose manifest
was rehashed to match its changed files."""

from __future__ import annotations

import contextlib
import hashlib
import os
import resource
import shutil
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from npu_data.annotations.images import ImageOptions
from npu_data.cli import main
from npu_data.errors import DataCorruption, UserError
from npu_data.kinds.masks import unpack_mask
from npu_data.loaders import collate_samples
from npu_data.shards.reader import ShardDataset
from npu_data.shards.verify import verify_dataset
from npu_data.shards.writer import WriteOptions, write_dataset
from tests.support.exports import make_export

N = 6


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("damaged")
    export = make_export(tmp / "proj", n=N)
    out = {}
    for store in ("raw", "encoded"):
        out[store] = tmp / store
        write_dataset(export, out[store], WriteOptions(
            store=store, shard_size=3, images=ImageOptions(images_root=tmp / "proj")))
    return out


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _manifest(root: Path) -> dict[str, Any]:
    return dict(orjson.loads((root / "manifest.json").read_bytes()))


def _write_manifest(root: Path, m: dict[str, Any]) -> None:
    (root / "manifest.json").write_bytes(orjson.dumps(m))


def _rehash(root: Path) -> None:
    """Make the manifest agree with the files' sizes and digests (a self-consistent copy)."""
    m = _manifest(root)
    for sh in m["shards"]:
        for fname, meta in sh["files"].items():
            data = (root / sh["name"] / fname).read_bytes()
            meta["size"], meta["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    _write_manifest(root, m)


def _col(root: Path, name: str, shard: str = "shard-00000") -> np.ndarray:
    return np.load(root / shard / f"ann.{name}.npy")


def _save(root: Path, name: str, arr: np.ndarray, shard: str = "shard-00000") -> None:
    np.save(root / shard / (name if name.endswith(".npy") else f"ann.{name}.npy"), arr)


def _read_everything(ds: ShardDataset) -> None:
    for i in range(len(ds)):
        ds[i]
    collate_samples(ds.__getitems__(list(range(len(ds)))))


def _one_line(exc: BaseException, *words: str) -> None:
    text = str(exc)
    assert "\n" not in text and " — " in text, text
    for w in words:
        assert w in text, (w, text)


# ------------------------------------------------------------------------ the manifest
def _set(*path: Any, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(m: dict[str, Any]) -> None:
        d: Any = m
        for k in path[:-1]:
            d = d[k]
        if value is KeyError:
            del d[path[-1]]
        else:
            d[path[-1]] = value
    return edit


def _twice(m: dict[str, Any]) -> None:
    m["shards"].append(dict(m["shards"][0]))
    m["counts"]["samples"] += m["shards"][0]["samples"]
    m["counts"]["shards"] += 1


def _fewer(m: dict[str, Any]) -> None:  # a sample fewer than the index holds, totals agreeing
    m["shards"][0]["samples"] -= 1
    m["counts"]["samples"] -= 1


def _rename_file(old: str, new: str) -> Callable[[dict[str, Any]], None]:
    def edit(m: dict[str, Any]) -> None:
        files = m["shards"][0]["files"]
        files[new] = files.pop(old)
    return edit


def _many(*edits: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def edit(m: dict[str, Any]) -> None:
        for e in edits:
            e(m)
    return edit


DATA = ("shards", 0, "files", "data.bin")
MANIFEST_CASES = {
    "samples not an int": (_set("shards", 0, "samples", value="3"), "shards[0].samples"),
    "samples a bool": (_set("shards", 0, "samples", value=True), "shards[0].samples"),
    "labels missing": (_set("labels", value=KeyError), "labels is missing"),
    "controls not strings": (_set("controls", value=[1, 2]), "controls[0]"),
    "shard listed twice": (_twice, "listed twice"),
    "counts disagree": (_set("counts", "samples", value=N + 1), "counts.samples"),
    "samples vs index": (_many(_set("shards", 0, "samples", value=300),
                               _set("shards", 0, "tasks", value=[0, 300])),
                         "size of index.npy"),
    "samples under index": (_fewer, "size of index.npy"),
    "samples vs tasks": (_set("shards", 0, "samples", value=4), "more than its 3 tasks"),
    "files not an object": (_set("shards", 0, "files", value=[]), "shards[0].files"),
    "size negative": (_set(*DATA, "size", value=-1), "size"),
    "sha256 malformed": (_set(*DATA, "sha256", value="zz"), "sha256"),
    "data.bin unaligned": (_set(*DATA, "size", value=65), "multiple of 64"),
    "index missing": (_rename_file("index.npy", "ann.extra.npy"), "has no index.npy"),
    "unknown file": (_rename_file("ann.boxes.xywhr.npy", "notes.txt"), "not a file of a"),
    "column missing": (_rename_file("ann.boxes.xywhr.npy", "ann.zebras.npy"),
                       "has no ann.boxes.xywhr.npy"),
    "column spec": (_set("columns", "boxes.xywhr", value={"dtype": "<f8", "shape": [5]}),
                    "columns"),
    "tasks reversed": (_set("shards", 0, "tasks", value=[3, 0]), "shards[0].tasks"),
    "align": (_set("align", value=16), "align"),
    "store": (_set("store", value="zip"), "store"),
}


@pytest.mark.parametrize("case", list(MANIFEST_CASES))
def test_malformed_manifest_one_line(made: dict[str, Path], tmp_path: Path, case: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    edit, word = MANIFEST_CASES[case]
    root = _copy(made["raw"], tmp_path / "ds")
    m = _manifest(root)
    edit(m)
    _write_manifest(root, m)
    with pytest.raises(DataCorruption) as err:
        ShardDataset(root)
    _one_line(err.value, str(root / "manifest.json"), word)
    with pytest.raises(DataCorruption):
        verify_dataset(root)
    assert main(["verify", str(root)]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and word in lines[0]


def test_newer_or_foreign_manifest(made: dict[str, Path], tmp_path: Path) -> None:
    root = _copy(made["raw"], tmp_path / "ds")
    m = _manifest(root)
    _write_manifest(root, {**m, "version": 2})
    with pytest.raises(UserError, match="upgrade npu-data"):
        ShardDataset(root)
    _write_manifest(root, [1, 2])
    with pytest.raises(UserError, match="not an npu-data shard manifest"):
        ShardDataset(root)
    (root / "manifest.json").write_bytes(b"\xff{")
    with pytest.raises(DataCorruption, match="corrupt manifest"):
        ShardDataset(root)


# ------------------------------------------------------------------------- the columns
def _dtype(root: Path) -> str:
    _save(root, "boxes.xywhr", _col(root, "boxes.xywhr").astype(np.float64))
    return "ann.boxes.xywhr.npy: holds dtype float64"


def _shape(root: Path) -> str:
    xywhr = _col(root, "boxes.xywhr")
    _save(root, "boxes.xywhr", xywhr.reshape(-1, 3))  # the same bytes, read as garbage before
    return "ann.boxes.xywhr.npy: has shape"


def _decreasing(root: Path) -> str:
    off = _col(root, "boxes.offsets")
    off[1], off[2] = off[-1], 0  # in range, but sample 0 gets every row, sample 1 fewer than 0
    _save(root, "boxes.offsets", off)
    return "ann.boxes.offsets.npy: the offsets decrease"


def _past_the_end(root: Path) -> str:
    off = _col(root, "polygons.point_offsets")
    off[-1] = 1 << 29  # one bad offset: it used to allocate gigabytes before failing
    _save(root, "polygons.point_offsets", off)
    return "ann.polygons.point_offsets.npy: the offsets end at"


def _short_bits(root: Path) -> str:
    bits = _col(root, "masks.bits")
    _save(root, "masks.bits", bits[:-5])  # shorter than its offsets say
    return "ann.masks.bit_offsets.npy: the offsets end at"


def _short_masks(root: Path) -> str:
    bits, off = _col(root, "masks.bits"), _col(root, "masks.bit_offsets")
    keep = np.concatenate([bits[a:b - 3] for a, b in zip(off[:-1], off[1:], strict=True)])
    _save(root, "masks.bits", keep)  # consistent offsets, but fewer bits than the image
    _save(root, "masks.bit_offsets", np.concatenate([[0], np.cumsum(np.diff(off) - 3)]))
    return "bytes of bits, its"


def _text(root: Path) -> str:
    off = _col(root, "texts.text.offsets")
    off[-1] += 7
    _save(root, "texts.text.offsets", off)
    return "ann.texts.text.offsets.npy: the offsets end at"


def _appended(root: Path) -> str:
    with open(root / "shard-00000" / "ann.boxes.label.npy", "ab") as fh:
        fh.write(b"\0" * 16)
    return "ann.boxes.label.npy: has"


def _not_npy(root: Path) -> str:
    (root / "shard-00000" / "ann.boxes.label.npy").write_bytes(b"PK\x03\x04 a zip")
    return "ann.boxes.label.npy: not a readable .npy file"


def _fewer_rows(root: Path) -> str:
    m = _manifest(root)
    idx = np.load(root / "shard-00000" / "index.npy")
    np.save(root / "shard-00000" / "index.npy", idx[:2])  # manifest still says 3 samples
    _write_manifest(root, m)
    return "index.npy: holds 2 samples, the manifest says 3"


def _index_edit(words: str, **values: int) -> Callable[[Path], str]:
    def damage(root: Path) -> str:
        idx = np.load(root / "shard-00000" / "index.npy")
        for field, value in values.items():
            idx[1][field] = value
        np.save(root / "shard-00000" / "index.npy", idx)
        return words
    return damage


COLUMN_CASES: dict[str, Callable[[Path], str]] = {
    "wrong dtype": _dtype,
    "wrong shape": _shape,
    "decreasing offsets": _decreasing,
    "offset past the values": _past_the_end,
    "mask bits cut short": _short_bits,
    "masks smaller than the image": _short_masks,
    "text offsets": _text,
    "bytes after the array": _appended,
    "not an npy file": _not_npy,
    "huge claimed image": _index_edit("claims more than", height=60000, width=60000),
    "raw length": _index_edit("not height x width x 3", width=7),
    "payload past data.bin": _index_edit("runs past the end of data.bin", offset=1 << 40),
    "unaligned payload": _index_edit("alignment", offset=3),
    "two channels": _index_edit("other than 3 channels", channels=2),
    "unknown encoding": _index_edit("unknown encoding", encoding=9),
    "empty image": _index_edit("claims an empty image", height=0),
}



@contextlib.contextmanager
def _deadline(seconds: int) -> Iterator[None]:
    """Fail instead of hanging (a FIFO read blocks forever)."""
    def fail(signum: int, frame: Any) -> None:
        raise TimeoutError(f"hung for {seconds} s")
    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@pytest.mark.parametrize("case", list(COLUMN_CASES))
def test_damaged_shard_one_line_and_verify_finds_a_rehashed_copy(
        made: dict[str, Path], tmp_path: Path, case: str) -> None:
    root = _copy(made["raw"], tmp_path / "ds")
    words = COLUMN_CASES[case](root)
    before = _peak_rss()
    with _deadline(60):
        ds = ShardDataset(root)  # the manifest still describes the old files: sizes differ
        with pytest.raises(DataCorruption) as err:
            _read_everything(ds)
        _one_line(err.value, "shard-00000")
        _rehash(root)  # a self-consistent copy: the manifest agrees with every file's digest
        ds = ShardDataset(root)
        with pytest.raises(DataCorruption) as err:
            _read_everything(ds)
        _one_line(err.value, words, "verify")
        assert ds[3]["index"] == 3  # the other shard still reads
        problems = [str(p) for p in verify_dataset(root)]
    assert _peak_rss() - before < 256 << 20  # nothing the size of a claim was allocated
    assert problems and all(p.startswith("shard-00000") for p in problems), problems
    assert any(words in p for p in problems), (words, problems)


def test_index_shorter_than_its_samples_is_refused_when_opened(made: dict[str, Path],
                                                               tmp_path: Path) -> None:
    root = _copy(made["raw"], tmp_path / "ds")
    _fewer_rows(root)
    _rehash(root)  # sizes and digests agree with the files; samples (3) does not
    with pytest.raises(DataCorruption) as err:
        ShardDataset(root)
    _one_line(err.value, "shards[0].samples (3) disagrees with the size of index.npy")


def test_verify_cli_lists_a_rehashed_copy(made: dict[str, Path], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    root = _copy(made["raw"], tmp_path / "ds")
    _decreasing(root)
    _rehash(root)
    assert main(["verify", str(root)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "offsets decrease" in err and "problem(s)" in err


def test_fifo_and_links_out_never_hang_nor_escape(made: dict[str, Path],
                                                   tmp_path: Path) -> None:
    root = _copy(made["raw"], tmp_path / "ds")
    col = root / "shard-00000" / "ann.boxes.xywhr.npy"
    col.unlink()
    os.mkfifo(col)
    man = root / "manifest.json"
    with _deadline(30):
        with pytest.raises(DataCorruption) as err:
            _read_everything(ShardDataset(root))
        _one_line(err.value, "is a FIFO")
        assert any("FIFO" in str(p) for p in verify_dataset(root))
        assert main(["inspect", str(root)]) == 1
    col.unlink()
    secret = tmp_path / "outside.npy"
    shutil.copy(made["raw"] / "shard-00000" / "ann.boxes.xywhr.npy", secret)
    col.symlink_to(secret)  # a link out of the dataset: refused even with the right bytes
    with pytest.raises(DataCorruption, match="leads out of"):
        _read_everything(ShardDataset(root))
    assert any("leads out of" in str(p) for p in verify_dataset(root))
    shutil.copy(man, tmp_path / "m.json")
    man.unlink()
    man.symlink_to(tmp_path / "m.json")
    with pytest.raises(DataCorruption, match="leads out of"):
        ShardDataset(root)
    man.unlink()
    os.mkfifo(man)
    with _deadline(30), pytest.raises(DataCorruption, match="FIFO"):
        ShardDataset(root)


def test_encoded_header_checked_before_decoding(made: dict[str, Path], tmp_path: Path) -> None:
    root = _copy(made["encoded"], tmp_path / "ds")
    idx = np.load(root / "shard-00000" / "index.npy")
    idx[1]["height"] += 500  # still under the pixel cap: only the header can tell
    np.save(root / "shard-00000" / "index.npy", idx)
    _rehash(root)
    ds = ShardDataset(root)
    ds.image(0, 0)
    with pytest.raises(DataCorruption) as err:
        ds.image(0, 1)  # (the masks of sample 1, sized by the index, are refused too)
    _one_line(err.value, "its index says")
    with pytest.raises(DataCorruption):
        collate_samples(ds.__getitems__([0, 1]))


def test_pixel_cap_is_configurable(made: dict[str, Path]) -> None:
    ds = ShardDataset(made["raw"], max_pixels=100)  # every image here is larger
    with pytest.raises(DataCorruption, match="claims more than 100 pixels"):
        ds[0]
    assert ShardDataset(made["raw"], max_pixels=40 * 50)[0]["image"].shape[2] == 3
    with pytest.raises(UserError, match="max_pixels"):
        ShardDataset(made["raw"], max_pixels=0)


def test_masks_never_from_missing_bits() -> None:
    bits = np.packbits(np.ones(4 * 5, np.uint8))
    assert unpack_mask(bits, 4, 5).sum() == 20
    with pytest.raises(ValueError, match="needs 3 bytes"):
        unpack_mask(bits[:2], 4, 5)  # numpy would return uninitialised memory


def test_non_integer_indices_are_type_errors(made: dict[str, Path]) -> None:
    ds = ShardDataset(made["raw"])
    for bad in (1.5, "1", 1.0, np.float64(1), None):
        with pytest.raises(TypeError, match="integers"):
            ds[bad]  # type: ignore[index]
    with pytest.raises(TypeError, match="integers"):
        ds.__getitems__([0, 1.5])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="integers"):
        ds.__getitems__(np.array([0.0, 1.0])).columns()  # type: ignore[arg-type]
    assert ds[np.int64(2)]["index"] == ds[2]["index"] == 2
    assert ds[-1]["index"] == N - 1


SHRINK = r"""
import os, sys
from npu_data.errors import UserError
from npu_data.shards.reader import ShardDataset
ds = ShardDataset(sys.argv[1])
ds[0], ds[N_LAST]  # every file of the first shard mapped and read
target = sys.argv[2]
column = target.startswith("ann.")
if column:
    ds.shard(0).col(target[len("ann."):-len(".npy")])
os.truncate(os.path.join(sys.argv[1], "shard-00000", target), 64)
try:
    int(ds[N_LAST]["image"].sum())  # its bytes past the first page: gone from the map
    if column:
        ds.shard(0).col(target[len("ann."):-len(".npy")])[1:].sum()
except UserError as exc:
    print("error:", exc)
"""


@pytest.mark.slow
@pytest.mark.parametrize("target", ["data.bin", "ann.boxes.xyxy.npy"])
def test_a_file_shrunk_while_mapped_is_a_read_error_not_sigbus(
        made: dict[str, Path], tmp_path: Path, target: str) -> None:
    import subprocess
    import sys

    root = _copy(made["raw"], tmp_path / "ds")
    script = SHRINK.replace("N_LAST", "2")
    got = subprocess.run([sys.executable, "-c", script, str(root), target], text=True,
                         capture_output=True, timeout=300, cwd=Path(__file__).parents[2])
    assert got.returncode == 0, (got.returncode, got.stderr[-2000:])  # -7: SIGBUS
    line = got.stdout.strip()
    assert line.startswith("error: ") and "\n" not in line, got.stdout
    assert f"shard-00000/{target}: shrank to 64 bytes while it was open" in line
