"""Hash-partitioned spill files: rows split by the bucket of a key column and appended to
one temporary Arrow IPC stream per bucket, read back one bucket at a time (issue 15).

A key's bucket is `pmod(spark_hash(key), buckets)` (`protocol.checkpoint_schema.spark_hash`:
Spark's `hash()`, Murmur3 over the UTF-8 bytes, seed 42), so a Spark job computing
`pmod(hash(col), B)` puts every key in the bucket this module does. Equal keys always land in
the same bucket, which is all a per-bucket join needs: two spills with the same bucket count
over the same key space can be joined bucket by bucket.

The files live in a fresh scratch directory (`engine.scratch`: under `TMPDIR`) that `close`
removes, and leaving a `with` block closes, on error too; one left behind by a killed process
is removed by the next scratch directory made. Nothing in them is ever read by anything but
the spill that wrote them.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from delta_ops.engine.scratch import ScratchDir
from delta_ops.protocol.arrays import from_numpy
from delta_ops.protocol.checkpoint_schema import spark_hash

__all__ = ["BucketSpill", "KeyBuckets", "bucket_ids"]

#: Write buffers of one spill, all buckets together, and the least one bucket gets.
_WRITE_BUFFER = 16 * 1024 * 1024
_MIN_BUFFER = 64 * 1024


def _write_options() -> pa.ipc.IpcWriteOptions:
    """LZ4-compressed buffers where the codec is built in: paths compress about 6x (181 to
    29 MB for a 3M-file listing), and writing the smaller files is faster than not
    compressing."""
    codec = "lz4" if pa.Codec.is_available("lz4_frame") else None
    return pa.ipc.IpcWriteOptions(compression=codec)


def bucket_ids(keys: pa.Array | pa.ChunkedArray, buckets: int) -> np.ndarray:
    """The bucket (0 <= b < buckets) of each key: Spark's `pmod(hash(key), buckets)`."""
    hashes = spark_hash(keys).astype(np.int64)
    return np.mod(hashes, buckets)  # the divisor is positive: never negative, as pmod


class KeyBuckets(ABC):
    """A set of string keys too large to hold at once, partitioned by `bucket_ids` into
    `buckets` buckets: a key is in the set exactly when it is in its own bucket."""

    buckets: int

    @abstractmethod
    def bucket(self, b: int) -> pa.Array:
        """The keys of bucket `b` (duplicates allowed)."""


class BucketSpill:
    """Rows of one schema spilled to `buckets` files by the bucket of `key`.

    `append` while writing, then `bucket` / `batches` to read a bucket back (the writers
    are closed on the first read). `buckets=1` is a plain spill file (no hashing).

    Args:
        schema: The rows' schema.
        key: The string column whose bucket decides where a row goes.
        buckets: How many buckets (at least 1).
        name: A word for the temporary directory's name.
    """

    def __init__(self, schema: pa.Schema, key: str, buckets: int, *, name: str = "spill") -> None:
        if buckets < 1:
            raise ValueError(f"a spill needs at least one bucket, not {buckets}")
        self.schema = schema
        self.key = key
        self.buckets = buckets
        self.rows = [0] * buckets
        self._scratch = ScratchDir(name)
        self._dir: str | None = self._scratch.path
        self._sinks: dict[int, tuple[pa.NativeFile, pa.ipc.RecordBatchStreamWriter]] = {}
        self._closed_writers = False

    # ---- writing -------------------------------------------------------------------------

    def _path(self, b: int) -> str:
        if self._dir is None:
            raise ValueError("the spill is closed")
        return os.path.join(self._dir, f"{b:05d}.arrows")

    def _write(self, b: int, table: pa.Table) -> None:
        if self._closed_writers:
            raise ValueError("the spill is being read: nothing more can be appended")
        sink = self._sinks.get(b)
        if sink is None:
            # Buffered: a batch is written as several small pieces (the buffers use
            # _WRITE_BUFFER bytes in all, whatever the bucket count).
            size = max(_MIN_BUFFER, _WRITE_BUFFER // self.buckets)
            out = pa.BufferedOutputStream(pa.OSFile(self._path(b), "wb"), size)
            writer = pa.ipc.new_stream(out, self.schema, options=_write_options())
            sink = self._sinks[b] = (out, writer)
        sink[1].write_table(table)
        self.rows[b] += table.num_rows

    def append(self, table: pa.Table) -> None:
        """Add `table`'s rows (of `schema`), each to its key's bucket."""
        n = table.num_rows
        if not n:
            return
        table = table.select(self.schema.names)
        if table.schema != self.schema:
            table = table.cast(self.schema)
        if self.buckets == 1:
            self._write(0, table)
            return
        ids = bucket_ids(table.column(self.key), self.buckets)
        counts = np.bincount(ids, minlength=self.buckets)
        order = np.argsort(ids, kind="stable")
        grouped = table.take(from_numpy(order.astype(np.int64)))
        start = 0
        for b in np.flatnonzero(counts):
            count = int(counts[b])
            self._write(int(b), grouped.slice(start, count))
            start += count

    def write_bucket(self, b: int, table: pa.Table) -> None:
        """Append `table` (of `schema`) to bucket `b` as it is, its rows already known to
        belong there (the output of a per-bucket step)."""
        if table.num_rows:
            self._write(b, table)

    def finish(self) -> None:
        """Close the writers (nothing more will be appended); reading does it too."""
        if not self._closed_writers:
            self._close_writers()

    def _close_writers(self) -> None:
        for out, writer in self._sinks.values():
            writer.close()
            out.close()
        self._sinks.clear()
        self._closed_writers = True

    # ---- reading -------------------------------------------------------------------------

    def batches(self, b: int) -> Iterator[pa.RecordBatch]:
        """The rows of bucket `b`, batch by batch as they were appended (empty buckets
        yield nothing)."""
        if not self._closed_writers:
            self._close_writers()
        if not self.rows[b]:
            return
        with pa.OSFile(self._path(b), "rb") as source:
            reader = pa.ipc.open_stream(source)
            for batch in reader:
                if batch.num_rows:
                    yield batch

    def bucket(self, b: int) -> pa.Table:
        """Every row of bucket `b` as one table."""
        return pa.Table.from_batches(list(self.batches(b)), schema=self.schema)

    # ---- cleaning up ---------------------------------------------------------------------

    def close(self) -> None:
        """Close the writers and remove the files (idempotent)."""
        try:
            for out, writer in self._sinks.values():
                try:
                    writer.close()
                finally:
                    out.close()
        finally:
            self._sinks.clear()
            self._closed_writers = True
            self._scratch.close()
            self._dir = None

    def __enter__(self) -> BucketSpill:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
