"""``WebDatasetStream``: WebDataset tars (paths or allowed URLs) as the sample dicts
ShardDataset yields, for our DataLoader or torch's.

Work is split over ``rank x worker``: whole tars when there are at least as many tars as
consumers, otherwise each tar is shared by a group of consumers that take its samples
round-robin — so no worker is left without data and nothing is read twice by one consumer.

Under a ``DataLoader`` that crops while reading (``loaders.request``: the loader arms the
stream's ``CropState`` for a pass) a stream's JPEGs are not decoded here: only their header
is read (the size the crop box needs); the loader's assembler draws the batch's request from
its sample ids (``loaders.assemble``) and the reader decodes each box alone
(``readers.read_crop``), as for a ``ShardDataset`` batch.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import random
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from npu_data.common.dist import place
from npu_data.formats.webdataset import stages
from npu_data.formats.webdataset.reader import DEFAULT_MAX_TAR_BYTES, TarAccess
from npu_data.formats.webdataset.tar_members import DEFAULT_MAX_MEMBER, DEFAULT_MAX_TOTAL
from npu_data.loaders.request import CropState


def _rank_world(rank: int | None, world: int | None) -> tuple[int, int]:
    if rank is not None and world is not None:
        return rank, world
    here = place()
    return here.rank, here.world


def assignment(num_shards: int, consumer: int, consumers: int) -> list[tuple[int, int, int]]:
    """(shard, offset, stride) triples consumer ``consumer`` of ``consumers`` reads."""
    if num_shards >= consumers:
        return [(k, 0, 1) for k in range(consumer, num_shards, consumers)]
    k = consumer % num_shards
    group = [c for c in range(consumers) if c % num_shards == k]
    return [(k, group.index(consumer), len(group))]


def _stable_seed(*parts: object) -> int:
    """A seed from ``parts`` that is the same in every process (``hash`` of a str is salted)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


class WebDatasetStream(torch.utils.data.IterableDataset):
    """Streams ``urls`` (tar paths; http(s)://, s3:// from the hosts ``allow_download``
    names; ``pipe:`` commands with ``allow_pipe=True``) as ShardDataset-style sample dicts.

    ``rank`` / ``world_size`` default to torch.distributed, then ``RANK`` / ``WORLD_SIZE``.
    ``shuffle`` permutes the tar order and a ``buffer``-sample window per ``set_epoch``.
    ``max_download_bytes`` caps each remote or piped tar, ``timeout`` its connects and stalled
    reads, ``storage_options`` go to fsspec for s3://; ``max_member_bytes`` each member (and
    sample), ``max_unpacked_bytes`` each tar unpacked (``TarAccess``).
    ``crop_at_read``: armed by a ``DataLoader`` that applies its transform's leading crop
    while reading (``loaders.request``) for the passes it runs; the batches are the same.
    """

    def __init__(self, urls: Sequence[str], shuffle: bool = False, seed: int = 0,
                 buffer: int = 256, rank: int | None = None, world_size: int | None = None,
                 allow_download: Any = (), max_download_bytes: int = DEFAULT_MAX_TAR_BYTES,
                 allow_pipe: bool = False, timeout: float = 30.0,
                 storage_options: dict[str, Any] | None = None,
                 max_member_bytes: int = DEFAULT_MAX_MEMBER,
                 max_unpacked_bytes: int = DEFAULT_MAX_TOTAL) -> None:
        super().__init__()
        self.urls = [str(u) for u in urls]
        if not self.urls:
            raise ValueError("WebDatasetStream needs at least one tar")
        self.access = TarAccess(allow_download, max_download_bytes, allow_pipe, timeout,
                                dict(storage_options or {}), max_member_bytes,
                                max_unpacked_bytes)
        self.shuffle, self.seed, self.buffer = shuffle, seed, buffer
        self.rank, self.world_size = rank, world_size
        # shared memory: persistent DataLoader workers see set_epoch of the main process
        self._epoch = multiprocessing.RawValue("q", 0)
        self.crop_at_read = CropState()

    @property
    def epoch(self) -> int:
        """The epoch whose shuffle the next pass uses."""
        return int(self._epoch.value)

    def set_epoch(self, epoch: int) -> None:
        """Change the shuffle of the next pass (also in workers already started)."""
        self._epoch.value = int(epoch)

    def _plan(self) -> list[tuple[int, int, int]]:
        rank, world = _rank_world(self.rank, self.world_size)
        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info is not None else (0, 1)
        plan = assignment(len(self.urls), rank * nw + wid, world * nw)
        if self.shuffle:
            random.Random(_stable_seed(self.seed, self.epoch, rank, wid)).shuffle(plan)
        return plan

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = torch.utils.data.get_worker_info()
        rank, _ = _rank_world(self.rank, self.world_size)
        rng = random.Random(_stable_seed(self.seed, self.epoch, rank,
                                         info.id if info is not None else 0, "buffer"))
        crop = self.crop_at_read.plan()  # None unless a DataLoader armed this pass
        samples = stages.split(self.urls, self._plan(), self.access)
        return stages.shuffle(stages.to_dicts(samples, crop), self.buffer,
                              rng if self.shuffle else None)
