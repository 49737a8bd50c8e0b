"""Batches ahead of the consumer: host batches read on a thread, copied to the device a few
batches ahead.

``DevicePrefetcher.batches`` reads the next ``depth`` host batches, prepares each one on the
host (the batch to deliver and its keyed parameters) and queues its copy to the device with
``non_blocking`` copies on a side stream; when a batch is due the consuming stream waits on that stream and every tensor
of the batch is ``record_stream``'d, so its memory is not reused early. On the CPU the same
path runs without streams or copies. A batch that fails to load raises when it is due (after
the batches before it), as torch's loader does; nothing is read past it.

**Read ahead on a thread** (:func:`read_ahead`): the batches of an iterator produced by one
background thread of this process while the caller consumes the previous ones.

The loader's in-process mode (``num_workers=0``): reading, crop-region decoding and collating
run in compiled code that releases the GIL (libjpeg-turbo, the resize kernels), so one
producer thread overlaps them with the main thread's device transform — two cores busy with
no worker processes, no shared-memory hand-off and no pickling. Batches come in the
iterator's order; an exception in the producer is raised in the consumer at the batch where
it happened; closing the consumer (``break``, garbage collection) stops the producer.

The producer thread is given the consumer's torch thread count (``threads``), which its
compiled kernels spread a batch over: a thread otherwise takes torch's process-wide default
when it first asks, and torch's pin-memory thread (any DataLoader with ``pin_memory`` and
workers) sets that default to 1 — seen on a 16-core GPU machine, where it left in-process
decoding on one core.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import torch

from npu_data import device as dev
from npu_data.buffers import nbytes

_NO_STREAM = contextlib.nullcontext()


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
        return rebuild(batch, [to_device(v, device, non_blocking) for v in batch])
    return batch


def tensor_bytes(batch: Any) -> int:
    """Bytes of every tensor of a (nested) batch (``buffers.nbytes``)."""
    return nbytes((batch,))


def rebuild(batch: list[Any] | tuple[Any, ...], items: list[Any]) -> Any:
    """``items`` in a container of ``batch``'s type (named tuples included)."""
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*items)
    return type(batch)(items)


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


def _record(batch: Any, stream: Any) -> None:
    if isinstance(batch, torch.Tensor):
        batch.record_stream(stream)
    elif isinstance(batch, dict):
        for v in batch.values():
            _record(v, stream)
    elif isinstance(batch, (list, tuple)):
        for v in batch:
            _record(v, stream)


class DevicePrefetcher:
    """One loader's copies to the device (module doc); ``host_bytes`` counts the bytes of
    the host batches it handed to the device so far, over every pass."""

    def __init__(self) -> None:
        self.host_bytes = 0

    def batches(self, source: Iterator[Any], device: torch.device, depth: int,
                prepare: Callable[[Any], tuple[Any, Any]],
                discard: int = 0) -> Iterator[tuple[Any, Any, bool]]:
        """``(batch on device, its keyed parameters or None, whether it is the last)`` for
        each batch of ``source`` after the first ``discard`` (read and dropped: a resumed
        stream), copied up to ``depth`` batches ahead (0: when due). ``prepare(host_batch)``
        gives ``(the batch to copy, its keyed parameters or None)``, before its copy is
        queued; the bytes counted are the parameters' ``nbytes`` where they know them (a
        ``HostBatch``: counted where it was made), else the batch's tensors'."""
        accel = torch.device(device).type != "cpu" and dev.is_accelerator(device)
        stream = dev.new_stream(device) if depth > 0 and accel else None
        pending: deque[tuple[Any, Any]] = deque()

        def submit() -> bool:
            nonlocal discard
            if pending and isinstance(pending[-1][0], Exception):
                return False  # nothing is read past a failed batch
            try:
                while discard:
                    next(source)
                    discard -= 1
                host = next(source)
            except StopIteration:
                return False
            except Exception as exc:  # raised when its batch is due, as torch's loader does
                pending.append((exc, None))
                return False
            host, drawn = prepare(host)
            known = getattr(drawn, "nbytes", None)
            self.host_bytes += known if isinstance(known, int) else tensor_bytes(host)
            # on the CPU every tensor already is there: no stream
            with dev.stream_context(stream) if stream is not None else _NO_STREAM:
                moved = to_device(host, device, non_blocking=accel) if accel else host
                # apply() takes the host parameters as they are (the kernels queue what they
                # need on the device and read pass orders on the host, never back)
                pending.append((moved, drawn))
            return True

        for _ in range(max(1, depth)):
            if not submit():
                break
        while pending:
            batch, aug = pending.popleft()
            if isinstance(batch, Exception):
                raise batch
            if stream is not None:
                consumer = dev.current_stream(device)
                consumer.wait_stream(stream)
                _record(batch, consumer)
            submit()
            yield batch, aug, not pending


# --- read ahead on a thread (module doc) ---
T = TypeVar("T")

_END = object()


class _Failed:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def read_ahead(source: Iterator[T], depth: int, threads: int | None = None) -> Iterator[T]:
    """``source``'s items, produced up to ``depth`` ahead on a daemon thread (which runs
    torch's CPU ops on ``threads`` threads when given)."""
    if depth < 1:
        raise ValueError(f"read_ahead: depth={depth} must be at least 1")
    items: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                items.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            if threads:
                torch.set_num_threads(threads)
            for item in source:
                if not put(item):
                    return
        except BaseException as exc:  # handed to the consumer, raised there
            put(_Failed(exc))
            return
        put(_END)

    thread = threading.Thread(target=produce, name="npu-data-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item = items.get()
            if item is _END:
                return
            if isinstance(item, _Failed):
                raise item.exc
            yield item
    finally:
        stop.set()
        thread.join()
