"""The row-tracking backfill of a table whose state is held in memory (`Snapshot.files` an
Arrow table): every batch is planned on a snapshot refreshed with the commits since the last
one (`commit.refresh`), which also re-plans a batch after a conflicting concurrent commit.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pyarrow.compute as pc

from delta_ops.commit.refresh import refresh_snapshot
from delta_ops.commit.row_counts import footer_row_counts
from delta_ops.errors import CommitConflictError
from delta_ops.log import Snapshot, load_snapshot
from delta_ops.maintenance.row_tracking.commits import (
    Tally,
    commit_batch,
    commit_enable,
    commit_upgrade,
)
from delta_ops.maintenance.row_tracking.plan import (
    BackfillProgress,
    BackfillResult,
    lacking_num_records,
    missing_mask,
    plan_backfill,
)
from delta_ops.protocol.arrays import string_array
from delta_ops.storage import Storage

__all__ = ["backfill_loaded"]


def backfill_loaded(
    storage: Storage,
    *,
    batch_size: int,
    enable: bool,
    engine: Any,
    common: dict[str, Any],
    progress: Callable[[BackfillProgress], None] | None,
    max_conflicts: int,
) -> BackfillResult:
    """`backfill_row_tracking` on a loaded state (see the package docstring)."""
    known_counts: dict[str, int] = {}
    snap: Snapshot | None = None
    tally: Tally | None = None
    while True:
        first = snap is None
        snap = load_snapshot(storage) if snap is None else refresh_snapshot(snap)
        if tally is None:
            tally = Tally(snap.table, max_conflicts, progress)
        snap.ensure_supported("row_tracking_backfill")
        plan = plan_backfill(snap, batch_size=batch_size, token=str(uuid.uuid4()))
        if plan.already_enabled:
            return tally.result(enabled=True, mark=plan.high_water_mark, already=first)
        upgrade = plan.new_protocol is not None or bool(plan.new_configuration)
        if not (upgrade or plan.next_batch or enable):
            return tally.result(enabled=False, mark=plan.high_water_mark)
        # Row counts stats lack come from footers, read before anything is written (a
        # table whose files cannot be counted is refused untouched), and only once.
        _counts_without_stats(snap, known_counts, engine)
        try:
            if upgrade:
                result = commit_upgrade(snap, plan, common)
                tally.protocol_upgraded |= plan.new_protocol is not None
                tally.committed("protocol", result.version, plan.files_missing)
            elif plan.next_batch:
                files = snap.files
                rows = files.filter(
                    pc.and_(
                        pc.is_in(files.column("path"), value_set=string_array(plan.next_batch)),
                        missing_mask(files),
                    )
                )
                result = commit_batch(snap, rows, tally.batches, common, known_counts)
                tally.committed(
                    "batch", result.version, plan.files_missing - rows.num_rows, rows.num_rows
                )
            else:
                result = commit_enable(snap, common)
                tally.committed("enable", result.version, 0)
                mark = result.row_id_high_water_mark
                return tally.result(
                    enabled=True, mark=plan.high_water_mark if mark is None else mark
                )
        except CommitConflictError as exc:
            tally.conflict(exc)


def _counts_without_stats(snapshot: Snapshot, known: dict[str, int], engine: Any) -> None:
    """Read (once) the footer row counts of files lacking row IDs and numRecords stats."""
    files = snapshot.files
    if not files.num_rows:
        return
    lacking = lacking_num_records(files.filter(missing_mask(files)))
    need = [p for p in lacking if p not in known]
    known.update(footer_row_counts(snapshot.storage, need, engine=engine))
