"""Dynamic batching: concurrent requests merged into one engine call.

Each HTTP request hands :meth:`DynamicBatcher.submit` its items (a request's ``(query, passage)``
pairs). One worker thread takes the first waiting request, then every request that arrives within
``max_wait_ms`` or is already queued, up to ``max_batch_items`` items, and runs the model once over
all of them; the engine cuts that call into forward passes under its padded-token budget
(``batch_tokens``, :class:`~inference.engine.ScoringEngine`). While the model runs, new requests
queue, so under load batches grow without waiting; a lone request waits at most ``max_wait_ms``.

The queue is bounded in items (``max_queue_items``): a request that would pass the bound is refused
with :class:`QueueFull` at once (the server answers 503 with ``Retry-After``), so a burst cannot
grow memory or latency without limit. A request larger than ``max_batch_items`` runs alone.

The function the batcher calls maps a list of items to one result per item, in order. The scorers
tokenise and score every pair on its own; sharing a call with other requests changes only which
sequences sit beside a pair in the packed matrix products, so a lone request's scores are those of
``inference.load(DIR).score`` exactly, and a merged one's agree to float rounding (within 1e-9 in
``tests/test_serving.py``; the test asserts 1e-6).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

logger = logging.getLogger(__name__)


class QueueFull(Exception):
    """The batcher's queue holds ``max_queue_items`` already: try again later (HTTP 503)."""


class BatcherStopped(Exception):
    """The batcher is stopping and takes no new work."""


@dataclass
class _Job:
    items: Sequence[Any]
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    enqueued: float = field(default_factory=time.perf_counter)


@dataclass
class BatchStats:
    """What the batcher did, for ``/metrics`` and the tests."""

    calls: int = 0
    items: int = 0
    requests: int = 0
    max_requests_per_call: int = 0


class DynamicBatcher:
    """Merge concurrent :meth:`submit` calls into calls of ``fn(items) -> results`` on one thread."""

    def __init__(self, fn: Callable[[list[Any]], Sequence[Any]], *, max_batch_items: int = 512,
                 max_wait_ms: float = 2.0, max_queue_items: int = 8192, name: str = "model",
                 on_batch: Callable[[int, int], None] | None = None):
        if max_batch_items < 1 or max_queue_items < 1 or max_wait_ms < 0:
            raise ValueError("max_batch_items and max_queue_items must be >= 1 and max_wait_ms >= 0")
        self.fn = fn
        self.max_batch_items = max_batch_items
        self.max_wait = max_wait_ms / 1000.0
        self.max_queue_items = max_queue_items
        self.name = name
        self.on_batch = on_batch  # (requests, items) per model call
        self.stats = BatchStats()
        self._jobs: deque[_Job] = deque()
        self._queued_items = 0
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None

    # -- state ---------------------------------------------------------------------------------
    @property
    def queued_items(self) -> int:
        """Items waiting for the model (not those it is running)."""
        return self._queued_items

    def start(self) -> "DynamicBatcher":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"batcher-{self.name}", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Take no new work, finish what is queued, and end the worker thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    # -- requests ------------------------------------------------------------------------------
    async def submit(self, items: Sequence[Any]) -> list[Any]:
        """The results of ``items``, in order, once a model call that holds them ends."""
        if not items:
            return []
        loop = asyncio.get_running_loop()
        job = _Job(items, loop.create_future(), loop)
        with self._cond:
            if self._stopping:
                raise BatcherStopped(f"{self.name}: the server is stopping")
            if self._queued_items and self._queued_items + len(items) > self.max_queue_items:
                raise QueueFull(f"{self.name}: {self._queued_items} items are queued (max {self.max_queue_items})")
            self._jobs.append(job)
            self._queued_items += len(items)
            self._cond.notify()
        return await job.future

    # -- the worker ----------------------------------------------------------------------------
    def _take(self) -> list[_Job] | None:
        """The next batch of jobs, or None once stopping with nothing queued."""
        with self._cond:
            while not self._jobs:
                if self._stopping:
                    return None
                self._cond.wait()
            batch = [self._jobs.popleft()]
            n = len(batch[0].items)
            deadline = batch[0].enqueued + self.max_wait
            while n < self.max_batch_items:
                if self._jobs:
                    if n + len(self._jobs[0].items) > self.max_batch_items:
                        break
                    job = self._jobs.popleft()
                    batch.append(job)
                    n += len(job.items)
                    continue
                left = deadline - time.perf_counter()
                if left <= 0 or self._stopping:
                    break
                self._cond.wait(left)
            self._queued_items -= n
            return batch

    def _run(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            items = [it for job in batch for it in job.items]
            try:
                results = list(self.fn(items))
                if len(results) != len(items):
                    raise RuntimeError(f"{self.name}: {len(results)} results for {len(items)} items")
                error = None
            except Exception as e:  # handed to every waiting request; the worker goes on
                logger.exception("%s: a model call of %d items failed", self.name, len(items))
                results, error = [], e
            self.stats.calls += 1
            self.stats.items += len(items)
            self.stats.requests += len(batch)
            self.stats.max_requests_per_call = max(self.stats.max_requests_per_call, len(batch))
            if self.on_batch is not None:
                self.on_batch(len(batch), len(items))
            at = 0
            for job in batch:
                part = None if error else results[at : at + len(job.items)]
                at += len(job.items)
                job.loop.call_soon_threadsafe(_resolve, job.future, part, error)


def _resolve(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if future.cancelled():  # the client went away
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
