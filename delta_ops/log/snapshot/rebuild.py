"""The full state of a version reconciled by bucket, in memory that follows a bucket.

Spec sections: "Action Reconciliation", "Checkpoints", "Log Compaction Files". Among all
the file actions of a segment (the checkpoint's, then every commit's or compaction's,
oldest first) the newest action for a file key `(canonical path, deletion vector unique
id)` wins. Reconciliation is per key, so the actions can be hash-partitioned by key into
B buckets that reconcile independently. This module does it in two passes:

1. Spill. The checkpoint's file actions are read one row group at a time
   (`log.replay.streamed_actions.StreamedActions` without superseded keys), and the deltas after it
   in chunks of about `CHUNK_BYTES` of JSON (small files grouped, a larger one, such as a
   commit of a million adds, cut into pieces of whole lines read block by block; oldest
   first, a compaction's lines reversed by the one rule: `log.replay.delta_chunks`), each chunk
   reconciled columnar on its own (`log.replay.columnar_commits.reconcile`, or action by action with
   `log.replay.action_replay` when that steps aside). Every action kept gets its order, a counter
   over the whole oldest-first stream, and its key, and is appended to its key's bucket
   (`engine.spill.BucketSpill`: LZ4 Arrow IPC files under `$TMPDIR`). Non-file actions
   (protocol, metadata, txns, domains, commitInfo) are few and stay here, reconciled by
   the same rule as `log.replay.full_replay`.
2. Reconcile, bucket by bucket: the bucket's actions are read back, the newest per key is
   chosen (`pc.unique` / `pc.index_in` over the keys newest first), and the winners, in
   log order, are spilled again as the bucket's live adds and tombstones. The choice is
   checked, bucket by bucket, by an independent aggregation (a hash group-by of the
   newest order per key): the two must select exactly the same actions, and every action
   spilled must have been read back, or `RebuildCheckError` is raised.

The result is a `Snapshot` whose `files` and `tombstones` are `BucketedActions` (a
`StreamedActions` reading the reconciled spill bucket by bucket), so the streamed
checkpoint writer writes it unchanged. Tombstones are kept expired or not, as
`log.replay.full_replay` keeps them; `Snapshot.unexpired_tombstones` filters them the same way.

Memory: one row group or one chunk of commits while spilling, one bucket while
reconciling. B follows an estimate of the file actions from the bytes of the checkpoint
and the commits (`bucket_count`); the `buckets` argument (`ReadOptions.rebuild_buckets`)
fixes it (tests use 1, 2 and 7).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.engine.spill import BucketSpill
from delta_ops.errors import (
    CorruptLogError,
    NotATableError,
    RebuildCheckError,
    VersionNotFoundError,
)
from delta_ops.log.files.checkpoint_reader import _struct_array, read_checkpoint
from delta_ops.log.read_options import DEFAULT_REBUILD_THRESHOLD_BYTES, ReadOptions
from delta_ops.log.replay.action_replay import ActionReconciler, NonFileState
from delta_ops.log.replay.checkpoint_fallback import read_with_usable_checkpoint
from delta_ops.log.replay.columnar_commits import CommitFile, reconcile
from delta_ops.log.replay.delta_chunks import CHUNK_BYTES as DELTA_CHUNK_BYTES
from delta_ops.log.replay.delta_chunks import DeltaPiece, delta_chunks
from delta_ops.log.replay.full_replay import ReplayState, fill_from_checkpoint
from delta_ops.log.replay.streamed_actions import BATCH_ROWS, Predicate, StreamedActions
from delta_ops.log.segment.log_segment import LogSegment, build_log_segment
from delta_ops.log.snapshot.loaded_snapshot import Snapshot, snapshot_from_state
from delta_ops.protocol.actions import ADD_SCHEMA, ADD_TYPE, REMOVE_SCHEMA, REMOVE_TYPE, file_keys
from delta_ops.protocol.arrays import empty_table, from_numpy, to_numpy
from delta_ops.storage import Storage

#: Estimated file actions per bucket: a bucket of 250,000 actions with short statistics
#: reconciles in about 150 MB, under what the streamed writer itself takes (~450 MB).
ACTIONS_PER_BUCKET = 250_000
MAX_BUCKETS = 1024
#: Bytes per file action, to estimate the count without reading: a checkpoint holds 30 to
#: 60 bytes per action with short statistics (hundreds with wide ones), a commit 250 to
#: 500. Low figures: the estimate errs high, which costs a few more small buckets only.
CHECKPOINT_BYTES_PER_ACTION = 32
COMMIT_BYTES_PER_ACTION = 128
#: JSON bytes of deltas reconciled in memory at once while spilling (small files grouped,
#: a larger one cut into pieces of whole lines: `log.replay.delta_chunks`).
CHUNK_BYTES = DELTA_CHUNK_BYTES

_KEY = "_key"
_ORDER = "_order"


def rebuild_threshold_bytes(value: int | None = None, options: ReadOptions | None = None) -> int:
    """The commits' JSON bytes from which a log without a usable checkpoint is rebuilt by
    bucket: `value` when given, else `options.rebuild_threshold_bytes` (the default
    without). 0 rebuilds every table, checkpoint or not."""
    if value is not None:
        return int(value)
    return (options or ReadOptions()).rebuild_threshold_bytes


def needs_rebuild(storage: Storage, version: int | None, threshold_bytes: int) -> bool:
    """Whether the state of `version` is reconciled by bucket: always when `threshold_bytes`
    is 0; else when its deltas hold at least that many bytes and either its segment has no
    checkpoint or one of the deltas after the checkpoint is larger than `CHUNK_BYTES` (with
    a checkpoint, the incremental stream of `log.replay.streamed_actions` is the bounded path, but
    it reads each delta whole: a commit of a million adds after the checkpoint is read in chunks
    here instead)."""
    if threshold_bytes <= 0:
        return True
    segment = build_log_segment(storage, version)
    if sum(d.file.size for d in segment.deltas) < threshold_bytes:
        return False
    if segment.checkpoint is None:
        return True
    return any(d.file.size > CHUNK_BYTES for d in segment.deltas)


def bucket_count(
    segment: LogSegment, value: int | None = None, *, checkpoint_bytes: int | None = None
) -> int:
    """Buckets for `segment`: `value` when given (None or 0: estimated), else
    one per `ACTIONS_PER_BUCKET` file actions estimated from the bytes (1 to
    `MAX_BUCKETS`): the commits' at `COMMIT_BYTES_PER_ACTION`, the checkpoint's by the
    count `_last_checkpoint` gives for it, else at `CHECKPOINT_BYTES_PER_ACTION` of
    `checkpoint_bytes` (parts and sidecars, `CheckpointContent.source_bytes`; default: the
    parts' sizes)."""
    if value:
        return int(value)
    estimate = sum(d.file.size for d in segment.deltas) // COMMIT_BYTES_PER_ACTION
    if segment.checkpoint is not None:
        hint = segment.last_checkpoint
        if hint is not None and hint.version == segment.checkpoint.version and hint.size:
            estimate += int(hint.size)  # the checkpoint's own count of actions
        else:
            if checkpoint_bytes is None:
                checkpoint_bytes = sum(info.size for info in segment.checkpoint.files)
            estimate += checkpoint_bytes // CHECKPOINT_BYTES_PER_ACTION
    return max(1, min(MAX_BUCKETS, math.ceil(estimate / ACTIONS_PER_BUCKET)))


def _spill_schema(schema: pa.Schema) -> pa.Schema:
    return schema.append(pa.field(_KEY, pa.string())).append(pa.field(_ORDER, pa.int64()))


class BucketedActions(StreamedActions):
    """The reconciled live adds (or tombstones) of a rebuilt state, read from the spill
    one bucket, and one batch of at most `BATCH_ROWS` rows, at a time.

    A `StreamedActions` to every reader of a streamed state (the checkpoint writer, the
    plan, the checksum); it is read in this process only (`read_items` refuses).
    """

    def __init__(
        self,
        storage: Storage,
        kind: str,
        spill: BucketSpill,
        version: int,
        rows: int,
        predicates: tuple[Predicate, ...] = (),
    ) -> None:
        schema = ADD_SCHEMA if kind == "add" else REMOVE_SCHEMA
        super().__init__(storage, kind, (), version, None, empty_table(schema), predicates)
        self._spill = spill
        self._rows = rows

    def where(self, predicate: Predicate) -> BucketedActions:
        return BucketedActions(
            self.storage, self.kind, self._spill, self.version, self._rows,
            self._predicates + (predicate,),
        )

    def tables(self, columns: Sequence[str] | None = None) -> Iterator[pa.Table]:
        """The actions, bucket after bucket, in tables of `BATCH_ROWS` rows (the last one
        shorter): small buckets are joined, so a checkpoint written from them has row
        groups of the usual size whatever B is."""
        wanted = list(columns) if columns is not None else None
        held: list[pa.Table] = []
        have = 0
        for b in range(self._spill.buckets):
            for batch in self._spill.batches(b):
                t = pa.Table.from_batches([batch])
                if wanted is not None and not self._predicates:
                    t = t.select(wanted)
                for p in self._predicates:
                    if t.num_rows:
                        t = t.filter(p(t))
                if not t.num_rows:
                    continue
                if wanted is not None and self._predicates:
                    t = t.select(wanted)
                held.append(t)
                have += t.num_rows
                if have >= BATCH_ROWS:
                    joined = pa.concat_tables(held)
                    held.clear()
                    yield joined.slice(0, BATCH_ROWS).combine_chunks()
                    rest = joined.slice(BATCH_ROWS)
                    have = rest.num_rows
                    if have:
                        held.append(rest)
                    del joined
        if held:
            yield pa.concat_tables(held).combine_chunks()

    def held_without_path(self) -> bool:
        return False  # every action spilled had a path (checked while spilling)

    @cached_property
    def num_rows(self) -> int:
        if not self._predicates:
            return self._rows
        return sum(t.num_rows for t in self.tables(["path"]))

    def read_items(self) -> list[tuple[str, str, int]]:
        raise TypeError(
            f"the rebuilt state of {self.storage.root} version {self.version} lives in this "
            "process's spill files; it cannot be read in pieces elsewhere"
        )

    def portable(self) -> dict:
        return {"items": self.read_items()}


class _Recording(ActionReconciler):
    """The action-by-action rule for one chunk of deltas, its non-file actions recorded
    (newest first) instead of applied, so chunks combine in order."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.others: list[tuple[int, str, dict]] = []

    def apply_other(self, obj: dict, *, table: str, version: int, file: str) -> None:
        self.others.append((version, file, obj))


@dataclass
class RebuildSummary:
    """What the rebuild read, spilled and kept (the independent aggregation's figures).

    Attributes:
        buckets: B.
        actions_read: file actions spilled (checkpoint rows plus each chunk's winners).
        live_files: live adds after reconciliation.
        tombstones: tombstones after reconciliation (expired ones included).
        live_bytes: total size of the live adds.
        largest_bucket: most actions in one bucket.
    """

    buckets: int
    actions_read: int = 0
    live_files: int = 0
    tombstones: int = 0
    live_bytes: int = 0
    largest_bucket: int = 0


@dataclass
class Rebuilt:
    """A rebuilt snapshot and the spill files it reads; `close` (or leaving a `with`
    block) removes them."""

    snapshot: Snapshot
    summary: RebuildSummary
    spills: list[BucketSpill] = field(default_factory=list)

    def close(self) -> None:
        for s in self.spills:
            s.close()

    def __enter__(self) -> Rebuilt:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Spiller:
    """Pass 1: every file action of a segment into its key's bucket, with its order."""

    def __init__(self, storage: Storage, buckets: int, typed_stats: bool = False) -> None:
        self.storage = storage
        self.root = storage.root
        self.typed_stats = typed_stats
        self.adds = BucketSpill(_spill_schema(ADD_SCHEMA), _KEY, buckets, name="rebuild")
        try:
            self.removes = BucketSpill(
                _spill_schema(REMOVE_SCHEMA), _KEY, buckets, name="rebuild"
            )
        except BaseException:  # a full TMPDIR: the first spill's directory goes too
            self.adds.close()
            raise
        self.order = 0

    def close(self) -> None:
        self.adds.close()
        self.removes.close()

    def append(self, kind: str, t: pa.Table, *, version: int, file: str) -> None:
        n = t.num_rows
        if not n:
            return
        path = _contiguous(t.column("path"))
        if path.null_count:
            raise CorruptLogError(
                f"{path.null_count} {kind} actions without a path", table=self.root,
                version=version, file=file,
            )
        dv = _contiguous(t.column("deletionVector"))
        keys = file_keys(
            pa.StructArray.from_arrays([path, dv], names=["path", "deletionVector"]), self.root
        )
        order = from_numpy(np.arange(self.order, self.order + n, dtype=np.int64))
        self.order += n
        t = t.append_column(_KEY, keys).append_column(_ORDER, order)
        (self.adds if kind == "add" else self.removes).append(t)

    def checkpoint(self, segment: LogSegment, sources: Sequence[tuple[str, str]]) -> None:
        assert segment.checkpoint is not None
        version = segment.checkpoint.version
        for kind, schema in (("add", ADD_SCHEMA), ("remove", REMOVE_SCHEMA)):
            reader = StreamedActions(
                self.storage, kind, sources, version, None, empty_table(schema),
                typed_stats=self.typed_stats,
            )
            for t in reader.tables():
                self.append(kind, t, version=version, file=segment.checkpoint.files[0].path)

    def deltas(self, deltas: Sequence, hint: list[str]) -> list[tuple[int, str, dict]]:
        """Spill the deltas' file actions chunk by chunk (oldest first: small files
        grouped, a large one in pieces of whole lines, `log.replay.delta_chunks`); the non-file
        actions, newest first."""
        others_by_chunk: list[list[tuple[int, str, dict]]] = []
        for chunk in delta_chunks(self.storage, deltas, CHUNK_BYTES):
            others = self._chunk(chunk, hint)
            for _, _, obj in others:
                m = obj.get("metaData")
                if isinstance(m, dict) and isinstance(m.get("partitionColumns"), list):
                    hint += [c for c in m["partitionColumns"] if c not in hint]
            others_by_chunk.append(others)
        return [o for others in reversed(others_by_chunk) for o in others]

    def _chunk(self, chunk: list[DeltaPiece], hint: list[str]) -> list[tuple[int, str, dict]]:
        # The pieces' bytes stay referenced here: the columnar reader empties its files,
        # and the action-by-action replay needs them again when that steps aside.
        data = [p.data for p in chunk]
        files = [CommitFile(p.delta.end, p.delta.file.path, p.data) for p in chunk]
        last = chunk[-1].delta
        fast = reconcile(files, self.root, partition_columns=hint)
        if fast is not None:
            self.append("add", fast.adds, version=last.end, file=last.file.path)
            self.append("remove", fast.removes, version=last.end, file=last.file.path)
            return fast.others
        del files
        rec = _Recording(self.root)
        for p, blob in reversed(list(zip(chunk, data, strict=True))):
            # Already oldest first (a compaction's lines reversed by `delta_chunks`).
            rec.apply_file(
                blob, table=self.root, version=p.delta.end, file=p.delta.file.path,
                first_line=p.first_line,
            )
        adds, removes = rec.winners()
        self.append(
            "add", pa.Table.from_struct_array(_struct_array(adds, ADD_TYPE)),
            version=last.end, file=last.file.path,
        )
        self.append(
            "remove", pa.Table.from_struct_array(_struct_array(removes, REMOVE_TYPE)),
            version=last.end, file=last.file.path,
        )
        return rec.others


def _contiguous(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return col


def _newest_per_key(keys: pa.Array, orders: np.ndarray) -> np.ndarray:
    """Positions (in `keys`) of the newest action of each key, oldest first."""
    newest_first = np.argsort(orders, kind="stable")[::-1].astype(np.int64)
    ordered = pc.take(keys, from_numpy(newest_first))
    unique = pc.unique(ordered)
    first = to_numpy(pc.index_in(unique, value_set=ordered))
    winners = newest_first[first.astype(np.int64)]
    return winners[np.argsort(orders[winners], kind="stable")]


def _independent_newest(keys: pa.Array, orders: np.ndarray) -> np.ndarray:
    """The newest order of each key, sorted, by another route: keys dictionary-encoded,
    then the maximum order per code (`np.maximum.at`), with no sort by order and no
    first-occurrence search (the check's side of `_newest_per_key`)."""
    encoded = pc.dictionary_encode(keys)
    codes = to_numpy(encoded.indices).astype(np.int64)
    newest = np.full(len(encoded.dictionary), -1, dtype=np.int64)
    np.maximum.at(newest, codes, orders)
    return np.sort(newest)


def _kept(t: pa.Table, rows: np.ndarray) -> pa.Table:
    """The rows `rows` (ascending) of `t`: `t` itself when that is every row (a bucket
    whose keys each appear once), else a filter, which keeps the spill's order (the order
    of the log, as rows are appended in it)."""
    if len(rows) == t.num_rows:
        return t
    mask = np.zeros(t.num_rows, dtype=bool)
    mask[rows] = True
    return t.filter(from_numpy(mask))


def _reconcile_buckets(
    spiller: _Spiller, table: str, version: int, summary: RebuildSummary
) -> tuple[BucketSpill, BucketSpill]:
    """Pass 2: each bucket's winners, spilled as its live adds and tombstones."""
    adds_in, removes_in = spiller.adds, spiller.removes
    buckets = adds_in.buckets
    out_adds = BucketSpill(ADD_SCHEMA, "path", buckets, name="rebuilt")
    try:
        out_removes = BucketSpill(REMOVE_SCHEMA, "path", buckets, name="rebuilt")
    except BaseException:  # a full TMPDIR: the first spill's directory goes too
        out_adds.close()
        raise
    try:
        read_back = 0
        for b in range(buckets):
            a = adds_in.bucket(b)
            r = removes_in.bucket(b)
            n_a, n = a.num_rows, a.num_rows + r.num_rows
            read_back += n
            summary.largest_bucket = max(summary.largest_bucket, n)
            if not n:
                continue
            keys = _contiguous(pa.chunked_array(
                a.column(_KEY).chunks + r.column(_KEY).chunks, type=pa.string()
            ))
            orders = np.concatenate([
                to_numpy(a.column(_ORDER)), to_numpy(r.column(_ORDER))
            ]).astype(np.int64)
            winners = _newest_per_key(keys, orders)
            if not np.array_equal(np.sort(orders[winners]), _independent_newest(keys, orders)):
                raise RebuildCheckError(
                    f"bucket {b} of {buckets}: the newest action per key differs between the "
                    "reconciliation and the independent aggregation; nothing was written",
                    table=table, version=version,
                )
            del keys
            live = _kept(a.drop_columns([_KEY, _ORDER]), winners[winners < n_a])
            tombs = _kept(r.drop_columns([_KEY, _ORDER]), winners[winners >= n_a] - n_a)
            del a, r
            summary.live_files += live.num_rows
            summary.tombstones += tombs.num_rows
            summary.live_bytes += int(pc.sum(live.column("size")).as_py() or 0)
            for spill, t in ((out_adds, live), (out_removes, tombs)):
                for start in range(0, t.num_rows, BATCH_ROWS):
                    spill.write_bucket(b, t.slice(start, BATCH_ROWS))
            del live, tombs
        if read_back != spiller.order or read_back != summary.actions_read:
            raise RebuildCheckError(
                f"{spiller.order} file actions were spilled but {read_back} read back; "
                "nothing was written",
                table=table, version=version,
            )
        out_adds.finish()
        out_removes.finish()
    except BaseException:
        out_adds.close()
        out_removes.close()
        raise
    return out_adds, out_removes


def _read_segment(
    storage: Storage, segment: LogSegment, buckets: int | None, typed_stats: bool = False
) -> Rebuilt:
    table = storage.root
    cp = (
        None if segment.checkpoint is None
        else read_checkpoint(storage, segment.checkpoint, file_actions=False)
    )
    b = bucket_count(segment, buckets, checkpoint_bytes=None if cp is None else cp.source_bytes)
    summary = RebuildSummary(buckets=b)
    spiller = _Spiller(storage, b, typed_stats)
    try:
        hint = [] if cp is None or cp.metadata is None else list(cp.metadata.partition_columns)
        if cp is not None:
            spiller.checkpoint(segment, cp.file_sources)
        others = spiller.deltas(segment.deltas, hint)
        summary.actions_read = spiller.order
        # Non-file actions newest first, as `log.replay.full_replay` applies them; then the
        # checkpoint's.
        rec = ActionReconciler(table, NonFileState())
        for version, file, obj in others:
            rec.apply_other(obj, table=table, version=version, file=file)
        state = ReplayState(
            protocol=rec.state.protocol, metadata=rec.state.metadata, txns=rec.state.txns,
            domains=rec.state.domains, commit_infos=rec.state.commit_infos,
        )
        if cp is not None:
            fill_from_checkpoint(state, rec, cp)
        out_adds, out_removes = _reconcile_buckets(spiller, table, segment.version, summary)
    finally:
        spiller.close()
    try:
        state.adds = BucketedActions(
            storage, "add", out_adds, segment.version, summary.live_files
        )
        state.removes = BucketedActions(
            storage, "remove", out_removes, segment.version, summary.tombstones
        )
        snapshot = snapshot_from_state(storage, segment, state)
    except BaseException:
        out_adds.close()
        out_removes.close()
        raise
    return Rebuilt(snapshot, summary, [out_adds, out_removes])


def rebuild_snapshot(
    storage: Storage,
    version: int | None = None,
    *,
    buckets: int | None = None,
    typed_stats: bool = False,
) -> Rebuilt:
    """The state of `version` (latest when None) reconciled by bucket from its segment: the
    newest usable checkpoint (row group by row group) and the commits after it, never
    compaction files when the commits are there (as a streamed snapshot, so the state is
    its own independent replay); a checkpoint that cannot be read is left out as
    `load_snapshot` leaves it out.

    Args:
        storage: the table's storage.
        version: the version to rebuild.
        buckets: B (default: `bucket_count`).
        typed_stats: adds whose checkpoint row keeps only typed statistics get JSON
            `stats` from them (`StreamedActions.typed_stats`; the checkpoint writer asks).

    Returns:
        A `Rebuilt` (use it in a `with` block: its spill files are removed on leaving).

    Raises:
        RebuildCheckError: a bucket's reconciliation disagrees with the independent
            aggregation, or actions were lost between the spill and its reading.
        CorruptLogError, UnusableCheckpointError, VersionNotFoundError, NotATableError.
    """

    def read(segment: LogSegment) -> Rebuilt:
        return _read_segment(storage, segment, buckets, typed_stats)

    if version is None:
        # The latest version as every reader sees it (compactions included): a log whose
        # last commits were cleaned up after a compaction must not be rebuilt at the
        # version of its last remaining commit.
        version = build_log_segment(storage).version

    try:
        _, rebuilt = read_with_usable_checkpoint(
            storage, read, version=version, use_compactions=False
        )
    except (CorruptLogError, VersionNotFoundError, NotATableError):
        # Commits were cleaned up and only compaction files cover them.
        _, rebuilt = read_with_usable_checkpoint(storage, read, version=version)
    return rebuilt


__all__ = [
    "DEFAULT_REBUILD_THRESHOLD_BYTES",
    "BucketedActions",
    "RebuildSummary",
    "Rebuilt",
    "bucket_count",
    "needs_rebuild",
    "rebuild_snapshot",
    "rebuild_threshold_bytes",
]
