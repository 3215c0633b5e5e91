"""SparkEngine: the Engine whose heavy work runs as Spark jobs (DataFrame API only).

Each job spreads its inputs over partitions, runs a task of `delta_ops.engine.spark.tasks`
with `mapInArrow` and collects Arrow; only the splitting, the anti-join of VACUUM and the
histogram aggregation are Spark's, the per-file work is the local engine's. The session
starts on first use (`delta_ops.engine.spark.startup`). Protocol sections: none directly;
VACUUM, checkpoints (V2 sidecars), version checksums and the row-tracking backfill use this
engine for their heavy parts.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from delta_ops import errors as _errors
from delta_ops.engine.base import LISTING_SCHEMA, NESTED_LOG_MARK, ROW_COUNT_SCHEMA, Engine
from delta_ops.engine.config import SparkSessionConfig
from delta_ops.engine.progress import DELETE, LIST, Progress
from delta_ops.engine.spark.startup import _start_session
from delta_ops.engine.spark.tasks import (
    _call_task,
    _delete_task,
    _histogram_task,
    _list_task,
    _row_count_task,
    _spark_errors,
    _translate,
    _write_task,
)
from delta_ops.engine.spill import KeyBuckets
from delta_ops.errors import EngineError
from delta_ops.storage import Storage
from delta_ops.storage.parallel import windows_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["SparkEngine"]

_LISTING_DDL = "path string, size long, modification_time long"
_ROW_COUNT_DDL = "i long, num_records long"
_WRITE_DDL = "i long, size long"
_DELETE_DDL = "deleted long"
_HISTOGRAM_DDL = "bin int, files long, bytes long"
_CALL_DDL = "i long, result binary"
#: Fewest sizes per task for histograms.
_MIN_SIZES_PER_TASK = 100_000
#: Fewest paths per task for deletes and footer reads (smaller jobs use fewer tasks).
_MIN_PATHS_PER_TASK = 64
#: Most paths deleted by one Spark job (more go in several jobs, one after the other).
_PATHS_PER_JOB = 200_000
#: Executors run in other processes: an in-process store is invisible to them.
_PROCESS_LOCAL_SCHEMES = frozenset({"memory"})


def _chunks(items: Sequence[Any], n: int) -> list[list[Any]]:
    """`items` cut into `n` contiguous, nearly equal, non-empty lists."""
    n = max(1, min(n, len(items)))
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for k in range(n):
        end = start + size + (1 if k < extra else 0)
        out.append(list(items[start:end]))
        start = end
    return out


class SparkEngine(Engine):
    """Engine whose heavy work runs as Spark jobs.

    Args:
        config: Where Spark runs (default: an embedded `local[*]` session). Ignored when
            `session` is given.
        session: An existing SparkSession (classic or Connect) to use; the engine then
            never stops it.

    The session starts on first use; `close()` stops it if this engine started it.
    """

    name = "spark"
    distributed = True

    def __init__(
        self, config: SparkSessionConfig | None = None, *, session: SparkSession | None = None
    ) -> None:
        if config is not None and session is not None:
            raise ValueError("give SparkEngine a config or a session, not both")
        self.config = config or SparkSessionConfig()
        self._session = session
        self._owns_session = False
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        state = "started" if self._session is not None else "not started"
        return f"SparkEngine({self.config.describe()}, {state})"

    # ---- session -------------------------------------------------------------------

    @property
    def session(self) -> SparkSession:
        """The Spark session, started on first access."""
        with self._lock:
            if self._session is None:
                if importlib.util.find_spec("pyspark") is None:
                    raise EngineError(
                        f"the spark engine ({self.config.describe()}) needs pyspark: "
                        "pip install 'delta_ops[spark]'"
                    )
                self._session, self._owns_session = _start_session(self.config)
            return self._session

    @property
    def started(self) -> bool:
        """Whether the engine holds a session (it starts on first use)."""
        return self._session is not None

    @property
    def is_connect(self) -> bool:
        """Whether the session is a Spark Connect client."""
        return type(self.session).__module__.startswith("pyspark.sql.connect")

    def close(self) -> None:
        """Stop the session if this engine started it (a given session is left running)."""
        with self._lock:
            session, owned = self._session, self._owns_session
            self._session, self._owns_session = None, False
        if session is not None and owned:
            session.stop()

    def __enter__(self) -> SparkEngine:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _where(self) -> str:
        return self.config.describe()

    def _parallelism(self) -> int:
        session = self.session
        if not self.is_connect:
            return max(1, int(session.sparkContext.defaultParallelism))
        value = session.conf.get("spark.default.parallelism", None)
        try:
            return max(1, int(value)) if value else 8
        except ValueError:
            return 8

    def _max_partitions(self) -> int:
        return self.config.max_partitions or 4 * self._parallelism()

    # ---- plumbing ------------------------------------------------------------------

    @staticmethod
    def _storage_config(storage: Storage) -> dict[str, Any]:
        if storage.scheme in _PROCESS_LOCAL_SCHEMES:
            raise _errors.StorageError(
                f"the spark engine does storage I/O in executor processes, which cannot see "
                f"this process's {storage.scheme}:// store; use the local engine",
                table=storage.root,
            )
        return storage.to_config()

    def _frame(self, table: pa.Table, partitions: int) -> DataFrame:
        """`table` as a DataFrame spread round-robin over `partitions` partitions."""
        return self.session.createDataFrame(table).repartition(max(1, partitions))

    def _collect(self, df: DataFrame, what: str, storage: Storage) -> pa.Table:
        try:
            return df.toArrow()
        except _spark_errors() as exc:
            raise _translate(exc, what, storage.root, self._where()) from exc

    # ---- Engine --------------------------------------------------------------------

    def _listing_frame(
        self, storage: Storage, directories: Sequence[str],
        keep: pa.Array | KeyBuckets | None = None,
    ) -> DataFrame | None:
        """The files below `directories`, listed by the executors. On an object store,
        with the referenced paths `keep`, each directory's listing is cut into key ranges
        as the local engine cuts it (`range_specs`), and the ranges are shared between
        the tasks in windows (`parallel.windows_of`): one directory holding millions of
        files is listed by every executor, not by one."""
        config = self._storage_config(storage)
        if not directories:
            return None
        items: list[Any] = list(directories)
        from delta_ops.engine.local import lists_in_ranges, range_specs

        if keep is not None and lists_in_ranges(storage):

            specs = range_specs(directories, keep)
            per = max(1, math.ceil(sum(len(b) + 1 for _d, b, _r in specs)
                                   / self._max_partitions()))
            items = [(d, inner, recursive, window) for d, bounds, recursive in specs
                     for window, inner in windows_of(bounds, per)]
        chunks = _chunks(items, self._max_partitions())
        task = functools.partial(_list_task, config, self.config.threads_per_task, chunks)
        # One chunk number per partition, no shuffle: range() splits ids evenly.
        frame = self.session.range(0, len(chunks), 1, len(chunks))
        return frame.mapInArrow(task, _LISTING_DDL)

    def list_files(self, storage: Storage, directories: Sequence[str]) -> pa.Table:
        frame = self._listing_frame(storage, directories)
        if frame is None:
            return LISTING_SCHEMA.empty_table()
        listing = self._collect(frame, "list files", storage)
        return _conform(listing, LISTING_SCHEMA).sort_by("path")

    def _keep_frame(self, keep: pa.Array | KeyBuckets) -> DataFrame | None:
        """The referenced paths as a DataFrame (None when there are none); keys held in
        buckets go to Spark a bucket at a time, so the driver holds one bucket."""
        if isinstance(keep, KeyBuckets):
            frames = []
            for b in range(keep.buckets):
                paths = keep.bucket(b)
                if len(paths):
                    frames.append(self.session.createDataFrame(pa.table({"path": paths})))
                del paths
            return functools.reduce(lambda a, b: a.unionAll(b), frames) if frames else None
        keep_paths = keep.cast(pa.string())
        if isinstance(keep_paths, pa.ChunkedArray):
            keep_paths = keep_paths.combine_chunks()
        if not len(keep_paths):
            return None
        return self.session.createDataFrame(pa.table({"path": keep_paths}))

    def find_unreferenced(
        self,
        storage: Storage,
        directories: Sequence[str],
        keep: pa.Array | KeyBuckets,
        older_than_ms: int,
        *,
        progress: Progress | None = None,
    ) -> pa.Table:
        from delta_ops.engine.local import LocalEngine, lists_in_ranges

        parts = []
        if "" in directories and lists_in_ranges(storage):
            # On an object store the root's files come in the same pages as its
            # subdirectories, which the driver has just listed (VACUUM's plan), and the
            # storage keeps them for the next listing of the root: they are anti-joined
            # here rather than listed again by an executor. Only names without '/' can
            # reference a file of the root. Referenced paths in buckets stay in buckets:
            # the local engine takes them one bucket at a time, its listing spilled by
            # the same buckets, so the driver holds no more than one bucket either way.
            root_keep = keep
            if not isinstance(keep, KeyBuckets):
                names = keep.cast(pa.string())
                root_keep = names.filter(pc.invert(pc.match_substring(names, "/")))
            parts.append(LocalEngine().find_unreferenced(
                storage, [""], root_keep, older_than_ms, progress=progress))
            directories = [d for d in directories if d != ""]
        frame = self._listing_frame(storage, directories, keep)
        if frame is not None:
            found = self._find_unreferenced(storage, frame, keep, older_than_ms)
            if progress is not None:
                # The listing runs on the executors: one report, the directories listed
                # (pages) and the unreferenced old files they hold, when the job is done.
                progress.advance(
                    LIST, pages=len(directories), files=found.num_rows,
                    bytes=int(pc.sum(found.column("size")).as_py() or 0),
                )
            parts.append(found)
        if not parts:
            return LISTING_SCHEMA.empty_table()
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts).sort_by("path")

    def _find_unreferenced(
        self,
        storage: Storage,
        frame: DataFrame,
        keep: pa.Array | KeyBuckets,
        older_than_ms: int,
    ) -> pa.Table:
        # SQL text rather than pyspark.sql.functions: the same on classic and Connect.
        # A file below a nested table's log is kept whatever its age (`NESTED_LOG_MARK`).
        old = frame.where(
            f"modification_time < {int(older_than_ms)} "
            f"OR instr(path, '{NESTED_LOG_MARK}') > 0"
        )
        if isinstance(keep, KeyBuckets) and keep.buckets > 1:
            found = self._anti_join_by_bucket(old, keep, storage)
        else:
            keep_frame = self._keep_frame(keep)
            if keep_frame is not None:
                old = old.join(keep_frame, on="path", how="left_anti")
            found = self._collect(old, "find unreferenced files", storage)
        return _conform(found, LISTING_SCHEMA).sort_by("path")

    def _anti_join_by_bucket(self, old: DataFrame, keep: KeyBuckets, storage: Storage) -> pa.Table:
        """The anti-join one bucket at a time: the listing is computed once and kept on the
        executors, each bucket of it (Spark's `pmod(hash(path), B)`, the function the keys
        were bucketed with: `engine.spill.bucket_ids`) is collected and its referenced
        paths taken out here. Neither this process nor the driver JVM ever holds more than
        one bucket of keys and of the listing. (Sending each bucket's keys to Spark as a
        DataFrame instead kept them in the driver JVM: at 3M files its heap filled and a
        job's tasks were never launched.)"""
        n = int(keep.buckets)
        listed = old.persist()
        found: list[pa.Table] = []
        try:
            for b in range(n):
                side = self._collect(
                    listed.where(f"pmod(hash(path), {n}) = {b}"), "find unreferenced files",
                    storage,
                )
                paths = keep.bucket(b).cast(pa.string())
                if isinstance(paths, pa.ChunkedArray):
                    paths = paths.combine_chunks()
                if side.num_rows and len(paths):
                    kept = pc.is_in(side.column("path"), value_set=paths)
                    side = side.filter(pc.invert(kept))
                del paths
                found.append(side)
        finally:
            listed.unpersist()
        return pa.concat_tables(found) if found else LISTING_SCHEMA.empty_table()

    def delete_files(
        self, storage: Storage, paths: Sequence[str], *, progress: Progress | None = None
    ) -> int:
        config = self._storage_config(storage)
        unique = sorted(set(paths))
        if not unique:
            return 0
        deleted = 0
        # One job per _PATHS_PER_JOB paths: the paths reach the executors through the
        # driver JVM (a DataFrame of local data), which then holds one job's worth.
        for start in range(0, len(unique), _PATHS_PER_JOB):
            part = unique[start : start + _PATHS_PER_JOB]
            # Contiguous runs of sorted paths keep each directory's files in few tasks (on
            # S3 a task checks a directory's keys with one listing, then DeleteObjects).
            n = min(math.ceil(len(part) / _MIN_PATHS_PER_TASK), self._max_partitions())
            chunks = _chunks(part, n)
            paths = pa.table({"paths": pa.array(chunks, pa.list_(pa.string()))})
            frame = self._frame(paths, len(chunks))
            out = frame.mapInArrow(functools.partial(_delete_task, config), _DELETE_DDL)
            counts = self._collect(out, "delete files", storage)
            done = int(pc.sum(counts.column("deleted")).as_py() or 0)
            deleted += done
            if progress is not None:  # one report per job
                progress.advance(DELETE, pages=len(chunks), files=done)
        return deleted

    def parquet_row_counts(self, storage: Storage, paths: Sequence[str]) -> pa.Table:
        config = self._storage_config(storage)
        paths = list(paths)
        if not paths:
            return ROW_COUNT_SCHEMA.empty_table()
        n = min(math.ceil(len(paths) / _MIN_PATHS_PER_TASK), self._max_partitions())
        index_chunks = _chunks(range(len(paths)), n)
        path_chunks = [[paths[i] for i in chunk] for chunk in index_chunks]
        table = pa.table(
            {
                "i": pa.array(index_chunks, pa.list_(pa.int64())),
                "paths": pa.array(path_chunks, pa.list_(pa.string())),
            }
        )
        task = functools.partial(_row_count_task, config, self.config.threads_per_task)
        out = self._frame(table, len(index_chunks)).mapInArrow(task, _ROW_COUNT_DDL)
        counts = self._collect(out, "read Parquet footers", storage).sort_by("i")
        if counts.num_rows != len(paths):
            raise EngineError(
                f"footer job returned {counts.num_rows} row counts for {len(paths)} files",
                table=storage.root,
            )
        return pa.table(
            {
                "path": pa.array(paths, pa.string()),
                "num_records": counts.column("num_records").cast(pa.int64()).combine_chunks(),
            },
            schema=ROW_COUNT_SCHEMA,
        )

    def write_parquet_files(
        self, storage: Storage, files: Sequence[tuple[str, pa.Table]]
    ) -> list[int]:
        """Write each (path, table) as Parquet from the executors.

        Each table travels to its executor as one Arrow IPC stream in a binary column, so
        one table must serialize to less than 2 GiB (checkpoint sidecars are far smaller).
        """
        config = self._storage_config(storage)
        files = list(files)
        if not files:
            return []
        blobs = []
        for _path, table in files:
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
            blobs.append(sink.getvalue().to_pybytes())
        table = pa.table(
            {
                "i": pa.array(range(len(files)), pa.int64()),
                "path": pa.array([path for path, _ in files], pa.string()),
                "ipc": pa.array(blobs, pa.binary()),
            }
        )
        task = functools.partial(_write_task, config, self.config.threads_per_task)
        partitions = min(len(files), self._max_partitions())
        out = self._frame(table, partitions).mapInArrow(task, _WRITE_DDL)
        sizes = self._collect(out, "write Parquet files", storage).sort_by("i")
        if sizes.num_rows != len(files):
            raise EngineError(
                f"write job reported {sizes.num_rows} files written of {len(files)}",
                table=storage.root,
            )
        return [int(s) for s in sizes.column("size").to_pylist()]

    def map_tasks(
        self, storage: Storage, fn: Callable[[Storage, Any], Any], items: Sequence[Any],
        *, parallel: int | None = None,
    ) -> list[Any]:
        """`fn(storage, item)` for each item on the executors (items spread round-robin over
        at most `_max_partitions()` tasks; `fn` travels pickled in the task function, the
        items and results pickled in binary columns), results in input order."""
        import pickle

        config = self._storage_config(storage)
        items = list(items)
        if not items:
            return []
        table = pa.table(
            {
                "i": pa.array(range(len(items)), pa.int64()),
                "item": pa.array(
                    [pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL) for x in items],
                    pa.binary(),
                ),
            }
        )
        task = functools.partial(_call_task, config, fn)
        partitions = min(len(items), self._max_partitions())
        out = self._frame(table, partitions).mapInArrow(task, _CALL_DDL)
        results = self._collect(out, "run tasks", storage).sort_by("i")
        if results.num_rows != len(items):
            raise EngineError(
                f"task job returned {results.num_rows} results for {len(items)} items",
                table=storage.root,
            )
        return [pickle.loads(r) for r in results.column("result").to_pylist()]

    def size_histogram(
        self, sizes: pa.Array, boundaries: Sequence[int]
    ) -> tuple[list[int], list[int]]:
        """Per-bin counts and byte totals: each task bins its share of `sizes` (with the
        local engine's `histogram`, so bins and null handling are the same), the driver
        adds up the per-task histograms (one small row per task)."""
        bounds = [int(b) for b in boundaries]
        if not bounds:
            raise ValueError("a size histogram needs at least one bin boundary")
        if any(a >= b for a, b in zip(bounds, bounds[1:], strict=False)):
            raise ValueError(f"histogram boundaries must increase strictly: {bounds[:8]}...")
        counts, totals = [0] * len(bounds), [0] * len(bounds)
        values = sizes.cast(pa.int64())
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        if len(values) == 0:
            return counts, totals
        partitions = min(math.ceil(len(values) / _MIN_SIZES_PER_TASK), self._max_partitions())
        task = functools.partial(_histogram_task, bounds)
        frame = self._frame(pa.table({"size": values}), partitions)
        out = frame.mapInArrow(task, _HISTOGRAM_DDL)
        try:
            partial = out.toArrow()
        except _spark_errors() as exc:
            raise _translate(exc, "size histogram", None, self._where()) from exc
        for row in partial.to_pylist():
            counts[row["bin"]] += row["files"]
            totals[row["bin"]] += row["bytes"]
        return counts, totals


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table`'s columns by name, cast to `schema` (Spark may use other string types)."""
    return pa.table([table.column(f.name).cast(f.type) for f in schema], schema=schema)
