"""Live files and tombstones read on demand, for tables too large to hold in memory.

Spec sections: "Action Reconciliation", "Checkpoints". A state is the checkpoint's file
actions minus the keys the later commits touch, plus the commits' winners
(`log.replay.full_replay`). The checkpoint is reconciled already (one action per file key), so the
subtraction needs only the commits' keys: a `StreamedActions` holds those keys and the
commits' winners (their size follows the commits since the checkpoint, not the table) and
reads the checkpoint's file actions again each time it is iterated, one row group (at
most `BATCH_ROWS` rows) at a time. Memory then depends on the row group, not on the table;
every iteration reads the checkpoint again, which is what it costs.

`log.replay.full_replay.replay(..., stream=True)` builds them; operations that handle a streamed
state (the checkpoint writer, the checksum) ask for one when the table is large
(`stream_threshold_bytes`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import cached_property
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.engine.threads import Task, io_submit
from delta_ops.errors import UnusableCheckpointError
from delta_ops.log.files.checkpoint_reader import (
    _action_columns,
    _columns_with_values,
    _file_action_table,
    _struct_array,
    read_json_part,
    require_add_column,
)
from delta_ops.log.read_options import (
    DEFAULT_STREAM_THRESHOLD_BYTES as DEFAULT_STREAM_THRESHOLD_BYTES,
)
from delta_ops.log.read_options import ReadOptions
from delta_ops.protocol.actions import ADD_TYPE, REMOVE_TYPE, file_keys
from delta_ops.storage import Storage

#: Most rows decoded at once from a checkpoint file (a row group is read in batches of it).
BATCH_ROWS = 131_072
#: Row groups read ahead of the one being consumed (each on its own thread).
READ_AHEAD = 2

#: A filter on a table of actions: the rows to keep.
Predicate = Callable[[pa.Table], pa.Array]


def stream_threshold_bytes(value: int | None = None, options: ReadOptions | None = None) -> int:
    """The checkpoint size from which the state is streamed: `value` when given, else
    `options.stream_threshold_bytes` (`DEFAULT_STREAM_THRESHOLD_BYTES` without options)."""
    if value is not None:
        return int(value)
    return (options or ReadOptions()).stream_threshold_bytes


class StreamedActions:
    """The live adds (or the tombstones) of one version, read on demand.

    Iterating (`tables`) reads the checkpoint's file actions file by file and row group by
    row group, drops those whose key a later commit touched, and then yields the commits'
    own winners. The rows come in the order the in-memory state has them (checkpoint order,
    then the commits'), so a streamed state and a loaded one write the same checkpoint.

    Attributes:
        storage: the table's storage.
        kind: "add" or "remove".
        schema: the schema of the tables yielded (ADD_SCHEMA or REMOVE_SCHEMA).
        version: the checkpoint's version (for error messages).
    """

    def __init__(
        self,
        storage: Storage,
        kind: str,
        sources: Sequence[tuple[str, str]],
        version: int,
        superseded: pa.Array | None,
        tail: pa.Table,
        predicates: tuple[Predicate, ...] = (),
        typed_stats: bool = False,
    ) -> None:
        self.storage = storage
        #: Adds whose checkpoint row has only typed statistics get JSON `stats` from them
        #: (`checkpoint_reader.fill_stats_from_parsed`; the checkpoint writer asks for it).
        self.typed_stats = typed_stats
        self.kind = kind
        self.version = version
        self.schema = tail.schema
        self._sources = tuple(sources)
        self._superseded = superseded if superseded is not None and len(superseded) else None
        self._tail = tail
        self._predicates = predicates
        self._target = ADD_TYPE if kind == "add" else REMOVE_TYPE

    def where(self, predicate: Predicate) -> StreamedActions:
        """These actions, keeping only the rows `predicate` selects (a full-row table in,
        a boolean array out)."""
        return StreamedActions(
            self.storage,
            self.kind,
            self._sources,
            self.version,
            self._superseded,
            self._tail,
            self._predicates + (predicate,),
            self.typed_stats,
        )

    def with_typed_stats(self) -> StreamedActions:
        """These actions, adds lacking JSON `stats` taking them from their checkpoint row's
        typed `stats_parsed` (as JSON Spark writes)."""
        return StreamedActions(
            self.storage,
            self.kind,
            self._sources,
            self.version,
            self._superseded,
            self._tail,
            self._predicates,
            True,
        )

    # ---- reading ---------------------------------------------------------------------------

    def tables(self, columns: Sequence[str] | None = None) -> Iterator[pa.Table]:
        """The actions, a table of at most `BATCH_ROWS` rows at a time (never empty).

        Args:
            columns: the columns wanted (all of `schema` when None). With filters, every
                column is read, and the selection made after filtering.
        """
        wanted = list(columns) if columns is not None else None
        read_all = wanted is None or bool(self._predicates)
        fields = (
            list(self._target)
            if read_all
            else [f for f in self._target if f.name in set(wanted) | {"path", "deletionVector"}]
        )
        target = pa.struct(fields)
        for path, fmt in self._sources:
            for t in self._read_source(path, fmt, target):
                t = self._kept(t)
                if t.num_rows:
                    yield t if wanted is None else t.select(wanted)
        tail = self.held()
        for start in range(0, tail.num_rows, BATCH_ROWS):
            part = tail.slice(start, BATCH_ROWS)
            yield part if wanted is None else part.select(wanted)

    def _kept(self, t: pa.Table) -> pa.Table:
        if self._superseded is not None and t.num_rows:
            keys = file_keys(
                pa.StructArray.from_arrays(
                    [_contiguous(t.column("path")), _dv_column(t)],
                    names=["path", "deletionVector"],
                ),
                self.storage.root,
            )
            hit = pc.is_in(keys, value_set=self._superseded)
            if pc.any(hit).as_py():
                t = t.filter(pc.invert(hit))
        for p in self._predicates:
            if t.num_rows:
                t = t.filter(p(t))
        return t

    def _read_source(self, path: str, fmt: str, target: pa.StructType) -> Iterator[pa.Table]:
        if fmt == "json":
            actions = read_json_part(self.storage, self.version, path)
            rows = [a[self.kind] for a in actions if a.get(self.kind) is not None]
            if rows:
                full = pa.Table.from_struct_array(_struct_array(rows, self._target))
                yield full.select([f.name for f in target])
            return
        yield from _parquet_groups(
            self.storage, path, self.version, self.kind, target, typed_stats=self.typed_stats
        )

    # ---- reading in pieces, anywhere ------------------------------------------------------

    def read_items(self) -> list[tuple[str, str, int]]:
        """The checkpoint's file actions as units of reading work: (path, format, row group)
        per row group of each Parquet source (its footer is read here), (path, "json", -1)
        per JSON source. `read_item` reads one; together they hold what `tables` yields
        before the commits' winners (`held`)."""
        import pyarrow.parquet as pq

        items: list[tuple[str, str, int]] = []
        for path, fmt in self._sources:
            if fmt == "json":
                items.append((path, fmt, -1))
                continue
            try:
                with self.storage.open_input(path) as fh:
                    groups = pq.ParquetFile(fh).metadata.num_row_groups
            except (OSError, pa.ArrowInvalid) as exc:
                raise UnusableCheckpointError(
                    f"checkpoint file cannot be read as Parquet: {exc}",
                    table=self.storage.root,
                    version=self.version,
                    file=path,
                ) from exc
            items.extend((path, fmt, g) for g in range(groups))
        return items

    def read_item(self, item: tuple[str, str, int]) -> Iterator[pa.Table]:
        """The actions of one unit of `read_items` (every column), minus the superseded
        keys and filtered as `tables` filters them, a bounded table at a time."""
        path, fmt, group = item
        target = self._target
        if fmt == "json":
            tables = self._read_source(path, fmt, target)
        else:
            tables = _parquet_groups(
                self.storage, path, self.version, self.kind, target, groups=[group],
                typed_stats=self.typed_stats,
            )
        for t in tables:
            t = self._kept(t)
            if t.num_rows:
                yield t

    def held(self) -> pa.Table:
        """The commits' winners (held in memory, filtered), which follow the checkpoint's
        rows in `tables`."""
        tail = self._tail
        for p in self._predicates:
            if tail.num_rows:
                tail = tail.filter(p(tail))
        return tail

    def portable(self) -> dict[str, Any]:
        """What `from_portable` needs to read `read_items` in another process (with the
        table's storage rebuilt there): the sources, the superseded keys, the filters (which
        must then pickle) and the schema; not the commits' winners."""
        return {
            "kind": self.kind,
            "sources": self._sources,
            "version": self.version,
            "superseded": self._superseded,
            "schema": self.schema,
            "predicates": self._predicates,
            "typed_stats": self.typed_stats,
        }

    @classmethod
    def from_portable(cls, storage: Storage, spec: dict[str, Any]) -> StreamedActions:
        """The reader `portable` describes, on `storage` (its commits' winners left out)."""
        return cls(
            storage,
            spec["kind"],
            spec["sources"],
            spec["version"],
            spec["superseded"],
            spec["schema"].empty_table(),
            tuple(spec["predicates"]),
            bool(spec.get("typed_stats", False)),
        )

    # ---- summaries -------------------------------------------------------------------------

    def held_without_path(self) -> bool:
        """Whether an action held in memory (the commits' winners) lacks a path. Rows read
        from the checkpoint always have one: a row without a path holds no action."""
        return bool(self._tail.num_rows and self._tail.column("path").null_count)

    @cached_property
    def num_rows(self) -> int:
        """How many actions (one pass over the checkpoint's paths)."""
        return sum(t.num_rows for t in self.tables(["path"]))

    def sum(self, column: str) -> int:
        """The sum of an integer column (one pass reading that column)."""
        total = 0
        for t in self.tables([column]):
            s = pc.sum(t.column(column)).as_py()
            total += int(s or 0)
        return total


def _contiguous(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return col


def _dv_column(t: pa.Table) -> pa.Array:
    if "deletionVector" in t.column_names:
        return _contiguous(t.column("deletionVector"))
    dv_type = ADD_TYPE.field("deletionVector").type
    return pa.nulls(t.num_rows, dv_type)


def _parquet_groups(
    storage: Storage,
    path: str,
    version: int,
    kind: str,
    target: pa.StructType,
    groups: Sequence[int] | None = None,
    *,
    typed_stats: bool = False,
    batch_rows: int | None = None,
) -> Iterator[pa.Table]:
    """The `kind` actions of one Parquet checkpoint file as `target`, row group by row group
    (in batches of at most `batch_rows` rows, `BATCH_ROWS` when None), reading up to
    READ_AHEAD groups of at most one batch ahead; only the row groups `groups` when given.
    `typed_stats`: see `StreamedActions.typed_stats`."""
    rows_per_batch = BATCH_ROWS if batch_rows is None else max(1, int(batch_rows))
    import pyarrow.parquet as pq

    table = storage.root
    try:
        with storage.open_input(path) as fh:
            pf = pq.ParquetFile(fh)
            meta = pf.metadata
            schema = pf.schema_arrow
    except (OSError, pa.ArrowInvalid) as exc:
        raise UnusableCheckpointError(
            f"checkpoint file cannot be read as Parquet: {exc}",
            table=table,
            version=version,
            file=path,
        ) from exc
    require_add_column(schema, table=table, version=version, file=path)
    columns = _action_columns(schema, kind, target, typed_stats=typed_stats)
    if not columns:
        return

    def batches_of(i: int) -> Iterator[pa.Table]:
        cols = _columns_with_values(meta.row_group(i), columns)
        if not cols:
            return
        try:
            with storage.open_input(path) as handle:
                reader = pq.ParquetFile(handle, metadata=meta)
                for batch in reader.iter_batches(
                    batch_size=rows_per_batch, row_groups=[i], columns=cols,
                    use_threads=False,
                ):
                    t = _file_action_table(
                        [pa.Table.from_batches([batch])], kind, target, typed_stats=typed_stats
                    )
                    if t.num_rows:
                        yield t
        except (OSError, pa.ArrowInvalid) as exc:
            raise UnusableCheckpointError(
                f"row group {i} of the checkpoint file cannot be read: {exc}",
                table=table,
                version=version,
                file=path,
            ) from exc

    def read_group(i: int) -> list[pa.Table]:
        return list(batches_of(i))

    order = list(range(meta.num_row_groups)) if groups is None else list(groups)
    for i in order:
        if not 0 <= i < meta.num_row_groups:
            raise UnusableCheckpointError(
                f"the checkpoint file has {meta.num_row_groups} row groups, not a group {i}",
                table=table,
                version=version,
                file=path,
            )
    n = len(order)
    # A group of more than one batch (a writer that puts the whole checkpoint in one row
    # group, as deltalake does) is never read ahead: read whole, it would be held whole.
    # Its turn comes in order, and it is decoded one batch at a time.
    pending: list[tuple[int, Task[list[pa.Table]] | None]] = []
    nxt = 0
    try:
        while nxt < n or pending:
            while nxt < n and len(pending) < READ_AHEAD:
                i = order[nxt]
                large = meta.row_group(i).num_rows > rows_per_batch
                pending.append((i, None if large else io_submit(read_group, i)))
                nxt += 1
            i, task = pending.pop(0)
            if task is None:
                yield from batches_of(i)
                continue
            tables = task.result()
            yield from tables
            del tables
    finally:
        for _, f in pending:
            if f is not None:
                f.cancel()


__all__ = [
    "BATCH_ROWS",
    "DEFAULT_STREAM_THRESHOLD_BYTES",
    "StreamedActions",
    "stream_threshold_bytes",
]
