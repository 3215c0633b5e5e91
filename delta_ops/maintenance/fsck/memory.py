"""The Arrow memory pool fsck runs with: one that hands freed memory back.

fsck streams a large table batch by batch (the data check's groups, VACUUM's spilled
references and listing), so what it holds at once does not grow with the table; but each
batch is allocated and freed on Arrow's and the engine's threads, and mimalloc (Arrow's
default pool) keeps freed pages mapped per thread. Measured on the scale benchmarks' table
(`benchmarks/bench_fsck.py`): after the data check, live Arrow memory is about 1 MB and live
Python memory about 30 MB at 1M and at 3M live files, yet the process held about 360 and
450 MB (at 1M, 190 MB of it in mimalloc's arena, two thirds of which a collection from the main
thread does not give back); VACUUM's dry run then added over 100 MB on top. With jemalloc
(its freed pages decay back to the system) the whole run's peak is about 40% lower (1M:
524 to 330 MB, 3M: 634 to 373 MB, single runs). The system allocator stands in when this
Arrow has no jemalloc. A pool named in `ARROW_DEFAULT_MEMORY_POOL` is the user's choice and
is kept.

Only pyarrow calls that take the default pool see the change (`pyarrow.set_memory_pool`);
Arrow's C++ code that allocates from its own default (chosen at startup, which
`ARROW_DEFAULT_MEMORY_POOL` sets) keeps that one.

The pool is Arrow's process-wide default, set for the length of a `returning_pool` block
(nested and concurrent blocks share it: the first sets it, the last restores the one that
was there). Buffers remember their pool, so one allocated inside and freed outside (or the
other way) is freed by the pool that allocated it. Protocol sections: none.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_LOCK = threading.Lock()
_users = 0
_saved: Any = None


def _returning() -> Any:
    """jemalloc's pool, else the system allocator's (None: keep the default)."""
    import pyarrow as pa

    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return None
    try:
        return pa.jemalloc_memory_pool()
    except NotImplementedError:  # an Arrow built without jemalloc
        return pa.system_memory_pool()


@contextmanager
def returning_pool() -> Iterator[None]:
    """Run the block with Arrow's default pool set to one that returns freed memory."""
    import pyarrow as pa

    global _users, _saved
    with _LOCK:
        if _users == 0:
            pool = _returning()
            _saved = None
            if pool is not None and pool.backend_name != pa.default_memory_pool().backend_name:
                _saved = pa.default_memory_pool()
                pa.set_memory_pool(pool)
        _users += 1
    try:
        yield
    finally:
        with _LOCK:
            _users -= 1
            if _users == 0 and _saved is not None:
                pa.set_memory_pool(_saved)
                _saved = None


__all__ = ["returning_pool"]
