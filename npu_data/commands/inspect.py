"""``npu-data inspect``: a readable summary of a shard folder or its URL (names from the data
printed with their control characters escaped)."""

from __future__ import annotations

import argparse

from npu_data.errors import UserError
from npu_data.shards.reader import ShardDataset
from npu_data.shards.stats import dataset_stats
from npu_data.shards.storage import add_remote_arguments, endpoint_options, is_url

NAME = "inspect"
HELP = "Summarise a dataset folder: samples, shards, bytes, labels, image sizes, result counts."


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``npu-data inspect``."""
    p.add_argument("dataset", metavar="DIR|URL",
                   help="folder written by `npu-data import`, or its URL (s3://bucket/prefix: "
                        "read through the node-local cache)")
    p.add_argument("--caption-field", metavar="KEY",
                   help="the task data key holding captions (default: TextArea texts, else "
                        "the data's caption, text or prompt)")
    add_remote_arguments(p)


def plain(text: object) -> str:
    """``text`` safe for a terminal: every character Python cannot print (control characters,
    escape sequences, newlines, bidirectional overrides) written as its backslash escape."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in str(text))


def _row(key: str, value: object) -> str:
    return f"  {plain(key):<22} {plain(value)}"


def _latent_lines(where: object, ds: ShardDataset) -> list[str]:
    """The summary of a latents store: sizes, buckets, upscaling, dtype, encoders, captions."""
    from npu_data.latents import summary

    record = ds.latents
    assert record is not None
    m = ds.manifest
    total = sum(int(f["size"]) for sh in m["shards"] for f in sh.get("files", {}).values())
    original, target = summary.sizes(ds)
    text = record.get("text")
    rule = f"{len(record['buckets'])} listed" + (
        f", no upscale (step {record.get('step')})" if record.get("no_upscale") else "")
    lines = [f"dataset {plain(where)}", _row("samples", len(ds)),
             _row("shards", len(m["shards"])), _row("bytes", f"{total:,} ({total / 1e6:.1f} MB)"),
             _row("store", f"latents of source {str(m.get('source_sha256'))[:12]}"),
             _row("latents", f"{record['channels']} channels, factor {record['factor']}, "
                             f"{record['dtype']}, {record['latent']}, "
                             f"{'with' if record['flip'] else 'without'} flipped variant"),
             _row("text embeddings", f"{text['tokens']} x {text['dim']}, pooled "
                                     f"{text['pooled']}" if text else "none"),
             _row("buckets", f"{rule}: " + " ".join(f"{h}x{w}" for h, w in record["buckets"])),
             _row("samples per bucket", summary.bucket_counts(target)),
             _row("upscaled", summary.upscale_line(original, target,
                                                   bool(record.get("no_upscale")),
                                                   "`npu-data encode --no-upscale`")
                  [len("upscaled: "):]),
             _row("captions", summary.caption_line(record)),
             _row("samples with captions", ds.caption_coverage().line()[len("captions: "):]),
             _row("captions per sample", summary.rows_line(ds)),
             "encoders"]
    lines += [_row(role, text) for role, text in summary.encoder_lines(record)]
    return lines


def run(args: argparse.Namespace) -> int:
    """Print the summary table."""
    field = getattr(args, "caption_field", None)
    ds = (ShardDataset(args.dataset, cache_dir=args.cache_dir,
                       storage_options=endpoint_options(args.storage_endpoint),
                       caption_field=field)
          if is_url(args.dataset) else ShardDataset(args.dataset, caption_field=field))
    if ds.latents is not None:
        if field:
            raise UserError(f"{args.dataset}: a latents store's captions were chosen when it "
                            "was encoded (`npu-data encode --caption-field`) — drop "
                            "--caption-field")
        print("\n".join(_latent_lines(args.dataset if is_url(args.dataset) else ds.path, ds)))
        return 0
    st = dataset_stats(ds)
    lines = [f"dataset {plain(args.dataset if is_url(args.dataset) else ds.path)}",
             _row("samples", st.samples), _row("shards", st.shards),
             _row("bytes", f"{st.bytes:,} ({st.bytes / 1e6:.1f} MB)"),
             _row("store", st.store + (f" ({', '.join(f'{k} {v}' for k, v in st.encodings.items())})"
                                       if st.encodings else "")),
             _row("rejected tasks", st.rejected),
             _row("samples with captions", ds.caption_coverage().line()[len("captions: "):])]
    for axis, s in st.sizes.items():
        lines.append(_row(f"image {axis}", f"min {s['min']}  median {s['median']:g}  "
                                           f"mean {s['mean']:.1f}  max {s['max']}"))
    lines.append("results per type")
    lines += [_row(g, n) for g, n in st.results.items() if n]
    for control, hist in st.labels.items():
        lines.append(f"labels of {plain(control)}")
        lines += [_row(name, n) for name, n in sorted(hist.items(), key=lambda kv: -kv[1])]
    print("\n".join(lines))
    return 0
