"""The three kinds of commit the row-tracking backfill makes, each one `Transaction`.

Spec sections: "Row Tracking", "Table Features", "Append-only Tables" (recommits with
dataChange=false only rearrange). Both paths (loaded and streamed) commit through these, so
what they write differs only in what the snapshot they plan on holds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa

from delta_ops.commit.row_ids import (
    ENABLE_ROW_TRACKING,
    num_records_from_stats,
    stats_with_num_records,
)
from delta_ops.commit.transaction import CommitResult, Transaction
from delta_ops.errors import CommitConflictError
from delta_ops.log import Snapshot
from delta_ops.maintenance.row_tracking.plan import (
    BackfillPlan,
    BackfillProgress,
    BackfillResult,
    recommits,
)

__all__ = ["DEFAULT_MAX_CONFLICTS", "Tally", "commit_batch", "commit_enable", "commit_upgrade"]

#: Consecutive conflicting attempts (re-planned each time) before the backfill gives up.
DEFAULT_MAX_CONFLICTS = 20


@dataclass
class Tally:
    """What one run has done so far (both paths keep the same account)."""

    table: str
    max_conflicts: int
    progress: Callable[[BackfillProgress], None] | None = None
    versions: list[int] = field(default_factory=list)
    protocol_upgraded: bool = False
    batches: int = 0
    files_done: int = 0
    conflicts: int = 0
    consecutive: int = 0
    checkpoints: list[int] = field(default_factory=list)

    def conflict(self, exc: CommitConflictError) -> None:
        """Count a conflict with a concurrent writer; raise once there were too many in a
        row."""
        self.conflicts += 1
        self.consecutive += 1
        if self.consecutive > self.max_conflicts:
            raise CommitConflictError(
                f"row-tracking backfill gave up after {self.consecutive} consecutive "
                f"conflicts with concurrent writers; last: {exc.reason}",
                table=self.table,
                version=exc.version,
            ) from exc

    def committed(self, step: str, version: int, remaining: int, files: int = 0) -> None:
        """Record a commit of `step` ("protocol", "batch" of `files` files, "enable") and
        report it; `remaining`: files still lacking row IDs after it."""
        self.consecutive = 0
        self.versions.append(version)
        if step == "batch":
            self.batches += 1
            self.files_done += files
        if self.progress is not None:
            self.progress(
                BackfillProgress(
                    step, self.files_done, self.files_done + remaining, self.batches, version
                )
            )

    def result(
        self, *, enabled: bool, mark: int, already: bool = False, streamed: bool = False
    ) -> BackfillResult:
        return BackfillResult(
            table=self.table,
            protocol_upgraded=self.protocol_upgraded,
            batches=self.batches,
            files_backfilled=self.files_done,
            high_water_mark=mark,
            enabled=enabled,
            versions=tuple(self.versions),
            already_enabled=already,
            conflicts=self.conflicts,
            streamed=streamed,
            checkpoints=tuple(self.checkpoints),
        )


def commit_upgrade(snap: Snapshot, plan: BackfillPlan, common: dict[str, Any]) -> CommitResult:
    """Support rowTracking and domainMetadata, and name the materialized columns."""
    params: dict[str, Any] = {}
    txn = Transaction(
        snap.storage,
        snapshot=snap,
        operation="UPGRADE PROTOCOL",
        operation_parameters=params,
        **common,
    )
    if plan.new_protocol is not None:
        txn.set_protocol(plan.new_protocol)
        params["newProtocol"] = orjson.dumps(plan.new_protocol).decode()
    if plan.new_configuration:
        txn.update_configuration(plan.new_configuration)
        params["properties"] = orjson.dumps(plan.new_configuration).decode()
    return txn.commit()


def commit_batch(
    snap: Snapshot,
    rows: pa.Table,
    batch_index: int,
    common: dict[str, Any],
    counts: Mapping[str, int],
) -> CommitResult:
    """Recommit `rows` (live adds lacking row IDs, in the state's order) with
    dataChange=false; the transaction gives them `baseRowId`s above the high-water mark and
    `defaultRowCommitVersion` = its version, and records the new mark.

    Args:
        snap: The snapshot planned on; its `files` must hold at least `rows` (the
            transaction carries row-ID fields over from them).
        rows: The batch.
        batch_index: The batch's number in this run (commitInfo `batchId`).
        common: engine, clock, max_retries, sleep.
        counts: Row counts read from footers, by path (recorded in the adds' stats).
    """
    adds = recommits(rows)
    txn = Transaction(
        snap.storage,
        snapshot=snap,
        operation="ROW TRACKING BACKFILL",
        operation_parameters={"batchId": batch_index, "numFiles": len(adds)},
        row_counts={a["path"]: counts[a["path"]] for a in adds if a["path"] in counts},
        **common,
    )
    for add in adds:
        # Counted from the footer: recorded, so the row-ID ranges can be checked from the
        # log alone (and writers that need numRecords, as Spark does, can go on).
        if num_records_from_stats(add.get("stats")) is None and add["path"] in counts:
            add["stats"] = stats_with_num_records(add.get("stats"), counts[add["path"]])
    txn.add_files(adds)
    return txn.commit()


def commit_enable(snap: Snapshot, common: dict[str, Any]) -> CommitResult:
    """Set `delta.enableRowTracking=true` (the transaction refuses it while `snap.files`
    holds a file lacking row IDs, and conflicts with a concurrent add lacking them)."""
    updates = {ENABLE_ROW_TRACKING: "true"}
    txn = Transaction(
        snap.storage,
        snapshot=snap,
        operation="SET TBLPROPERTIES",
        operation_parameters={"properties": orjson.dumps(updates).decode()},
        requires_row_ids=True,
        **common,
    )
    txn.update_configuration(updates)
    return txn.commit()
