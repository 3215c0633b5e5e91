"""The row-tracking backfill of a large table, from a streamed state (issue 15).

A table whose checkpoint holds at least `log.replay.streamed_actions.stream_threshold_bytes()` is
never loaded whole: `load_snapshot(stream=True)` holds the protocol, metadata, domains and the
commits since the checkpoint, and its files are read again, one row group at a time, each
time they are iterated. A round of the backfill is:

1. Survey (one pass, the row-ID columns and `stats`): count the files lacking row IDs,
   and read the Parquet footers of those whose stats lack numRecords (through the Engine,
   `FOOTER_CHUNK` paths per call), spilling (path, count) to a local temporary file in the
   pass's order. Everything is read before anything is written: a table whose files cannot
   be counted is refused untouched, as on the loaded path.
2. Upgrade the protocol when needed (as the loaded path does).
3. Batches (one pass, every column, of the same state): the files lacking row IDs, cut
   into batches of `batch_size` in the state's order, each committed by `commits.
   commit_batch` on the current header (protocol, metadata, domains and timestamps caught
   up with the commits since, never the files). Before each attempt the commits since the
   last one are read: the keys a concurrent writer touched (removed, re-added) leave the
   batch; the backfill's own commits are known by version and not read for keys, so what
   is held follows the concurrent writers, not the table. A batch that still conflicts at
   commit time (`CommitConflictError`) is filtered again the same way and retried.
   The footer counts a batch needs are taken from the spill, read on in the same order.
4. A new round: its survey finds nothing left (or what a concurrent writer added without
   row IDs), and the enabling commit is planned on that round's state, which the survey
   just proved complete.

Memory: one row group being read, one batch (at most `batch_size` rows, plus the row
group that completes it), the header, the keys concurrent writers touched. The backfill's
own commits pile up after the checkpoint (a 20,000-file batch is a 20,000-add commit), and
the next round's `load_snapshot(stream=True)`, a reader's, or a resumed run's, would hold
every one of them; so after every `checkpoint_every` backfilled files the table is
checkpointed (`maintenance.checkpoint.write_checkpoint`, the streamed writer on a large
table, the kind the table asks for) at the version just committed. Nothing is deleted:
old checkpoints and commits stay for metadata cleanup to judge.

Equality with the loaded path: the same batches (see `plan`), the same actions in each
(the same `commit_batch`, planned on a snapshot of the same version, protocol, metadata
and domains), hence the same row IDs and high-water mark; the checkpoints add no version.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.commit.refresh import refresh_snapshot
from delta_ops.commit.row_counts import footer_row_counts
from delta_ops.commit.row_ids import NO_ROW_IDS, max_assigned_row_id
from delta_ops.engine.scratch import ScratchDir
from delta_ops.errors import CommitConflictError
from delta_ops.log import Snapshot, list_log, load_snapshot, read_commit
from delta_ops.maintenance.options import DEFAULT_BACKFILL_CHECKPOINT_EVERY
from delta_ops.maintenance.row_tracking.commits import (
    Tally,
    commit_batch,
    commit_enable,
    commit_upgrade,
)
from delta_ops.maintenance.row_tracking.plan import (
    BackfillPlan,
    BackfillProgress,
    BackfillResult,
    header_changes,
    lacking_num_records,
    make_plan,
    missing_tables,
)
from delta_ops.protocol.actions import ADD_SCHEMA, REMOVE_SCHEMA, file_key, file_keys
from delta_ops.protocol.arrays import empty_table, from_pylist, string_array
from delta_ops.protocol.filenames import LogFileKind
from delta_ops.storage import Storage

__all__ = ["DEFAULT_CHECKPOINT_EVERY", "FOOTER_CHUNK", "backfill_streamed"]

#: Backfilled files after which the streamed path checkpoints the table (see `options`).
DEFAULT_CHECKPOINT_EVERY = DEFAULT_BACKFILL_CHECKPOINT_EVERY
#: Paths whose footers are read in one Engine call during the survey.
FOOTER_CHUNK = 50_000
_SURVEY_COLUMNS = ("path", "stats")


def backfill_streamed(
    storage: Storage,
    *,
    batch_size: int,
    enable: bool,
    engine: Any,
    common: dict[str, Any],
    progress: Callable[[BackfillProgress], None] | None,
    max_conflicts: int,
    checkpoint_every: int,
    stream_threshold: int | None = None,
) -> BackfillResult:
    """`backfill_row_tracking` on a streamed state (see the module docstring)."""
    tally: Tally | None = None
    first = True
    while True:
        base = load_snapshot(storage, stream=True)
        if tally is None:
            tally = Tally(base.table, max_conflicts, progress)
        base.ensure_supported("row_tracking_backfill")
        head = _header(base)
        enabled, new_protocol, new_config = header_changes(head, "0")
        if enabled:
            return tally.result(enabled=True, mark=_mark(head), already=first, streamed=True)
        first = False
        with _FooterCounts(storage, engine) as footers:
            plan = _survey(base, batch_size, footers)
            # Each commit's snapshot holds no files (`_header`): the IDs they hold, here.
            common = {**common, "row_id_floor": plan.high_water_mark}
            upgrade = plan.new_protocol is not None or bool(plan.new_configuration)
            if not (upgrade or plan.files_missing):
                if not enable:
                    return tally.result(enabled=False, mark=plan.high_water_mark, streamed=True)
                try:
                    result = commit_enable(head, common)
                except CommitConflictError as exc:
                    tally.conflict(exc)
                    continue
                tally.committed("enable", result.version, 0)
                mark = result.row_id_high_water_mark
                return tally.result(
                    enabled=True,
                    mark=plan.high_water_mark if mark is None else mark,
                    streamed=True,
                )
            if upgrade:
                try:
                    result = commit_upgrade(head, plan, common)
                except CommitConflictError as exc:
                    tally.conflict(exc)
                    continue
                tally.protocol_upgraded |= plan.new_protocol is not None
                tally.committed("protocol", result.version, plan.files_missing)
                # The upgrade changed no file: the batches still come from `base`.
                if not plan.files_missing:
                    continue
            _batches(
                storage, base, plan, footers, tally,
                batch_size=batch_size, common=common, engine=engine,
                checkpoint_every=checkpoint_every, stream_threshold=stream_threshold,
            )


def _header(snap: Snapshot) -> Snapshot:
    """`snap` without its files: what a transaction needs to plan on (version, protocol,
    metadata, domains, timestamps)."""
    return dataclasses.replace(
        snap, files=empty_table(ADD_SCHEMA), tombstones=empty_table(REMOVE_SCHEMA)
    )


def _mark(snap: Snapshot) -> int:
    from delta_ops.commit.row_ids import high_water_mark

    return high_water_mark(snap.domains, table=snap.table)


def _survey(base: Snapshot, batch_size: int, footers: _FooterCounts) -> BackfillPlan:
    """Step 1: the plan of `base` (one pass), the footer counts spilled on the way."""
    missing = 0
    batch: list[str] = []
    top = [NO_ROW_IDS]  # the highest row ID a live file holds: the mark must not lag it

    def seen(t: pa.Table) -> None:
        top[0] = max(top[0], max_assigned_row_id(t))

    for t in missing_tables(base.files, _SURVEY_COLUMNS, seen):
        missing += t.num_rows
        if len(batch) < batch_size:
            batch.extend(t.column("path").slice(0, batch_size - len(batch)).to_pylist())
        footers.add(lacking_num_records(t))
    footers.finish()
    _release()
    plan = make_plan(base, str(uuid.uuid4()), missing, batch)
    return dataclasses.replace(plan, high_water_mark=max(plan.high_water_mark, top[0]))


def _release() -> None:
    """Hand the pages Arrow's allocator keeps after a whole pass (or a checkpoint) back
    to the system, so the next stage starts from what is live, not from that pass's peak."""
    pa.default_memory_pool().release_unused()


def _cut(tables: Iterator[pa.Table], size: int) -> Iterator[pa.Table]:
    """`tables` re-cut into tables of exactly `size` rows (the last one fewer)."""
    held: list[pa.Table] = []
    rows = 0
    for t in tables:
        held.append(t)
        rows += t.num_rows
        while rows >= size:
            whole = pa.concat_tables(held)
            yield whole.slice(0, size).combine_chunks()
            rest = whole.slice(size)
            held = [rest] if rest.num_rows else []
            rows = rest.num_rows
    if rows:
        yield pa.concat_tables(held).combine_chunks()


def _batches(
    storage: Storage,
    base: Snapshot,
    plan: BackfillPlan,
    footers: _FooterCounts,
    tally: Tally,
    *,
    batch_size: int,
    common: dict[str, Any],
    engine: Any,
    checkpoint_every: int,
    stream_threshold: int | None,
) -> None:
    """Step 3: every batch of `base`'s files lacking row IDs, committed in order."""
    from delta_ops.maintenance.checkpoint import write_checkpoint

    root = base.table
    head = _header(base)
    touched: set[str] = set()  # keys concurrent writers touched since `base`
    left = plan.files_missing
    since_checkpoint = 0
    for rows in _cut(missing_tables(base.files), batch_size):
        left -= rows.num_rows
        while True:
            head = _catch_up(storage, head, touched, set(tally.versions))
            kept = rows
            if touched:
                keys = file_keys(rows.select(["path", "deletionVector"]).to_struct_array(), root)
                hit = pc.is_in(keys, value_set=string_array(sorted(touched)))
                if pc.any(hit).as_py():
                    kept = rows.filter(pc.invert(hit))
            if not kept.num_rows:
                break
            counts = footers.take(lacking_num_records(kept))
            try:
                result = commit_batch(
                    dataclasses.replace(head, files=kept), kept, tally.batches, common, counts
                )
            except CommitConflictError as exc:
                tally.conflict(exc)
                continue
            tally.committed("batch", result.version, left, kept.num_rows)
            since_checkpoint += kept.num_rows
            if since_checkpoint >= checkpoint_every:
                done = write_checkpoint(
                    storage,
                    version=result.version,
                    engine=engine,
                    clock=common["clock"],
                    stream_threshold=stream_threshold,
                )
                tally.checkpoints.append(done.version)
                since_checkpoint = 0
                _release()
            break


def _catch_up(storage: Storage, head: Snapshot, touched: set[str], ours: set[int]) -> Snapshot:
    """`head` brought up to date (without files); adds to `touched` the file keys of the
    commits since that this run did not write."""
    start = head.version + 1
    newer = sorted(
        lf.version
        for lf, _ in list_log(storage, start)
        if lf.kind == LogFileKind.COMMIT and lf.version >= start
    )
    if not newer:
        return head
    for v in newer:
        if v in ours:
            continue
        for obj in read_commit(storage, v):
            for kind in ("add", "remove"):
                body = obj.get(kind)
                if isinstance(body, dict) and body.get("path") is not None:
                    touched.add(file_key(body["path"], body.get("deletionVector"), head.table))
    return _header(refresh_snapshot(head))


class _FooterCounts:
    """Row counts read from Parquet footers during a survey, spilled to a local temporary
    Arrow IPC file in the survey's order and handed back in that order (`take` with paths
    that follow the same order, some skipped). Removed on exit."""

    _SCHEMA = pa.schema([("path", pa.string()), ("num_records", pa.int64())])

    def __init__(self, storage: Storage, engine: Any) -> None:
        self.storage = storage
        self.engine = engine
        self._dir: str | None = None
        self._sink: Any = None
        self._writer: Any = None
        self._pending: list[str] = []
        self._source: Any = None
        self._batches: Iterator[pa.RecordBatch] | None = None
        self._paths: list[str] = []
        self._counts: list[int] = []
        self._at = 0

    def __enter__(self) -> _FooterCounts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add(self, paths: list[str]) -> None:
        """Count these files (in order); their footers are read FOOTER_CHUNK at a time."""
        self._pending.extend(paths)
        while len(self._pending) >= FOOTER_CHUNK:
            self._flush(self._pending[:FOOTER_CHUNK])
            del self._pending[:FOOTER_CHUNK]

    def _flush(self, paths: list[str]) -> None:
        counts = footer_row_counts(self.storage, paths, engine=self.engine)
        if self._writer is None:
            self._scratch = ScratchDir("backfill")
            self._dir = self._scratch.path
            self._sink = pa.OSFile(os.path.join(self._dir, "counts.arrows"), "wb")
            self._writer = pa.ipc.new_stream(self._sink, self._SCHEMA)
        self._writer.write_batch(
            pa.record_batch(
                [string_array(paths), from_pylist([counts[p] for p in paths], pa.int64())],
                schema=self._SCHEMA,
            )
        )

    def finish(self) -> None:
        """Every footer read: the counts can be taken."""
        if self._pending:
            self._flush(self._pending)
            self._pending = []
        if self._writer is not None:
            self._writer.close()
            self._sink.close()
            self._writer = self._sink = None
            assert self._dir is not None
            self._source = pa.OSFile(os.path.join(self._dir, "counts.arrows"))
            self._batches = iter(pa.ipc.open_stream(self._source))

    def take(self, paths: list[str]) -> dict[str, int]:
        """The counts of `paths`, which come in the survey's order (a subsequence of it)."""
        out: dict[str, int] = {}
        for p in paths:
            while True:
                if self._at >= len(self._paths):
                    nxt = next(self._batches, None) if self._batches is not None else None
                    if nxt is None:
                        break  # not surveyed: the transaction reads that footer itself
                    self._paths = nxt.column(0).to_pylist()
                    self._counts = nxt.column(1).to_pylist()
                    self._at = 0
                    continue
                at = self._at
                self._at += 1
                if self._paths[at] == p:
                    out[p] = self._counts[at]
                    break
        return out

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._sink.close()
        self._batches = None
        if self._source is not None:
            self._source.close()
            self._source = None
        if self._dir is not None:
            self._scratch.close()
            self._dir = None
