"""The WebDataset format package: pixel coordinates end to end (the streamed sample equals
the shard's bit for bit), version-1 tars still read, the manifest, bad JSON named, and which
tar URLs may be read (allowed hosts, size cap, redirects, pipe: only when opted in)."""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from npu_data.cli import main
from npu_data.errors import UserError
from npu_data.formats.webdataset import iter_tar_samples, wds_to_table
from npu_data.formats.webdataset.mapping import ENUMS
from npu_data.formats.webdataset.stream import WebDatasetStream
from npu_data.formats.webdataset.writer import manifest_path
from npu_data.kinds.registry import KINDS
from npu_data.shards.reader import ShardDataset
from npu_data.transforms import RandomResizedCrop
from tests.support.compare import same_sample
from tests.support.local_http import serving
from tests.support.stores import import_sample


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    tmp = tmp_path_factory.mktemp("wds_fmt")
    ds = import_sample(tmp, "encoded")
    pattern = str(tmp / "tars" / "part-%06d.tar")
    assert main(["export-wds", str(ds), "--out", pattern, "--maxcount", "4"]) == 0
    return ds, sorted(str(p) for p in (tmp / "tars").glob("part-*.tar"))


def _members(path: str) -> list[tuple[str, bytes]]:
    with tarfile.open(path) as t:
        return [(m.name, t.extractfile(m).read()) for m in t.getmembers()]  # type: ignore[union-attr]


def _write_tar(path: Path, members: list[tuple[str, bytes]]) -> None:
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))


def test_streamed_samples_are_the_shard_samples_bit_for_bit(
        exported: tuple[Path, list[str]]) -> None:
    ds_dir, tars = exported
    ref = ShardDataset(ds_dir)
    got = list(WebDatasetStream(tars, rank=0, world_size=1))
    assert sorted(s["index"] for s in got) == list(range(len(ref)))
    boxes = 0
    for s in got:
        r = ref[s["index"]]
        assert set(s) == set(r)
        for k, v in r.items():
            if isinstance(v, np.ndarray):  # every column, derived corners/envelope included
                assert s[k].dtype == v.dtype and s[k].shape == v.shape, k
                assert s[k].tobytes() == v.tobytes(), k
            else:
                assert s[k] == v, k
        boxes += len(r["boxes.xywhr"])
    assert boxes > 0


def test_json_holds_pixel_coordinates(exported: tuple[Path, list[str]]) -> None:
    ds_dir, tars = exported
    ref = ShardDataset(ds_dir)
    seen = set()
    for name, data in _members(tars[0]):
        if not name.endswith(".json"):
            continue
        ann = orjson.loads(data)
        r = ref[ann["index"]]
        assert ann["version"] == 2 and (ann["height"], ann["width"]) == r["image"].shape[:2]
        for group, col in [(k.name, c) for k in KINDS for c in k.pixel]:
            key = f"{group}.{col}"
            if group in ann:  # the float32 pixels of the shard, as JSON numbers
                seen.add(key)
                got = np.array(ann[group][col], np.float32).reshape(r[key].shape)
                assert got.tobytes() == r[key].tobytes(), key
    assert {"boxes.xywhr", "boxes.corners", "polygons.points", "keypoints.xy"} <= seen


def _v1_json(s: dict[str, Any], controls: list[str], labels: dict[str, list[str]],
             extra: dict[str, Any]) -> bytes:
    """The JSON tars were written with before version 2: one dict per row, names."""
    h, w = s["image"].shape[:2]
    out: dict[str, Any] = {"task_id": int(s["task_id"]), "index": int(s["index"]),
                           "width": int(w), "height": int(h), "controls": controls,
                           "labels": labels, "caption": s["caption"], **extra}
    for kind in KINDS:
        group, fixed = kind.name, kind.fixed
        n = len(s[f"{group}.control"])
        rows: list[dict[str, Any]] = [{} for _ in range(n)]
        for name in fixed:
            if group == "masks" and name in ("height", "width"):
                continue
            for j in range(n):
                v = s[f"{group}.{name}"][j]
                c = int(s[f"{group}.control"][j])
                if name == "control":
                    rows[j][name] = controls[c] if c >= 0 else None
                elif name == "label":
                    rows[j][name] = labels[controls[c]][int(v)] if int(v) >= 0 else None
                elif name in ENUMS:
                    rows[j][name] = ENUMS[name][int(v)]
                else:
                    a = np.asarray(v, np.float64 if np.asarray(v).dtype.kind == "f" else None)
                    rows[j][name] = None if a.ndim == 0 and np.isnan(a) else a.tolist()
        for name in kind.text:
            key = f"{group}.{name}"
            for j, t in enumerate(s[key]):
                rows[j][name] = orjson.loads(t) if name in kind.json_text else t
        if group == "polygons":
            pts, off = s["polygons.points"], s["polygons.point_offsets"]
            for j in range(n):
                rows[j]["points"] = pts[off[j]:off[j + 1]].astype(np.float64).tolist()
        if group == "masks":
            for j in range(n):
                rows[j]["bits"] = base64.b64encode(
                    np.packbits(s["masks.mask"][j].reshape(-1)).tobytes()).decode()
        out[group] = rows
    return orjson.dumps(out, option=orjson.OPT_SORT_KEYS)


def test_version_1_tars_still_read(exported: tuple[Path, list[str]], tmp_path: Path) -> None:
    ds_dir, tars = exported
    ref = ShardDataset(ds_dir)
    old = []
    for k, path in enumerate(tars):
        members = []
        for name, data in _members(path):
            if name.endswith(".json"):
                ann = orjson.loads(data)
                extra = {x: ann[x] for x in ("image_ext", "image_ref", "data")}
                data = _v1_json(ref[ann["index"]], ref.controls, ref.labels, extra)
                assert b'"version"' not in data
            members.append((name, data))
        old.append(tmp_path / f"v1-{k}.tar")
        _write_tar(old[-1], members)
    for s in WebDatasetStream([str(p) for p in old], rank=0, world_size=1):
        r = ref[s["index"]]
        # all groups (version 1 names no kinds); derived boxes recomputed as before
        same_sample({k: r.get(k, s[k]) for k in s}, s)
    table = wds_to_table([str(p) for p in old], tmp_path / "media")
    assert table.controls == ref.controls and table.labels == ref.labels
    assert table.num_samples == len(ref)


def test_manifest_lists_the_tars(exported: tuple[Path, list[str]]) -> None:
    ds_dir, tars = exported
    man = orjson.loads(manifest_path(str(Path(tars[0]).parent / "part-%06d.tar")).read_bytes())
    assert man["format"] == "npu-data-webdataset" and man["version"] == 2
    assert [t["name"] for t in man["tars"]] == [Path(t).name for t in tars]
    assert sum(t["samples"] for t in man["tars"]) == man["samples"] == len(ShardDataset(ds_dir))
    for entry, path in zip(man["tars"], tars, strict=True):
        body = Path(path).read_bytes()
        assert entry["bytes"] == len(body) and entry["sha256"] == hashlib.sha256(body).hexdigest()
    assert not list(Path(tars[0]).parent.glob(".*part"))  # no temporary file left


def test_bad_annotations_name_the_sample(exported: tuple[Path, list[str]], tmp_path: Path) -> None:
    _, tars = exported
    members = _members(tars[0])
    name, data = next((n, d) for n, d in members if n.endswith(".json"))
    ann = orjson.loads(data)
    ann["boxes"]["label"] = ann["boxes"]["label"][:-1]  # a column one row short
    bad = tmp_path / "bad.tar"
    _write_tar(bad, [(n, orjson.dumps(ann) if n == name else d) for n, d in members])
    key = name.split(".")[0]
    with pytest.raises(UserError, match=f"bad.tar: sample {key}: annotations unreadable"):
        list(WebDatasetStream([str(bad)], rank=0, world_size=1))
    with pytest.raises(UserError, match=f"sample {key}: annotations unreadable"):
        wds_to_table([str(bad)], tmp_path / "media")
    ann["version"] = 9
    _write_tar(bad, [(n, orjson.dumps(ann) if n == name else d) for n, d in members])
    with pytest.raises(UserError, match="upgrade npu-data"):
        list(WebDatasetStream([str(bad)], rank=0, world_size=1))
    ann = orjson.loads(data)
    ann["width"] += 1  # annotations for another size than the image's
    ann.pop("masks", None)
    _write_tar(bad, [(n, orjson.dumps(ann) if n == name else d) for n, d in members])
    with pytest.raises(UserError, match=f"sample {key}: the image is 72x96 pixels but its "
                                        "annotations are for 72x97"):
        list(WebDatasetStream([str(bad)], rank=0, world_size=1))
    _write_tar(bad, [(n, b"not an image" if n == f"{key}.jpg" else d) for n, d in members])
    for read_crop in (False, True):  # decoded whole, or only its header read
        from npu_data.loaders import DataLoader

        with pytest.raises(UserError, match=f"sample {key}: the image does not decode"):
            list(DataLoader(WebDatasetStream([str(bad)], rank=0, world_size=1), batch_size=2,
                            device="cpu", transform=RandomResizedCrop(16), read_crop=read_crop))


# ------------------------------------------------------------------------------ tar URLs
@pytest.fixture()
def server(exported: tuple[Path, list[str]]) -> Iterator[tuple[str, int]]:
    """A local server on 127.0.0.1: /<tar> (sized), /unsized/<tar> (no Content-Length),
    /to-other/<tar> (redirects to localhost, a host not named)."""
    root = Path(exported[1][0]).parent

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            port = self.server.server_address[1]
            parts = self.path.strip("/").split("/")
            if parts[0] == "to-other":
                self.send_response(302)
                self.send_header("Location", f"http://localhost:{port}/{parts[-1]}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = (root / parts[-1]).read_bytes()
            self.send_response(200)
            if parts[0] != "unsized":
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except OSError:
                pass
            if parts[0] == "unsized":
                self.close_connection = True

    with serving(Handler) as port:
        yield "127.0.0.1", port


def _keys(urls: list[str], **kw: Any) -> list[str]:
    return [str(s["index"]) for s in WebDatasetStream(urls, rank=0, world_size=1, **kw)]


def test_remote_tars_only_from_named_hosts(exported: tuple[Path, list[str]],
                                           server: tuple[str, int]) -> None:
    _, tars = exported
    host, port = server
    url = f"http://{host}:{port}/{Path(tars[0]).name}"
    with pytest.raises(UserError, match=r"allow_download=\['127.0.0.1'\]"):
        _keys([url])
    with pytest.raises(UserError, match="not one that allow_download names"):
        _keys([url], allow_download="example.com")
    with pytest.raises(UserError, match="not one that allow_download names"):
        _keys(["s3://some-bucket/a.tar"], allow_download="other-bucket")
    with pytest.raises(UserError, match="redirects to host localhost"):
        _keys([f"http://{host}:{port}/to-other/{Path(tars[0]).name}"], allow_download=host)
    with pytest.raises(UserError, match="name a host"):
        _keys([url], allow_download="http://127.0.0.1/")
    local = _keys(tars[:1])
    assert _keys([url], allow_download=f"{host}:{port}") == local
    assert _keys([f"http://{host}:{port}/unsized/{Path(tars[0]).name}"],
                 allow_download=host) == local


def test_remote_tars_are_capped(exported: tuple[Path, list[str]], server: tuple[str, int]
                                ) -> None:
    _, tars = exported
    host, port = server
    size = Path(tars[0]).stat().st_size
    for path in ("", "unsized/"):  # refused from the length, or the read stops past the cap
        with pytest.raises(UserError, match="cap"):
            _keys([f"http://{host}:{port}/{path}{Path(tars[0]).name}"], allow_download=host,
                  max_download_bytes=size // 2)
    with pytest.raises(UserError, match="max_download_bytes 0"):
        _keys(tars, max_download_bytes=0)
    with pytest.raises(UserError, match="timeout -1"):
        _keys(tars, timeout=-1)


def test_pipe_urls_only_when_opted_in(exported: tuple[Path, list[str]], tmp_path: Path) -> None:
    _, tars = exported
    marker = tmp_path / "ran"
    url = f"pipe:touch {marker} && cat {tars[0]}"
    with pytest.raises(UserError, match="allow_pipe=True"):
        _keys([url])
    assert not marker.exists()  # refused before anything ran
    assert _keys([url], allow_pipe=True) == _keys(tars[:1]) and marker.exists()
    with pytest.raises(UserError, match="exited with status 3"):
        _keys([f"pipe:cat {tars[0]}; exit 3"], allow_pipe=True)
    with pytest.raises(UserError, match="cap"):
        _keys([f"pipe:cat {tars[0]}"], allow_pipe=True, max_download_bytes=4096)


def test_a_stream_left_early_stops_its_download(exported: tuple[Path, list[str]],
                                                server: tuple[str, int]) -> None:
    _, tars = exported
    host, port = server
    it = iter_tar_samples(f"http://{host}:{port}/unsized/{Path(tars[0]).name}",
                          WebDatasetStream(tars, allow_download=host).access)
    first = next(it)
    it.close()  # closes the spool; its thread stops at its next write
    assert first.key == _members(tars[0])[0][0].split(".")[0]


def test_s3_tars_from_a_named_bucket(exported: tuple[Path, list[str]],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import moto.server as moto_server
    import s3fs

    _, tars = exported
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAFAKEFAKEFAKE")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fAkEsEcReT")
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        monkeypatch.setenv("NPU_DATA_S3_ENDPOINT", f"http://{host}:{port}")
        fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": f"http://{host}:{port}"},
                               skip_instance_cache=True)
        fs.mkdir("tars-bucket")
        fs.put(tars[0], "tars-bucket/a.tar")
        url = "s3://tars-bucket/a.tar"
        assert _keys([url], allow_download="tars-bucket") == _keys(tars[:1])
        with pytest.raises(UserError, match="larger than the cap"):
            _keys([url], allow_download="tars-bucket", max_download_bytes=1000)
        with pytest.raises(UserError, match="cannot open"):
            _keys(["s3://tars-bucket/missing.tar"], allow_download="tars-bucket")
    finally:
        server.stop()


def test_import_maps_label_ids_of_tars_with_other_label_maps(
        exported: tuple[Path, list[str]], tmp_path: Path) -> None:
    """Tars whose samples list labels and controls in another order (another export): the
    table maps every id onto the union, so each row keeps its label and control names."""
    _, tars = exported

    def names(table: Any) -> list[tuple[str, str | None]]:
        out = []
        for group in [k.name for k in KINDS if "label" in k.fixed]:
            for c, v in zip(table.columns[f"{group}.control"].tolist(),
                            table.columns[f"{group}.label"].tolist(), strict=True):
                out.append((table.controls[c], table.label_name(c, v)))
        return out

    members = []
    for name, data in _members(tars[1]):
        if name.endswith(".json"):
            ann = orjson.loads(data)
            old_controls, old_labels = ann["controls"], ann["labels"]
            controls = old_controls[::-1]
            labels = {c: old_labels[c][::-1] for c in old_labels}
            for group in [k.name for k in KINDS]:
                g = ann.get(group)
                if not g:
                    continue
                if "label" in g:
                    g["label"] = [-1 if v < 0 else labels[old_controls[c]].index(
                        old_labels[old_controls[c]][v]) for c, v in zip(g["control"], g["label"],
                                                                       strict=True)]
                g["control"] = [-1 if c < 0 else controls.index(old_controls[c])
                                for c in g["control"]]
            assert controls != old_controls and labels != old_labels
            ann["controls"], ann["labels"] = controls, labels
            data = orjson.dumps(ann)
        members.append((name, data))
    other = tmp_path / "other.tar"
    _write_tar(other, members)
    want = wds_to_table([tars[0], tars[1]], tmp_path / "m1")
    got = wds_to_table([tars[0], str(other)], tmp_path / "m2")
    assert names(got) == names(want) and len(names(want)) > 10


def test_cli_imports_remote_tars_only_from_named_hosts(
        exported: tuple[Path, list[str]], server: tuple[str, int], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    _, tars = exported
    host, port = server
    urls = [f"http://{host}:{port}/{Path(t).name}" for t in tars]
    assert main(["import", *urls, "--out", str(tmp_path / "refused")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "127.0.0.1" in err[0] and "Traceback" not in err[0]
    assert main(["import", *tars, "--out", str(tmp_path / "local")]) == 0
    assert main(["import", *urls, "--out", str(tmp_path / "remote"),
                 "--allow-download", f"{host}:{port}"]) == 0
    local, remote = ShardDataset(tmp_path / "local"), ShardDataset(tmp_path / "remote")
    assert len(remote) == len(local) > 0
    for i in range(len(local)):
        same_sample(remote[i], local[i])
