"""Row-tracking backfill: give every live file row IDs, then enable row tracking.

Spec section: "Row Tracking" (supported vs. enabled, the `delta.rowTracking` high-water mark
domain, "a backfill operation may be required to commit add and remove actions with the
baseRowId field set for all data files before the table property delta.enableRowTracking
can be set to true", materialized column names), "Table Features" (protocol upgrade),
"Append-only Tables" (recommits with dataChange=false only rearrange).

Three steps, each its own commit(s) through `delta_ops.commit.Transaction`:

1. Upgrade the protocol to support `rowTracking` and `domainMetadata` (writer version 7,
   listing what the legacy versions imply) and assign the materialized column names.
2. In batches of at most `batch_size` files, each a transaction planned on a fresh snapshot,
   re-commit the live adds that lack `baseRowId` or `defaultRowCommitVersion`: same file,
   `dataChange=false`, fresh `baseRowId`s above the high-water mark (counts from stats,
   else from Parquet footers through the Engine), `defaultRowCommitVersion` = the batch's
   version, and the new mark in `delta.rowTracking`. Once the protocol supports row
   tracking, concurrent writers assign row IDs themselves, so the set only shrinks; a
   batch that conflicts with a concurrent commit is planned again.
3. Set `delta.enableRowTracking=true` once no live file lacks row IDs.

Interrupted anywhere, a re-run picks up where the log says it stopped; on an enabled table
it reports `already_enabled`. Planning (`plan_backfill`) is pure; `backfill_row_tracking`
applies.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.commit.actions import is_true
from delta_ops.commit.protocol_upgrade import protocol_with_features
from delta_ops.commit.refresh import refresh_snapshot
from delta_ops.commit.row_counts import footer_row_counts
from delta_ops.commit.row_ids import (
    ENABLE_ROW_TRACKING,
    column_names,
    high_water_mark,
    materialized_column_names,
    num_records_from_stats,
    row_id_problems,
    stats_with_num_records,
)
from delta_ops.commit.transaction import DEFAULT_MAX_RETRIES, Clock, CommitResult, Transaction
from delta_ops.errors import CommitConflictError
from delta_ops.log.snapshot import Snapshot, load_snapshot
from delta_ops.maintenance.options import DEFAULT_BATCH_SIZE as DEFAULT_BATCH_SIZE  # re-exported
from delta_ops.protocol import features
from delta_ops.protocol.arrays import string_array
from delta_ops.storage import Storage

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "BackfillPlan",
    "BackfillProgress",
    "BackfillResult",
    "backfill_row_tracking",
    "plan_backfill",
    "row_counts",
    "verify_row_tracking",
]

#: Consecutive conflicting attempts (re-planned each time) before the backfill gives up.
DEFAULT_MAX_CONFLICTS = 20
ROW_TRACKING_FEATURES = ("rowTracking", "domainMetadata")
_ROW_FIELDS = ("baseRowId", "defaultRowCommitVersion")


@dataclass(frozen=True)
class BackfillProgress:
    """Reported after each committed step.

    Attributes:
        step: "protocol", "batch" or "enable".
        files_done: Files backfilled by this run so far.
        files_total: files_done plus the files still lacking row IDs.
        batches: Batches committed by this run so far.
        version: The version just committed.
    """

    step: str
    files_done: int
    files_total: int
    batches: int
    version: int


@dataclass(frozen=True)
class BackfillPlan:
    """What the backfill still has to do at one snapshot (pure, from the snapshot).

    Attributes:
        table: Table root URI.
        version: The snapshot version.
        already_enabled: Row tracking is enabled (supported and the property true).
        new_protocol: The upgraded protocol, None when rowTracking is supported already.
        new_configuration: Configuration entries to set with the upgrade (materialized
            column names; enableRowTracking=false when it was set on a table that did not
            support the feature), empty when nothing is needed.
        files_missing: Live files lacking baseRowId or defaultRowCommitVersion.
        next_batch: Paths of the next batch (at most batch_size, sorted by path).
        high_water_mark: The current row ID high-water mark (-1: none assigned).
    """

    table: str
    version: int
    already_enabled: bool
    new_protocol: dict[str, Any] | None
    new_configuration: dict[str, str]
    files_missing: int
    next_batch: tuple[str, ...]
    high_water_mark: int


@dataclass(frozen=True)
class BackfillResult:
    """Outcome of `backfill_row_tracking` (the CLI's --json object).

    Attributes:
        table: Table root URI.
        protocol_upgraded: This run upgraded the protocol.
        batches: Backfill batches this run committed.
        files_backfilled: Files this run gave row IDs.
        high_water_mark: The row ID high-water mark at the end.
        enabled: Row tracking is enabled at the end.
        versions: Versions this run committed, in order.
        already_enabled: Row tracking was enabled before this run (nothing was written).
        conflicts: Batches or steps re-planned after a conflicting concurrent commit.
    """

    table: str
    protocol_upgraded: bool
    batches: int
    files_backfilled: int
    high_water_mark: int
    enabled: bool
    versions: tuple[int, ...]
    already_enabled: bool
    conflicts: int = 0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["versions"] = list(self.versions)
        return out


def _missing_mask(files: pa.Table) -> pa.ChunkedArray:
    return pc.or_(
        pc.is_null(files.column("baseRowId")), pc.is_null(files.column("defaultRowCommitVersion"))
    )


def plan_backfill(
    snapshot: Snapshot, *, batch_size: int = DEFAULT_BATCH_SIZE, token: str = "0"
) -> BackfillPlan:
    """Plan the rest of the backfill from a snapshot (pure).

    Args:
        snapshot: The table state.
        batch_size: Most files per batch.
        token: Suffix for new materialized column names (a fresh UUID in practice).

    Raises:
        ValueError: batch_size < 1.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    protocol = snapshot.protocol
    config = snapshot.metadata.configuration
    enabled = features.is_feature_enabled(protocol, config, "rowTracking")
    new_protocol = protocol_with_features(protocol, ROW_TRACKING_FEATURES)
    new_config = materialized_column_names(
        config, column_names(snapshot.metadata.schema), token=token
    )
    if new_protocol is not None and is_true(config, ENABLE_ROW_TRACKING):
        # The property is set on a table that did not support the feature (so it meant
        # nothing). Supporting the feature would make it mean "every file has row IDs"
        # before the backfill: turn it off in the same commit; step 3 turns it on.
        new_config[ENABLE_ROW_TRACKING] = "false"
    files = snapshot.files
    missing = 0
    batch: tuple[str, ...] = ()
    if files.num_rows:
        paths = files.column("path").filter(_missing_mask(files))
        missing = len(paths)
        if missing:
            ordered = pc.sort_indices(paths)
            batch = tuple(paths.take(ordered.slice(0, batch_size)).to_pylist())
    return BackfillPlan(
        table=snapshot.table,
        version=snapshot.version,
        already_enabled=enabled,
        new_protocol=new_protocol,
        new_configuration=new_config,
        files_missing=missing,
        next_batch=batch,
        high_water_mark=high_water_mark(snapshot.domains, table=snapshot.table),
    )


def _batch_adds(snapshot: Snapshot, paths: tuple[str, ...]) -> list[dict[str, Any]]:
    """The live add actions of `paths` as recommits (dataChange=false, nulls dropped)."""
    files = snapshot.files
    mask = pc.and_(
        pc.is_in(files.column("path"), value_set=string_array(paths)),
        _missing_mask(files),
    )
    rows = files.filter(mask).to_pylist()
    out = []
    for row in rows:
        add = {k: v for k, v in row.items() if v is not None}
        for key in ("partitionValues", "tags"):
            if isinstance(add.get(key), list):  # Arrow maps come back as pairs
                add[key] = dict(add[key])
        if "partitionValues" not in add:
            add["partitionValues"] = {}
        dv = add.get("deletionVector")
        if isinstance(dv, dict):
            add["deletionVector"] = {k: v for k, v in dv.items() if v is not None}
        add["dataChange"] = False
        out.append(add)
    out.sort(key=lambda a: a["path"])
    return out


def backfill_row_tracking(
    table: Any,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    enable: bool = True,
    engine: Any = None,
    clock: Clock | None = None,
    progress: Callable[[BackfillProgress], None] | None = None,
    max_conflicts: int = DEFAULT_MAX_CONFLICTS,
    max_retries: int = DEFAULT_MAX_RETRIES,
    sleep: Callable[[float], None] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> BackfillResult:
    """Backfill row IDs on a table and (by default) enable row tracking.

    Args:
        table: A `Storage`, `DeltaTable` or URI.
        batch_size: Most files re-committed per batch (default 20,000).
        enable: Set `delta.enableRowTracking=true` at the end (False: backfill only).
        engine: Reads Parquet footers for files whose stats lack numRecords (default
            LocalEngine).
        clock: Milliseconds since the epoch (commit timestamps).
        progress: Called after every commit with a `BackfillProgress`.
        max_conflicts: Consecutive re-plans after conflicting concurrent commits before
            giving up.
        max_retries: Rebased retries per commit (see `Transaction`).
        sleep: Waits between commit attempts.
        storage_options: For a URI `table`.

    Returns:
        What was done; `already_enabled` when row tracking was on before (nothing written).

    Raises:
        UnsupportedFeatureError: The table has features delta_ops cannot write; nothing
            is written.
        CommitConflictError: Still conflicting after `max_conflicts` re-plans.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    storage = Storage.of(table, storage_options)
    common = {
        "engine": engine,
        "clock": clock,
        "max_retries": max_retries,
        "sleep": sleep,
    }
    versions: list[int] = []
    protocol_upgraded = False
    batches = files_done = conflicts = consecutive = 0
    known_counts: dict[str, int] = {}
    snap: Snapshot | None = None

    def finish(*, enabled: bool, mark: int, already: bool = False) -> BackfillResult:
        assert snap is not None
        return BackfillResult(
            table=snap.table,
            protocol_upgraded=protocol_upgraded,
            batches=batches,
            files_backfilled=files_done,
            high_water_mark=mark,
            enabled=enabled,
            versions=tuple(versions),
            already_enabled=already,
            conflicts=conflicts,
        )

    while True:
        first = snap is None
        snap = load_snapshot(storage) if snap is None else refresh_snapshot(snap)
        snap.ensure_supported("row_tracking_backfill")
        plan = plan_backfill(snap, batch_size=batch_size, token=str(uuid.uuid4()))
        if plan.already_enabled:
            return finish(enabled=True, mark=plan.high_water_mark, already=first)
        if not (plan.new_protocol is not None or plan.new_configuration or plan.next_batch):
            if not enable:
                return finish(enabled=False, mark=plan.high_water_mark)
        # Row counts stats lack come from footers, read before anything is written (a
        # table whose files cannot be counted is refused untouched), and only once.
        _counts_without_stats(snap, known_counts, engine)
        try:
            if plan.new_protocol is not None or plan.new_configuration:
                result = _upgrade(snap, plan, common)
                protocol_upgraded = protocol_upgraded or plan.new_protocol is not None
                step = "protocol"
            elif plan.next_batch:
                result = _commit_batch(snap, plan, batches, common, known_counts)
                batches += 1
                files_done += len(plan.next_batch)
                step = "batch"
            else:
                result = _enable(snap, common)
                step = "enable"
        except CommitConflictError as exc:
            conflicts += 1
            consecutive += 1
            if consecutive > max_conflicts:
                raise CommitConflictError(
                    f"row-tracking backfill gave up after {consecutive} consecutive conflicts "
                    f"with concurrent writers; last: {exc.reason}",
                    table=snap.table,
                    version=exc.version,
                ) from exc
            continue
        consecutive = 0
        versions.append(result.version)
        if progress is not None:
            remaining = plan.files_missing - (len(plan.next_batch) if step == "batch" else 0)
            progress(
                BackfillProgress(step, files_done, files_done + remaining, batches, result.version)
            )
        if step == "enable":
            mark = result.row_id_high_water_mark
            return finish(enabled=True, mark=plan.high_water_mark if mark is None else mark)


def row_counts(snapshot: Snapshot, *, engine: Any = None) -> pa.Array:
    """Physical row counts of the snapshot's live files, aligned with `snapshot.files`:
    `numRecords` from stats, else from the Parquet footer (read through the Engine)."""
    files = snapshot.files
    counts = [num_records_from_stats(s) for s in files.column("stats").to_pylist()]
    paths = files.column("path").to_pylist()
    missing = [p for p, n in zip(paths, counts, strict=True) if n is None]
    footer = footer_row_counts(snapshot.storage, missing, engine=engine)
    return pa.array(
        [footer[p] if n is None else n for p, n in zip(paths, counts, strict=True)], pa.int64()
    )


def _counts_without_stats(snapshot: Snapshot, known: dict[str, int], engine: Any) -> None:
    """Read (once) the footer row counts of files lacking row IDs and numRecords stats."""
    files = snapshot.files
    if not files.num_rows:
        return
    lacking = files.filter(_missing_mask(files))
    stats = lacking.column("stats")
    # Cheap vectorized pre-filter: stats that do not even mention numRecords, or none
    # (Kleene logic: null stats are taken by `is_null`; no Python scalar is handed to
    # Arrow, which would import pandas to convert it).
    mentions = pc.match_substring(stats, '"numRecords"')
    candidates = lacking.filter(pc.or_kleene(pc.invert(mentions), pc.is_null(stats)))
    # (Stats that mention numRecords without a usable count are rare; the transaction
    # reads those footers itself.)
    need = [p for p in candidates.column("path").to_pylist() if p not in known]
    known.update(footer_row_counts(snapshot.storage, need, engine=engine))


def verify_row_tracking(snapshot: Snapshot, *, engine: Any = None, limit: int = 10) -> list[str]:
    """What is wrong with the snapshot's row IDs (empty list: every live file has
    baseRowId and defaultRowCommitVersion, the ranges are disjoint, and the high-water mark
    covers them). Row counts come from stats, else from Parquet footers."""
    return row_id_problems(
        snapshot.files,
        high_water_mark=high_water_mark(snapshot.domains, table=snapshot.table),
        counts=row_counts(snapshot, engine=engine),
        limit=limit,
    )




def _upgrade(snap: Snapshot, plan: BackfillPlan, common: dict[str, Any]) -> CommitResult:
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


def _commit_batch(
    snap: Snapshot,
    plan: BackfillPlan,
    batch_index: int,
    common: dict[str, Any],
    counts: Mapping[str, int],
) -> CommitResult:
    txn = Transaction(
        snap.storage,
        snapshot=snap,
        operation="ROW TRACKING BACKFILL",
        operation_parameters={"batchId": batch_index, "numFiles": len(plan.next_batch)},
        row_counts={p: counts[p] for p in plan.next_batch if p in counts},
        **common,
    )
    adds = _batch_adds(snap, plan.next_batch)
    for add in adds:
        # Counted from the footer: recorded, so the row-ID ranges can be checked from the
        # log alone (and writers that need numRecords, as Spark does, can go on).
        if num_records_from_stats(add.get("stats")) is None and add["path"] in counts:
            add["stats"] = stats_with_num_records(add.get("stats"), counts[add["path"]])
    txn.add_files(adds)
    return txn.commit()


def _enable(snap: Snapshot, common: dict[str, Any]) -> CommitResult:
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
