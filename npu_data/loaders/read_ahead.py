"""Read ahead on a thread: the batches of an iterator produced by one background thread of
this process while the caller consumes the previous ones.

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

import queue
import threading
from collections.abc import Iterator
from typing import Any, TypeVar

import torch

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
