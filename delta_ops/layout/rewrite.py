"""Rewrite one bin: stream its files row group by row group, drop deleted rows, write anew.

Spec sections: "Deletion Vectors" (a row whose index is in the file's DV is not part of the
table; applied before rows are copied), "Column Mapping" (data files keep physical column
names and, in `id` mode, the field ids; columns are matched by field id in `id` mode and by
physical name otherwise), "Partition Value Serialization" (partition columns are not in the
files; the new adds carry the bin's partition values), "Row Tracking" (every copied row
keeps its stable row ID and row commit version through the materialized columns named by
`delta.rowTracking.materializedRowIdColumnName` / `...RowCommitVersionColumnName`: the
materialized value when the input has a non-null one, else `baseRowId` + the row's physical
index, and `defaultRowCommitVersion`), "Per-file Statistics" (the new files get statistics
from `delta_ops.layout.statistics.StatsCollector`: null counts, float and decimal bounds from
the rows written, integer, date, timestamp and string bounds from the footer pyarrow writes
for the file, which computes them anyway).

`rewrite_bin(storage, task)` is a module-level function of (storage, item), so
`Engine.map_tasks` runs it on local threads or ships it to Spark executors. Memory follows
the output row group plus one input batch, never the bin: each input is read in batches of
`READ_BATCH_ROWS` rows (`pyarrow.parquet.ParquetFile.iter_batches`, which decodes a row
group incrementally, so even a file written as one huge row group is read in pieces),
filtered and buffered; the buffer is written as one row group once it holds
`ROW_GROUP_ROWS` rows (1Mi, the maximum pyarrow and parquet-rs, hence deltalake, write) or
`RewriteSettings.row_group_bytes` of Arrow data (64 MiB: bounds wide rows), whichever comes
first. A file rolls over once it reaches the target size, and the bin's last file ends with
the bin. Files are named `part-00000-<uuid>-c000.<codec>.parquet` under the bin's directory,
with the codec of the table's files.

On the local file system (a `file://` root) a new file is written in place, under its
final name (its writeback started after each row group: `in_place.start_writeback`), and fsynced
before it is reported; elsewhere it is written to a local
temporary file and uploaded (`Storage.put_atomic`: it appears complete or not at all).
Either way the new files are not yet part of the table: no reader looks at a file no commit
names. `delta_ops.layout.commit` commits them; a file being written when the bin
fails is deleted, and files of a killed run or of a bin that cannot commit stay
unreferenced, for VACUUM (as Spark's and deltalake's writers leave theirs).
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from delta_ops.engine.scratch import ScratchDir
from delta_ops.errors import DeletionVectorError, MissingFileError, RewriteError
from delta_ops.layout.dictionaries import DictionaryChoice
from delta_ops.layout.field_match import file_mismatch
from delta_ops.layout.in_place import claim, fsync_file, local_path, start_writeback
from delta_ops.layout.plan import Bin, InputFile
from delta_ops.protocol.actions import Metadata
from delta_ops.protocol.deletion_vectors import (
    DeletionVectorDescriptor,
    inline_dv_bitmap,
    read_dv_from_file_bytes,
)
from delta_ops.protocol.path_identity import relative_key
from delta_ops.protocol.table_configuration import TableConfiguration
from delta_ops.storage import Storage

__all__ = [
    "DEFAULT_ROW_GROUP_BYTES",
    "ROW_GROUP_ROWS",
    "BinOutput",
    "RewriteError",
    "RewriteSettings",
    "RewriteTask",
    "codec_of",
    "deleted_rows",
    "rewrite_bin",
]

#: Arrow bytes buffered per output row group (Spark's `parquet.block.size` is 128 MB of
#: encoded data; 64 MiB of Arrow data keeps a task's memory well under 0.5 GB).
DEFAULT_ROW_GROUP_BYTES = 64 * 1024 * 1024

#: Rows per output row group at most (pyarrow's and parquet-rs's default maximum, so the
#: row groups are those deltalake writes; `row_group_bytes` bounds wide rows).
ROW_GROUP_ROWS = 1024 * 1024

#: Rows per batch read from an input (`ParquetFile.iter_batches` decodes a row group
#: incrementally, so a file written as one huge row group is still read in pieces).
READ_BATCH_ROWS = 65_536

#: Parquet codec -> (pyarrow compression, the infix Spark puts in file names).
_CODECS = {
    "SNAPPY": ("snappy", ".snappy"),
    "ZSTD": ("zstd", ".zstd"),
    "GZIP": ("gzip", ".gz"),
    "LZ4": ("lz4", ".lz4"),
    "LZ4_RAW": ("lz4", ".lz4raw"),
    "BROTLI": ("brotli", ".br"),
    "UNCOMPRESSED": ("none", ""),
}


@dataclass(frozen=True)
class RewriteSettings:
    """What every task of a run needs besides its bin (small, pickles).

    Attributes:
        table: The table root (errors).
        protocol, metadata: The raw actions the run planned on (for the stats collector).
        file_schema: Arrow schema of the new files: physical names, field ids, no
            partition columns, then the materialized row-tracking columns when preserved.
        column_mapping_mode: 'none', 'name' or 'id' (how input columns are matched).
        row_id_column, row_commit_version_column: Materialized column names when row IDs
            and commit versions are preserved, else None.
        compression: Parquet codec name as the footer writes it ("SNAPPY", "ZSTD", ...).
        target_size: Roll over to a new output file once the one written reaches this.
        row_group_bytes: Arrow bytes buffered per output row group.
        scratch_dir: Where temporary output files are written for an object store (None:
            the system's); local tables get theirs written in place.
    """

    table: str
    protocol: Mapping[str, Any]
    metadata: Mapping[str, Any]
    file_schema: pa.Schema
    column_mapping_mode: str
    row_id_column: str | None
    row_commit_version_column: str | None
    compression: str
    target_size: int
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES
    scratch_dir: str | None = None


@dataclass(frozen=True)
class RewriteTask:
    """One engine task: a bin, the run's settings, and its commit batch's name token (the
    new files' names derive from it: `output_key`)."""

    bin: Bin
    settings: RewriteSettings
    batch: str = ""


#: A bound on one bin's new files (`delete_outputs`: a search that could not end otherwise).
_MOST_PARTS = 100_000

#: The namespace of the new files' name-derived UUIDs (`output_key`).
_NAMES = uuid.UUID("6f1d3c2a-9b7e-4e52-8a61-0d4c2b7f9e13")


def output_key(task: RewriteTask, part: int) -> str:
    """The key of the task's `part`-th new file: `part-NNNNN-<uuid>-c000.<codec>.parquet`
    in the bin's directory, the UUID derived from the batch token, the bin and the part
    (random without a token), so that a batch that fails can find what it wrote."""
    _, infix = _CODECS.get(task.settings.compression, _CODECS["SNAPPY"])
    ident = (uuid.uuid5(_NAMES, f"{task.batch}/{task.bin.index}/{part}") if task.batch
             else uuid.uuid4())
    name = f"part-{part:05d}-{ident}-c000{infix}.parquet"
    return f"{task.bin.directory}/{name}" if task.bin.directory else name


def delete_outputs(storage: Storage, tasks: list[RewriteTask], failure: BaseException) -> int:
    """Delete the new files the tasks of a failed batch wrote (never committed, named by no
    add: no reader needs them); each bin's parts are written in order, so its first absent
    part ends the search. A name the batch could not claim because a file held it (the
    `failure`'s file: never ours) ends its bin's search too. Returns the files deleted."""
    taken = getattr(failure, "file", None) if isinstance(failure, RewriteError) else None
    deleted = 0
    for task in tasks:
        for part in range(_MOST_PARTS):
            key = output_key(task, part)
            if taken is not None and taken in (storage.absolute_uri(key),
                                               local_path(storage, key)):
                break
            # Asked first: not every store says whether a DELETE found its key.
            if not storage.exists(key):
                break
            deleted += int(storage.delete(key))
    return deleted



@dataclass(frozen=True)
class BinOutput:
    """What a rewritten bin produced.

    Attributes:
        index: The bin's index in the plan.
        adds: The new files' `add` actions (dataChange false, stats, no row-ID fields:
            the transaction assigns fresh ones).
        rows_read: Physical rows read.
        rows_written: Rows written (read minus deleted).
        bytes_written: Bytes of the new files.
        seconds: Wall time of the task.
    """

    index: int
    adds: tuple[dict[str, Any], ...]
    rows_read: int
    rows_written: int
    bytes_written: int
    seconds: float = 0.0
    deleted_rows: int = field(default=0)


def codec_of(storage: Storage, key: str) -> str:
    """The Parquet codec of a data file's first column chunk ("SNAPPY" when it has none).

    Raises:
        MissingFileError: the file is gone (names the table).
    """
    try:
        fh = storage.open_input(key)
    except MissingFileError as exc:
        raise MissingFileError(
            f"{exc.reason}: the log references a file that is gone (see `delta-ops fsck`); "
            "nothing was written", table=storage.root, file=exc.file) from None
    with fh:
        md = pq.ParquetFile(fh).metadata
        if md.num_row_groups == 0 or md.num_columns == 0:
            return "SNAPPY"
        codec = str(md.row_group(0).column(0).compression).upper()
    return codec if codec in _CODECS else "SNAPPY"


def deleted_rows(storage: Storage, f: InputFile) -> np.ndarray:
    """The row indexes `f`'s deletion vector deletes, sorted (uint64; empty without a DV).

    Raises:
        DeletionVectorError: the DV cannot be read or does not match its descriptor.
    """
    if not f.deletion_vector:
        return np.empty(0, dtype=np.uint64)
    d = DeletionVectorDescriptor.from_dict(f.deletion_vector)
    if d.is_inline:
        bitmap = inline_dv_bitmap(d)
    else:
        rel = d.relative_path() if d.storage_type == "u" else relative_key(
            d.path_or_inline_dv, storage.root)
        if rel is None:
            raise DeletionVectorError(
                f"deletion vector {d.path_or_inline_dv!r} of {f.path} is outside the table "
                "root", table=storage.root, file=f.path)
        data = storage.read(rel)
        bitmap = read_dv_from_file_bytes(
            data, d.offset, d.size_in_bytes, expected_cardinality=d.cardinality,
            file=storage.absolute_uri(rel))
    return np.frombuffer(bitmap.to_array(), dtype=np.uint64)


def _field_id(f: pa.Field) -> int | None:
    md = f.metadata or {}
    raw = md.get(b"PARQUET:field_id")
    return int(raw) if raw is not None else None


def _source_columns(table: pa.Table, schema: pa.Schema, mode: str) -> dict[str, int]:
    """Target column name -> index in `table` (by field id in `id` mode, else by name)."""
    out: dict[str, int] = {}
    names = {name: i for i, name in enumerate(table.column_names)}
    ids: dict[int, int] = {}
    if mode == "id":
        for i, f in enumerate(table.schema):
            fid = _field_id(f)
            if fid is not None:
                ids[fid] = i
    for target in schema:
        fid = _field_id(target) if mode == "id" else None
        if fid is not None and fid in ids:
            out[target.name] = ids[fid]
        elif target.name in names:
            out[target.name] = names[target.name]
    return out


class _Writer:
    """Output files of one bin: buffered row groups, rolled over at the target size."""

    def __init__(self, storage: Storage, task: RewriteTask) -> None:
        self.storage = storage
        self.task = task
        self.bin = task.bin
        self.s = s = task.settings
        self.compression = _CODECS.get(s.compression, _CODECS["SNAPPY"])[0]
        self.stats_schema = pa.schema(
            [f for f in s.file_schema
             if f.name not in (s.row_id_column, s.row_commit_version_column)])
        #: Made when a file cannot be written in place; swept if this process dies.
        self.scratch: ScratchDir | None = None
        self.config = TableConfiguration(s.protocol, Metadata(dict(s.metadata)), None, s.table)
        self.buffer: list[pa.Table] = []
        self.buffered = self.buffered_rows = 0
        self.key = ""
        self.direct = False
        self.writer: pq.ParquetWriter | None = None
        self.local: str | None = None
        self.collector: Any = None
        self.rows_in_file = 0
        self.adds: list[dict[str, Any]] = []
        self.keys: list[str] = []  # the storage keys of the files finished, as `adds`
        self.bytes_written = 0
        self.part = 0
        self.dictionaries = DictionaryChoice(s.file_schema)

    def close_scratch(self) -> None:
        if self.scratch is not None:
            self.scratch.close()
            self.scratch = None

    def write(self, t: pa.Table) -> None:
        if t.num_rows == 0:
            return
        room = ROW_GROUP_ROWS - self.buffered_rows
        if t.num_rows > room:  # a row group holds at most ROW_GROUP_ROWS rows
            head, t = t.slice(0, room), t.slice(room)  # zero-copy views
            self.buffer.append(head)
            self._flush()
        self.buffer.append(t)
        self.buffered += t.nbytes
        self.buffered_rows += t.num_rows
        if self.buffered >= self.s.row_group_bytes or self.buffered_rows >= ROW_GROUP_ROWS:
            self._flush()

    def _open(self) -> None:
        from delta_ops.layout.statistics import StatsCollector

        self.key = output_key(self.task, self.part)
        direct = local_path(self.storage, self.key)
        if direct is not None:  # written in place: no copy (module docstring)
            os.makedirs(os.path.dirname(direct), exist_ok=True)
            claim(direct, self.s.table)
        self.direct = direct is not None
        if direct is None and self.scratch is None:
            self.scratch = ScratchDir("layout", self.s.scratch_dir)
        self.local = direct or os.path.join(
            str(self.scratch.path), f"part-{self.part:05d}.parquet")
        # Materialized row IDs are distinct within a table: never worth a dictionary.
        row_ids = {self.s.row_id_column} if self.s.row_id_column else set()
        self.writer = pq.ParquetWriter(
            self.local, self.s.file_schema, compression=self.compression,
            write_statistics=True,
            use_dictionary=self.dictionaries.use_dictionary(row_ids))
        # Integer, date, timestamp and string bounds come from the footer pyarrow writes.
        self.collector = StatsCollector(self.config, footer_bounds=True)
        self.rows_in_file = 0

    def _flush(self) -> None:
        if not self.buffer:
            return
        t = pa.concat_tables(self.buffer)
        self.buffer, self.buffered, self.buffered_rows = [], 0, 0
        if self.writer is None:
            self._open()
        assert self.writer is not None and self.local is not None
        self.writer.write_table(t, row_group_size=max(1, t.num_rows))
        # Batch by batch (each an input row group): no column is combined into a copy.
        for batch in t.select(self.stats_schema.names).to_batches():
            self.collector.update(batch)
        self.rows_in_file += t.num_rows
        if self.direct:
            start_writeback(self.local)
        if os.path.getsize(self.local) >= self.s.target_size:
            self._finish_file()

    def _finish_file(self) -> None:
        if self.writer is None or self.local is None:
            return
        self.writer.close()
        local = self.local
        self.collector.add_footer_bounds(
            self.writer.writer.metadata, self.s.file_schema,
            lambda rg, column: pq.ParquetFile(local).read_row_group(rg, columns=[column]))
        self.writer = None
        size = os.path.getsize(self.local)
        key = self.key
        if self.direct:
            fsync_file(self.local)  # durable before any commit names it
        else:
            self.storage.put_atomic(key, Path(self.local))
            os.unlink(self.local)
        info = self.storage.info(key)
        self.local = None
        self.part += 1
        self.bytes_written += size
        self.keys.append(key)
        self.adds.append({
            "path": quote(key, safe="/="),
            "partitionValues": dict(self.bin.partition_values),
            "size": size,
            "modificationTime": (
                info.modification_time if info is not None else int(time.time() * 1000)),
            "dataChange": False,
            "stats": self.collector.to_json(),
        })

    def finish(self) -> None:
        self._flush()
        self._finish_file()

    def abandon(self) -> None:
        """After a failure: close the file being written and delete it (never committed,
        never named by an add: no reader can need it). Closing may fail in turn (a full
        disk fails the flush too); the file is deleted all the same, and so is one claimed
        whose writer never opened."""
        writer, self.writer = self.writer, None
        if writer is not None:
            with contextlib.suppress(Exception):  # the failure being handled is the one told
                writer.close()
        if self.direct and self.local is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.local)
        self.local = None
        self.close_scratch()


def _conform(t: pa.Table, s: RewriteSettings, f: InputFile, storage: Storage) -> pa.Table:
    """The row group's columns in the new files' schema (missing columns as nulls)."""
    source = _source_columns(t, s.file_schema, s.column_mapping_mode)
    arrays = []
    for target in s.file_schema:
        if target.name in (s.row_id_column, s.row_commit_version_column):
            arrays.append(pa.nulls(t.num_rows, target.type))  # filled by the caller
            continue
        i = source.get(target.name)
        if i is None:
            arrays.append(pa.nulls(t.num_rows, target.type))
            continue
        col = t.column(i)
        if col.type != target.type:
            try:
                col = col.cast(target.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise RewriteError(
                    f"column {target.name!r} has type {col.type} in the file, which cannot "
                    f"be written as the table's {target.type}: {exc}",
                    table=s.table, file=storage.absolute_uri(f.key)) from None
        arrays.append(col)
    return pa.Table.from_arrays(arrays, schema=s.file_schema)


def _row_tracking(t: pa.Table, conformed: pa.Table, s: RewriteSettings, f: InputFile,
                  offset: int) -> pa.Table:
    """Fill the materialized row ID / commit version columns of `conformed` (stable values:
    the input's materialized value when non-null, else the default generated one)."""
    n = t.num_rows
    for column, default in (
        (s.row_id_column, None if f.base_row_id is None
         else pa.array(np.arange(f.base_row_id + offset, f.base_row_id + offset + n,
                                 dtype=np.int64))),
        (s.row_commit_version_column, None if f.default_row_commit_version is None
         else pa.array(np.full(n, f.default_row_commit_version, dtype=np.int64))),
    ):
        if column is None:
            continue
        existing = t.column(column).cast(pa.int64()) if column in t.column_names else None
        if existing is not None and default is not None:
            value = pc.coalesce(existing, default)
        elif existing is not None:
            value = existing
        elif default is not None:
            value = default
        else:
            value = pa.nulls(n, pa.int64())
        idx = conformed.schema.get_field_index(column)
        conformed = conformed.set_column(idx, conformed.schema.field(idx), value)
    return conformed


def _read(s: RewriteSettings, storage: Storage, f: InputFile, fn: Any, *args: Any) -> Any:
    """`fn(*args)`, reading input `f`; a file that does not read as Parquet is named."""
    try:
        return fn(*args)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise RewriteError(f"the data file does not read as Parquet ({exc}); nothing of "
                           "its bin is committed", table=s.table,
                           file=storage.absolute_uri(f.key)) from exc


def rewrite_bin(storage: Storage, task: RewriteTask) -> BinOutput:
    """Rewrite one bin (module docstring); returns the new files' adds and counts.

    Raises:
        RewriteError: an input does not fit the table schema, or holds a different number
            of rows than its stats say.
        MissingFileError: an input or its deletion vector file is gone (names the table).
        DeletionVectorError: a deletion vector cannot be read.
        StorageError: reading or writing failed.
    """
    start = time.monotonic()
    s = task.settings
    b = task.bin
    out = _Writer(storage, task)
    rows_read = rows_written = 0
    deleted_total = 0
    try:
        for f in b.files:
            deleted = deleted_rows(storage, f)
            deleted_total += len(deleted)
            offset = 0
            with storage.open_input(f.key) as fh:
                pf = _read(s, storage, f, pq.ParquetFile, fh)
                data_schema = pa.schema([c for c in s.file_schema if c.name not in (
                    s.row_id_column, s.row_commit_version_column)])
                problem = file_mismatch(pf.schema_arrow, data_schema, s.column_mapping_mode)
                if problem is not None:
                    raise RewriteError(
                        f"{problem}: rewriting the file would change what readers read, so "
                        "it is left as it is", table=s.table, file=storage.absolute_uri(f.key))
                out.dictionaries.observe(pf.metadata)
                # Decoded on this thread: the engine already runs a bin per core, and
                # Arrow's own pool on top only hands columns between threads (the layout
                # benchmark's OPTIMIZE took 14% longer with it, and its one 2 GB bin 8%).
                batches = pf.iter_batches(batch_size=READ_BATCH_ROWS, use_threads=False)
                while (batch := _read(s, storage, f, next, batches, None)) is not None:
                    t = pa.Table.from_batches([batch])
                    n = t.num_rows
                    conformed = _conform(t, s, f, storage)
                    if s.row_id_column or s.row_commit_version_column:
                        conformed = _row_tracking(t, conformed, s, f, offset)
                    lo, hi = np.searchsorted(deleted, [offset, offset + n])
                    if hi > lo:
                        keep = np.ones(n, dtype=bool)
                        keep[(deleted[lo:hi] - offset).astype(np.int64)] = False
                        conformed = conformed.filter(pa.array(keep))
                    out.write(conformed)
                    rows_written += conformed.num_rows
                    offset += n
            rows_read += offset
            if f.num_records is not None and f.num_records != offset:
                raise RewriteError(
                    f"the file holds {offset} rows but its stats say numRecords "
                    f"{f.num_records}; it is left as it is",
                    table=s.table, file=storage.absolute_uri(f.key))
            if len(deleted) and int(deleted[-1]) >= offset:
                raise DeletionVectorError(
                    f"deletion vector of {f.path} deletes row {int(deleted[-1])} of a "
                    f"{offset}-row file", table=s.table, file=storage.absolute_uri(f.key))
        out.finish()
    except BaseException as exc:
        # The files this bin finished are named by no commit: gone, so that a retry of the
        # task (Spark's) claims the same names afresh.
        with contextlib.suppress(Exception):
            for key in out.keys:
                storage.delete(key)
        if isinstance(exc, MissingFileError):
            raise MissingFileError(
                f"bin {b.index}: {exc.reason}; the log references a file that is gone (see "
                "`delta-ops fsck`), so nothing of this batch is committed",
                table=s.table, file=exc.file) from None
        raise
    finally:
        out.abandon()
    return BinOutput(
        index=b.index,
        adds=tuple(out.adds),
        rows_read=rows_read,
        rows_written=rows_written,
        bytes_written=out.bytes_written,
        seconds=time.monotonic() - start,
        deleted_rows=deleted_total,
    )
