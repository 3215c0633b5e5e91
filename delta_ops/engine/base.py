"""The Engine: where work that grows with table size runs.

Operations plan from a Snapshot (pure) and hand the heavy, parallel parts to an Engine:
listing a table's directory tree, deleting many files, reading Parquet footers, writing
many Parquet files, aggregating file sizes. `LocalEngine` runs them on threads in this
process; `SparkEngine` runs them on Spark executors. Both give identical results; every
method takes the table's Storage, whose `to_config()` is what travels to executors.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from delta_ops.protocol.filenames import LOG_DIR
from delta_ops.storage import Storage

if TYPE_CHECKING:
    from delta_ops.engine.progress import Progress
    from delta_ops.engine.spill import KeyBuckets

LISTING_SCHEMA = pa.schema(
    [
        pa.field("path", pa.string()),  # relative to the table root
        pa.field("size", pa.int64()),
        pa.field("modification_time", pa.int64()),  # ms since the epoch
    ]
)

#: A listed file whose name is not valid UTF-8 (no Delta log can name it) appears as this
#: prefix plus its name with the undecodable bytes escaped (`bad\\xff.parquet`), with size
#: -1 and modification time 0. It is never a path to act on (Storage refuses the NUL).
UNREADABLE_PREFIX = "\x00unreadable:"
#: Files whose path holds this (a `_delta_log/` below one of the listed directories: a
#: Delta table nested in this one) are returned by `find_unreferenced` whatever their
#: age, so that VACUUM learns of nested tables from the listing it makes anyway.
NESTED_LOG_MARK = f"/{LOG_DIR}/"

ROW_COUNT_SCHEMA = pa.schema([pa.field("path", pa.string()), pa.field("num_records", pa.int64())])


class Engine(ABC):
    """Runs the heavy, parallel parts of maintenance operations."""

    name: str = "engine"
    #: Whether `map_tasks` runs in other processes (Spark executors): operations on a large
    #: state then hand it their reading, so this process holds only summaries.
    distributed: bool = False

    @abstractmethod
    def list_files(self, storage: Storage, directories: Sequence[str]) -> pa.Table:
        """Every file below each of `directories` (relative; "" is the root, non-recursive
        for the root itself: only its direct files), as LISTING_SCHEMA sorted by path. Each
        directory other than "" is listed recursively. Hidden-directory rules are the
        caller's. What is listed may be deleted, so symbolic links are neither listed nor
        followed (a symlinked directory is not entered, a symlinked file not listed)."""

    @abstractmethod
    def find_unreferenced(
        self,
        storage: Storage,
        directories: Sequence[str],
        keep: pa.Array | KeyBuckets,
        older_than_ms: int,
        *,
        progress: Progress | None = None,
    ) -> pa.Table:
        """Files below `directories` (as in `list_files`) whose path is not in `keep` and
        whose modification time is before `older_than_ms`, and every file below a nested
        log (`NESTED_LOG_MARK`) whatever its age; LISTING_SCHEMA, sorted by path.
        `progress` (`engine.progress`) hears of every listed page as phase
        `list` (pages, files, bytes where the listing carries sizes).
        The anti-join runs where the engine runs (on Spark: in Spark, not on the driver).
        `keep` may be held in buckets (`engine.spill.KeyBuckets`, a set too large for
        memory): the local engine then joins bucket by bucket, Spark a bucket at a time."""

    @abstractmethod
    def delete_files(
        self, storage: Storage, paths: Sequence[str], *, progress: Progress | None = None
    ) -> int:
        """Delete `paths` (relative) in parallel; idempotent; returns how many the store
        confirmed deleted (on the local file system: how many existed; on S3, which
        confirms an absent key too, how many it was asked to delete). `progress`
        (`engine.progress`) hears of them as phase `delete` (requests or jobs as pages,
        files confirmed); a `StorageError` names the files still not deleted after
        retries."""

    @abstractmethod
    def parquet_row_counts(self, storage: Storage, paths: Sequence[str]) -> pa.Table:
        """Row counts from the Parquet footers of `paths` (ROW_COUNT_SCHEMA, input order)."""

    @abstractmethod
    def write_parquet_files(
        self, storage: Storage, files: Sequence[tuple[str, pa.Table]]
    ) -> list[int]:
        """Write each (relative path, table) as a Parquet file that appears under its name
        only when complete; returns the sizes in bytes, in input order."""

    @abstractmethod
    def size_histogram(
        self, sizes: pa.Array, boundaries: Sequence[int]
    ) -> tuple[list[int], list[int]]:
        """(file counts, total bytes) per bin; bin i is [boundaries[i], boundaries[i+1])."""

    def map_tasks(
        self, storage: Storage, fn: Callable[[Storage, Any], Any], items: Sequence[Any],
        *, parallel: int | None = None,
    ) -> list[Any]:
        """`fn(storage, item)` for each item, results in input order. `parallel` bounds how
        many run at once on a local engine (CPU-bound tasks: one per core); a distributed
        engine schedules its own executors and ignores it.

        `fn` and the items must pickle (a module-level function, possibly in a
        `functools.partial`, and small values): a distributed engine ships them to its
        workers, rebuilds `storage` there from `storage.to_config()` and pickles the results
        back, so both should be small (summaries, not tables). This default runs them here,
        one after the other."""
        return [fn(storage, item) for item in items]

    def close(self) -> None:
        """Release resources (thread pools, sessions the engine started); nothing by default."""
        return None
