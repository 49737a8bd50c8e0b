"""Remote feed rate (issue 16.6): a dataset on a loopback S3 server (moto, through s3fs) read
by ``world`` simulated nodes (one rank each, its own cache folder), cold and warm cache, with
and without the locality sampler; bytes downloaded per node.

Run: ``npu-data bench remote [--quick] [--n 1024] [--shard-size 32] [--world 2] [--window 2]``.
The loopback server answers in ~ms per object, so the figures show the cost of the cache
and of the shards a node touches, not a real network's; the download bytes carry over.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

os.environ.setdefault("NPU_DATA_QUIET", "1")


def _cached_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.glob("shard-*/*") if p.is_file())


def _epoch(ds: Any, sampler: Any, batch_size: int, epoch: int) -> tuple[int, float]:
    import torch

    from npu_data.loaders import collate_samples

    sampler.set_epoch(epoch)
    loader = torch.utils.data.DataLoader(ds, batch_size=batch_size, sampler=sampler,
                                         collate_fn=collate_samples)
    t, n = time.perf_counter(), 0
    for batch in loader:
        n += int(batch["image"].shape[0])
    return n, time.perf_counter() - t


def _node_rows(url: str, cache: Path, world: int, window: int | None,
               batch_size: int) -> list[dict[str, Any]]:
    """Every node's cold epoch 0, then its warm epoch 1 (same cache folder)."""
    from npu_data.loaders import NpuDistributedSampler
    from npu_data.shards.reader import ShardDataset

    rows = []
    for rank in range(world):
        folder = cache / f"node{rank}"
        ds = ShardDataset(url, cache_dir=folder)
        sampler = NpuDistributedSampler(ds, world, rank, seed=0, shard_window=window)
        for state, epoch in (("cold", 0), ("warm", 1)):
            before = _cached_bytes(ds.path)
            n, dt = _epoch(ds, sampler, batch_size, epoch)
            rows.append({"locality": f"window {window}" if window else "off", "cache": state,
                         "rank": rank, "images": n, "seconds": dt,
                         "downloaded": _cached_bytes(ds.path) - before})
        assert ds._remote is not None
        ds._remote.wait_prefetch()
    return rows


def main(argv: list[str] | None = None) -> int:
    """Print one line per (locality, cache state): images/s and MB downloaded per node."""
    ap = argparse.ArgumentParser(prog="npu-data bench remote")
    ap.add_argument("--quick", action="store_true", help="32 small images, 4 shards (seconds)")
    ap.add_argument("--n", type=int, help="images (default 1024; --quick: 32)")
    ap.add_argument("--shard-size", type=int, help="default 32 (--quick: 8)")
    ap.add_argument("--world", type=int, default=2, help="nodes, one rank each (default 2)")
    ap.add_argument("--window", type=int, default=2, help="shard_window (default 2)")
    ap.add_argument("--batch-size", type=int, default=16, help="default %(default)s")
    args = ap.parse_args(argv)
    n, shard_size, size = (32, 8, (128, 96)) if args.quick else (1024, 32, (500, 375))
    n, shard_size = args.n or n, args.shard_size or shard_size
    if min(n, shard_size, args.world, args.window, args.batch_size) < 1 or (
            args.n is not None and args.n < 1) or (args.shard_size is not None
                                                     and args.shard_size < 1):
        ap.error("--n, --shard-size, --world, --window and --batch-size must be at least 1")
    try:
        import moto.server as moto_server
        import s3fs
    except ImportError as exc:
        from npu_data.errors import UserError

        raise UserError(f"bench remote needs moto and s3fs ({exc.name} is missing) — pip "
                        "install 'npu-data[dev]'") from None
    from npu_data.annotations.images import ImageOptions
    from npu_data.shards.writer import WriteOptions, write_dataset
    from npu_data.tools.sample_data import make_bench_images

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server: no line per request
    tmp = Path(tempfile.mkdtemp(prefix="npu-remote-bench-"))
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                            "AWS_DEFAULT_REGION", "NPU_DATA_S3_ENDPOINT")}
    try:
        proj = make_bench_images(tmp / "proj", n=n, width=size[0], height=size[1])
        write_dataset(proj.export_path, tmp / "ds", WriteOptions(
            images=ImageOptions(images_root=proj.export_path.parent), shard_size=shard_size))
        server.start()
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                           "AWS_DEFAULT_REGION": "us-east-1", "NPU_DATA_S3_ENDPOINT": endpoint})
        fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": endpoint}, skip_instance_cache=True)
        bucket = f"npu-bench-{uuid.uuid4().hex[:12]}"  # moto's buckets live per process
        fs.mkdir(bucket)
        fs.put(str(tmp / "ds") + "/", f"{bucket}/ds", recursive=True)
        manifest = json.loads((tmp / "ds" / "manifest.json").read_bytes())
        total = sum(int(f["size"]) for sh in manifest["shards"] for f in sh["files"].values())
        print(f"remote bench: {n} images {size[0]}x{size[1]} raw, {-(-n // shard_size)} shards "
              f"of {shard_size}, {total / 1e6:.1f} MB, {args.world} nodes (one rank each), "
              f"loopback moto server")
        for window in (None, args.window):
            rows = _node_rows(f"s3://{bucket}/ds", tmp / f"cache-{window}", args.world, window,
                              args.batch_size)
            for state in ("cold", "warm"):
                mine = [r for r in rows if r["cache"] == state]
                rate = sum(r["images"] for r in mine) / max(sum(r["seconds"] for r in mine),
                                                            1e-9)
                per_node = sum(r["downloaded"] for r in mine) / len(mine)
                print(f"  locality {mine[0]['locality']:<9} {state} cache  {rate:8.1f} img/s "
                      f"per node  downloaded {per_node / 1e6:7.2f} MB per node "
                      f"({100 * per_node / max(total, 1):5.1f}% of the dataset)")
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
