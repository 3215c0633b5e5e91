"""The process's one pool of I/O threads, with one sizing rule.

Reading a log fans out: sidecars and checkpoint row groups are decoded side by side, deltas
and object-store probes wait on the network, a sensor tick looks at many tables at once.
All of it runs on this pool (`io_map`, `io_submit`), so the process holds one set of
threads, sized once: `default_io_threads()` (at least 16, because a request to an object
store waits on the network, not on a core; at least one per core, because decoding Parquet
is CPU work). The edge that knows better (a library caller, the command line, the Dagster
definitions) calls `set_io_threads(n)`; nothing deeper reads a setting. The local engine's
worker pool (`engine.local.LocalEngine(max_workers=...)`) stays the engine's own.

This module sits in `engine/` but imports nothing of delta_ops, so `log/` (which the engine
never imports) may use it without a cycle; it imports no pyarrow.

Nested fan-out cannot deadlock: a task that fans out waits for its children by running,
in its own thread, every child no thread has started yet (`Task.result`), so a waiting
thread never waits on work queued behind it, whatever the pool's size. A pool of one thread
is enough for any depth of nesting.

Protocol sections: none (execution only).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Generic, TypeVar

__all__ = ["Task", "default_io_threads", "io_map", "io_submit", "io_threads", "request_threads",
           "run_in_own_thread", "set_io_threads"]

T = TypeVar("T")
R = TypeVar("R")

_POOL: ThreadPoolExecutor | None = None
_THREADS: int | None = None  # None: default_io_threads()
_LOCK = threading.Lock()


def default_io_threads() -> int:
    """The one sizing rule: max(16, CPUs)."""
    return max(16, os.cpu_count() or 1)


def io_threads() -> int:
    """The size of the pool: what `set_io_threads` set, else `default_io_threads()`."""
    return _THREADS or default_io_threads()


def set_io_threads(threads: int | None) -> None:
    """Size the pool (None: the default rule). Takes effect for work submitted afterwards;
    work already running on the old pool finishes there.

    Raises:
        ValueError: `threads` is below 1.
    """
    global _POOL, _THREADS
    if threads is not None and threads < 1:
        raise ValueError(f"the I/O pool needs at least one thread, not {threads}")
    with _LOCK:
        old, _POOL, _THREADS = _POOL, None, threads
    if old is not None:
        old.shutdown(wait=False)


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(io_threads(), thread_name_prefix="delta_ops-io")
        return _POOL


def _forget_pool() -> None:
    """A forked child has none of the parent's threads: it starts its own pool."""
    global _POOL, _LOCK
    _POOL, _LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)


class Task(Generic[R]):
    """One call submitted to the pool. `result()` runs the call in the waiting thread when
    no pool thread has started it yet, so waiting never deadlocks on a full pool."""

    def __init__(self, fn: Callable[..., R], args: tuple) -> None:
        self._fn, self._args = fn, args
        self._future: Future[R] = _pool().submit(fn, *args)

    def result(self) -> R:
        if self._future.cancel():
            return self._fn(*self._args)
        return self._future.result()

    def cancel(self) -> bool:
        return self._future.cancel()


def io_submit(fn: Callable[..., R], *args: Any) -> Task[R]:
    """Start `fn(*args)` on the pool."""
    return Task(fn, args)


def io_map(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """`[fn(i) for i in items]`, side by side on the pool, results in order. One item runs
    in the calling thread. The first error is raised once the calls not started are
    cancelled."""
    items = list(items)
    if len(items) <= 1:
        return [fn(i) for i in items]
    tasks = [io_submit(fn, i) for i in items]
    out: list[R] = []
    try:
        for task in tasks:
            out.append(task.result())
    except BaseException:
        for task in tasks:
            task.cancel()
        raise
    return out


# ---- threads that wait on an object store's request limit ----------------------------------


def request_threads(workers: int, name: str) -> ThreadPoolExecutor:
    """A pool of `workers` threads for blocking requests that an event loop awaits
    (`loop.run_in_executor`): the S3 listings and deletes at the request limit keep
    `workers` requests in flight (`storage.s3_bulk`, `storage.s3_client`). Its size is the
    store's concurrency limit, not the I/O pool's rule, and it is a pool of its own because
    the loop that awaits these calls may itself be awaited by a task of the I/O pool: sharing
    that pool could leave every thread waiting. It lives as long as its owner (the S3
    client, kept per storage options for the process)."""
    if workers < 1:
        raise ValueError(f"a request pool needs at least one thread, got {workers}")
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)


def run_in_own_thread(fn: Callable[[], R]) -> R:
    """`fn()` in a new thread of its own, and its result (or its error): for a call that runs
    an event loop (`asyncio.run`) from a thread that may be running one already."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="delta_ops-loop") as one:
        return one.submit(fn).result()
