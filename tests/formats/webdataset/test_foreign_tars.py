"""WebDataset tars npu-data did not write (img2dataset's layout, written with
``webdataset.TarWriter``) imported into shards: every sample present, pixels equal to Pillow's
decode, captions byte-equal and class labels equal to what ``webdataset`` itself reads; keys as
webdataset groups them; npu-data's own tars told apart by content; bad samples refused in one
line naming the tar and the sample."""

from __future__ import annotations

import functools
import http.server
import io
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
import webdataset as wds
from PIL import Image

from npu_data.cli import main
from npu_data.errors import UserError
from npu_data.formats.sources import SourceOptions, convert, detect
from npu_data.formats.webdataset.foreign import is_own_tar
from npu_data.formats.webdataset.reader import TarAccess, wds_to_table
from npu_data.shards.importer import import_dataset
from npu_data.shards.reader import ShardDataset
from npu_data.tools.sample_data import make_sample_project
from tests.support.local_http import serving

CAPTIONS = ["a dog on a beach", "  spaced  ", "ünïcödé — 犬 🐶", "two\nlines", "tab\t\"q\""]


def _encoded(rng: np.random.Generator, ext: str, h: int, w: int) -> bytes:
    buf = io.BytesIO()
    fmt = {"jpg": "JPEG", "png": "PNG", "webp": "WEBP"}[ext]
    Image.fromarray(rng.integers(0, 256, (h, w, 3), np.uint8)).save(buf, fmt)
    return buf.getvalue()


def _img2dataset(path: Path, shard: int, n: int, cls: bool = False) -> Path:
    """A tar as img2dataset writes it (KEY.jpg + KEY.txt + KEY.json, 9-digit keys)."""
    rng = np.random.default_rng(shard)
    with wds.TarWriter(str(path)) as sink:
        for i in range(n):
            key = f"{shard:05d}{i:04d}"
            ext = ("jpg", "png", "webp")[i % 3]
            h, w = 10 + i, 12 + 2 * i
            caption = CAPTIONS[i % len(CAPTIONS)]
            sample: dict[str, Any] = {
                "__key__": key, ext: _encoded(rng, ext, h, w), "txt": caption,
                "json": {"url": f"https://example.com/{key}.{ext}", "key": key,
                         "status": "success", "width": w, "height": h, "caption": caption,
                         "error_message": None}}
            if cls:
                sample["cls"] = (i * 5) % 7
            sink.write(sample)
    return path


def _webdataset(tars: list[Path]) -> list[dict[str, Any]]:
    """The samples as webdataset itself reads them (text, JSON and cls decoded)."""
    return list(wds.WebDataset([str(t) for t in tars], shardshuffle=False).decode())


def _import(tars: list[str], tmp: Path, **kw: Any) -> ShardDataset:
    stage = tmp / "stage"
    stage.mkdir(parents=True)
    conv = convert("webdataset", tars, stage, SourceOptions(**kw))
    import_dataset(conv.export, tmp / "ds", images_root=conv.images_root,
                   config=str(conv.config) if conv.config else None)
    return ShardDataset(tmp / "ds")


def _by_task(ds: ShardDataset) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(sample, task data) in task order."""
    order = sorted(range(len(ds)), key=lambda i: int(ds[i]["task_id"]))
    out = []
    for i in order:
        k, j = ds.locate(i)
        out.append((ds[i], orjson.loads(ds.shard(k).data_json(j))))
    return out


def _image_of(ref: dict[str, Any]) -> np.ndarray:
    data = next(ref[e] for e in ("jpg", "png", "webp") if e in ref)
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def test_img2dataset_tars_import_every_sample(tmp_path: Path) -> None:
    tars = [_img2dataset(tmp_path / f"{s:05d}.tar", s, 11) for s in range(2)]
    assert detect([str(t) for t in tars]) == "webdataset"
    assert not any(is_own_tar(str(t)) for t in tars)
    ds = _import([str(t) for t in tars], tmp_path)
    ref = _webdataset(tars)
    got = _by_task(ds)
    assert len(got) == len(ref) == 22
    for (s, data), r in zip(got, ref, strict=True):
        np.testing.assert_array_equal(s["image"], _image_of(r))
        assert s["caption"].encode() == r["txt"].encode()
        assert data["caption"] == r["txt"] and data["key"] == r["__key__"]
        assert {k: data[k] for k in r["json"]} == r["json"]  # every json key, as it was
    assert "label" not in ds.labels  # no cls: no class control


def test_class_labels_are_webdatasets_integers(tmp_path: Path) -> None:
    tar = _img2dataset(tmp_path / "00000.tar", 0, 9, cls=True)
    ds = _import([str(tmp_path)], tmp_path)  # a folder of tars
    ref = _webdataset([tar])
    assert ds.labels["label"] == [str(i) for i in range(7)]
    for (s, data), r in zip(_by_task(ds), ref, strict=True):
        assert s["choices.label"].tolist() == [r["cls"]]
        assert data["label"] == str(r["cls"])


def _tar(path: Path, members: list[tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_keys_are_webdatasets(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    png, jpg = _encoded(rng, "png", 6, 8), _encoded(rng, "jpg", 9, 5)
    tar = _tar(tmp_path / "keys.tar", [
        ("README", b"no dot: no sample's member"),
        ("x.y/c.JPG", jpg), ("x.y/c.txt", b"dot in the folder"),  # ext lower-cased
        ("d/a.jpg", jpg), ("d/a.seg.png", png), ("d/a.txt", b"first dot splits"),
        ("e.png", png), ("e.cls", b"3\n")])
    ref = _webdataset([tar])
    stage = tmp_path / "stage"
    conv = convert("webdataset", [str(tar)], stage, SourceOptions())
    assert any("1 .seg.png" in n for n in conv.notes)  # counted, not silently dropped
    import_dataset(conv.export, tmp_path / "ds", images_root=conv.images_root,
                   config=str(conv.config))
    got = _by_task(ShardDataset(tmp_path / "ds"))
    assert [d["key"] for _, d in got] == [r["__key__"] for r in ref] == ["x.y/c", "d/a", "e"]
    for (s, d), r in zip(got, ref, strict=True):
        np.testing.assert_array_equal(s["image"], _image_of(r))
        assert d.get("caption") == r.get("txt")
    assert got[2][0]["choices.label"].tolist() == [ref[2]["cls"]] == [3]


@pytest.fixture(scope="module")
def own_tar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("own-wds")
    proj = make_sample_project(tmp / "proj", n_images=3, width=64, height=48)
    assert main(["import", str(proj.export_path), "--out", str(tmp / "ds"), "--store",
                 "encoded", "--images-root", str(proj.root)]) == 0
    assert main(["export-wds", str(tmp / "ds"), "--out", str(tmp / "own-%03d.tar")]) == 0
    return tmp / "own-000.tar"


def test_own_tars_told_apart_by_content(tmp_path: Path, own_tar: Path) -> None:
    foreign = _img2dataset(tmp_path / "f.tar", 0, 3)
    renamed = tmp_path / "not-named-own.tar"
    renamed.write_bytes(own_tar.read_bytes())
    assert is_own_tar(str(own_tar)) and is_own_tar(str(renamed))
    assert not is_own_tar(str(foreign))
    assert wds_to_table([str(renamed)], tmp_path / "media").num_samples == 3  # the own path reads it
    with pytest.raises(UserError, match=r"not-named-own.tar: written by npu-data") as err:
        convert("webdataset", [str(foreign), str(renamed)], tmp_path / "s", SourceOptions())
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("members", "words"), [
    ([("k1.txt", b"caption only"), ("k1.json", b"{}")], "sample k1: no image member"),
    ([("k2.png", b"\x89PNG"), ("k2.txt", b"caf\xe9")], "sample k2: its txt is not UTF-8"),
    ([("k3.png", b"\x89PNG"), ("k3.cls", b"cat")], "sample k3: its cls b'cat' is not an"),
    ([("k4.png", b"\x89PNG"), ("k4.json", b"{nope")], "sample k4: its json is not JSON"),
    ([("k5.png", b"\x89PNG"), ("k6.png", b"\x89PNG"), ("k5.txt", b"x")], "sample k5 appears "
                                                                         "twice"),
])
def test_bad_samples_are_refused_in_one_line(tmp_path: Path, members: list[tuple[str, bytes]],
                                             words: str) -> None:
    tar = _tar(tmp_path / "bad.tar", members)
    with pytest.raises(UserError) as err:
        convert("webdataset", [str(tar)], tmp_path / "s", SourceOptions())
    assert words in str(err.value) and "bad.tar" in str(err.value)
    assert "\n" not in str(err.value) and not (tmp_path / "s" / "export.json").exists()


def test_tar_limits_apply(tmp_path: Path) -> None:
    tar = _img2dataset(tmp_path / "00000.tar", 0, 3)
    access = TarAccess(max_member_bytes=200)
    with pytest.raises(UserError, match="raise max_member_bytes"):
        convert("webdataset", [str(tar)], tmp_path / "s", SourceOptions(tar_access=access))


def test_http_tars_only_from_allowed_hosts(tmp_path: Path) -> None:
    tar = _img2dataset(tmp_path / "00000.tar", 0, 4)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *a, **k: None  # type: ignore[attr-defined]
    with serving(handler) as port:
        url = f"http://127.0.0.1:{port}/00000.tar"
        with pytest.raises(UserError, match="allow_download"):
            convert("webdataset", [url], tmp_path / "s", SourceOptions())
        assert not is_own_tar(url, TarAccess(allow_download="127.0.0.1"))
        ds = _import([url], tmp_path / "remote",
                     tar_access=TarAccess(allow_download="127.0.0.1"))
    got = _by_task(ds)
    for (s, d), r in zip(got, _webdataset([tar]), strict=True):
        np.testing.assert_array_equal(s["image"], _image_of(r))
        assert d["key"] == r["__key__"]
    assert len(got) == 4
