"""``npu-data export-wds``: write a dataset folder as WebDataset tar shards."""

from __future__ import annotations

import argparse
import sys

from npu_data.formats.webdataset.writer import export_wds, manifest_path

NAME = "export-wds"
HELP = ("Write a dataset folder as WebDataset tars (image + JSON annotations per sample, "
        "pixel coordinates; docs/format.md) and their manifest.")
FLAGS = {"pattern": "--out"}  # export_wds's keyword for the tar name pattern


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dataset", metavar="DIR", help="dataset folder written by import")
    parser.add_argument("--out", required=True, metavar="PATTERN",
                        help="tar name pattern with a shard number, e.g. 'wds/train-%%06d.tar'")
    parser.add_argument("--maxcount", type=int, default=10000, help="samples per tar")
    parser.add_argument("--maxsize", type=int, default=1 << 30, help="bytes per tar")


def run(args: argparse.Namespace) -> int:
    paths = export_wds(args.dataset, args.out, args.maxcount, args.maxsize)
    print(f"wrote {len(paths)} tars: {paths[0] if paths else '-'} ... and "
          f"{manifest_path(args.out)}", file=sys.stderr)
    return 0
