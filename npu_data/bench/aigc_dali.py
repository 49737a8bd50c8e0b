"""NVIDIA DALI's CPU pipeline in the AIGC row (``aigc_buckets``, when ``nvidia.dali`` imports:
``pip install 'npu-data[bench,dali]'``): the same photos, batches and per-sample parameters as
the row's other two pipelines.

``fn.external_source`` (each batch of the row's ``BucketBatchSampler``: the JPEG files' bytes,
each sample's covering size, window and flip) -> ``fn.decoders.image`` (CPU, RGB) ->
``fn.resize`` to the covering size (linear with antialias: a triangle filter when shrinking,
like Pillow's BILINEAR) -> ``fn.crop_mirror_normalize`` (DALI's fused crop + flip + normalise:
the window, the flip, ``(x - 127.5) / 127.5``, CHW) in float16, as DALI has no bfloat16.
``num_threads`` = the row's workers, in the training process (no worker processes);
``device_id=None``: no GPU. DALI's decoder and resampling are its own, so its pixels differ
from Pillow's by a few levels; the row prints the largest difference of a first batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from npu_data.bench import extras


def available() -> bool:
    """Whether DALI imports here."""
    return extras.installed("nvidia.dali")


def crop_pos(offset: int, full: int, window: int) -> float:
    """DALI's normalised crop anchor for an integer ``offset``: DALI takes ``pos * (full -
    window)`` (rounded or truncated, by version); a quarter pixel past ``offset`` gives
    ``offset`` either way."""
    if full <= window:
        return 0.0
    return min(1.0, (offset + 0.25) / (full - window))


class Feed:
    """``batches`` as DALI's external source, one epoch after another (an epoch ends with
    ``StopIteration``): per batch, the samples' JPEG bytes and their parameters
    (``aigc_buckets.sample_params``)."""

    def __init__(self, batches: Sequence[Sequence[int]], files: Sequence[Path],
                 params: Sequence[dict[str, int]]) -> None:
        self.batches, self.files, self.params, self.pos = batches, files, params, 0

    def __iter__(self) -> Feed:
        self.pos = 0
        return self

    def __next__(self) -> tuple[list[np.ndarray], ...]:
        if self.pos >= len(self.batches):  # the epoch ends; the next call starts the next
            self.pos = 0
            raise StopIteration
        ids = self.batches[self.pos]
        self.pos += 1
        ps = [self.params[i] for i in ids]

        def column(values: list[float], dtype: Any = np.float32) -> list[np.ndarray]:
            return [np.array(v, dtype=dtype) for v in values]

        return (
            [np.fromfile(self.files[i], dtype=np.uint8) for i in ids],
            column([p["nh"] for p in ps]), column([p["nw"] for p in ps]),
            column([p["th"] for p in ps]), column([p["tw"] for p in ps]),
            column([crop_pos(p["top"], p["nh"], p["th"]) for p in ps]),
            column([crop_pos(p["left"], p["nw"], p["tw"]) for p in ps]),
            column([p["flip"] for p in ps], np.int32),
        )


def loader(batches: Sequence[Sequence[int]], files: Sequence[Path],
           params: Sequence[dict[str, int]], workers: int) -> extras.DaliBatches:
    """The pipeline of this module's docstring, built; each ``iter()`` is one epoch."""
    from nvidia.dali import fn, types
    from nvidia.dali.pipeline import Pipeline
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    pipe = Pipeline(batch_size=max(len(b) for b in batches), num_threads=max(1, workers),
                    device_id=None, prefetch_queue_depth=2, seed=0)
    with pipe:
        jpegs, nh, nw, th, tw, pos_y, pos_x, flip = fn.external_source(
            source=Feed(batches, files, params), num_outputs=8, batch=True)
        images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
        images = fn.resize(images, resize_y=nh, resize_x=nw, interp_type=types.INTERP_LINEAR,
                           antialias=True)
        pipe.set_outputs(fn.crop_mirror_normalize(
            images, crop_h=th, crop_w=tw, crop_pos_y=pos_y, crop_pos_x=pos_x, mirror=flip,
            mean=[127.5] * 3, std=[127.5] * 3, dtype=types.FLOAT16, output_layout="CHW"))
    return extras.DaliBatches(DALIGenericIterator(pipe, ["image"],
                                                  last_batch_policy=LastBatchPolicy.PARTIAL))
