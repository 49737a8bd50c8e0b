"""``npu-data import``: a Label Studio export, a dataset folder (ImageFolder, kohya, Hugging
Face), parquet, WebDataset tars or COCO -> verified memory-mapped shards.

Every source but Label Studio JSON and npu-data's own tars is first written as a Label Studio
export beside the output (``<out>.source/``, ``formats.sources``), so all take one path. An
import that imported nothing, or rejected more tasks than ``--max-rejected`` allows, exits 1
with the count and the commonest reasons (``shards.rejections``)."""

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
from npu_data.shards.image_payload import IMPORT_MAX_PIXELS
from npu_data.shards.importer import import_dataset, import_options
from npu_data.shards.storage import is_url

NAME = "import"
HELP = ("Import a Label Studio export, an ImageFolder, a kohya or Hugging Face folder, parquet, "
        "WebDataset tars or COCO JSON into memory-mapped shards.")
# import options whose flag is not --<keyword with dashes> (npu_data.errors spells them)
FLAGS = {"max_download_bytes": "--max-download-mb", "timeout": "--download-timeout",
         "restart_markers": "--keep-jpeg-bytes", "restart_markers=False": "--keep-jpeg-bytes"}
MiB = 1 << 20


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``npu-data import``."""
    p.add_argument("export", metavar="SRC", nargs="+",
                   help="what to import: a Label Studio JSON / JSON_MIN export; a folder "
                        "(torchvision ImageFolder, kohya <repeats>_<name>/ caption folders, a "
                        "Hugging Face imagefolder with metadata.jsonl/.csv, a save_to_disk "
                        "folder, a folder of parquet files); parquet files; WebDataset .tar "
                        "shards (npu-data's or img2dataset's; paths or http(s)/s3 URLs); or a "
                        "COCO instances/keypoints JSON. The format is detected; --format "
                        "forces one")
    p.add_argument("--format", metavar="NAME", dest="source_format",
                   help="read SRC as: labelstudio, imagefolder, kohya, hf-imagefolder, "
                        "hf-parquet, hf-disk, webdataset, coco (default: detected)")
    p.add_argument("--caption-extension", metavar=".EXT",
                   help="kohya folders: the caption files' extension (default: .txt, then "
                        ".caption)")
    p.add_argument("--max-rejected", default="0", metavar="N|P%",
                   help="exit 1 when more tasks than this are rejected (a count, or a "
                        "percentage of the tasks; default: 0). The shards written are kept")
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
    from npu_data.formats.sources import is_tar

    return is_tar(source)


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


def _max_rejected(text: str, option: str = "max_rejected") -> tuple[float, bool]:
    """(the limit, whether it is a percentage) of ``--max-rejected N|P%``."""
    t = str(text).strip()
    pct = t.endswith("%")
    try:
        value = float(t[:-1] if pct else t)
    except ValueError:
        value = -1.0
    if not value >= 0 or (pct and value > 100) or (not pct and value != int(value)):
        raise UserValueError(f"{{max_rejected={text}}}: use a count (0, 10) or a percentage "
                             "of the tasks (5%)", option=option)
    return value, pct


def _stage(args: argparse.Namespace) -> Path:
    """Where a converted source's export (and unpacked images) go: beside ``--out``."""
    out = Path(args.out)
    return out.parent / f"{out.name}.source"


def _check_roots(args: argparse.Namespace, roots: list[tuple[Path, bool]]) -> None:
    """Refuse an ``--out`` inside (or, for ``inside=False``, equal to) an image root."""
    out = Path(args.out).resolve()
    for root, whole in roots:
        r = root.resolve()
        if out == r or (whole and out.is_relative_to(r)):
            raise UserError(f"{args.out}: inside the images' folder {root} — the shards would "
                            "be written among the images (and read as images next time): "
                            "choose an --out folder outside it")


def _source(args: argparse.Namespace) -> tuple[Any, str, list[str]]:
    """(the export to parse or the tars' table, the anchor of relative references, notes);
    a converted source also sets ``args.images_root`` and ``args.config``."""
    from npu_data.formats import sources as src

    given = list(args.export)
    fmt = (src.format_name(args.source_format) if args.source_format
           else src.detect(given))
    if args.images_root is not None and not Path(args.images_root).is_dir():
        raise UserError(f"{args.images_root}: no such folder — pass --images-root the folder "
                        "that holds the images (image references are resolved under it)")
    if args.caption_extension is not None and fmt != "kohya":
        raise UserError(f"--caption-extension is for kohya folders; {given[0]} reads as {fmt}")
    if fmt == "labelstudio":
        if len(given) != 1:
            raise UserError(f"import takes one Label Studio export, got {len(given)}: pass a "
                            "single JSON file (or WebDataset .tar shards only)")
        explicit = args.images_root is not None
        root = Path(args.images_root) if explicit else Path(given[0]).resolve().parent
        _check_roots(args, [(root, explicit)])
        return given[0], given[0], []
    if fmt == "webdataset" and _own_tars(args, given):
        anchor, tars = _anchor(args)
        return _tar_table(args, anchor, tars), anchor, []
    stage = _stage(args)
    for g in given:
        if "://" not in g and Path(g).is_dir():
            _check_roots(args, [(Path(g), True)])
    if args.images_root is not None:
        _check_roots(args, [(Path(args.images_root), True)])
    options = src.SourceOptions(caption_extension=args.caption_extension,
                                tar_access=_access(args))
    made = not stage.exists()
    try:
        conv = src.convert(fmt, given, stage, options)
    except BaseException:
        if made and stage.is_dir() and not any(stage.iterdir()):
            stage.rmdir()  # a refused source leaves nothing behind
        raise
    if args.images_root is None:
        args.images_root = str(conv.images_root)
    if args.config is None and conv.config is not None:
        args.config = str(conv.config)
    return str(conv.export), str(conv.export), conv.notes


def _own_tars(args: argparse.Namespace, tars: list[str]) -> bool:
    """Whether the tars are npu-data's own (``export-wds``), told by their content (every
    local tar's first sample; a URL list's first tar); a mix is refused."""
    from npu_data.formats.webdataset.foreign import is_own_tar, tars_of

    tars = tars_of(tars)
    local = [t for t in tars if "://" not in t and not t.startswith("pipe:")]
    probe = local if len(local) == len(tars) else tars[:1]
    own = [is_own_tar(t, _access(args)) for t in probe]
    if any(own) and not all(own):
        mine = probe[own.index(True)]
        other = probe[own.index(False)]
        raise UserError(f"{other}: a tar npu-data did not write, among tars it did ({mine}) — "
                        "import them into separate folders")
    if own[0]:
        args.export = tars
    return own[0]


def _access(args: argparse.Namespace) -> Any:
    from npu_data.formats.webdataset.reader import TarAccess

    return TarAccess(allow_download=args.allow_download or (), timeout=args.download_timeout,
                     max_member_bytes=max(1, int(args.max_tar_member_mb * MiB)))


def _tar_table(args: argparse.Namespace, media: str, tars: list[str]) -> AnnotationTable:
    """The tars' samples as a table, their images unpacked into ``media``; http(s)/s3 tars
    only from the ``--allow-download`` hosts (buckets), as images."""
    from npu_data.formats.webdataset.reader import wds_to_table

    return wds_to_table(tars, Path(media), _access(args))


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
    limit = _max_rejected(args.max_rejected)
    if args.max_tar_member_mb <= 0:
        raise UserValueError(f"{{max_tar_member_mb={args.max_tar_member_mb:g}}}: must be "
                             "positive", option="max_tar_member_mb")
    import_options(None, **_options(args))  # every option checked before a source is read
    source, anchor, notes = _source(args)
    options = _options(args)
    import_options(anchor, **options)
    for line in notes:
        print(line, file=sys.stderr)
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
    if not s.rejected:
        print("rejected 0 tasks")
    return _judge(s, limit, rejected_at, args)


def _judge(s: Any, limit: tuple[float, bool], rejected_at: str,
           args: argparse.Namespace) -> int:
    """1 (with the count and the commonest reasons) when nothing was imported or more tasks
    were rejected than ``--max-rejected`` allows; else 0."""
    from npu_data.shards.rejections import commonest

    value, pct = limit
    allowed = value * s.tasks / 100 if pct else value
    if s.rejected:
        shown = f"{value:g}%" if pct else f"{value:g}"
        print(f"rejected {s.rejected} of {s.tasks} tasks (--max-rejected {shown}): reasons in "
              f"{rejected_at}", file=sys.stderr if s.rejected > allowed else sys.stdout)
        root = args.images_root or str(Path(args.export[0]).resolve().parent)
        for count, reason, fix in commonest(s.rejected_path, root):
            print(f"  {count} x {reason}" + (f" — {fix}" if fix else ""), file=sys.stderr)
    if s.samples == 0:
        print(f"error: imported 0 of {s.tasks} tasks — nothing to train on"
              + (": see the reasons above" if s.rejected else " (the source has no tasks)"),
              file=sys.stderr)
        return 1
    if s.rejected > allowed:
        print(f"error: {s.rejected} of {s.tasks} tasks rejected, more than --max-rejected "
              "allows — fix them, or pass --max-rejected N (or P%) to accept the loss; the "
              f"{s.samples} samples imported are kept",
              file=sys.stderr)
        return 1
    return 0
