"""The torch ``color_jitter``: several colour ops per sample, each sample in its own order.

Op ids: 0 brightness, 1 contrast, 2 saturation, 3 hue. The batch runs a fixed *timeline* of
steps whatever the orders: a blend step ``G`` (any of 0-2, or nothing, per sample:
``color.blend_step``) or a hue step ``H`` (``color.hue_step``). With one order for the batch
the timeline is that order; with a per-sample order it is ``G H G G H G`` for three blends and
hue (it contains every order of them: a sample's hue runs in the first ``H`` when it comes
first or second, in the second otherwise), ``G..G H G..G`` for fewer blends, ``G..G`` without
hue. Which op each step runs for each sample is worked out where the parameters live (on the
host for the DataLoader's), so the device runs the same ops for every batch, every order.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from npu_data.transforms._kernels import (
    DeviceTables,
    compiling,
    host_values,
    on_host,
    riding,
    take,
    to_device,
)
from npu_data.transforms._kernels import color as K
from npu_data.transforms._kernels.tables import (
    ROW_BRIGHTNESS,
    ROW_IDENTITY,
    ROW_SATURATION,
    color_tables,
)

HUE = 3
_NONE = 4  # a blend step that leaves the sample as it is
_WIDE = 1 << 22  # pixels per image from which a contrast sum needs int64


def timeline(ops: Sequence[int], per_sample: bool) -> str:
    """The steps (``G`` blend, ``H`` hue) that run ``ops`` in any order (``per_sample``) or
    in the given order."""
    if not per_sample:
        return "".join("H" if op == HUE else "G" for op in ops)
    k = sum(op != HUE for op in ops)
    if HUE not in ops:
        return "G" * k
    return "GHGGHG" if k == 3 else "G" * k + "H" + "G" * k


def slot_maps(steps: str, blends: int, hue: bool) -> tuple[list[list[int]], list[list[bool]]]:
    """For each position ``p`` of hue among a sample's ops (rows 0..blends; one row without
    ``hue``): which of the sample's blends each ``G`` step runs (``blends`` = none) and whether
    each ``H`` step runs hue — the earliest steps that keep the order."""
    g_rows, h_rows = [], []
    for p in range(blends + 1 if hue else 1):
        seq = list(range(p)) + [HUE] + list(range(p, blends)) if hue else list(range(blends))
        j, g_row, h_row = 0, [], []
        for step in steps:
            want = j < len(seq) and (seq[j] == HUE) == (step == "H")
            if step == "G":
                g_row.append(seq[j] if want else blends)
            else:
                h_row.append(want)
            j += int(want)
        if j != len(seq):
            raise AssertionError(f"timeline {steps} cannot run hue at position {p}")
        g_rows.append(g_row)
        h_rows.append(h_row)
    return g_rows, h_rows  # plain lists: constants in a torch.compile graph


def _step_ops(ops: list[int], order: torch.Tensor | None, steps: str, batch: int,
              device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(op of each G step (B, G) with _NONE for nothing, whether each H step runs hue
    (B, H) or None when every H step does for every sample)``, computed on ``device``."""
    if order is None or len(ops) <= 1:
        fixed = [op for op in ops if op != HUE]
        return to_device(torch.tensor(fixed, dtype=torch.int64), device).expand(batch, len(fixed)), None
    order = order.to(torch.int64)
    k = sum(op != HUE for op in ops)
    if HUE in ops:
        at = torch.argmax((order == HUE).to(torch.int32), dim=1)  # (B,) hue's position
        steps_k = torch.arange(k, device=device).view(1, -1)
        blends = torch.gather(order, 1, steps_k + (steps_k >= at.view(-1, 1)).to(torch.int64))
    else:
        at = torch.zeros(batch, dtype=torch.int64, device=device)
        blends = order
    g_map, h_map = slot_maps(steps, k, HUE in ops)
    with_none = torch.cat([blends, torch.full((batch, 1), _NONE, dtype=torch.int64,
                                              device=device)], 1)
    g_ops = torch.gather(with_none, 1, to_device(torch.tensor(g_map, dtype=torch.int64), device)[at])
    if all(all(row) for row in h_map):
        return g_ops, None
    return g_ops, to_device(torch.tensor(h_map, dtype=torch.bool), device)[at]


def _key_select(g_ops: torch.Tensor, pixels: torch.Tensor | int) -> torch.Tensor:
    """(G, 4, B) int32 (N, M, D, S) of each blend step (``color.blend_step``)."""
    con, sat, bri = g_ops == 1, g_ops == 2, g_ops == 0
    n = pixels if isinstance(pixels, int) else pixels.view(-1, 1)
    rows = torch.where(sat, ROW_SATURATION, torch.where(bri, ROW_BRIGHTNESS, ROW_IDENTITY))
    big_n = torch.where(con, n, rows)
    big_m = torch.where(con, 2, 0)
    big_d = torch.where(con, 2 * n, 1)
    big_s = sat.to(torch.int64)
    sel = torch.stack([big_n, big_m.expand_as(big_n), big_d.expand_as(big_n), big_s], 0)
    return sel.to(torch.int32).permute(2, 0, 1)  # (G, 4, B)


def _pixels(sizes: torch.Tensor) -> torch.Tensor:
    """(B,) int64 valid pixels of each sample, at least 1: an empty sample's contrast mean is
    0, as the compiled kernel's (``color.cpp`` ``contrast_mean``), not a division by 0."""
    s = sizes.to(torch.int64)
    return (s[:, 0] * s[:, 1]).clamp(min=1)


_POSITIONS = DeviceTables("the row and column positions")


def positions(n: int, device: torch.device) -> torch.Tensor:
    """(n,) int64 ``0 .. n - 1`` on ``device``: made once per length and device (in place
    inside a ``torch.compile`` trace)."""
    if compiling():
        return torch.arange(n, device=device)
    return _POSITIONS.get(n, device, lambda: torch.arange(n))


def _valid(sizes: torch.Tensor, height: int, width: int, device: torch.device
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(valid (B, H, W) bool, valid pixels (B,) int64)`` on ``device``."""
    s = to_device(sizes, device).to(torch.int64)
    rows = positions(height, device).view(1, -1, 1) < s[:, 0].view(-1, 1, 1)
    cols = positions(width, device).view(1, 1, -1) < s[:, 1].view(-1, 1, 1)
    return rows & cols, _pixels(s)


def host_parts(shape: tuple[int, int, int], ops: Sequence[int], order: torch.Tensor | None,
               factors: torch.Tensor, shifts: torch.Tensor, full: bool | None
               ) -> dict[str, torch.Tensor]:
    """What :func:`color_jitter` copies to the device for a ``(B, H, W)`` batch, made on the
    host (named as :func:`~npu_data.transforms._kernels.take` knows them), so that it can ride
    with an earlier copy; empty where the parameters are not on the host or the padding is not
    known to be absent."""
    ops = [int(op) for op in ops]
    per_sample = order is not None and len(ops) > 1
    params = [factors, shifts] + ([order] if order is not None and per_sample else [])
    if not on_host(*params) or not (full or 1 not in ops):
        return {}
    b, height, width = shape
    steps = timeline(ops, per_sample)
    pack, on = _pack(ops, order, factors, shifts, b, max(height * width, 1), steps,
                     torch.device("cpu"))
    out = {"jitter.pack": pack}
    if on is not None:
        out["jitter.on"] = on
    if "G" in steps:
        out["jitter.products"] = K.products(factors)
    return out


def _pack(ops: list[int], order: torch.Tensor | None, factors: torch.Tensor,
          shifts: torch.Tensor, b: int, n: torch.Tensor | int, steps: str, pdev: torch.device,
          late: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The steps' int32 parameters in one tensor on ``pdev`` (sample ids, the blend
    selectors, the hue shifts, which samples run contrast, a zero; with ``late``, then what
    each selector gains per valid pixel counted on the device, (B, G, 4): ``(N, M, D, S)``
    + ``(1, 0, 2, 0)`` times the count where a step runs contrast) and which samples each hue step runs
    ``(H, B)`` bool (None: every sample, every step)."""
    per_sample = order is not None and len(ops) > 1
    g_ops, h_on = _step_ops(ops, to_device(order, pdev) if order is not None and per_sample
                            else None, steps, b, pdev)
    ints = [torch.arange(b, device=pdev), _key_select(g_ops, n).reshape(-1),
            to_device(shifts, pdev).to(torch.int64)]
    # padding: brightness, saturation and hue treat it as pixels; contrast leaves it 0
    ints.append((g_ops == 1).any(1).to(torch.int64))
    ints.append(torch.zeros(1, dtype=torch.int64, device=pdev))
    if late:  # (B, G, 4): contrast's N = n and D = 2n, n known on the device only
        per = to_device(torch.tensor([1, 0, 2, 0], dtype=torch.int64), pdev).view(1, 1, 4)
        ints.append((g_ops == 1).to(torch.int64).unsqueeze(-1) * per)
    on = None if h_on is None else h_on.t().contiguous()
    return torch.cat([t.reshape(-1).to(torch.int32) for t in ints]), on


def color_jitter(images: torch.Tensor, sizes: torch.Tensor, ops: Sequence[int],
                 order: torch.Tensor | None, factors: torch.Tensor, shifts: torch.Tensor,
                 inplace: bool = False, full: bool | None = None) -> torch.Tensor:
    """``ops`` in play (host ints); ``order (B, len(ops))`` each sample's permutation of them
    or None (``ops`` in that order for all); ``factors (B, 3)`` brightness, contrast,
    saturation; hue ``shifts (B,)`` levels. ``full``: every sample fills the whole batch
    (no padding to keep at 0; None: find out from host ``sizes``). ``inplace`` allows writing
    the result into ``images``. Host parameters reach the device in one copy (or ride with an
    earlier one: :func:`host_parts`)."""
    b, _, height, width = images.shape
    dev = images.device
    ops = [int(op) for op in ops]
    per_sample = order is not None and len(ops) > 1
    steps = timeline(ops, per_sample)
    mean, grey = 1 in ops, 1 in ops or 2 in ops  # contrast needs the mean, both the grey
    if not mean:  # brightness, saturation and hue treat the padding as pixels
        full = True
    elif full is None:
        full = host_values(sizes) and bool(((sizes[:, 0] == height) & (sizes[:, 1] == width)
                                            ).all())
    # the steps' parameters where the parameters live (the host for the DataLoader's)
    params = [factors, shifts] + ([order] if order is not None and per_sample else [])
    host = on_host(*params)
    pdev = torch.device("cpu") if host else dev
    valid: torch.Tensor | None = None
    if not full:
        valid, pixels = _valid(sizes, height, width, dev)
    # the valid pixels of each sample (contrast's mean), where the selectors are made; 0 when
    # only the device has them: added there (``late``)
    late = not full and not host_values(sizes)
    n: torch.Tensor | int = max(height * width, 1) if full else (
        0 if late else _pixels(to_device(sizes, pdev)))
    host_pack, host_on = _pack(ops, order, factors, shifts, b, n, steps, pdev, late and mean)
    prods = K.products(to_device(factors, pdev)) if "G" in steps else None
    riders = {} if prods is None else {"jitter.products": prods}
    if host_on is not None:
        riders["jitter.on"] = host_on
    with riding(riders):
        pack = take("jitter.pack", host_pack, dev)
        blend_prods = None if prods is None else take("jitter.products", prods, dev)
        on = None if host_on is None else take("jitter.on", host_on, dev)
    n_g = steps.count("G")
    sample = pack[:b].view(b, 1, 1, 1)
    sel = pack[b:b + n_g * 4 * b].view(n_g, 4, b)
    end = 3 * b + n_g * 4 * b + 1  # the pack without what ``late`` adds
    shift = pack[b + n_g * 4 * b:b + n_g * 4 * b + b]
    contrast = pack[end - 1 - b:end - 1]
    zero = pack[end - 1:end]
    if late and mean and n_g:  # contrast's N = n and D = 2n: from the device's sizes
        gain = pack[end:].view(b, n_g, 4).permute(1, 2, 0)
        sel = torch.addcmul(sel, gain, pixels.to(torch.int32).view(1, 1, b))

    tables = color_tables(dev)
    # int32 tables where a step follows a blend: its output is the next step's index as it is
    wide_out = len(steps) > 1
    blend = (K.blend_tables(blend_prods, tables, torch.int32 if wide_out else torch.uint8)
             if blend_prods is not None else None)
    x = images.permute(0, 2, 3, 1)  # (B, H, W, C): free for channels-last batches
    x = x.to(torch.int32)
    wide = height * width >= _WIDE
    g = h = 0
    for step in steps:
        if x.dtype != torch.int32:
            x = x.to(torch.int32)
        if step == "G":
            assert blend is not None
            x = K.blend_step(x, blend, sample, sel[g], tables, valid, wide, grey, mean)
            g += 1
        else:
            x = K.hue_step(x, shift, tables, on[h] if on is not None else None)
            h += 1
    if valid is not None:  # contrast leaves the padding 0
        keep = valid | (contrast == 0).view(b, 1, 1)
        x = torch.where(keep.unsqueeze(-1), x, zero)
    if x.dtype == torch.uint8:
        return x.permute(0, 3, 1, 2)
    if inplace and images.permute(0, 2, 3, 1).is_contiguous():
        images.permute(0, 2, 3, 1).copy_(x)
        return images
    return x.to(torch.uint8).permute(0, 3, 1, 2)


# --- the functional ops (one-step jitters) ---------------------------------------------------
def _single(images: torch.Tensor, sizes: torch.Tensor, op: int, factors: torch.Tensor,
            shifts: torch.Tensor | None = None) -> torch.Tensor:
    b = images.shape[0]
    f = factors.to(torch.float32).view(-1, 1).expand(b, 3)
    sh = shifts if shifts is not None else torch.zeros(b, dtype=torch.int32, device=f.device)
    return color_jitter(images, sizes, (op,), None, f, sh)


def adjust_brightness(images: torch.Tensor, sizes: torch.Tensor, factors: torch.Tensor
                      ) -> torch.Tensor:
    """Blend with black."""
    return _single(images, sizes, 0, factors)


def adjust_contrast(images: torch.Tensor, sizes: torch.Tensor, factors: torch.Tensor
                    ) -> torch.Tensor:
    """Blend with the grey mean of the valid region; the padding comes out 0."""
    return _single(images, sizes, 1, factors)


def adjust_saturation(images: torch.Tensor, sizes: torch.Tensor, factors: torch.Tensor
                      ) -> torch.Tensor:
    """Blend with each pixel's grey."""
    return _single(images, sizes, 2, factors)


def adjust_hue(images: torch.Tensor, sizes: torch.Tensor, shifts: torch.Tensor) -> torch.Tensor:
    """Hue shifted by ``shifts (B,)`` levels through the tables."""
    ones = torch.ones(images.shape[0], dtype=torch.float32, device=shifts.device)
    return _single(images, sizes, 3, ones, shifts)
