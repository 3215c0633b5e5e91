"""Row-tracking backfill: give every live file row IDs, then enable row tracking.

Spec section: "Row Tracking" (supported vs. enabled, the `delta.rowTracking` high-water mark
domain, "a backfill operation may be required to commit add and remove actions with the
baseRowId field set for all data files before the table property delta.enableRowTracking
can be set to true", materialized column names), "Table Features" (protocol upgrade),
"Append-only Tables" (recommits with dataChange=false only rearrange).

Three steps, each its own commit(s) through `delta_ops.commit.Transaction`
(`commits.py`):

1. Upgrade the protocol to support `rowTracking` and `domainMetadata` (writer version 7,
   listing what the legacy versions imply) and assign the materialized column names.
2. In batches of at most `batch_size` files, taken in the state's order (`plan.py` says
   why), re-commit the live adds that lack `baseRowId` or `defaultRowCommitVersion`: same
   file, `dataChange=false`, fresh `baseRowId`s above the high-water mark (counts from
   stats, else from Parquet footers through the Engine, all read before anything is
   written), `defaultRowCommitVersion` = the batch's version, and the new mark in
   `delta.rowTracking`. Once the protocol supports row tracking, concurrent writers assign
   row IDs themselves, so the set only shrinks; a batch that conflicts with a concurrent
   commit is planned again.
3. Set `delta.enableRowTracking=true` once no live file lacks row IDs.

Two paths, with the same commits: a table whose checkpoint holds less than
`log.replay.streamed_actions.stream_threshold_bytes()` (16 MiB by default,
`$DELTA_OPS_STREAM_THRESHOLD_BYTES`, the `stream_threshold` argument; 0 streams every table) is
loaded and re-planned on a refreshed snapshot per batch (`loaded.py`); a larger one is streamed, its
batches cut in one pass over the state, and checkpointed every `checkpoint_every` backfilled files
(`streamed.py`), so memory does not grow with the table.

Interrupted anywhere, a re-run picks up where the log says it stopped; on an enabled table
it reports `already_enabled`. Planning (`plan_backfill`) is pure; `backfill_row_tracking`
applies.

Step 1 locks out writers that do not implement rowTracking and domainMetadata (delta-rs
among them). `backfill_protocol_upgrade` says, from the protocol alone, what step 1 would
add and who loses write access; the command line and the Dagster job ask for confirmation
with it before they start.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from delta_ops.commit.transaction import DEFAULT_MAX_RETRIES, Clock
from delta_ops.errors import ProtocolUpgradeNotConfirmedError
from delta_ops.log import ReadOptions, StateKind, choose_state
from delta_ops.maintenance.options import DEFAULT_BATCH_SIZE as DEFAULT_BATCH_SIZE  # re-exported
from delta_ops.maintenance.row_tracking.commits import DEFAULT_MAX_CONFLICTS
from delta_ops.maintenance.row_tracking.loaded import backfill_loaded
from delta_ops.maintenance.row_tracking.plan import (
    ROW_TRACKING_FEATURES,
    BackfillPlan,
    BackfillProgress,
    BackfillResult,
    plan_backfill,
    row_counts,
    verify_row_tracking,
)
from delta_ops.maintenance.row_tracking.streamed import DEFAULT_CHECKPOINT_EVERY, backfill_streamed
from delta_ops.protocol.upgrade import ProtocolUpgrade, plan_protocol_upgrade
from delta_ops.storage import Storage, TableLike

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_CHECKPOINT_EVERY",
    "DEFAULT_MAX_CONFLICTS",
    "ROW_TRACKING_FEATURES",
    "BackfillPlan",
    "BackfillProgress",
    "BackfillResult",
    "ProtocolUpgrade",
    "backfill_protocol_upgrade",
    "backfill_row_tracking",
    "plan_backfill",
    "row_counts",
    "verify_row_tracking",
]


def backfill_protocol_upgrade(
    table: TableLike, *, storage_options: Mapping[str, Any] | None = None
) -> ProtocolUpgrade:
    """What the backfill's first step would do to the table's protocol (the features it
    adds, the writers that lose access), from the log's protocol alone (no replay); a
    `ProtocolUpgrade` whose `needed` is False when the table supports row tracking already.

    Args:
        table: A `Storage`, `DeltaTable` or URI.
        storage_options: For a URI `table`.

    Raises:
        UnsupportedFeatureError: The table has features the backfill cannot write (as
            `backfill_row_tracking` would raise).
    """
    from delta_ops.log import build_log_segment, read_protocol_metadata

    storage = Storage.of(table, storage_options)
    config = read_protocol_metadata(storage, build_log_segment(storage))
    # A table the backfill refuses asks no question: its own error comes first.
    config.ensure_supported("row_tracking_backfill")
    return plan_protocol_upgrade(config.protocol, ROW_TRACKING_FEATURES)


def backfill_row_tracking(
    table: TableLike,
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
    stream_threshold: int | None = None,
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
    read_options: ReadOptions | None = None,
    confirm_protocol_upgrade: bool = False,
) -> BackfillResult:
    """Backfill row IDs on a table and (by default) enable row tracking.

    On a table whose protocol lacks the rowTracking and domainMetadata writer features,
    the first commit adds them, after which writers without those features (delta-rs, the
    `deltalake` package, up to at least 1.6.6) can no longer write the table: that needs
    `confirm_protocol_upgrade=True` (`backfill_protocol_upgrade` says what would change),
    as the command line's `--confirm-protocol-upgrade` and the Dagster job's config.

    Args:
        table: A `Storage`, `DeltaTable` or URI.
        batch_size: Most files re-committed per batch (default 20,000).
        enable: Set `delta.enableRowTracking=true` at the end (False: backfill only).
        engine: Reads Parquet footers for files whose stats lack numRecords (default
            LocalEngine), and writes the streamed path's checkpoints.
        clock: Milliseconds since the epoch (commit timestamps).
        progress: Called after every commit with a `BackfillProgress`.
        max_conflicts: Consecutive re-plans after conflicting concurrent commits before
            giving up.
        max_retries: Rebased retries per commit (see `Transaction`).
        sleep: Waits between commit attempts.
        storage_options: For a URI `table`.
        stream_threshold: Checkpoint bytes from which the state is streamed instead of
            loaded (default `$DELTA_OPS_STREAM_THRESHOLD_BYTES`, else 16 MiB; 0: always).
        checkpoint_every: Streamed path: checkpoint the table after this many backfilled
            files (default 250,000), so the backfill's own commits never pile up after the
            checkpoint beyond that.
        read_options: The log's reading thresholds for what `stream_threshold` leaves
            unset (None: the environment's, `ReadOptions.from_env`).
        confirm_protocol_upgrade: Go ahead when the backfill must add table features to
            the protocol (see above).

    Returns:
        What was done; `already_enabled` when row tracking was on before (nothing written).

    Raises:
        ProtocolUpgradeNotConfirmedError: The protocol needs the upgrade and
            `confirm_protocol_upgrade` is False; nothing is written.
        UnsupportedFeatureError: The table has features delta_ops cannot write; nothing
            is written.
        StorageError: A file lacking numRecords in its stats has no readable footer;
            nothing is written.
        CommitConflictError: Still conflicting after `max_conflicts` re-plans.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if checkpoint_every < 1:
        raise ValueError(f"checkpoint_every must be at least 1, got {checkpoint_every}")
    storage = Storage.of(table, storage_options)
    if not confirm_protocol_upgrade:
        upgrade = backfill_protocol_upgrade(storage)
        if upgrade.needed:
            raise ProtocolUpgradeNotConfirmedError(
                f"the backfill {upgrade.describe()}. Nothing was committed; pass "
                "confirm_protocol_upgrade=True to go ahead", table=storage.root)
    common = {"engine": engine, "clock": clock, "max_retries": max_retries, "sleep": sleep}
    state = choose_state(
        storage, None, read_options or ReadOptions.from_env(), may_rebuild=False,
        stream_threshold=stream_threshold,
    )
    if state is StateKind.STREAMED:
        return backfill_streamed(
            storage,
            batch_size=batch_size,
            enable=enable,
            engine=engine,
            common=common,
            progress=progress,
            max_conflicts=max_conflicts,
            checkpoint_every=checkpoint_every,
            stream_threshold=stream_threshold,
        )
    return backfill_loaded(
        storage,
        batch_size=batch_size,
        enable=enable,
        engine=engine,
        common=common,
        progress=progress,
        max_conflicts=max_conflicts,
    )
