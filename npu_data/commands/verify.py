"""``npu-data verify``: check every file and every sample of a shard folder or its URL."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from npu_data.errors import DataCorruption
from npu_data.shards.latent_format import root_files
from npu_data.shards.remote import RemoteStore
from npu_data.shards.storage import add_remote_arguments, endpoint_options, is_url
from npu_data.shards.verify import Problem, verify_dataset

NAME = "verify"
HELP = ("Check the manifest, every file's size, sha256 and structure, and every sample's "
        "crc32 against it.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``npu-data verify``."""
    p.add_argument("dataset", metavar="DIR|URL",
                   help="folder written by `npu-data import`, or its URL (s3://bucket/prefix: "
                        "every shard is downloaded into the node-local cache and checked)")
    add_remote_arguments(p)


def remote_problems(url: str, cache_dir: str | None = None,
                    endpoint: str | None = None) -> tuple[str, list[Problem]]:
    """(cache folder, problems) of the dataset at ``url``: each shard fetched through the
    cache (a remote file that differs from the manifest is a problem), then the cached copy
    checked sample by sample."""
    store = RemoteStore(url, cache_dir, storage_options=endpoint_options(endpoint))
    problems: list[Problem] = []
    for fname in root_files(store.manifest):  # a latents store's empty prompt
        try:
            store.fetch_root(fname)
        except DataCorruption as exc:
            problems.append(Problem(".", str(exc)))
    for k, shard in enumerate(store.manifest["shards"]):
        try:
            store.fetch(k, lambda folder: None)
        except DataCorruption as exc:
            problems.append(Problem(shard["name"], str(exc)))
    bad = {p.shard for p in problems}
    problems += [p for p in verify_dataset(store.root) if p.shard not in bad]
    return str(store.root), problems


def run(args: argparse.Namespace) -> int:
    """Exit 0 when intact, 1 listing each problem (shard, sample, task)."""
    if is_url(args.dataset):
        local, problems = remote_problems(args.dataset, args.cache_dir, args.storage_endpoint)
        fix = "upload the dataset folder again (manifest.json last)"
    else:
        problems = verify_dataset(args.dataset)
        local = args.dataset
        fix = "import the dataset again (or --resume after deleting the broken shard folders)"
    if not problems and _samples(local) == 0:
        print(f"error: {args.dataset}: the dataset holds 0 samples — every task was rejected "
              "(see its rejected.jsonl); import it again with the fix", file=sys.stderr)
        return 1
    if not problems:
        print(f"{args.dataset}: ok")
        return 0
    for p in problems:
        print(f"error: {args.dataset.rstrip('/')}/{p}", file=sys.stderr)
    print(f"{len(problems)} problem(s) — {fix}", file=sys.stderr)
    return 1


def _samples(folder: str) -> int | None:
    """The samples the manifest in ``folder`` counts (None when it says nothing)."""
    import orjson

    from npu_data.shards.format import MANIFEST

    try:
        counts = orjson.loads((Path(folder) / MANIFEST).read_bytes()).get("counts", {})
    except (OSError, orjson.JSONDecodeError, AttributeError):
        return None
    n = counts.get("samples") if isinstance(counts, dict) else None
    return n if isinstance(n, int) else None
