"""DataLoader: torch's loader reads and collates host batches, a ``DevicePrefetcher``
(``loaders.prefetch``) copies them to the device ahead, the device transform runs on whole
batches, and an ``EpochState`` (``loaders.epochs``) decides each pass's epoch, length and
resume state. The whole path: docs/architecture.md."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader as TorchDataLoader
from torch.utils.data import IterableDataset

from npu_data import device as dev
from npu_data.batch import HostBatch
from npu_data.buffers import release_reused
from npu_data.common.compat import DATALOADER_ARGS, dataloader_kwargs
from npu_data.errors import UserError, UserValueError
from npu_data.loaders import epochs, frameworks, placement
from npu_data.loaders.assemble import collate_host, host_request, is_collate_samples
from npu_data.loaders.epochs import EpochState, PassIndices, batch_seed
from npu_data.loaders.loader_args import READ_AHEAD, check_extras, loader_transform, worker_init
from npu_data.loaders.loader_args import image_position as _image_position
from npu_data.loaders.loader_args import ours as _ours
from npu_data.loaders.prefetch import DevicePrefetcher, read_ahead
from npu_data.loaders.prefetch import rebuild as _rebuild
from npu_data.loaders.request import Requests, refusal, state_of, worker_refusal
from npu_data.loaders.sampler import loader_order
from npu_data.loaders.states import loader_seed

BatchTransform = Callable[..., Any]


class DataLoader(TorchDataLoader):
    """``torch.utils.data.DataLoader`` that yields batches transformed on ``device``: host
    batches are copied ahead (``device_prefetch``) and transformed whole there. An npu_data
    transform's parameters are drawn per sample from (seed, epoch, sample index), so a
    sample's pixels depend on no batch size, worker count, rank or resume point.

    A subclass, so frameworks that check for torch's loader (Lightning's sampler injection,
    Accelerate's ``prepare``) treat it as one; every extra is an attribute of the same name,
    so a loader rebuilt from its attributes keeps them. torch's arguments keep their meaning
    and torch validates them.

    Epochs are torch's: every ``iter()`` is a new epoch — a new order and new augmentation —
    unless ``load_state_dict`` asked to resume one; ``set_epoch`` (the loader's or its
    sampler's) chooses the epoch instead. ``len()`` is always the epoch's length; a resumed
    pass yields the rest of its epoch. ``state_dict()`` / ``load_state_dict()`` resume any
    sampler mid-epoch (``loaders.epochs``). Under Accelerate, ``prepare`` keeps this loader
    (``loaders.frameworks``).

    Args:
        dataset: Any map-style or iterable dataset; ``ShardDataset`` (``__getitems__``) is
            read a batch at a time and collated in one shot.
        batch_size: Samples per batch, as torch's.
        shuffle: As torch's. Without a sampler the loader orders the samples itself
            (``sampler.ShuffledOrder`` / ``SequentialOrder``: a ``seed + epoch`` permutation,
            or in order), a ``RandomSampler`` / ``SequentialSampler`` to frameworks.
        sampler: As torch's (``NpuDistributedSampler`` for distributed runs).
        batch_sampler: As torch's (``BucketBatchSampler`` for aspect-ratio buckets).
        num_workers: Worker processes, as torch's.
        collate_fn: Default: ``collate_samples`` (a padded batch dict; other sample
            structures go through ``torch.utils.data.default_collate``). A user's gets the
            list of samples; its return value passes through whatever its type.
        pin_memory: Pin host batches (on accelerators only).
        drop_last: As torch's.
        timeout: As torch's.
        worker_init_fn: As torch's; runs after the loader's own worker setup.
        multiprocessing_context: As torch's; default ``spawn`` for NPU workers (an NPU
            cannot be re-initialised in a forked child), else the platform's.
        generator: As torch's; its ``initial_seed()`` is the default ``seed``.
        prefetch_factor: As torch's.
        persistent_workers: As torch's.
        pin_memory_device: As torch's, where the installed torch has it.
        in_order: As torch's, where the installed torch has it.
        device: ``"auto"``, ``"cpu"``, ``"cuda[:N]"``, ``"npu[:N]"`` or a ``torch.device``:
            where batches are delivered and transformed.
        transform: A device batch transform ``t(batch, generator=...)``; default
            ``dataset.transform`` for this package's datasets. A tuple/list batch gets it on
            its first uint8 (B, C, H, W) tensor.
        device_prefetch: Batches copied to the device ahead (0: none).
        seed: Transform and shuffle seed, an int from 0 to 2**64 - 1 (its low 63 bits are
            used); default ``generator.initial_seed()`` or 0.
        jit_compile: The NPU's compile mode (None: leave it as it is).
        image_key: Which element of a tuple/dict batch the transform gets.
        read_crop: Apply the keyed transform's leading crop while reading a ``ShardDataset``
            or a ``WebDatasetStream``: only each crop box is read or decoded, the same pixels
            (``loaders.request``). None (default): wherever it can;
            True: fail when it cannot.
        decode: ``"exact"`` (the pixels of a full decode) or ``"fast"`` (a JPEG crop box at
            least twice the output is decoded DCT-scaled — less work, a few levels off, see
            docs/benchmarks.md).
        read_thread: With ``num_workers=0``, read, decode and collate batches on one
            background thread of this process while the main thread transforms the previous
            one (``loaders.prefetch.read_ahead``); None: on for this package's datasets, off for
            others, which may not be thread-safe.
        augment_on: Where the keyed transform runs (``loaders.placement``): ``"device"`` in
            this process after the copy; ``"workers"`` where each batch is assembled (every
            worker on its own batch; the read thread with ``num_workers=0``), this process
            only hands batches on; ``"auto"`` (default): ``"workers"`` for a CPU device with
            workers, else ``"device"`` (``NPU_DATA_AUGMENT_ON`` overrides). The same bytes in
            every placement.
        threads: torch intra-op threads of each process that runs the transform (workers, or
            this process on the CPU during a pass); None: ``NPU_DATA_THREADS``, else the cores
            this process may use shared out (``loaders.placement``).

    Raises:
        UserError: A device that is not usable here, an extra argument out of range (a
            ``seed`` that is not an int from 0 to 2**64 - 1), or ``read_crop=True`` where the
            loader cannot crop while reading, or ``augment_on="workers"`` where its
            assembler cannot run the transform.
    """

    # Accelerate: prepare() returns this loader as it is; save_state() saves state_dict()
    _is_accelerate_prepared = True
    use_stateful_dataloader = True

    def __init__(self, dataset: Any, batch_size: int | None = 1, shuffle: bool | None = None,
                 sampler: Any = None, batch_sampler: Any = None, num_workers: int = 0,
                 collate_fn: Callable[[list[Any]], Any] | None = None, pin_memory: bool = False,
                 drop_last: bool = False, timeout: float = 0,
                 worker_init_fn: Callable[[int], None] | None = None,
                 multiprocessing_context: Any = None, generator: torch.Generator | None = None,
                 *, prefetch_factor: int | None = None, persistent_workers: bool = False,
                 pin_memory_device: str = "", in_order: bool = True,
                 device: dev.DeviceLike = "auto", transform: BatchTransform | None = None,
                 device_prefetch: int = 2, seed: int | None = None,
                 jit_compile: bool | None = None, image_key: int | str | None = None,
                 read_crop: bool | None = None, decode: str = "exact",
                 read_thread: bool | None = None, augment_on: str = "auto",
                 threads: int | None = None) -> None:
        # checked before anything changes; a generator's own seed is never refused
        self.seed = loader_seed(seed if seed is not None else generator.initial_seed()
                                if generator is not None else 0, "DataLoader")
        check_extras(device_prefetch, image_key, read_crop, decode, read_thread)
        placement.check(augment_on, threads)
        self._auto_device = device is None or (isinstance(device, str) and device == "auto")
        self.device = dev.resolve_device(device)
        if jit_compile is not None:
            dev.set_jit_compile(jit_compile, self.device)
        torch_shuffle = shuffle
        if sampler is None and batch_sampler is None and not isinstance(dataset, IterableDataset):
            sampler = loader_order(dataset, bool(shuffle), self.seed)
            torch_shuffle = None
        accel = dev.is_accelerator(self.device)
        pin = bool(pin_memory) and accel
        # the keyed pipeline where batches are assembled, or in this process (loaders.placement)
        here = placement.in_workers(augment_on, accel, num_workers)
        self._pipeline = placement.WorkerPipeline() if here else None
        if collate_fn is None and (batch_size is not None or batch_sampler is not None):
            collate_fn = functools.partial(collate_host, pin=pin and num_workers == 0,
                                           stream=state_of(dataset), pipeline=self._pipeline)
        elif is_collate_samples(collate_fn):
            # collate_samples passed as collate_fn (or a rebuilt loader's): the same
            # assembler, its HostBatch kept, this loader's own pipeline
            given = collate_fn.keywords if isinstance(collate_fn, functools.partial) else {}
            collate_fn = functools.partial(collate_host, pin=bool(given.get("pin", False)),
                                           stream=state_of(dataset), pipeline=self._pipeline)
        elif collate_fn is not None and not (is_collate_samples(collate_fn)
                                             or _wraps(collate_fn, _listed)):
            collate_fn = functools.partial(_listed, collate_fn)
        if multiprocessing_context is None and num_workers > 0:
            multiprocessing_context = dev.start_method(self.device)
        super().__init__(
            dataset, batch_size=batch_size, shuffle=torch_shuffle, sampler=sampler,
            batch_sampler=batch_sampler, num_workers=num_workers, collate_fn=collate_fn,
            pin_memory=pin and num_workers > 0, drop_last=drop_last, timeout=timeout,
            worker_init_fn=worker_init(worker_init_fn, placement.worker_threads(
                threads, num_workers, here, accel)),
            multiprocessing_context=multiprocessing_context,
            generator=generator, prefetch_factor=prefetch_factor,
            **dataloader_kwargs(persistent_workers=persistent_workers,
                                pin_memory_device=pin_memory_device, in_order=in_order),
        )
        if "in_order" not in DATALOADER_ARGS:
            self.in_order = in_order  # as newer torch keeps it (a rebuild reads it back)
        self.device_prefetch, self.jit_compile, self.image_key = device_prefetch, jit_compile, image_key
        self.read_crop, self.decode, self.read_thread = read_crop, decode, read_thread
        self.augment_on, self.threads = augment_on, threads
        self._main_threads = placement.main_threads(threads, num_workers, here, accel)
        self._read_threads = torch.get_num_threads()  # the read thread's (read_ahead)
        self._ours = _ours(dataset)  # a dataset of this package: read ahead by default
        weakref.finalize(self, release_reused)  # the batch buffers kept for reuse go with it
        self.transform = loader_transform(
            transform, dataset, self.batch_sampler if batch_sampler is not None else None,
            batch_size)
        self._indices = PassIndices(super()._index_sampler)
        # batches (or, with batch_size=None, single indices) leave the sampler as requests
        self._requests = Requests(dataset, self._indices,
                                  single=self.batch_sampler is None)
        if read_crop:
            why = refusal(self)
            if why:
                raise UserValueError(f"DataLoader(read_crop=True): {why} — drop read_crop=True")
        if augment_on == "workers":
            why = worker_refusal(self)
            if why:
                raise UserValueError(f"DataLoader(augment_on='workers'): {why} — use "
                                     "augment_on='auto' or 'device'")
        self._epochs = EpochState(epochs.order_of(self.sampler, self.batch_sampler, dataset),
                                  self._indices, isinstance(dataset, IterableDataset))
        self._prefetcher = DevicePrefetcher()
        self._adopted = False
        self._transform_generator: torch.Generator | None = None

    @property
    def order(self) -> Any:
        """What decides each epoch's samples (``epochs.order_of``)."""
        return self._epochs.order

    @property
    def auto_device(self) -> bool:
        """Made with ``device="auto"``: a framework may move it."""
        return self._auto_device

    @property
    def host_bytes(self) -> int:
        """Bytes of the host batches handed to the device so far."""
        return self._prefetcher.host_bytes

    @property
    def epoch(self) -> int:
        """The epoch the next pass serves (a resumed one, a chosen one, else the next)."""
        return self._epochs.epoch

    def set_epoch(self, epoch: int) -> None:
        """Serve ``epoch`` next (its order and augmentation; the sampler's or an iterable
        dataset's ``set_epoch`` too). A pending resume of another epoch is dropped."""
        self._epochs.set_epoch(epoch)

    def __len__(self) -> int:
        """Batches in the epoch (all of them, also while a resumed pass serves the rest)."""
        self._adopt()
        return self._epochs.length(super().__len__)

    def state_dict(self) -> dict[str, Any]:
        """Plain state to resume exactly here: the epoch, its batches yielded and what
        re-creates its order (``loaders.epochs``); saved between epochs, the next one. Never
        raises for a sampler: one not re-created exactly resumes closely, with a warning."""
        in_order = self.num_workers == 0 or getattr(self, "in_order", True) is not False
        return self._epochs.state_dict(self.seed, self.batch_size, in_order)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Make the next pass continue the saved epoch with exactly the unseen batches.

        Raises:
            UserError: a state with keys missing, mistyped or out of range, of another
                dataset, or that cannot resume this sampler exactly (nothing changes).
        """
        self.seed = self._epochs.load_state_dict(state, self.batch_size, super().__len__,
                                                 self.seed)

    def __setattr__(self, name: str, value: Any) -> None:  # prepare() fails at once, not later
        super().__setattr__(name, value)  # accelerator.prepare() marks the loader it returns
        if name == "_is_accelerate_prepared" and value and self.__dict__.get("_adopted") is False:
            self._adopt()

    def _adopt(self) -> None:
        """Take over what Accelerate's prepare() would have done (``loaders.frameworks``)."""
        if not self._adopted and "_is_accelerate_prepared" in vars(self):  # prepare() marked it
            self._adopted = True
            frameworks.adopt(self)

    @property  # torch's iterators and len() take batches here; frameworks read batch_sampler
    def _index_sampler(self) -> Any:
        requests = self.__dict__.get("_requests")
        if requests is not None and requests.batches is not None:
            return requests.batches  # batches as requests (loaders.request)
        indices = self.__dict__.get("_indices")
        return indices if indices is not None else super()._index_sampler

    # --- iteration --------------------------------------------------------------------------
    def _rank(self) -> int:
        rank = getattr(self.order, "rank", 0)  # a stream's may be None (read when it runs)
        return rank if isinstance(rank, int) else 0

    def _reads_ahead(self) -> bool:
        """Whether this pass reads on a background thread (``read_thread``; see the class)."""
        read_thread = self.read_thread if self.read_thread is not None else self._ours
        return self.num_workers == 0 and read_thread

    def _host_request(self, host: Any, epoch: int) -> tuple[Any, HostBatch | None]:
        """The batch to deliver and its request (``assemble.host_request``)."""
        return host_request(host, self._requests.pipeline, self.seed, epoch)

    def _transform(self, batch: Any, number: int, epoch: int,
                   host: HostBatch | None = None) -> Any:
        if self.transform is None:
            return batch
        if host is not None and host.applied:  # the assembler ran the pipeline (placement)
            batch["aug"] = host.params
            return batch
        if host is not None and host.request is not None:  # keyed: drawn on the host
            pipeline = self._requests.pipeline
            assert pipeline is not None  # a request is drawn only for a keyed transform
            # a batch our collate built is the loader's alone: the kernels may write into it
            out = pipeline.finish(batch, host.request, host.cropped,
                                  donate=is_collate_samples(self.collate_fn))
            out["aug"] = host.params
            return out
        if self._transform_generator is None:
            self._transform_generator = torch.Generator(device=self.device)
        self._transform_generator.manual_seed(batch_seed(self.seed, epoch, self._rank(), number))
        key = self.image_key
        if isinstance(batch, (list, tuple)):  # e.g. (images, labels): transform the images
            i = _image_position(batch, key)
            items = list(batch)
            items[i] = self.transform(items[i], generator=self._transform_generator)
            return _rebuild(batch, items)
        if isinstance(key, str) and isinstance(batch, Mapping):
            if key not in batch:
                raise UserError(f"DataLoader: image_key={key!r} is not a key of the batch "
                                f"(keys: {', '.join(map(str, batch))})")
            out = dict(batch)
            out[key] = self.transform(batch[key], generator=self._transform_generator)
            return out
        return self.transform(batch, generator=self._transform_generator)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]  # a generator of batches
        self._adopt()
        p = self._epochs.begin(super().__len__)
        aug_epoch = p.epoch + (p.repeat << 32)  # a repeated epoch still gets new augmentation
        armed = self._requests.begin(self, aug_epoch, self._pipeline)  # ended with the pass
        source: Iterator[Any] = super().__iter__()
        if self._reads_ahead():
            source = read_ahead(source, READ_AHEAD, self._read_threads)
        link = frameworks.GradientStateLink(self) if self._adopted else None
        threads = torch.get_num_threads()  # the main process's, set for this pass only
        if self._main_threads is not None:
            torch.set_num_threads(self._main_threads)
        try:
            for batch, aug, last in self._prefetcher.batches(
                    source, self.device, self.device_prefetch,
                    lambda host: self._host_request(host, aug_epoch), p.discard):
                out = self._transform(batch, p.base + p.yielded, aug_epoch, aug)
                p.yielded += 1
                if link is not None and last:
                    link.last()
                yield out
            p.finished = True
        finally:  # a pass left early stops its read thread now, not at garbage collection
            p.active = False
            close = getattr(source, "close", None)
            if close is not None:
                close()
            if link is not None:
                link.close()
            armed.close()
            if self._main_threads is not None:
                torch.set_num_threads(threads)


def _wraps(fn: Any, inner: Callable[..., Any]) -> bool:
    """``fn`` is ``functools.partial(inner, ...)``."""
    return isinstance(fn, functools.partial) and fn.func is inner


def _listed(collate_fn: Callable[[list[Any]], Any], samples: Any) -> Any:
    """Give a user ``collate_fn`` the plain list of sample dicts, not a lazy HostBatch."""
    return collate_fn(list(samples) if isinstance(samples, HostBatch) else samples)
