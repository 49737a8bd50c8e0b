"""Guest instructions per image of each compiled CPU kernel, for comparing builds
(``NPU_DATA_SIMD`` native / portable / scalar) where wall-clock time means nothing: under
qemu's emulation of aarch64 (``bash scripts/arm64_check.sh insns``). The counting is done by
the qemu plugin ``scripts/arm64/insn_count.c`` between two markers this script makes
(``getpriority(MARK, 1)`` / ``(MARK, 2)``, calls that fail harmlessly); each case's name goes to
stderr just before its count, so the two interleave in order.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import numpy as np
import torch

MARK = 0x4E5055
BATCH, REPEAT = 4, 2


def _mark(which: int) -> None:
    try:
        os.getpriority(MARK, which)
    except OSError:  # EINVAL, as intended: only the plugin looks at it
        pass


def _cases(ops: object) -> dict[str, Callable[[], object]]:
    from npu_data.transforms.backends import vertical_first_rule

    rng = np.random.default_rng(0)
    small = torch.from_numpy(rng.integers(0, 256, (BATCH, 3, 375, 500), dtype=np.uint8))
    big = torch.from_numpy(rng.integers(0, 256, (BATCH, 3, 1200, 1600), dtype=np.uint8))
    crop = torch.from_numpy(rng.integers(0, 256, (BATCH, 3, 224, 224), dtype=np.uint8))
    rule = vertical_first_rule()
    box_small = torch.tensor([[20, 30, 300, 400]] * BATCH)
    box_big = torch.tensor([[100, 200, 1000, 1300]] * BATCH)
    sizes = torch.tensor([[224, 224]] * BATCH)
    factors = torch.full((BATCH, 3), 1.3)
    shifts = torch.full((BATCH,), 20, dtype=torch.int64)
    flip = torch.ones(BATCH, dtype=torch.bool)
    mean, std = torch.tensor([0.485, 0.456, 0.406]), torch.tensor([0.229, 0.224, 0.225])
    o = ops  # torch.ops.npu_data

    def colour(op: int) -> Callable[[], object]:
        order = torch.full((BATCH, 1), op, dtype=torch.int64)
        return lambda: o.color_ops(crop, sizes, order, factors, shifts)  # type: ignore[attr-defined]

    return {
        "resized_crop 375x500 -> 224": lambda: o.resized_crop(small, box_small, 224, 224, rule),  # type: ignore[attr-defined]
        "resized_crop 1200x1600 -> 512": lambda: o.resized_crop(big, box_big, 512, 512, rule),  # type: ignore[attr-defined]
        "brightness 224": colour(0), "contrast 224": colour(1), "saturation 224": colour(2),
        "hue 224": colour(3),
        "hflip 224": lambda: o.hflip(crop, sizes, flip),  # type: ignore[attr-defined]
        "normalize 224": lambda: o.normalize(crop, mean, std, False),  # type: ignore[attr-defined]
    }


def main() -> int:
    from npu_data.transforms import backends

    torch.set_num_threads(1)  # one guest thread: the plugin's counter is not per thread
    ops = backends.compiled_ops()
    if ops is None:
        print("kernel_insns: the compiled kernels are not available", file=sys.stderr)
        return 1
    print(f"build {ops.simd_paths()}", file=sys.stderr, flush=True)
    for name, run in _cases(ops).items():
        run()  # warm: allocations, first-call work
        print(f"case {name} per_image_of {BATCH * REPEAT}", file=sys.stderr, flush=True)
        _mark(1)
        for _ in range(REPEAT):
            run()
        _mark(2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
