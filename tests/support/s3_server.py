"""The S3 server of the remote tests: moto's standalone server on 127.0.0.1, reached through
s3fs as a user would, with a dataset uploaded to s3://BUCKET/ds (the session fixture ``s3`` of
tests/conftest.py serves it once for every folder: moto keeps its buckets per process)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

N = 9  # shard_size 3: three shards (each ~100 files: every column is a file)
KEY = "AKIAFAKEKEY0123456789"
SECRET = "fAkEsEcReT/0123456789abcdefghijklmnopqrst"
BUCKET = "npu-data-test"


def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The server, a local dataset and its copy uploaded to s3://BUCKET/ds (via s3fs)."""
    import moto.server as moto_server  # the dev extra: a real S3-compatible server
    import s3fs  # what users read s3:// through

    from npu_data.annotations.images import ImageOptions
    from npu_data.shards.reader import ShardDataset
    from npu_data.shards.writer import WriteOptions, write_dataset
    from tests.support.exports import make_export

    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    with pytest.MonkeyPatch.context() as mpatch:
        for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
            mpatch.delenv(var, raising=False)
        mpatch.setenv("AWS_ACCESS_KEY_ID", KEY)
        mpatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
        mpatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        mpatch.setenv("NPU_DATA_S3_ENDPOINT", endpoint)
        tmp = tmp_path_factory.mktemp("remote")
        export = make_export(tmp / "proj", n=N)
        local = tmp / "local"
        write_dataset(export, local, WriteOptions(images=ImageOptions(images_root=tmp / "proj"),
                                                  shard_size=3))
        fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": endpoint}, skip_instance_cache=True)
        fs.mkdir(BUCKET)
        fs.put(str(local) + "/", f"{BUCKET}/ds", recursive=True)
        try:
            yield {"endpoint": endpoint, "local": ShardDataset(local), "fs": fs,
                   "url": f"s3://{BUCKET}/ds"}
        finally:
            server.stop()
