"""Spark engine tasks: the functions executors run, and their errors back on the driver.

Each task runs in an executor's Python worker; cloudpickle ships it by reference (module +
name), so executors import delta_ops (same interpreter and install as the driver), rebuild
the table's `Storage` from `Storage.to_config()` and run the reference `LocalEngine` on
their share of the work. A delta_ops error raised in a task leaves it as one JSON line
(`_guarded`) and is raised again on the driver with the same class and fields
(`_translate`). Protocol sections: none (execution only).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from delta_ops import errors as _errors
from delta_ops.errors import EngineError
from delta_ops.storage import Storage

#: Rows per Arrow batch a task yields.
_OUT_BATCH = 65_536
#: The last line of a Python worker's traceback: "delta_ops.errors.StorageError: message",
#: "pyarrow.lib.ArrowInvalid: message" or a builtin "FileNotFoundError: message".
_REMOTE_ERROR_RE = re.compile(
    r"^(?:(delta_ops\.errors|pyarrow\.lib)\.)?([A-Za-z_]\w*(?:Error|Exception|Invalid)): ?(.*)$",
    re.MULTILINE,
)


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

    return LocalEngine(max_workers=threads or None)


@_guarded
def _list_task(
    storage_config: dict[str, Any],
    threads: int,
    chunks: list[list[Any]],
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """Rows (id: chunk number) -> LISTING_SCHEMA rows of every file below that chunk's
    directories, or in that chunk's windows of directories ((directory, bounds,
    recursive, window): `LocalEngine.list_windows`). Directory names and range bounds
    are few and short: they travel with the function."""
    storage = Storage.from_config(storage_config)
    engine = _task_engine(threads)
    for batch in batches:
        for chunk in batch.column(0).to_pylist():
            items = chunks[chunk]
            listing = (engine.list_windows(storage, items) if items and isinstance(
                items[0], tuple) else engine.list_files(storage, items))
            yield from listing.to_batches(max_chunksize=_OUT_BATCH)


@_guarded
def _delete_task(
    storage_config: dict[str, Any], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Rows (paths: list<string>) -> one row per chunk: how many of its paths the store
    confirmed deleted (the reference engine's `delete_files`: batched on object stores)."""
    storage = Storage.from_config(storage_config)
    engine = _task_engine(0)
    for batch in batches:
        counts = [engine.delete_files(storage, paths) for paths in batch.column(0).to_pylist()]
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
def _call_task(
    storage_config: dict[str, Any],
    fn: Callable[[Storage, Any], Any],
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """Rows (i, item: pickled) -> (i, result: pickled fn(storage, item)), one at a time."""
    import pickle

    storage = Storage.from_config(storage_config)
    for batch in batches:
        indexes = batch.column(0).to_pylist()
        results = [
            pickle.dumps(fn(storage, pickle.loads(item)), protocol=pickle.HIGHEST_PROTOCOL)
            for item in batch.column(1).to_pylist()
        ]
        yield pa.RecordBatch.from_pydict(
            {"i": pa.array(indexes, pa.int64()), "result": pa.array(results, pa.binary())}
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
            try:
                return cls(reason, **fields)
            except TypeError:  # a class built from other arguments (InvalidTablePropertyError)
                pass
    for module, name, message in reversed(_REMOTE_ERROR_RE.findall(text)):
        cls = _remote_class(module or None, name)
        if cls is not None:
            try:
                return cls(message.strip())
            except TypeError:  # a class built from other arguments
                continue
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
    return EngineError(f"Spark job {what!r} failed on {where}: {first}", table=table)
