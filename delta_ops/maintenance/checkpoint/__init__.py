"""The checkpoint writer: classic, multi-part and V2 (classic- or UUID-named, with or
without sidecars) checkpoints, and `_last_checkpoint`.

Spec sections: "Checkpoints", "Checkpoint Specs", "Checkpoint Naming Scheme", "V2
Checkpoint Table Feature", "Sidecar File Information", "Checkpoint Metadata", "Last
Checkpoint File", "Checkpoint Schema" (appendix).

Plan (pure, `plan.py`) from a Snapshot, build rows columnar (`actions.py`), write and read
back (`writer.py`, `verify.py`); checkpoints already there are recognised, and
`_last_checkpoint` moved forward, by the log (`delta_ops.log.find_existing`,
`delta_ops.log.advance_last_checkpoint`).

    >>> from delta_ops.maintenance.checkpoint import write_checkpoint
    >>> write_checkpoint("s3://bucket/table", kind="v2-uuid", sidecar_actions=50_000)
"""

from delta_ops.errors import (
    CheckpointError,
    CheckpointVerificationError,
    InvalidCheckpointRequestError,
)
from delta_ops.log import advance_last_checkpoint
from delta_ops.maintenance.checkpoint.plan import (
    DEFAULT_PART_ACTIONS,
    DEFAULT_SIDECAR_ACTIONS,
    CheckpointKind,
    CheckpointPlan,
    default_kind,
    plan_checkpoint,
)
from delta_ops.maintenance.checkpoint.writer import (
    CheckpointResult,
    apply_checkpoint,
    write_checkpoint,
)

__all__ = [
    "DEFAULT_PART_ACTIONS",
    "DEFAULT_SIDECAR_ACTIONS",
    "CheckpointError",
    "CheckpointKind",
    "CheckpointPlan",
    "CheckpointResult",
    "CheckpointVerificationError",
    "InvalidCheckpointRequestError",
    "advance_last_checkpoint",
    "apply_checkpoint",
    "default_kind",
    "plan_checkpoint",
    "write_checkpoint",
]
