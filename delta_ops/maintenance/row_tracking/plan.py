"""What the row-tracking backfill still has to do at one snapshot, and the pieces both of its
paths (loaded and streamed) share: the missing-file filter, the recommits, the row counts.

Spec section: "Row Tracking" (a file lacks row IDs when its add has no `baseRowId` or no
`defaultRowCommitVersion`; materialized column names; the `delta.rowTracking` domain).

Order: the files lacking row IDs are taken in the order of the state (`Snapshot.files`:
the checkpoint's rows as stored, then the commits' winners), not sorted by path. A streamed
state (`log.replay.streamed_actions.StreamedActions`) yields its rows in exactly that order, one row
group at a time, so one pass over it cuts the same batches the loaded state does; sorting 10M paths
would need them all at once. The loaded path re-plans on a refreshed snapshot after every
batch, and a refresh keeps the untouched rows in their order (it only drops the keys a new
commit touched and appends the new winners), so its next batch is the next `batch_size`
files of the first plan: the two paths commit the same batches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.commit.actions import is_true
from delta_ops.commit.row_counts import footer_row_counts
from delta_ops.commit.row_ids import (
    ENABLE_ROW_TRACKING,
    ROW_TRACKING_SUSPENDED,
    column_names,
    high_water_mark,
    materialized_column_names,
    num_records_from_stats,
    row_id_problems,
)
from delta_ops.errors import InvalidCommitError
from delta_ops.log import Snapshot, StreamedActions
from delta_ops.maintenance.options import DEFAULT_BATCH_SIZE
from delta_ops.protocol.upgrade import protocol_with_features

__all__ = [
    "BackfillPlan",
    "BackfillProgress",
    "BackfillResult",
    "lacking_num_records",
    "missing_mask",
    "missing_tables",
    "plan_backfill",
    "recommits",
    "row_counts",
    "verify_row_tracking",
]

ROW_TRACKING_FEATURES = ("rowTracking", "domainMetadata")
#: The columns that decide whether a file lacks row IDs.
_ROW_COLUMNS = ("path", "baseRowId", "defaultRowCommitVersion")


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
        next_batch: Paths of the next batch: the first batch_size files lacking row IDs, in
            the state's order (see the module docstring).
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
        streamed: The table was backfilled from a streamed state (large table).
        checkpoints: Versions this run checkpointed (streamed path only, see
            `checkpoint_every`).
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
    streamed: bool = False
    checkpoints: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["versions"] = list(self.versions)
        out["checkpoints"] = list(self.checkpoints)
        return out


def missing_mask(files: pa.Table) -> pa.ChunkedArray | pa.Array:
    """The rows of `files` lacking `baseRowId` or `defaultRowCommitVersion`."""
    return pc.or_(
        pc.is_null(files.column("baseRowId")), pc.is_null(files.column("defaultRowCommitVersion"))
    )


def missing_tables(
    files: pa.Table | StreamedActions,
    columns: Sequence[str] | None = None,
    seen: Callable[[pa.Table], None] | None = None,
) -> Iterator[pa.Table]:
    """The files lacking row IDs, in the state's order, a table at a time (never empty):
    `columns` of them (every column when None). A loaded state is one table; a streamed one
    is read again, one row group at a time, and `seen` (with `columns`) is shown each of
    its tables before the filter (`columns` and the row ID columns)."""
    if isinstance(files, StreamedActions):
        if columns is None:
            tables = files.where(missing_mask).tables()
        else:
            wanted = list(columns)
            read = wanted + [c for c in _ROW_COLUMNS if c not in wanted]

            def shown(t: pa.Table) -> pa.Table:
                if seen is not None:
                    seen(t)
                return t

            tables = (shown(t).filter(missing_mask(t)).select(wanted)
                      for t in files.tables(read))
        for t in tables:
            if t.num_rows:
                yield t
        return
    if files.num_rows:
        t = files.filter(missing_mask(files))
        if t.num_rows:
            yield t if columns is None else t.select(list(columns))


def header_changes(
    snapshot: Snapshot, token: str
) -> tuple[bool, dict[str, Any] | None, dict[str, str]]:
    """(already enabled, the upgraded protocol or None, configuration entries to set): what
    the plan says from the protocol and metadata alone."""
    protocol = snapshot.protocol
    config = snapshot.metadata.configuration
    enabled = snapshot.table_configuration.is_row_tracking_enabled
    if is_true(config, ROW_TRACKING_SUSPENDED) and not enabled:
        # Spec "Row Tracking": while suspended, writers assign no row IDs and may not
        # enable row tracking.
        raise InvalidCommitError(
            f"row tracking is suspended on this table ({ROW_TRACKING_SUSPENDED}=true): no "
            "row IDs may be assigned nor row tracking enabled; nothing was written. Unset "
            "the property first if the table's owners agree",
            table=snapshot.table, version=snapshot.version,
        )
    new_protocol = protocol_with_features(protocol, ROW_TRACKING_FEATURES)
    new_config = materialized_column_names(
        config, column_names(snapshot.metadata.schema), token=token
    )
    if new_protocol is not None and is_true(config, ENABLE_ROW_TRACKING):
        # The property is set on a table that did not support the feature (so it meant
        # nothing). Supporting the feature would make it mean "every file has row IDs"
        # before the backfill: turn it off in the same commit; step 3 turns it on.
        new_config[ENABLE_ROW_TRACKING] = "false"
    return enabled, new_protocol, new_config


def make_plan(
    snapshot: Snapshot, token: str, files_missing: int, next_batch: Sequence[str]
) -> BackfillPlan:
    """The plan of `snapshot` once its files lacking row IDs were counted."""
    enabled, new_protocol, new_config = header_changes(snapshot, token)
    return BackfillPlan(
        table=snapshot.table,
        version=snapshot.version,
        already_enabled=enabled,
        new_protocol=new_protocol,
        new_configuration=new_config,
        files_missing=files_missing,
        next_batch=tuple(next_batch),
        high_water_mark=high_water_mark(snapshot.domains, table=snapshot.table),
    )


def plan_backfill(
    snapshot: Snapshot, *, batch_size: int = DEFAULT_BATCH_SIZE, token: str = "0"
) -> BackfillPlan:
    """Plan the rest of the backfill from a snapshot (pure; a streamed snapshot is read
    once, its row-ID columns only).

    Args:
        snapshot: The table state, loaded or streamed.
        batch_size: Most files per batch.
        token: Suffix for new materialized column names (a fresh UUID in practice).

    Raises:
        ValueError: batch_size < 1.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    missing = 0
    batch: list[str] = []
    for t in missing_tables(snapshot.files, ["path"]):
        missing += t.num_rows
        if len(batch) < batch_size:
            batch.extend(t.column("path").slice(0, batch_size - len(batch)).to_pylist())
    return make_plan(snapshot, token, missing, batch)


def recommits(rows: pa.Table) -> list[dict[str, Any]]:
    """Add actions (as live in the state, rows of ADD_SCHEMA) as recommits: the same
    actions with dataChange=false, null fields dropped, in the order of `rows`."""
    out = []
    for row in rows.to_pylist():
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
    return out


def lacking_num_records(rows: pa.Table) -> list[str]:
    """Paths of `rows` whose stats do not even mention numRecords, or are null: their row
    counts come from Parquet footers. (A vectorized pre-filter with Kleene logic: no Python
    scalar is handed to Arrow, which would import pandas to convert it. Stats that mention
    numRecords without a usable count are rare; the transaction reads those footers
    itself.)"""
    if not rows.num_rows:
        return []
    stats = rows.column("stats")
    mentions = pc.match_substring(stats, '"numRecords"')
    keep = pc.or_kleene(pc.invert(mentions), pc.is_null(stats))
    return rows.column("path").filter(keep).to_pylist()


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
