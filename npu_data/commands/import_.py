"""``npu-data import``: a Label Studio export -> verified memory-mapped shards."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from npu_data.annotations.table import AnnotationTable
from npu_data.errors import UserError, UserValueError
from npu_data.shards.distributed_import import Group, import_group, leave
from npu_data.shards.format import REJECTED
from npu_data.shards.images import IMPORT_MAX_PIXELS
from npu_data.shards.importer import import_dataset, import_options
from npu_data.shards.storage import is_url

NAME = "import"
HELP = "Import a Label Studio export (JSON) and its images into memory-mapped shards."
# import options whose flag is not --<keyword with dashes> (npu_data.errors spells them)
FLAGS = {"max_download_bytes": "--max-download-mb", "timeout": "--download-timeout",
         "restart_markers": "--keep-jpeg-bytes", "restart_markers=False": "--keep-jpeg-bytes"}
MiB = 1 << 20


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``npu-data import``."""
    p.add_argument("export", metavar="EXPORT", nargs="+",
                   help="Label Studio JSON / JSON_MIN export file, or WebDataset .tar shards "
                        "(local paths or http(s) URLs, e.g. from `npu-data export-wds`)")
    p.add_argument("--out", required=True, metavar="DIR|URL",
                   help="dataset folder to write, or an fsspec URL (s3://bucket/prefix; "
                        "endpoint from NPU_DATA_S3_ENDPOINT): written in a staging folder "
                        "under the cache, then uploaded, manifest last (--resume finishes an "
                        "interrupted upload). Under torchrun the ranks split the shards")
    p.add_argument("--store", choices=("raw", "encoded"), default="raw",
                   help="raw: decoded HWC RGB pixels (fastest to read); encoded: the original "
                        "file bytes (smallest) (default: raw)")
    p.add_argument("--max-side", type=int, metavar="N",
                   help="shrink images so the longest side is at most N (Pillow BILINEAR); "
                        "annotations follow")
    p.add_argument("--alpha", choices=("white", "drop"), default="white",
                   help="transparent pixels: white = composited over white, as Label Studio "
                        "shows them; drop = Pillow's convert('RGB'), as diffusers' and kohya's "
                        "trainers load images (default: white)")
    p.add_argument("--max-pixels", type=int, default=IMPORT_MAX_PIXELS, metavar="N",
                   help="reject an image of more than N pixels, from its header before it is "
                        f"decoded (default: {IMPORT_MAX_PIXELS:,}, Pillow's warning threshold)")
    p.add_argument("--reencode", metavar="jpeg:Q",
                   help="with --store encoded: re-encode as JPEG of quality Q")
    p.add_argument("--keep-jpeg-bytes", action="store_true",
                   help="with --store encoded: store JPEG files byte for byte (default: "
                        "re-encoded losslessly with restart markers — the same pixels, "
                        "usually a little smaller — so a crop decodes only its region)")
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="processes writing shards in parallel (default: 1)")
    p.add_argument("--shard-size", type=int, default=1024, metavar="N",
                   help="input tasks per shard (default: 1024)")
    p.add_argument("--resume", action="store_true",
                   help="keep complete shards already in DIR and write the rest")
    p.add_argument("--strict", action="store_true",
                   help="stop at the first bad task (exit 1) instead of rejecting it")
    p.add_argument("--annotations", choices=("default", "latest", "ground-truth", "all"),
                   default="default",
                   help="which annotations of a task to keep: default = latest ground truth, "
                        "else latest; cancelled ones never count")
    p.add_argument("--with-predictions", action="store_true",
                   help="also keep model predictions (source = 1)")
    p.add_argument("--config", metavar="label_config.xml",
                   help="labeling config: fixes each control's label list and order")
    p.add_argument("--images-root", metavar="P", help="folder for relative/absolute image paths")
    p.add_argument("--ls-data-dir", metavar="P",
                   help="Label Studio data dir (for /data/upload/... references)")
    p.add_argument("--local-files-root", metavar="P",
                   help="LOCAL_FILES_DOCUMENT_ROOT (for /data/local-files/?d=... references)")
    p.add_argument("--allow-download", metavar="HOST[,HOST...]", action="append", nargs="?",
                   const="",
                   help="download http(s) images from these hosts only (host, host:port or "
                        "*.example.com; repeatable), cached in ~/.cache/npu-data/downloads")
    p.add_argument("--storage-endpoint", metavar="URL",
                   help="S3-compatible endpoint for s3:// and presigned images and for an "
                        "s3:// --out (MinIO, Huawei OBS, ...); credentials come from the "
                        "environment or AWS_PROFILE")
    p.add_argument("--download-workers", type=int, default=8, metavar="N",
                   help="downloads / cloud reads in flight at once (default: 8)")
    p.add_argument("--max-download-mb", type=float, default=64, metavar="N",
                   help="refuse a downloaded image larger than N MiB (default: 64)")
    p.add_argument("--download-timeout", type=float, default=30, metavar="S",
                   help="seconds to wait for a connect or a read of a download "
                        "(default: 30; a whole transfer gets 10x that)")
    p.add_argument("--max-tar-member-mb", type=float, default=256, metavar="N",
                   help="with WebDataset tars: refuse a tar with a member (or a sample's "
                        "members together) over N MiB, before reading it (default: 256)")
    p.add_argument("--reject-out-of-range", action="store_true",
                   help="reject tasks with coordinates outside 0-100%% instead of clipping")


def _is_tar(source: str) -> bool:
    return source.split("?", 1)[0].endswith(".tar")


def _anchor(args: argparse.Namespace) -> tuple[str, list[str]]:
    """(the path that anchors relative image paths, the WebDataset tars: none for a Label
    Studio export)."""
    sources: list[str] = list(args.export)
    tars = [s for s in sources if _is_tar(s)]
    if not tars:
        if len(sources) != 1:
            raise UserError(f"import takes one Label Studio export, got {len(sources)}: "
                            "pass a single JSON file (or WebDataset .tar shards only)")
        return sources[0], []
    if len(tars) != len(sources):
        raise UserError("import takes either one Label Studio export or WebDataset .tar shards, "
                        "not both: run two imports into separate folders")
    out = Path(args.out)
    return str(out.parent / f"{out.name}.wds-media"), tars  # unpacked images, kept for resume


def _tar_table(args: argparse.Namespace, media: str, tars: list[str]) -> AnnotationTable:
    """The tars' samples as a table, their images unpacked into ``media``; http(s)/s3 tars
    only from the ``--allow-download`` hosts (buckets), as images."""
    from npu_data.formats.webdataset.reader import TarAccess, wds_to_table

    access = TarAccess(allow_download=args.allow_download or (), timeout=args.download_timeout,
                       max_member_bytes=max(1, int(args.max_tar_member_mb * MiB)))
    return wds_to_table(tars, Path(media), access)


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """The import options (``shards.importer``) of the command line."""
    mb = args.max_download_mb  # checked there as max_download_bytes, shown as this flag
    return {"store": args.store, "max_side": args.max_side, "max_pixels": args.max_pixels,
            "reencode": args.reencode, "alpha": args.alpha,
            "restart_markers": not args.keep_jpeg_bytes, "workers": args.workers,
            "shard_size": args.shard_size, "resume": args.resume, "strict": args.strict,
            "annotations": args.annotations, "with_predictions": args.with_predictions,
            "config": args.config, "reject_out_of_range": args.reject_out_of_range,
            "images_root": args.images_root, "ls_data_dir": args.ls_data_dir,
            "local_files_root": args.local_files_root, "allow_download": args.allow_download,
            "storage_endpoint": args.storage_endpoint, "timeout": args.download_timeout,
            "download_workers": args.download_workers,
            "max_download_bytes": max(1, int(mb * MiB)) if mb > 0 else mb}


def run(args: argparse.Namespace) -> int:
    """Run the import and print a summary; under torchrun the ranks split the shards
    (``shards.distributed_import``), ``--out URL`` uploads the result (``shards.upload``)."""
    group = import_group()
    target = None
    failed = True
    try:
        if is_url(args.out):
            from npu_data.shards.storage import endpoint_options
            from npu_data.shards.upload import UrlTarget

            target = UrlTarget(args.out, args.resume, group,
                               endpoint_options(args.storage_endpoint))
        rc = _run(args, group, target)
        failed = rc != 0
        return rc
    finally:
        if target is not None:
            target.close()  # the URL's lease and the staging lock
        leave(group, failed)


def _run(args: argparse.Namespace, group: Group, target: Any) -> int:
    if target is not None:
        args = target.local_args(args)  # --out: the staging folder
        group = replace(group, shared=False)  # one staging folder per node
    options = _options(args)
    anchor, tars = _anchor(args)
    import_options(anchor, **options)  # every option checked before a tar is read
    if args.max_tar_member_mb <= 0:
        raise UserValueError(f"{{max_tar_member_mb={args.max_tar_member_mb:g}}}: must be "
                             "positive", option="max_tar_member_mb")
    source = _tar_table(args, anchor, tars) if tars else anchor
    s = import_dataset(source, args.out, anchor=anchor, group=group, **options)
    where, rejected_at = str(s.out_dir), str(s.rejected_path)
    if target is not None:
        up = target.upload(s.shards)
        where, rejected_at = target.url, f"{target.url}/{REJECTED}"
    if group.rank != 0:
        return 0
    if target is not None:
        there = f", {up.skipped} already there" if up.skipped else ""
        print(f"uploaded {up.files} files ({up.bytes / 1e6:.1f} MB) to {target.url}{there}, "
              "manifest last")
    resumed = f" ({s.resumed_shards} kept from an earlier run)" if s.resumed_shards else ""
    print(f"imported {s.samples} of {s.tasks} tasks into {where} "
          f"({s.shards} shards{resumed}, {s.bytes / 1e6:.1f} MB, store {args.store})")
    if s.rejected:
        print(f"rejected {s.rejected} tasks: reasons in {rejected_at}", file=sys.stdout)
    else:
        print("rejected 0 tasks")
    return 0
