"""Plan a checkpoint: which kind, which format, how many parts or sidecars. Pure.

Spec sections: "Checkpoints" (the three naming schemes and the two specs, and the writer
constraints: classic V1 always allowed; multi-part forbidden when `v2Checkpoint` is
supported; V2 spec only when it is), "V2 Checkpoint Table Feature", "Checkpoint Specs",
and the table properties `delta.checkpointPolicy`, `delta.deletedFileRetentionDuration`,
`delta.checkpoint.writeStatsAsJson` / `writeStatsAsStruct`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pyarrow as pa

from delta_ops.errors import CheckpointError as CheckpointError  # re-exported
from delta_ops.errors import CheckpointVerificationError as CheckpointVerificationError
from delta_ops.errors import CorruptLogError, InvalidCheckpointRequestError
from delta_ops.log import Snapshot, StreamedActions
from delta_ops.protocol.checkpoint_kind import CheckpointKind as CheckpointKind  # re-exported
from delta_ops.protocol.checkpoint_schema import CheckpointLayout, checkpoint_layout

#: Spark's part size for V2 checkpoints (`spark.databricks.delta.checkpoint.partSize`
#: defaults to 50,000 actions per sidecar when V2 checkpoints are on).
DEFAULT_SIDECAR_ACTIONS = 50_000
#: Actions per part when a multi-part checkpoint is asked for without a number of parts.
DEFAULT_PART_ACTIONS = 50_000


def has_null_paths(actions: pa.Table | StreamedActions) -> bool:
    """Whether any action lacks a path (a checkpoint must not hold one)."""
    if isinstance(actions, StreamedActions):
        return actions.held_without_path()
    return bool(actions.num_rows and actions.column("path").null_count)


@dataclass(frozen=True)
class CheckpointPlan:
    """What to write for one checkpoint.

    Attributes:
        table: the table root, for messages.
        version: the version checkpointed.
        kind: the kind of checkpoint.
        fmt: format of the top-level file ("parquet", or "json" for UUID-named V2).
        parts: number of parts of a multi-part checkpoint (None otherwise).
        sidecar_actions: most file actions per sidecar; 0 embeds every file action in the
            top-level file (V2 only; 0 for V1 kinds).
        layout: the checkpoint's column layout (add fields, typed columns).
        num_adds: live files written; None for a classic checkpoint of a streamed state,
            whose adds are counted while they are written (counting them first would read
            the whole checkpoint once more).
        tombstones: the unexpired remove actions written (REMOVE_SCHEMA).
        now_ms: the clock used for tombstone expiry.
    """

    table: str
    version: int
    kind: CheckpointKind
    fmt: str
    parts: int | None
    sidecar_actions: int
    layout: CheckpointLayout
    num_adds: int | None
    tombstones: pa.Table | StreamedActions
    now_ms: int

    @property
    def num_removes(self) -> int:
        return self.tombstones.num_rows

    @property
    def num_file_actions(self) -> int:
        if self.num_adds is None:
            raise ValueError("the live files of this plan are counted while they are written")
        return self.num_adds + self.num_removes

    @property
    def uses_sidecars(self) -> bool:
        return self.kind.is_v2 and self.sidecar_actions > 0 and self.num_file_actions > 0


def default_kind(snapshot: Snapshot) -> CheckpointKind:
    """The table's own choice: `delta.checkpointPolicy = v2` (with the `v2Checkpoint`
    feature supported) asks for UUID-named V2 checkpoints; everything else gets classic."""
    return snapshot.table_configuration.default_checkpoint_kind()


def _kind(value: CheckpointKind | str | None, table: str, version: int) -> CheckpointKind | None:
    if value is None or isinstance(value, CheckpointKind):
        return value
    try:
        return CheckpointKind(value)
    except ValueError:
        known = ", ".join(k.value for k in CheckpointKind)
        raise InvalidCheckpointRequestError(
            f"unknown checkpoint kind {value!r} (one of {known})", table=table, version=version
        ) from None


def plan_checkpoint(
    snapshot: Snapshot,
    *,
    kind: CheckpointKind | str | None = None,
    fmt: str = "parquet",
    sidecar_actions: int | None = None,
    parts: int | None = None,
    now_ms: int,
) -> CheckpointPlan:
    """Decide what checkpoint to write for `snapshot`.

    Args:
        snapshot: the version to checkpoint.
        kind: classic, multi-part, v2-classic or v2-uuid; None follows the table
            (`default_kind`), or multi-part when `parts` is given.
        fmt: top-level file format: "parquet", or "json" (UUID-named V2 only).
        sidecar_actions: most file actions per sidecar file (V2 only); 0 embeds them all in
            the top-level file; None uses DEFAULT_SIDECAR_ACTIONS.
        parts: number of parts (multi-part only, at least 2); None sizes parts at
            DEFAULT_PART_ACTIONS actions (and at least 2 parts).
        now_ms: current time in ms: tombstones older than the table's
            `delta.deletedFileRetentionDuration` are left out.

    Raises:
        InvalidCheckpointRequestError: an option the spec or the table does not allow.
    """
    table, version = snapshot.table, snapshot.version

    def refuse(message: str) -> InvalidCheckpointRequestError:
        return InvalidCheckpointRequestError(message, table=table, version=version)

    requested = _kind(kind, table, version)
    if requested is None:
        requested = CheckpointKind.MULTI_PART if parts is not None else default_kind(snapshot)
    if fmt not in ("parquet", "json"):
        raise refuse(f"checkpoint format must be parquet or json, not {fmt!r}")
    v2_supported = snapshot.table_configuration.is_feature_supported("v2Checkpoint")
    if requested is CheckpointKind.MULTI_PART and v2_supported:
        raise refuse(
            "multi-part checkpoints are forbidden on tables that support the v2Checkpoint "
            "feature; write a v2-uuid or classic checkpoint instead"
        )
    if requested.is_v2 and not v2_supported:
        raise refuse(
            f"a {requested} checkpoint needs the v2Checkpoint table feature, which this table "
            "does not support; write a classic or multi-part checkpoint instead"
        )
    if fmt == "json" and requested is not CheckpointKind.V2_UUID:
        raise refuse(
            f"a {requested} checkpoint is a Parquet file; only UUID-named V2 checkpoints can "
            "be JSON"
        )
    if parts is not None and requested is not CheckpointKind.MULTI_PART:
        raise refuse(f"parts apply to multi-part checkpoints only, not to {requested}")
    if sidecar_actions is not None and not requested.is_v2:
        raise refuse(f"sidecars exist in V2 checkpoints only, not in {requested} ones")
    if sidecar_actions is not None and sidecar_actions < 0:
        raise refuse(f"sidecar_actions must be >= 0, got {sidecar_actions}")
    if parts is not None and parts < 2:
        raise refuse(f"a multi-part checkpoint has at least 2 parts, got {parts}")

    tombstones = snapshot.unexpired_tombstones(now_ms)
    # A streamed classic checkpoint counts its adds as it writes them (`streamed.py`); the
    # other kinds size their parts or sidecars from the count, so they count first.
    counted_later = snapshot.streamed and requested is CheckpointKind.CLASSIC
    num_adds = None if counted_later else snapshot.num_files
    for what, actions in (("live files", snapshot.files), ("tombstones", tombstones)):
        if has_null_paths(actions):
            raise CorruptLogError(
                f"the reconstructed state holds {what} without a path; refusing to checkpoint it",
                table=table,
                version=version,
            )
    if requested is CheckpointKind.MULTI_PART and parts is None:
        assert num_adds is not None
        parts = max(2, math.ceil((num_adds + tombstones.num_rows) / DEFAULT_PART_ACTIONS))
    if requested.is_v2:
        sidecars = DEFAULT_SIDECAR_ACTIONS if sidecar_actions is None else sidecar_actions
    else:
        sidecars = 0
    return CheckpointPlan(
        table=table,
        version=version,
        kind=requested,
        fmt=fmt,
        parts=parts,
        sidecar_actions=sidecars,
        layout=checkpoint_layout(snapshot.table_configuration),
        num_adds=num_adds,
        tombstones=tombstones,
        now_ms=now_ms,
    )
