"""Which Arrow memory pool the heavy work runs with: one that hands freed memory back.

Arrow's default pool (mimalloc) keeps freed pages mapped, per thread, for a while. Work that
allocates and frees a batch at a time then holds far more than it uses:

- OPTIMIZE and purge free a row group at a time. The layout benchmark's optimize peaked at
  about 350 MB with mimalloc and 240 MB with jemalloc, in the same time (docs/layout.md).
  Run in a Dagster run's process, the same OPTIMIZE peaked at 396-450 MB with mimalloc and
  313-318 MB with jemalloc.
- fsck streams a large table batch by batch. Live Arrow memory stayed about 1 MB, yet the
  process held 360 MB at 1M files. With jemalloc the run's peak fell by about 40%
  (docs/fsck.md).
- A VACUUM dry run listing 275,000 keys on S3 (moto) peaked at 421 MB with mimalloc and
  298 MB with jemalloc, in the same time. Commands on small tables took the same time
  with either pool.

Arrow configures jemalloc so that freed pages decay back to the system within a second.

Arrow has two defaults, the C++ one it picks at its first allocation and pyarrow's, and a
Spark session's Python workers are processes of their own. So there are three ways to
choose:

- `prefer_returning_pool_at_start()` sets `ARROW_DEFAULT_MEMORY_POOL=jemalloc` before pyarrow
  is imported. Arrow reads the variable once, at its first allocation, and its C++ code
  (Parquet decoding and encoding on its own threads among it) then allocates from jemalloc.
  The CLI does this for every command. The Dagster wing does it when it builds its
  definitions; that happens at load, in the code server and in every run worker, and the
  run workers a code server starts inherit the variable.
- `executor_pool()` is the same choice for a Spark session's Python workers, which start
  in processes of their own (`spark.executorEnv`). On a `local-cluster` of the scale
  benchmark's 1M-file table, their peak fell from 440 to 379 MB (checkpoint) and from 325
  to 270 MB (`crc compute --full`), in the same time (single runs).
- `returning_pool()` sets pyarrow's default pool (`pyarrow.set_memory_pool`) for the length
  of a block. Only pyarrow calls that take the default pool see it, so it reaches part of
  what the variable does. It is the fallback for a process that imported pyarrow first.

A pool the user named in `ARROW_DEFAULT_MEMORY_POOL` is always kept. Where Arrow is built
without jemalloc, the variable is left alone and `returning_pool` uses the system
allocator. Protocol sections: none.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: The environment variable Arrow reads, once, to choose its default pool.
POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"

_LOCK = threading.Lock()
_users = 0
_saved: Any = None


@functools.cache
def _arrow_has_jemalloc() -> bool:
    """Whether the installed pyarrow is built with jemalloc, read (once) from its
    `arrow/util/config.h` so that pyarrow is not imported."""
    spec = importlib.util.find_spec("pyarrow")
    if spec is None or not spec.submodule_search_locations:
        return False
    for folder in spec.submodule_search_locations:
        config = os.path.join(folder, "include", "arrow", "util", "config.h")
        try:
            with open(config, encoding="utf-8") as fh:
                return "#define ARROW_JEMALLOC\n" in fh.read()
        except OSError:
            continue
    return False


def prefer_returning_pool_at_start() -> bool:
    """Have Arrow start with jemalloc, when that can still be chosen.

    Sets `ARROW_DEFAULT_MEMORY_POOL=jemalloc` in this process's environment (and so in the
    environment of the processes it starts) unless the user set the variable, pyarrow is
    already imported, or pyarrow is built without jemalloc.

    Returns:
        Whether the variable names jemalloc now, either set here or by the user.
    """
    if POOL_ENV in os.environ:
        return os.environ[POOL_ENV] == "jemalloc"
    if "pyarrow" in sys.modules or not _arrow_has_jemalloc():
        return False
    os.environ[POOL_ENV] = "jemalloc"
    return True


def executor_pool() -> str | None:
    """The pool a Spark session's Python workers should start with: the one this process's
    `ARROW_DEFAULT_MEMORY_POOL` names, else jemalloc when this pyarrow has it (None: leave
    them Arrow's default). The Spark engine passes it as
    `spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL`, which a `conf` entry of the user's
    overrides."""
    if os.environ.get(POOL_ENV):
        return os.environ[POOL_ENV]
    return "jemalloc" if _arrow_has_jemalloc() else None


def _returning() -> Any:
    """jemalloc's pool, else the system allocator's (None: keep the default)."""
    import pyarrow as pa

    if os.environ.get(POOL_ENV):
        return None
    try:
        return pa.jemalloc_memory_pool()
    except NotImplementedError:  # an Arrow built without jemalloc
        return pa.system_memory_pool()


@contextmanager
def returning_pool() -> Iterator[None]:
    """Run the block with pyarrow's default pool set to one that returns freed memory.

    The pool is process-wide. Nested and concurrent blocks share it: the first one sets it
    and the last one restores the pool that was there. Buffers remember their pool, so one
    allocated inside the block and freed outside it (or the other way) goes back to the
    pool that allocated it. With `ARROW_DEFAULT_MEMORY_POOL` set (by the user or by
    `prefer_returning_pool_at_start`), nothing is changed.
    """
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


__all__ = ["POOL_ENV", "executor_pool", "prefer_returning_pool_at_start", "returning_pool"]
