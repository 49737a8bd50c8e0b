"""``npu-data pull``: download a project's export (and images) from a Label Studio server."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from npu_data.annotations.pull import TOKEN_ENV, PullOptions, pull, read_token
from npu_data.errors import UserError, flags, spelled_as

NAME = "pull"
HELP = "Download a Label Studio project's export, labeling config and uploads."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", required=True, help="server URL, e.g. http://localhost:8080")
    parser.add_argument("--project", type=int, required=True, help="project id")
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--token-file", help=f"file holding the API token (default: ${TOKEN_ENV})")
    parser.add_argument("--token", dest="token_on_cli", help=argparse.SUPPRESS)
    parser.add_argument("--snapshot", action="store_true",
                        help="use the export snapshot API (create, wait, download)")
    parser.add_argument("--with-predictions", action="store_true",
                        help="include full prediction objects (implies --snapshot)")
    parser.add_argument("--download-resources", action="store_true",
                        help="fetch uploaded images into OUT/media (use with --ls-data-dir OUT)")
    parser.add_argument("--workers", type=int, default=8, help="parallel media downloads")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds to wait for a snapshot")
    parser.add_argument("--import", dest="import_args", nargs=argparse.REMAINDER, default=None,
                        metavar="IMPORT_OPTIONS",
                        help="then import into OUT/shards; everything after --import is "
                             "passed to `npu-data import` (must come last)")


def run_import(export: Path, out: Path, extra: list[str]) -> int:
    """Run ``npu-data import`` on a pulled folder with ``extra`` options."""
    try:
        import_ = importlib.import_module("npu_data.commands.import_")
    except ModuleNotFoundError as exc:
        if exc.name != "npu_data.commands.import_":
            raise
        raise UserError(f"{export}: pulled, but `npu-data import` is not available in this "
                        "install — run the import separately") from None
    parser = argparse.ArgumentParser(prog="npu-data import")
    import_.add_arguments(parser)
    known = set(parser._option_string_actions)
    argv = [str(export)]
    defaults = {"--out": str(out / "shards"), "--ls-data-dir": str(out),
                "--config": str(out / "label_config.xml")}
    for flag, value in defaults.items():
        if flag in known and flag not in extra:
            argv += [flag, value]
    ns = parser.parse_args(argv + extra)
    with spelled_as(flags(getattr(import_, "FLAGS", {}))):  # its errors name import's flags
        return int(import_.run(ns) or 0)


def run(args: argparse.Namespace) -> int:
    if args.token_on_cli is not None:
        raise UserError("--token: tokens are not taken on the command line (shell history, "
                        f"ps) — put it in a file for --token-file or set {TOKEN_ENV}")
    if args.project < 1:
        raise UserError(f"--project {args.project}: project ids start at 1 — see the URL "
                        "of the project in Label Studio")
    opts = PullOptions(url=args.url, project=args.project, out=args.out,
                       token=read_token(args.token_file), snapshot=args.snapshot,
                       with_predictions=args.with_predictions,
                       download_resources=args.download_resources, workers=args.workers,
                       timeout=args.timeout)
    res = pull(opts)
    line = f"pulled {res.num_tasks} tasks of project {args.project} into {res.export_path}"
    if args.download_resources:
        line += f"; media: {res.downloaded} downloaded, {res.skipped} already present"
    print(line, file=sys.stderr)
    if args.import_args is not None:
        return run_import(res.export_path, Path(args.out), list(args.import_args))
    return 0
