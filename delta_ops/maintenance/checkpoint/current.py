"""Checkpoint the latest version unless it already has the checkpoint the writer would
write (spec "Checkpoints", "Last Checkpoint File"): the entry the Dagster checkpoint asset
calls once the cheap log reads (`delta_ops.log.segment.log_state`) say a checkpoint is due or
forced.

A latest version whose checkpoint is already there and named by `_last_checkpoint`
(`maintenance.due.checkpoint_current`) is reported from the listing and `_last_checkpoint`
alone, as `write_checkpoint` would report it, without reading the table; otherwise
`write_checkpoint` writes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from delta_ops.log import LogState, TableSettings
from delta_ops.maintenance.checkpoint.writer import CheckpointResult, write_checkpoint
from delta_ops.maintenance.due import checkpoint_current, checkpoint_kind
from delta_ops.storage import Storage

if TYPE_CHECKING:
    from delta_ops.engine.base import Engine


def current_checkpoint(state: LogState) -> CheckpointResult:
    """What `write_checkpoint` reports for a checkpoint already there, from the listing and
    `_last_checkpoint` alone (`checkpoint_current(state, ...)` must hold)."""
    ckpt, hint = state.segment.checkpoint, state.segment.last_checkpoint
    assert ckpt is not None and hint is not None
    sidecars = (hint.v2_checkpoint or {}).get("sidecarFiles") or []
    files = (*ckpt.names, *(f"_sidecars/{s['path']}" for s in sidecars if "path" in s))
    size = hint.size_in_bytes
    return CheckpointResult(
        version=ckpt.version,
        kind=checkpoint_kind(state) or "",
        files=files,
        num_actions=hint.size if hint.size is not None else 0,
        num_add_files=hint.num_of_add_files if hint.num_of_add_files is not None else 0,
        size_in_bytes=size if size is not None else sum(f.size for f in ckpt.files),
        last_checkpoint_updated=False,
        already_existed=True,
        cross_check="not needed: nothing was written",
    )


def checkpoint_latest(
    storage: Storage,
    state: LogState,
    settings: TableSettings,
    *,
    now_ms: int | None = None,
    engine: Callable[[], Engine] | None = None,
) -> CheckpointResult:
    """The checkpoint of the latest version (`state.version`): the one already there
    (`current_checkpoint`), else the one `write_checkpoint` writes.

    Args:
        storage: the table's storage.
        state, settings: the cheap log reads of the table, made by the caller.
        now_ms: the clock, read once by the caller (`write_checkpoint`'s `now_ms`).
        engine: gives the engine to write with, asked only when a checkpoint is written
            (so a Spark session starts only then); None: the writer's default.
    """
    if checkpoint_current(state, settings):
        return current_checkpoint(state)
    return write_checkpoint(storage, now_ms=now_ms, engine=engine() if engine else None)


__all__ = ["checkpoint_latest", "current_checkpoint"]
