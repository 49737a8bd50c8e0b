"""``npu-data parity``: device kernels vs the Pillow CPU versions, kernel by kernel."""

from __future__ import annotations

import argparse

from npu_data.errors import UserError

NAME = "parity"
HELP = ("Run every augmentation kernel on random padded batches on a device and compare each "
        "sample with the Pillow reference, the device kernels also under TF32/HF32, bf16 "
        "matmuls and bf16 autocast (exit 1 if any row is outside its tolerance).")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``npu-data parity``."""
    p.add_argument("--device", default="auto",
                   help="auto (npu, then cuda, then cpu), cpu, cuda[:N] or npu[:N] "
                        "(default: auto)")
    p.add_argument("--seed", type=int, default=0, help="seed of images and parameters (0)")
    p.add_argument("--batches", type=int, default=2, help="random batches per kernel (2)")
    p.add_argument("--batch-size", type=int, default=8, help="samples per batch (8)")
    p.add_argument("--precision", action=argparse.BooleanOptionalAction, default=True,
                   help="also run the torch kernels under each reduced-precision mode "
                        "(rows '<kernel> (torch, <mode>)', expected exact; default: on)")


def run(args: argparse.Namespace) -> int:
    """Print the table and the device; 0 when every kernel passes, 1 otherwise."""
    from npu_data.device import describe, resolve_device
    from npu_data.parity.runner import run_parity_suite

    if args.batches < 1 or args.batch_size < 1:
        raise UserError(f"--batches and --batch-size must be at least 1, got {args.batches} "
                        f"and {args.batch_size}")
    device = resolve_device(args.device)
    print(f"device: {describe(device)}  seed: {args.seed}  batches: {args.batches}")
    rows = run_parity_suite(device, seed=args.seed, batches=args.batches,
                            batch_size=args.batch_size, precision=args.precision)
    header = ("kernel", "max diff", "mean diff", "frac >1", "tolerance", "result")
    table = [header] + [
        (r.kernel, f"{r.max:g}", f"{r.mean:.4g}", f"{r.frac:.3%}", r.tolerance,
         "PASS" if r.passed else "FAIL")
        for r in rows
    ]
    widths = [max(len(line[c]) for line in table) for c in range(len(header))]
    for line in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
    failed = [r.kernel for r in rows if not r.passed]
    if failed:
        print(f"FAIL: {', '.join(failed)} outside tolerance on {describe(device)}")
        return 1
    print(f"all {len(rows)} kernels within tolerance")
    return 0
