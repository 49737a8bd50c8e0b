"""``npu-data verify``: check every file and every sample of a shard folder."""

from __future__ import annotations

import argparse
import sys

from npu_data.shards.verify import verify_dataset

NAME = "verify"
HELP = "Check every file's size and sha256 and every sample's crc32 against the manifest."


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``npu-data verify``."""
    p.add_argument("dataset", metavar="DIR", help="folder written by `npu-data import`")


def run(args: argparse.Namespace) -> int:
    """Exit 0 when intact, 1 listing each problem (shard, sample, task)."""
    problems = verify_dataset(args.dataset)
    if not problems:
        print(f"{args.dataset}: ok")
        return 0
    for p in problems:
        print(f"error: {args.dataset}/{p}", file=sys.stderr)
    print(f"{len(problems)} problem(s) — import the dataset again (or --resume after "
          "deleting the broken shard folders)", file=sys.stderr)
    return 1
