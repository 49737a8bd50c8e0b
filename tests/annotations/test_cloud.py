"""Cloud storage images (issue 15.2): ``s3://`` references, Label Studio's storage links
(``/tasks/<id>/resolve/?fileuri=<base64>``, older ``/presign/``), presigned URLs (also in the
double-encoded ``%252F`` form Label Studio writes) read through s3fs against moto's standalone
S3 server on 127.0.0.1 with fake credentials from the environment, in parallel, verified and
cached per user; the credentials never appear in output, errors, manifests or rejected.jsonl.
gs:// and azure-blob:// map to gcsfs / adlfs (a one-line error when they are missing)."""

from __future__ import annotations

import base64
import io
import json
import os
import stat
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit, urlunsplit

import numpy as np
import pytest
from PIL import Image

from npu_data.annotations import ImageError, ImageOptions, cloud, resolve_image
from npu_data.errors import UserError

KEY_ID = "AKIAFAKEKEYID7Q2W9XZ"
SECRET = "fakeSecret/9f8e7d6c5b4a+Zz0123456789abcdEFGH"


def _png(color: tuple[int, int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (5, 4), color).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    import moto.server as server_mod  # the dev extra: a real S3-compatible server
    import s3fs  # noqa: F401  # what users read s3:// through

    srv = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    srv.start()
    host, port = srv.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        srv.stop()


@pytest.fixture()
def s3(moto_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """A fresh bucket; the user's (fake) credentials in the environment, as a user sets them."""
    import boto3

    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                 "AWS_DEFAULT_PROFILE", "NPU_DATA_S3_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("NPU_DATA_CACHE", str(tmp_path / "user-cache"))
    cloud._FS.clear()
    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    bucket = f"imgs-{uuid.uuid4().hex[:10]}"
    client.create_bucket(Bucket=bucket)
    return SimpleNamespace(endpoint=moto_endpoint, client=client, bucket=bucket)


def _b64(uri: str) -> str:
    return base64.urlsafe_b64encode(uri.encode()).decode()


def _double_encoded(url: str) -> str:
    """What Label Studio makes of a presigned URL: every escape escaped again."""
    p = urlsplit(url)
    return urlunsplit((p.scheme, p.netloc, p.path.replace("%", "%25"),
                       p.query.replace("%", "%25"), ""))


def _assert_no_secrets(*texts: str) -> None:
    for text in texts:
        assert KEY_ID not in text and SECRET not in text
        assert quote(SECRET, safe="") not in text


COLORS = [(250, 10, 10), (10, 250, 10), (10, 10, 250), (200, 200, 20), (20, 200, 200),
          (200, 20, 200), (90, 90, 90)]


def _put_images(s3: SimpleNamespace) -> list[str]:
    keys = ["photos/img0.png", "photos/my café 1.png", "photos/img2.png", "photos/img3.png",
            "photos/sub/img4.png", "photos/100% done.png", "photos/img6.png"]
    for key, color in zip(keys, COLORS, strict=True):
        s3.client.put_object(Bucket=s3.bucket, Key=key, Body=_png(color))
    return keys


def test_import_reads_every_cloud_form_in_parallel(
        s3: SimpleNamespace, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from npu_data.cli import main
    from npu_data.shards.reader import ShardDataset

    b = s3.bucket
    keys = _put_images(s3)
    presigned = [s3.client.generate_presigned_url("get_object", Params={"Bucket": b, "Key": k},
                                                  ExpiresIn=60) for k in keys]
    assert KEY_ID in presigned[4]  # a presigned URL names the signer's key id
    refs = [f"s3://{b}/{keys[0]}",
            f"s3://{b}/{keys[1]}",                                            # raw unicode key
            f"/tasks/3/resolve/?fileuri={_b64(f's3://{b}/{keys[2]}')}",       # no HOSTNAME
            f"http://ls.example.com:8080/tasks/4/presign/?fileuri="           # older server:
            f"{quote(f's3://{b}/{keys[3]}', safe='')}",                        # URL-quoted uri
            presigned[4],                                                      # path-style
            _double_encoded(presigned[5]),                                     # %2525 in key
            f"https://ls.example.com/projects/9/resolve/?fileuri={_b64(f's3://{b}/{keys[6]}')}",
            f"s3://{b}/photos/missing.png",
            _double_encoded(s3.client.generate_presigned_url(
                "get_object", Params={"Bucket": b, "Key": "photos/gone.png"}))]
    tasks = [{"id": i + 1, "data": {"image": r}, "annotations": []} for i, r in enumerate(refs)]
    export = tmp_path / "export.json"
    export.write_text(json.dumps(tasks, ensure_ascii=False))

    threads: set[str] = set()
    real_read = cloud.read

    def read(*a: Any, **kw: Any) -> Path:
        threads.add(threading.current_thread().name)
        time.sleep(0.05)
        return real_read(*a, **kw)

    monkeypatch.setattr(cloud, "read", read)
    t0 = time.perf_counter()
    rc = main(["import", str(export), "--out", str(tmp_path / "ds"), "--storage-endpoint",
               s3.endpoint, "--download-workers", "4", "--max-rejected", "2"])
    took = time.perf_counter() - t0
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "imported 7 of 9 tasks" in out
    assert len(threads) > 1 and all(t.startswith("npu-data-fetch") for t in threads), threads
    ds = ShardDataset(tmp_path / "ds")
    got = [ds[i]["image"][0, 0].tolist() for i in range(len(ds))]
    assert got == [list(c) for c in COLORS]
    rejected = (tmp_path / "ds" / "rejected.jsonl").read_text()
    rows = [json.loads(x) for x in rejected.splitlines()]
    assert [r["task_id"] for r in rows] == [8, 9]
    assert all("no such object" in r["reason"] and "--storage-endpoint" in r["reason"]
               for r in rows)
    assert "REDACTED" in rows[1]["reason"]
    manifest = (tmp_path / "ds" / "manifest.json").read_text()
    cache = tmp_path / "user-cache" / "downloads"
    records = "".join(p.read_text() for p in cache.glob("*.json"))
    _assert_no_secrets(out, err, rejected, manifest, records)
    # the shards' image_ref / data_json hold the references redacted: no key id, no signature
    stored = b"".join(p.read_bytes() for p in (tmp_path / "ds").rglob("*") if p.is_file())
    sigs = [v[0] for u in presigned for k, v in parse_qs(urlsplit(u).query).items()
            if "signature" in k.lower()]
    assert len(sigs) == len(presigned) and KEY_ID.encode() not in stored
    assert not any(sig.encode() in stored for sig in sigs)
    assert b"/tasks/3/resolve/?fileuri=REDACTED" in stored
    assert f"{s3.endpoint}/{b}/photos/sub/img4.png?".encode() in stored  # which object it was
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    assert len(list(cache.glob("*.json"))) == 7
    print(f"7 cloud images imported in {took:.2f} s")


def test_cache_is_verified_and_follows_the_bucket(s3: SimpleNamespace, tmp_path: Path) -> None:
    b = s3.bucket
    s3.client.put_object(Bucket=b, Key="a.png", Body=_png((1, 2, 3)))
    s3.client.put_object(Bucket=b, Key="b.png", Body=_png((4, 5, 6)))
    opts = ImageOptions(storage_endpoint=s3.endpoint)
    pa, pb = resolve_image(f"s3://{b}/a.png", opts), resolve_image(f"s3://{b}/b.png", opts)
    assert pa.parent == tmp_path / "user-cache" / "downloads"
    meta = json.loads(pa.with_name(pa.name + ".json").read_text())
    assert meta["etag"] and meta["source_size"] == pa.stat().st_size == meta["size"]
    before = pb.stat().st_mtime_ns
    pa.write_bytes(b"\0" * pa.stat().st_size)  # tampered with
    time.sleep(0.01)
    assert resolve_image(f"s3://{b}/a.png", opts) == pa
    assert np.asarray(Image.open(pa))[0, 0].tolist() == [1, 2, 3]  # fetched again
    assert resolve_image(f"s3://{b}/b.png", opts) == pb and pb.stat().st_mtime_ns == before
    s3.client.put_object(Bucket=b, Key="b.png", Body=_png((7, 8, 9)))  # changed in the bucket
    resolve_image(f"s3://{b}/b.png", opts)
    assert np.asarray(Image.open(pb))[0, 0].tolist() == [7, 8, 9]
    small = ImageOptions(storage_endpoint=s3.endpoint, max_download_bytes=10)
    with pytest.raises(ImageError, match="larger than the download cap"):
        resolve_image(f"s3://{b}/a.png", small)


def test_errors_carry_no_credentials(s3: SimpleNamespace, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    opts = ImageOptions(storage_endpoint=dead, timeout=2)
    url = s3.client.generate_presigned_url("get_object", Params={"Bucket": s3.bucket, "Key": "x"})
    for ref in (f"s3://{s3.bucket}/x.png", url.replace(s3.endpoint, dead)):
        with pytest.raises(ImageError, match="cannot read it from S3") as e:
            resolve_image(ref, opts)
        assert "\n" not in e.value.reason and "storage_endpoint=" in e.value.reason
        _assert_no_secrets(e.value.reason, str(e.value))
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    cloud._FS.clear()
    with pytest.raises(ImageError, match="credentials"):
        resolve_image(f"s3://{s3.bucket}/x.png", ImageOptions(storage_endpoint=s3.endpoint))
    with pytest.raises(UserError, match="credentials do not belong in the URL"):
        ImageOptions(storage_endpoint=f"http://{KEY_ID}:{SECRET}@127.0.0.1:9000")


def test_import_workers_and_presigned_without_credentials(
        s3: SimpleNamespace, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from npu_data.cli import main
    from npu_data.shards.reader import ShardDataset

    keys = _put_images(s3)
    resolve_image(f"s3://{s3.bucket}/{keys[0]}", ImageOptions(storage_endpoint=s3.endpoint))
    export = tmp_path / "e.json"  # forked shard workers each open their own filesystem
    export.write_text(json.dumps([{"id": i, "data": {"image": f"s3://{s3.bucket}/{k}"}}
                                  for i, k in enumerate(keys)]))
    assert main(["import", str(export), "--out", str(tmp_path / "ds"), "--storage-endpoint",
                 s3.endpoint, "--workers", "2", "--shard-size", "3"]) == 0
    ds = ShardDataset(tmp_path / "ds")
    assert [ds[i]["image"][0, 0].tolist() for i in range(len(ds))] == [list(c) for c in COLORS]
    capsys.readouterr()
    url = s3.client.generate_presigned_url("get_object", Params={"Bucket": s3.bucket,
                                                                 "Key": keys[2]})
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    cloud._FS.clear()
    no_creds = ImageOptions(storage_endpoint=s3.endpoint)
    with pytest.raises(ImageError, match="NoCredentialsError"):
        resolve_image(url, no_creds)
    # without credentials, a presigned URL is still a download from a host the user names
    host = urlsplit(s3.endpoint).netloc
    p = resolve_image(url, ImageOptions(storage_endpoint=s3.endpoint, allow_download=host))
    assert np.asarray(Image.open(p))[0, 0].tolist() == list(COLORS[2])


# --- parsing, no network ----------------------------------------------------------------------

def test_reference_forms() -> None:
    o = ImageOptions()
    sig = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=K%2F1&X-Amz-Signature=ab"
    assert cloud.parse(f"https://my-bucket.s3.eu-central-1.amazonaws.com/a/b%20c.jpg?{sig}",
                       o) == cloud.CloudObject("s3", "my-bucket", ("a/b c.jpg",))
    assert cloud.parse("https://s3.amazonaws.com/bkt/k%2Fx.png?AWSAccessKeyId=K&Signature=s",
                       o) == cloud.CloudObject("s3", "bkt", ("k/x.png",))
    assert cloud.parse("https://s3.amazonaws.com/bkt/a%252Fb%2520c.png?Signature=%252Fs", o) == (
        cloud.CloudObject("s3", "bkt", ("a/b c.png", "a%2Fb%20c.png")))
    obs = ImageOptions(storage_endpoint="https://obs.cn-north-4.myhuaweicloud.com")
    assert cloud.parse(f"https://data.obs.cn-north-4.myhuaweicloud.com/x/y.jpg?{sig}",
                       obs) == cloud.CloudObject("s3", "data", ("x/y.jpg",))
    assert cloud.parse("https://storage.googleapis.com/gb/p/q.jpg?X-Goog-Signature=z", o) == (
        cloud.CloudObject("gcs", "gb", ("p/q.jpg",)))
    assert cloud.parse("https://acct1.blob.core.windows.net/cont/d/e.jpg?sv=2020&sig=z", o) == (
        cloud.CloudObject("abfs", "cont", ("d/e.jpg",), account="acct1"))
    std = base64.b64encode("s3://b/ü?>>.png".encode()).decode()  # standard base64: '+', '/'
    assert "+" in std or "/" in std
    assert cloud.parse(f"/tasks/1/resolve/?fileuri={std}", o) == cloud.CloudObject(
        "s3", "b", ("ü?>>.png",))
    assert cloud.parse(f"/tasks/2/resolve?fileuri={_b64('gs://g/k.jpg')}", o) == (
        cloud.CloudObject("gcs", "g", ("k.jpg",)))
    assert cloud.parse(f"/tasks/2/resolve/?fileuri={_b64('azure-blob://c/k.jpg')}", o) == (
        cloud.CloudObject("abfs", "c", ("k.jpg",)))
    with pytest.raises(ImageError, match="not cloud storage"):
        cloud.parse(f"/tasks/1/resolve/?fileuri={_b64('http://evil/x')}", o)
    with pytest.raises(ImageError, match="without \\?fileuri"):
        cloud.parse("/tasks/1/resolve/", o)
    with pytest.raises(ImageError, match="expected s3://<bucket>/<key>"):
        cloud.parse("s3://bucket-only", o)
    assert cloud.parse("https://cdn.example.com/a.jpg", o) is None  # a plain download
    assert cloud.parse("https://cdn.example.com/a.jpg?Signature=x", o) is None


def test_gcs_and_azure_need_their_packages(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(cloud.importlib.util, "find_spec",
                        lambda name, *a: None if name in ("gcsfs", "adlfs") else real(name, *a))
    cloud._FS.clear()
    opts = ImageOptions(cache_dir=tmp_path / "c")
    for ref, pkg in (("gs://bucket/a.jpg", "gcsfs"), ("azure-blob://cont/a.jpg", "adlfs"),
                     (f"/tasks/1/resolve/?fileuri={_b64('gs://b/k.jpg')}", "gcsfs")):
        with pytest.raises(ImageError, match=f"needs {pkg} — pip install {pkg}$") as e:
            resolve_image(ref, opts)
        assert "\n" not in e.value.reason
