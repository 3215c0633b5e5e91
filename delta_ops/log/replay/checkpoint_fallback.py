"""Reading a version without an unusable checkpoint: the one retry loop every reader uses.

Spec section: "Checkpoints" (a checkpoint is an optimization: the same state can be read
from an older checkpoint and the commits after it, or from the commits alone). A
checkpoint that cannot be read (corrupt Parquet or JSON, a V2 checkpoint whose sidecar is
missing: `UnusableCheckpointError`) is left out and the segment built again without it,
until a read succeeds or no older checkpoint or complete run of commits can stand in for
it; then the error names what was unusable and why nothing else could replace it.

`load_snapshot` (the full replay) and VACUUM (references only) both read through
`read_with_usable_checkpoint`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from delta_ops.errors import DeltaOpsError
from delta_ops.log.replay.full_replay import UnusableCheckpointError
from delta_ops.log.segment.log_segment import LogSegment, build_log_segment
from delta_ops.storage import Storage

T = TypeVar("T")


def read_with_usable_checkpoint(
    storage: Storage,
    read: Callable[[LogSegment], T],
    *,
    version: int | None = None,
    use_compactions: bool = True,
) -> tuple[LogSegment, T]:
    """`read(segment)` for the log segment of `version` (latest when None), built again
    without each checkpoint `read` finds unusable.

    Args:
        storage: The table's storage.
        read: Reads what the caller needs from a segment; raises `UnusableCheckpointError`
            (or a subclass) when the segment's checkpoint cannot be read.
        version: The version to read (latest when None).
        use_compactions: False builds segments from commits only (see `build_log_segment`).

    Returns:
        The segment that was read and what `read` returned for it.

    Raises:
        UnusableCheckpointError: (its own subclass, e.g. SidecarMissingError) a checkpoint
            is unusable and no older checkpoint or complete run of commits can stand in for
            it; names the table, the checkpoint's version and the unusable file.
        DeltaOpsError: whatever `build_log_segment` or `read` raise otherwise.
    """
    excluded: set[str] = set()
    unusable: UnusableCheckpointError | None = None
    while True:
        try:
            segment = build_log_segment(
                storage,
                version,
                exclude_checkpoints=frozenset(excluded),
                use_compactions=use_compactions,
            )
        except DeltaOpsError as exc:
            if unusable is None:
                raise
            # Without the unusable checkpoint the version cannot be rebuilt: say so, naming
            # what was unusable.
            raise type(unusable)(
                f"{unusable.reason}, and no older checkpoint or complete run of commits can "
                f"stand in for it ({exc.reason})",
                table=unusable.table, version=unusable.version, file=unusable.file,
            ) from exc
        try:
            return segment, read(segment)
        except UnusableCheckpointError as exc:
            if segment.checkpoint is None:
                raise
            excluded.add(segment.checkpoint.identity)
            unusable = exc
