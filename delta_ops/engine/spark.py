"""SparkEngine: the Engine on Spark executors (PySpark, imported lazily).

The only module of delta_ops that imports pyspark, and only inside functions: importing it
starts no JVM. The session is started on first use (`SparkEngine.session`), from a
`SparkSessionConfig` (embedded `local[*]` by default, any master URL, or Spark Connect).

Every job uses the DataFrame API only (`createDataFrame` from Arrow, `repartition`,
`mapInArrow`, `where` with SQL text, a left anti-join, `toArrow`), so the same code runs on
a classic session and over Spark Connect; nothing uses RDDs or `pyspark.sql.functions`
(whose columns follow a process-wide classic/Connect switch). Size histograms aggregate in
two steps: each task bins its share, the driver adds the per-task bins.

Storage I/O happens in the executors' Python workers through `delta_ops.storage`: each
task rebuilds the table's `Storage` from `Storage.to_config()` (carried in the pickled task
function, never in Spark conf, plans or logs, since it may hold credentials) and runs the
reference `LocalEngine` on its share of the work. Results are therefore those of the local
engine by construction; only the splitting, the anti-join and the histogram aggregation are
Spark's. A delta_ops error raised in a task is raised again on the driver with the same
class and fields (see `_translate`).

Protocol sections: none directly; VACUUM, checkpoints (V2 sidecars), version checksums and
the row-tracking backfill use this engine for their heavy parts.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from delta_ops import errors as _errors
from delta_ops.engine.base import LISTING_SCHEMA, ROW_COUNT_SCHEMA, Engine
from delta_ops.engine.session import EngineError, SparkSessionConfig
from delta_ops.storage import Storage

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["SparkEngine", "spark_home"]

logger = logging.getLogger(__name__)

_LISTING_DDL = "path string, size long, modification_time long"
_ROW_COUNT_DDL = "i long, num_records long"
_WRITE_DDL = "i long, size long"
_DELETE_DDL = "deleted long"
_HISTOGRAM_DDL = "bin int, files long, bytes long"
#: Fewest sizes per task for histograms.
_MIN_SIZES_PER_TASK = 100_000
#: Rows per Arrow batch a task yields.
_OUT_BATCH = 65_536
#: Fewest paths per task for deletes and footer reads (smaller jobs use fewer tasks).
_MIN_PATHS_PER_TASK = 64
#: The last line of a Python worker's traceback: "delta_ops.errors.StorageError: message",
#: "pyarrow.lib.ArrowInvalid: message" or a builtin "FileNotFoundError: message".
_REMOTE_ERROR_RE = re.compile(
    r"^(?:(delta_ops\.errors|pyarrow\.lib)\.)?([A-Za-z_]\w*(?:Error|Exception|Invalid)): ?(.*)$",
    re.MULTILINE,
)
#: Executors run in other processes: an in-process store is invisible to them.
_PROCESS_LOCAL_SCHEMES = frozenset({"memory"})


# --------------------------------------------------------------------------------------
# Task functions. They run in executors' Python workers; cloudpickle ships them by
# reference (module + name), so executors import delta_ops (same interpreter and install
# as the driver) and rebuild the storage from its config.
# --------------------------------------------------------------------------------------


#: Prefix of the one-line message carrying a delta_ops error out of a task.
_TASK_ERROR = "delta-ops-task-error:"
_TASK_ERROR_RE = re.compile(re.escape(_TASK_ERROR) + r" (\{.*\})\s*$", re.MULTILINE)


class _TaskError(RuntimeError):
    """A delta_ops error raised in a task, encoded so the driver can raise it again with
    the same class and fields (table, version, file)."""


_Task = Callable[..., Iterator[pa.RecordBatch]]


def _guarded(task: _Task) -> _Task:
    """Wrap a task so a delta_ops error leaves it as one JSON line (see `_translate`)."""

    @functools.wraps(task)
    def run(*args: Any) -> Iterator[pa.RecordBatch]:
        try:
            yield from task(*args)
        except _errors.DeltaOpsError as exc:
            payload = {
                "class": type(exc).__name__,
                "reason": exc.reason,
                "table": exc.table,
                "version": exc.version,
                "file": exc.file,
            }
            if isinstance(exc, _errors.UnsupportedFeatureError):
                payload["features"] = exc.features
            raise _TaskError(f"{_TASK_ERROR} {json.dumps(payload)}") from exc

    return run


def _task_engine(threads: int) -> Any:
    from delta_ops.engine.local import LocalEngine

    return LocalEngine(max_workers=threads)


@_guarded
def _list_task(
    storage_config: dict[str, Any],
    threads: int,
    chunks: list[list[str]],
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """Rows (id: chunk number) -> LISTING_SCHEMA rows of every file below that chunk's
    directories. Directory names are few and short: they travel with the function."""
    storage = Storage.from_config(storage_config)
    engine = _task_engine(threads)
    for batch in batches:
        for chunk in batch.column(0).to_pylist():
            listing = engine.list_files(storage, chunks[chunk])
            yield from listing.to_batches(max_chunksize=_OUT_BATCH)


@_guarded
def _delete_task(
    storage_config: dict[str, Any], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Rows (paths: list<string>) -> one row per chunk: how many of its paths existed."""
    storage = Storage.from_config(storage_config)
    for batch in batches:
        counts = [storage.delete_many(paths) for paths in batch.column(0).to_pylist()]
        yield pa.RecordBatch.from_pydict({"deleted": pa.array(counts, pa.int64())})


@_guarded
def _row_count_task(
    storage_config: dict[str, Any], threads: int, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Rows (i: list<long>, paths: list<string>) -> (i, num_records) per path."""
    storage = Storage.from_config(storage_config)
    engine = _task_engine(threads)
    for batch in batches:
        for indexes, paths in zip(
            batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True
        ):
            counts = engine.parquet_row_counts(storage, paths).column("num_records")
            yield pa.RecordBatch.from_arrays(
                [pa.array(indexes, pa.int64()), counts.combine_chunks()], names=["i", "num_records"]
            )


@_guarded
def _write_task(
    storage_config: dict[str, Any], threads: int, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Rows (i, path, ipc: one Arrow IPC stream) -> (i, size of the Parquet file written)."""
    storage = Storage.from_config(storage_config)
    engine = _task_engine(threads)
    for batch in batches:
        indexes = batch.column(0).to_pylist()
        files = [
            (path, pa.ipc.open_stream(pa.py_buffer(ipc)).read_all())
            for path, ipc in zip(
                batch.column(1).to_pylist(), batch.column(2).to_pylist(), strict=True
            )
        ]
        sizes = engine.write_parquet_files(storage, files)
        yield pa.RecordBatch.from_pydict(
            {"i": pa.array(indexes, pa.int64()), "size": pa.array(sizes, pa.int64())}
        )


@_guarded
def _histogram_task(
    boundaries: list[int], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Rows (size) -> this task's histogram: (bin, files, bytes) per non-empty bin."""
    from delta_ops.engine.local import histogram

    counts = [0] * len(boundaries)
    totals = [0] * len(boundaries)
    for batch in batches:
        c, t = histogram(batch.column(0), boundaries)
        counts = [a + b for a, b in zip(counts, c, strict=True)]
        totals = [a + b for a, b in zip(totals, t, strict=True)]
    bins = [i for i, n in enumerate(counts) if n]
    yield pa.RecordBatch.from_pydict(
        {
            "bin": pa.array(bins, pa.int32()),
            "files": pa.array([counts[i] for i in bins], pa.int64()),
            "bytes": pa.array([totals[i] for i in bins], pa.int64()),
        }
    )


# --------------------------------------------------------------------------------------
# Session start-up.
# --------------------------------------------------------------------------------------


def spark_home() -> str:
    """The Spark distribution pyspark runs: `SPARK_HOME`, else the pyspark package itself.

    The pip package holds `bin/spark-class`, `bin/spark-submit` and the jars (Spark
    Connect's included), enough to start a standalone master and workers or a Connect
    server (it has no `sbin` start scripts for masters and workers).
    """
    if os.environ.get("SPARK_HOME"):
        return os.environ["SPARK_HOME"]
    from pyspark.find_spark_home import _find_spark_home

    return _find_spark_home()


def _prepare_environment(config: SparkSessionConfig) -> None:
    """Environment a classic session's JVM and Python workers read when they start.

    `PYSPARK_PYTHON` (executors' interpreter) defaults to the running one; `SPARK_HOME`
    defaults to the pyspark package (the pip package is a Spark distribution: workers of
    `local-cluster` and standalone masters launch executors from it); `SPARK_LOCAL_IP`
    is set when the config names an address.
    """
    if config.python is not None or "PYSPARK_PYTHON" not in os.environ:
        os.environ["PYSPARK_PYTHON"] = config.executor_python
    if not os.environ.get("SPARK_HOME"):
        os.environ["SPARK_HOME"] = spark_home()
    if config.local_ip is not None:
        os.environ["SPARK_LOCAL_IP"] = config.local_ip


#: Modules a Spark Connect client needs, by the pip package that provides them.
_CONNECT_MODULES = {
    "pandas": "pandas",
    "numpy": "numpy",
    "grpc": "grpcio",
    "grpc_status": "grpcio-status",
    "google.rpc": "googleapis-common-protos",
    "zstandard": "zstandard",
}


def _require_connect_packages(remote: str) -> None:
    import importlib.util

    missing = []
    for module, package in _CONNECT_MODULES.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # a missing parent package (google)
            found = False
        if not found:
            missing.append(package)
    if missing:
        raise EngineError(
            f"Spark Connect ({remote}) needs the pyspark[connect] packages; missing: "
            f"{', '.join(missing)} (pip install 'pyspark[connect]')"
        )


def _start_session(config: SparkSessionConfig) -> tuple[SparkSession, bool]:
    """Start (or join) the session `config` describes; (session, whether we own it).

    Sessions are built from their own classes rather than `SparkSession.builder`, whose
    `getOrCreate` switches the whole process to Spark Connect once any Connect session
    exists (it sets `SPARK_CONNECT_MODE_ENABLED`): classic and Connect engines coexist.

    A `spark://` master or Connect server that accepts no connection fails first, in one
    line, before any JVM starts (`SparkSessionConfig.preflight`); a session that fails to
    start for another reason is one EngineError naming where, with Spark's first line.
    """
    config.preflight()
    try:
        return _create_session(config)
    except EngineError:
        raise
    except Exception as exc:  # py4j, PySparkRuntimeError, gRPC: one line, cause chained
        first = next(
            (line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__
        )
        raise EngineError(
            f"could not start a Spark session on {config.describe()}: {first}"
        ) from exc


def _create_session(config: SparkSessionConfig) -> tuple[SparkSession, bool]:
    """`_start_session` without the checks around it."""
    if config.remote is not None:
        _require_connect_packages(config.remote)
        from pyspark.sql.connect.session import SparkSession as ConnectSession

        builder = ConnectSession.builder.remote(config.remote)
        for key, value in config.conf.items():
            builder = builder.config(key, value)
        logger.info("connecting to %s", config.describe())
        return builder.create(), True

    _prepare_environment(config)
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    with SparkContext._lock:
        active = SparkContext._active_spark_context
    if active is not None:
        # One SparkContext per process: join it, unless the caller asked for another.
        if config.master is not None and active.master != config.master:
            raise EngineError(
                f"a Spark session with master {active.master} is already running in this "
                f"process; stop it before starting one on {config.master}"
            )
        return SparkSession(active), False

    settings = {"spark.ui.showConsoleProgress": "false"}
    if config.local_ip is not None:
        settings["spark.driver.host"] = config.local_ip
        settings["spark.driver.bindAddress"] = config.local_ip
    settings.update(config.conf)
    conf = SparkConf().setMaster(config.effective_master).setAppName(config.app_name)
    for key, value in settings.items():
        conf.set(key, value)
    logger.info("starting a Spark session on %s", config.describe())
    context = SparkContext(conf=conf)
    context.setLogLevel(config.log_level)
    return SparkSession(context), True


def _spark_errors() -> tuple[type[BaseException], ...]:
    """Exceptions a Spark action raises when a job or the connection fails."""
    from pyspark.errors import PySparkException

    found: list[type[BaseException]] = [PySparkException]
    try:
        from py4j.protocol import Py4JError
    except ImportError:  # Spark Connect clients need no py4j
        pass
    else:
        found.append(Py4JError)
    return tuple(found)


def _remote_class(module: str | None, name: str) -> type[Exception] | None:
    """The exception class a worker raised, when the driver should raise it too."""
    import builtins

    if module == "delta_ops.errors":
        cls = getattr(_errors, name, None)
        return cls if isinstance(cls, type) and issubclass(cls, _errors.DeltaOpsError) else None
    if module == "pyarrow.lib":
        cls = getattr(pa.lib, name, None)
        return cls if isinstance(cls, type) and issubclass(cls, pa.lib.ArrowException) else None
    cls = getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, (OSError, ValueError)):
        return cls
    return None


def _translate(exc: BaseException, what: str, table: str | None, where: str) -> Exception:
    """The error a failed job stands for.

    An error a task raised (a delta_ops error such as StorageError for a missing file, an
    Arrow error for a file that is not Parquet, an OSError) comes back wrapped in Spark's
    exception with the worker's traceback; it is raised again on the driver under its own
    class, so callers see what the local engine raises. Anything else (lost executors,
    a failed connection) becomes an EngineError.
    """
    text = str(exc)
    encoded = _TASK_ERROR_RE.findall(text)
    if encoded:
        fields = json.loads(encoded[-1])
        cls = getattr(_errors, fields.pop("class"), None)
        if isinstance(cls, type) and issubclass(cls, _errors.DeltaOpsError):
            reason = fields.pop("reason")
            if "features" in fields and not issubclass(cls, _errors.UnsupportedFeatureError):
                fields.pop("features")
            return cls(reason, **fields)
    for module, name, message in reversed(_REMOTE_ERROR_RE.findall(text)):
        cls = _remote_class(module or None, name)
        if cls is not None:
            return cls(message.strip())
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
    return EngineError(f"Spark job {what!r} failed on {where}: {first}", table=table)


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

    def _listing_frame(self, storage: Storage, directories: Sequence[str]) -> DataFrame | None:
        config = self._storage_config(storage)
        if not directories:
            return None
        chunks = _chunks(list(directories), self._max_partitions())
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

    def find_unreferenced(
        self, storage: Storage, directories: Sequence[str], keep: pa.Array, older_than_ms: int
    ) -> pa.Table:
        frame = self._listing_frame(storage, directories)
        if frame is None:
            return LISTING_SCHEMA.empty_table()
        keep_paths = keep.cast(pa.string())
        if isinstance(keep_paths, pa.ChunkedArray):
            keep_paths = keep_paths.combine_chunks()
        # SQL text rather than pyspark.sql.functions: the same on classic and Connect.
        old = frame.where(f"modification_time < {int(older_than_ms)}")
        if len(keep_paths):
            keep_frame = self.session.createDataFrame(pa.table({"path": keep_paths}))
            old = old.join(keep_frame, on="path", how="left_anti")
        found = self._collect(old, "find unreferenced files", storage)
        return _conform(found, LISTING_SCHEMA).sort_by("path")

    def delete_files(self, storage: Storage, paths: Sequence[str]) -> int:
        config = self._storage_config(storage)
        unique = sorted(set(paths))
        if not unique:
            return 0
        # Contiguous runs of sorted paths keep each directory's files in few tasks (on S3
        # a task checks a directory's keys with one listing, then DeleteObjects batches).
        n = min(math.ceil(len(unique) / _MIN_PATHS_PER_TASK), self._max_partitions())
        chunks = _chunks(unique, n)
        paths = pa.table({"paths": pa.array(chunks, pa.list_(pa.string()))})
        frame = self._frame(paths, len(chunks))
        out = frame.mapInArrow(functools.partial(_delete_task, config), _DELETE_DDL)
        counts = self._collect(out, "delete files", storage)
        return int(pc.sum(counts.column("deleted")).as_py() or 0)

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
