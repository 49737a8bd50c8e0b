"""DataLoader: a ``torch.utils.data.DataLoader`` subclass that yields transformed batches
already on the device.

Workers read samples and collate padded uint8 batches (shared memory, pinned on
accelerators); the main process copies the next ``device_prefetch`` batches to the device
with ``non_blocking`` copies on a side stream, the consuming stream waits on that stream and
every tensor is ``record_stream``'d; the device transform then runs on whole batches. An
npu_data transform's parameters are drawn on the host per sample, keyed by (seed, epoch,
sample index) (``transforms.draws``), shipped with the batch and kept in ``batch["aug"]``, so
a sample's pixels do not depend on batch size, workers, rank, world size, prefetch depth or
resume point; other callables get a generator seeded from (seed, epoch, rank, batch number).
On the CPU the same path runs without streams.
A ``ShardDataset`` is read a batch at a time, each batch asked for by a ``BatchRequest`` that
carries its keyed parameters (drawn once, ``loaders.request``), and assembled in one shot
(``loaders.assemble``); a user ``collate_fn`` still gets the list of sample dicts.
Any other sample structure (tuples, lists, tensors, numbers, plain dicts) is collated by
``torch.utils.data.default_collate``, so batches are exactly torch's; a user ``collate_fn``'s
return value passes through whatever its type.
"""

from __future__ import annotations

import functools
import gc
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader as TorchDataLoader
from torch.utils.data import IterableDataset

from npu_data import device as dev
from npu_data.buffers import release_reused
from npu_data.common.batch import ColumnBatch
from npu_data.common.compat import DATALOADER_ARGS, dataloader_kwargs
from npu_data.errors import UserError, UserTypeError, UserValueError
from npu_data.loaders import frameworks, host_transform, resume
from npu_data.loaders.assemble import HostBatch, collate_host, is_collate_samples
from npu_data.loaders.buckets import bind_buckets
from npu_data.loaders.caption_check import check_captions
from npu_data.loaders.read_ahead import read_ahead
from npu_data.loaders.request import Keyed, Requests, refusal, sample_ids, state_of
from npu_data.loaders.resume import PassIndices, epoch_mark, warn_once
from npu_data.loaders.sampler import loader_order
from npu_data.loaders.states import checked_seed
from npu_data.transforms import draws
from npu_data.transforms.base import Params
from npu_data.transforms.donate import donating
from npu_data.transforms.read_crop import apply_after_read

BatchTransform = Callable[..., Any]
_MASK = (1 << 63) - 1
_READ_AHEAD = 2  # batches a read thread works ahead of the transform
# The importing thread's torch thread count, fixed now: a thread that first asks after torch's
# pin-memory thread ran (it calls set_num_threads(1)) would get 1. The read thread uses it.
torch.get_num_threads()


def batch_seed(seed: int, epoch: int, rank: int, batch: int) -> int:
    """The transform seed of one batch: a mix of (seed, epoch, rank, batch number)."""
    x = 0x9E3779B97F4A7C15
    for v in (seed, epoch, rank, batch):
        x = ((x ^ (v & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 31
    return x & _MASK


def to_device(batch: Any, device: torch.device, non_blocking: bool) -> Any:
    """Move every tensor of a (nested) batch to ``device``; other values pass through and
    containers keep their type (dict, list, tuple, named tuple)."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, Mapping):
        out = {k: to_device(v, device, non_blocking) for k, v in batch.items()}
        if type(batch) is dict:
            return out
        try:
            return type(batch)(out)  # type: ignore[call-arg]
        except TypeError:
            return out
    if isinstance(batch, (list, tuple)) and _has_tensor(batch):
        return _rebuild(batch, [to_device(v, device, non_blocking) for v in batch])
    return batch


def tensor_bytes(batch: Any) -> int:
    """Bytes of every tensor of a (nested) batch."""
    if isinstance(batch, torch.Tensor):
        return batch.numel() * batch.element_size()
    values = _values(batch)
    return sum(tensor_bytes(v) for v in values if type(v) not in _LEAVES) if values else 0


def _has_tensor(batch: Any) -> bool:
    if isinstance(batch, torch.Tensor):
        return True
    values = _values(batch)
    return bool(values) and any(type(v) not in _LEAVES and _has_tensor(v) for v in values)


_LEAVES = frozenset({str, bytes, int, float, bool, type(None)})  # hold no tensor: not walked


def _values(batch: Any) -> Any:
    """The items of a container (None for anything else)."""
    if isinstance(batch, Mapping):
        return batch.values()
    return batch if isinstance(batch, (list, tuple)) else None


def _rebuild(batch: list[Any] | tuple[Any, ...], items: list[Any]) -> Any:
    """``items`` in a container of ``batch``'s type (named tuples included)."""
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*items)
    return type(batch)(items)


def _record(batch: Any, stream: Any) -> None:
    if isinstance(batch, torch.Tensor):
        batch.record_stream(stream)
    elif isinstance(batch, dict):
        for v in batch.values():
            _record(v, stream)
    elif isinstance(batch, (list, tuple)):
        for v in batch:
            _record(v, stream)


class DataLoader(TorchDataLoader):
    """``torch.utils.data.DataLoader`` that feeds ``device`` (see module doc).

    A subclass, so frameworks that check for torch's loader (Lightning's sampler injection,
    Accelerate's ``prepare``) treat it as one; every extra is an attribute of the same name,
    so a loader rebuilt from its attributes keeps them. torch's arguments keep their meaning
    and torch validates them.

    Epochs are torch's: every ``iter()`` is a new epoch — a new order and new augmentation —
    unless ``load_state_dict`` asked to resume one; ``set_epoch`` (the loader's or its
    sampler's) chooses the epoch instead. ``len()`` is always the epoch's length; a resumed
    pass yields the rest of its epoch. ``state_dict()`` / ``load_state_dict()`` resume any
    sampler mid-epoch (``loaders.resume``). Under Accelerate, ``prepare`` keeps this loader
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
        collate_fn: Default: ``collate_samples``'s assembler (a padded batch dict; other
            sample structures go through ``torch.utils.data.default_collate``). A user's gets
            the list of samples; its return value passes through whatever its type.
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
            one (``loaders.read_ahead``); None: on for this package's datasets, off for
            others, which may not be thread-safe.

    Raises:
        UserError: A device that is not usable here, an extra argument out of range (a
            ``seed`` that is not an int from 0 to 2**64 - 1), or ``read_crop=True`` where the
            loader cannot crop while reading.
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
                 read_thread: bool | None = None) -> None:
        if seed is not None:  # checked before anything changes; its low 63 bits are used below
            seed = checked_seed(seed, "DataLoader", lo=0)
        self._auto_device = device is None or (isinstance(device, str) and device == "auto")
        self.device = dev.resolve_device(device)
        if jit_compile is not None:
            dev.set_jit_compile(jit_compile, self.device)
        if device_prefetch < 0:
            raise UserValueError(f"device_prefetch={device_prefetch}: use 0 (no prefetch) or more")
        # the low 63 bits, so seed + epoch stays a generator seed
        self.seed = (seed if seed is not None else
                     generator.initial_seed() if generator is not None else 0) & _MASK
        torch_shuffle = shuffle
        if sampler is None and batch_sampler is None and not isinstance(dataset, IterableDataset):
            sampler = loader_order(dataset, bool(shuffle), self.seed)
            torch_shuffle = None
        accel = dev.is_accelerator(self.device)
        pin = bool(pin_memory) and accel
        if collate_fn is None and (batch_size is not None or batch_sampler is not None):
            collate_fn = functools.partial(collate_host, pin=pin and num_workers == 0,
                                           stream=state_of(dataset))
        elif is_collate_samples(collate_fn) and not _wraps(collate_fn, collate_host):
            # collate_samples passed as collate_fn: the same assembler, its HostBatch kept
            given = collate_fn.keywords if isinstance(collate_fn, functools.partial) else {}
            collate_fn = functools.partial(collate_host, pin=bool(given.get("pin", False)),
                                           stream=state_of(dataset))
        elif collate_fn is not None and not (is_collate_samples(collate_fn)
                                             or _wraps(collate_fn, _listed)):
            collate_fn = functools.partial(_listed, collate_fn)
        if _wraps(worker_init_fn, _worker_init):  # a loader rebuilt from our attributes
            worker_init_fn = worker_init_fn.args[0]  # type: ignore[union-attr]
        if multiprocessing_context is None and num_workers > 0:
            multiprocessing_context = dev.start_method(self.device)
        super().__init__(
            dataset, batch_size=batch_size, shuffle=torch_shuffle, sampler=sampler,
            batch_sampler=batch_sampler, num_workers=num_workers, collate_fn=collate_fn,
            pin_memory=pin and num_workers > 0, drop_last=drop_last, timeout=timeout,
            worker_init_fn=functools.partial(_worker_init, worker_init_fn),
            multiprocessing_context=multiprocessing_context,
            generator=generator, prefetch_factor=prefetch_factor,
            **dataloader_kwargs(persistent_workers=persistent_workers,
                                pin_memory_device=pin_memory_device, in_order=in_order),
        )
        if "in_order" not in DATALOADER_ARGS:
            self.in_order = in_order  # as newer torch keeps it (a rebuild reads it back)
        self.device_prefetch = device_prefetch
        self._read_threads = torch.get_num_threads()  # the read thread's (read_ahead)
        weakref.finalize(self, release_reused)  # the batch buffers kept for reuse go with it
        self.jit_compile = jit_compile
        if image_key is not None and (isinstance(image_key, bool)
                                      or not isinstance(image_key, int | str)):
            raise UserTypeError(
                f"DataLoader: image_key={image_key!r} must be a tuple position (int) "
                "or a dict key (str)"
            )
        self.image_key = image_key
        if transform is None and _ours(dataset):  # torchvision's .transform is per sample
            transform = getattr(dataset, "transform", None)
        self.transform = transform
        bind_buckets(transform, self.batch_sampler if batch_sampler is not None else None,
                     batch_size)
        check_captions(dataset, transform)
        if read_crop is not None and not isinstance(read_crop, bool):
            raise UserTypeError(f"DataLoader: read_crop={read_crop!r} must be True, False or None")
        self.read_crop = read_crop
        if decode not in ("exact", "fast"):
            raise UserValueError(f"DataLoader: decode={decode!r} must be 'exact' (the pixels of a "
                                 "full decode) or 'fast' (DCT-scaled JPEG decoding, not exact)")
        self.decode = decode
        if read_thread is not None and not isinstance(read_thread, bool):
            raise UserTypeError(
                f"DataLoader: read_thread={read_thread!r} must be True, False or None"
            )
        self.read_thread = read_thread
        self._indices = PassIndices(super()._index_sampler)
        self._crop_read = Requests(dataset, self._indices if self.batch_sampler is not None
                                   else None)
        if read_crop:
            why = refusal(self)
            if why:
                raise UserValueError(f"DataLoader(read_crop=True): {why} — drop read_crop=True")
        self._order: Any = resume.order_of(self.sampler, self.batch_sampler, self.dataset)
        self._epoch = int(getattr(self._order, "epoch", 0) or 0)
        self._chosen: int | None = None  # set_epoch() on the loader since the last pass began
        self._mark = epoch_mark(self._order)  # the order's epoch as the loader last left it
        self._last: tuple[int, int] | None = None  # (epoch, repeat) of the last pass begun
        self._resume: resume.Resume | None = None  # load_state_dict(): the next pass continues
        self._pass: resume.Pass | None = None
        self._adopted = False
        self._transform_generator: torch.Generator | None = None
        self.host_bytes = 0  # bytes of the host batches handed to the device so far

    # --- epochs and length ----------------------------------------------------------------
    @property
    def epoch(self) -> int:
        """The epoch the next pass serves (a resumed one, one chosen by ``set_epoch``, else
        the one after the last pass)."""
        return self._resume.epoch if self._resume is not None else self._next_epoch()

    def _next_epoch(self) -> int:
        if self._chosen is not None:
            return self._chosen
        mark = epoch_mark(self._order)
        if mark != self._mark and mark[0] is not None:  # its set_epoch was called directly
            return int(mark[0])
        if self._last is not None:
            return self._last[0] + 1
        return int(mark[0]) if mark[0] is not None else self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Serve ``epoch`` next (its order and augmentation): sets the epoch of the loader, of
        its sampler and of an iterable dataset that has ``set_epoch`` (e.g.
        WebDatasetStream). A pending resume of another epoch is dropped."""
        epoch = int(epoch)
        self._chosen = self._epoch = epoch
        resume.set_epoch(self._order, epoch)
        if self._resume is not None and self._resume.epoch != epoch:
            self._resume = None

    def __len__(self) -> int:
        """Batches in the epoch (all of them, also while a resumed pass serves the rest)."""
        self._adopt()
        if self._resume is not None:
            rest = resume.pass_length(self._order, super().__len__())
            return rest + (self._resume.batches if self._resume.native else 0)
        p = self._pass
        if p is not None and p.active and p.length is not None:
            return p.length
        return super().__len__()

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name == "_is_accelerate_prepared" and value and self.__dict__.get("_adopted") is False:
            self._adopt()  # accelerator.prepare() marks the loader it returns: adopt it now

    def _adopt(self) -> None:
        """Take over what Accelerate's prepare() would have done (``loaders.frameworks``)."""
        if not self._adopted and frameworks.prepared(self):
            self._adopted = True
            frameworks.adopt(self)

    def _rank(self) -> int:
        rank = getattr(self._order, "rank", 0)  # a stream's may be None (read when it runs)
        return rank if isinstance(rank, int) else 0

    @property
    def _index_sampler(self) -> Any:  # torch's iterators take their batches from here
        crop_read = self.__dict__.get("_crop_read")
        if crop_read is not None and crop_read.batches is not None:
            return crop_read.batches  # batches as requests (loaders.request)
        indices = self.__dict__.get("_indices")
        return indices if indices is not None else super()._index_sampler

    # --- iteration --------------------------------------------------------------------------
    def _reads_ahead(self) -> bool:
        """Whether this pass reads on a background thread (``read_thread``; see the class)."""
        if self.num_workers > 0:
            return False
        if self.read_thread is not None:
            return self.read_thread
        return _ours(self.dataset)

    def _host_params(self, host: Any, epoch: int) -> tuple[Any, Keyed | None]:
        """The batch to deliver and its keyed per-sample parameters on the host: the
        request's (drawn once, ``loaders.request``), else drawn here (``transforms.draws``)
        from its sizes and sample ids; None when the transform cannot draw them or the batch
        carries no sample ids (then the transform runs with a generator seeded per batch)."""
        params: Params | None = None
        cropped = False
        if isinstance(host, HostBatch):
            request = host.request
            if request is not None and (request.seed, request.epoch) != (self.seed, epoch):
                raise UserError(
                    f"crop at read: a batch's crops were drawn for seed {request.seed}, epoch "
                    f"{request.epoch} but this pass is seed {self.seed}, epoch {epoch} — one "
                    "stream feeds two loaders at once; give each loader its own stream or "
                    "pass read_crop=False")
            params, cropped, host = host.params, host.cropped, host.as_dict()
        t = self._crop_read.transform
        if t is None or not isinstance(host, Mapping) or \
                not isinstance(host.get("sizes"), torch.Tensor):
            return host, None
        if params is None:
            ids = sample_ids(host)
            if ids is None:
                return host, None
            keys = draws.sample_keys(self.seed, epoch, ids)
            params = t.draw_keyed(host["sizes"].numpy(), keys)
        return host, Keyed(params, cropped)

    def _transform(self, batch: Any, number: int, epoch: int, aug: Keyed | None = None) -> Any:
        if self.transform is None:
            return batch
        if aug is not None:  # keyed: parameters drawn on the host, shipped with the batch
            # a batch our collate built is the loader's alone: the kernels may write into it
            mine = batch.get("image") if is_collate_samples(self.collate_fn) else None
            t = self._crop_read.transform
            assert t is not None  # aug is drawn only for a keyed transform (_host_params)
            with donating(mine):
                out = apply_after_read(t, batch, aug.params, aug.cropped)
            out["aug"] = aug.params
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

    def _begin_pass(self) -> resume.Pass:
        """Decide this pass's epoch (module doc of ``loaders.resume`` for the resume) and set
        the index sampler's hooks."""
        order, pending = self._order, self._resume
        self._resume = None
        mark = epoch_mark(order)
        if pending is not None and mark != self._mark and mark[0] is not None and \
                int(mark[0]) != pending.epoch:  # its set_epoch chose another epoch: it wins
            pending = None
        if pending is not None:
            epoch, repeat, base = pending.epoch, pending.repeat, pending.batches
        else:
            epoch, base = self._next_epoch(), 0
            repeat = self._last[1] + 1 if self._last is not None and self._last[0] == epoch else 0
        resume.set_epoch(order, epoch)
        self._chosen, self._mark, self._epoch, self._last = None, epoch_mark(order), epoch, (
            epoch, repeat)
        native = resume.native(order)
        p = resume.Pass(epoch, repeat, base, native=native)
        skip = base if pending is not None and not native else 0
        if isinstance(self.dataset, IterableDataset):
            p.discard = skip  # a stream is fast-forwarded by reading (it has no indices)
        else:
            p.skip = self._indices.skip = skip
            if not p.native:
                replay = pending.replay if pending is not None else None
                self._indices.start = functools.partial(resume.snapshot_pass, p, order, replay)
        try:  # the index sampler's length now (an earlier pass may still be held open)
            length: int | None = TorchDataLoader.__len__(self)
        except TypeError:  # an iterable dataset without len()
            length = None
        if length is not None:
            length = resume.pass_length(order, length) + (base if native and pending else 0)
        p.length = length
        self._pass = p
        return p

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]  # a generator of batches
        self._adopt()
        p = self._begin_pass()
        aug_epoch = p.epoch + (p.repeat << 32)  # a repeated epoch still gets new augmentation
        armed = self._crop_read.begin(self, aug_epoch)  # ended with (or when dropping) the pass
        source: Iterator[Any] = super().__iter__()
        if self.num_workers == 0:  # read here: our datasets serve raw samples to us
            source = host_transform.loader_reads(source)
        if self._reads_ahead():
            source = read_ahead(source, _READ_AHEAD, self._read_threads)
        stream = dev.new_stream(self.device) if self.device_prefetch > 0 else None
        accel = dev.is_accelerator(self.device)
        pending: deque[Any] = deque()
        link = frameworks.GradientStateLink(self) if self._adopted else None

        def submit() -> bool:
            if pending and isinstance(pending[-1][0], Exception):
                return False  # nothing is read past a failed batch
            try:
                while p.discard:  # a resumed stream: the batches it already served
                    next(source)
                    p.discard -= 1
                host = next(source)
            except StopIteration:
                return False
            except Exception as exc:  # raised when its batch is due, as torch's loader does
                pending.append((exc, None))
                return False
            host, aug = self._host_params(host, aug_epoch)
            self.host_bytes += tensor_bytes(host)
            with dev.stream_context(stream):  # on the CPU every tensor already is there
                moved = to_device(host, self.device, non_blocking=accel) if accel else host
                # apply() takes the host parameters as they are (the kernels queue what they
                # need on the device and read pass orders on the host, never back)
                pending.append((moved, aug))
            return True

        try:
            for _ in range(max(1, self.device_prefetch)):
                if not submit():
                    break
            while pending:
                batch, aug = pending.popleft()
                if isinstance(batch, Exception):
                    raise batch
                if stream is not None:
                    consumer = dev.current_stream(self.device)
                    consumer.wait_stream(stream)
                    _record(batch, consumer)
                submit()
                out = self._transform(batch, p.base + p.yielded, aug_epoch, aug)
                p.yielded += 1
                if link is not None and not pending:
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

    # --- resume -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Plain state to resume exactly where this loader stands: the epoch, the batches of
        it already yielded and what re-creates its order (``loaders.resume``). Saved between
        epochs, it starts the next epoch. Never raises for a sampler: one that cannot be
        re-created exactly is resumed as closely as possible, with a warning."""
        if self._resume is not None:  # loaded, not iterated yet: the loaded state
            return dict(self._resume.state)
        p, order = self._pass, self._order
        if p is None or self._between_epochs(p):
            epoch = self.epoch
            repeat = self._last[1] + 1 if self._last is not None and self._last[0] == epoch else 0
            state: dict[str, Any] = {
                "version": resume.LOADER_VERSION, "epoch": epoch, "batches": 0, "repeat": repeat,
                "seed": self.seed, "batch_size": self.batch_size}
            fresh = resume.fresh_state(order, epoch)
            if fresh is not None:
                state["sampler"] = fresh
            return state
        state = {"version": resume.LOADER_VERSION, "epoch": p.epoch, "batches": p.base + p.yielded,
                 "repeat": p.repeat, "seed": self.seed, "batch_size": self.batch_size}
        if p.native:
            consumed = resume.consumed(order, self._indices.sizes, p.skip + p.yielded)
            state["sampler"] = order.state_dict(consumed=consumed)
        elif isinstance(self.dataset, IterableDataset):
            state["replay"] = {"type": type(self.dataset).__name__, "stream": True}
        else:
            state["replay"] = {"type": type(order).__name__, **(p.snapshot or {})}
            if p.inexact:
                warn_once(f"DataLoader.state_dict: the resume will not be exact — {p.inexact}")
        if self.num_workers > 0 and getattr(self, "in_order", True) is False:
            warn_once("DataLoader.state_dict: in_order=False — the batches yielded are not the "
                      "first ones of the epoch, so a resume will not be exact")
        return state

    def _between_epochs(self, p: resume.Pass) -> bool:
        """The last pass is over (all its batches yielded) or another epoch was chosen."""
        done = p.finished or (p.length is not None and p.base + p.yielded >= p.length)
        mark = epoch_mark(self._order)
        moved = mark != self._mark and mark[0] is not None and int(mark[0]) != p.epoch
        return done or (self._chosen is not None and self._chosen != p.epoch) or moved

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Make the next pass continue the saved epoch with exactly the unseen batches.

        Raises:
            UserError: a state whose keys are missing, of the wrong type or out of range, of
                another dataset, or one that cannot resume this sampler exactly (nothing is
                changed).
        """
        order = self._order
        stream = isinstance(self.dataset, IterableDataset)
        try:  # the epoch's batches, to bound a fast-forward
            length: int | None = None if resume.native(order) else TorchDataLoader.__len__(self)
        except TypeError:
            length = None
        pending = resume.read_state(state, order, length, stream)
        epoch, batches, replay = pending.epoch, pending.batches, pending.replay
        self.seed = int(state.get("seed", self.seed)) & _MASK
        if not pending.native:
            resume.set_epoch(order, epoch)
            why = None
            saved = (replay or {}).get("type", "NpuDistributedSampler")
            if batches and saved != type(order).__name__ and not (stream and replay):
                why = f"saved with {saved}, resumed with {type(order).__name__}"
            elif batches and state.get("batch_size", self.batch_size) != self.batch_size:
                why = (f"saved with batch_size={state.get('batch_size')}, resumed with "
                       f"{self.batch_size}")
            if why:
                warn_once(f"DataLoader.load_state_dict: the resume will not be exact — {why}")
                pending.replay = None
        elif state.get("sampler") is None:  # the start of an epoch: its order, nothing to skip
            resume.set_epoch(order, epoch)
        self._resume = pending
        self._epoch, self._chosen, self._mark = epoch, None, epoch_mark(order)


def _worker_init(user_init: Callable[[int], None] | None, worker_id: int) -> None:
    """Freeze what the worker inherited: the garbage collector never scans (nor dirties,
    copy-on-write) those objects again, so batches cost less and worker memory stays flat.
    Mark the process as this loader's: datasets serve it raw samples."""
    gc.freeze()
    host_transform.mark_worker()
    if user_init is not None:
        user_init(worker_id)


def _image_position(batch: list[Any] | tuple[Any, ...], key: int | str | None = None) -> int:
    """Index of the image tensor of a tuple/list batch: ``key`` when it is a position, else
    the first uint8 (B, C, H, W) tensor."""
    if isinstance(key, int):
        v = batch[key] if -len(batch) <= key < len(batch) else None
        if not (isinstance(v, torch.Tensor) and v.dtype == torch.uint8 and v.ndim == 4):
            kind = (f"{type(v).__name__}{tuple(v.shape) if isinstance(v, torch.Tensor) else ''}"
                    if v is not None else f"absent (the batch has {len(batch)} elements)")
            raise UserError(f"DataLoader: image_key={key}: batch element {key} is {kind}, not "
                            "a uint8 (B, C, H, W) image tensor")
        return key
    for i, v in enumerate(batch):
        if isinstance(v, torch.Tensor) and v.dtype == torch.uint8 and v.ndim == 4:
            if v.shape[1] not in (1, 3, 4) and v.shape[3] in (1, 3, 4):
                raise UserError(
                    f"DataLoader transform: batch element {i} looks channels-last "
                    f"{tuple(v.shape)} — return (C, H, W) images or permute in collate_fn")
            return i
    kinds = ", ".join(f"{type(v).__name__}{tuple(v.shape) if isinstance(v, torch.Tensor) else ''}"
                      for v in batch)
    raise UserError(f"DataLoader transform: the {type(batch).__name__} batch ({kinds}) has no "
                    "uint8 (B, C, H, W) image tensor — return one from the dataset/collate_fn "
                    "or drop transform=")


def _ours(dataset: Any) -> bool:
    """A dataset of this package (or a subclass): its ``transform`` is a device batch one."""
    return any(c.__module__.startswith("npu_data.") for c in type(dataset).__mro__)


def _wraps(fn: Any, inner: Callable[..., Any]) -> bool:
    """``fn`` is ``functools.partial(inner, ...)``."""
    return isinstance(fn, functools.partial) and fn.func is inner


def _listed(collate_fn: Callable[[list[Any]], Any], samples: Any) -> Any:
    """Give a user ``collate_fn`` the plain list of sample dicts, not a lazy ColumnBatch."""
    return collate_fn(list(samples) if isinstance(samples, ColumnBatch) else samples)
