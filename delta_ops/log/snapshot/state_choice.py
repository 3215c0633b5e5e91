"""Which state of a version a caller reads: loaded, streamed or rebuilt by bucket, chosen in
this one place.

Spec sections: "Checkpoints", "Action Reconciliation" (every strategy reconciles the same
way; they differ in the memory they take). A version's state is

- rebuilt by bucket (`log.snapshot.rebuild`) when its commits without a usable checkpoint
  hold at least `ReadOptions.rebuild_threshold_bytes` of JSON (or one commit after the
  checkpoint is too large to read whole), and the caller can take a rebuilt state;
- else streamed (`load_snapshot(stream=True)`) when its checkpoint holds at least
  `ReadOptions.stream_threshold_bytes`, and the caller can take a streamed state;
- else loaded in memory (`load_snapshot`).

The small state (`load_small_snapshot`, commits reconciled in Python) is the CLI summary's
own, which tries it first and falls back to these.
"""

from __future__ import annotations

import enum

from delta_ops.log.read_options import ReadOptions
from delta_ops.log.replay.streamed_actions import stream_threshold_bytes
from delta_ops.log.snapshot.loaded_snapshot import large_state
from delta_ops.log.snapshot.rebuild import needs_rebuild, rebuild_threshold_bytes
from delta_ops.storage import Storage


class StateKind(str, enum.Enum):
    """How a version's state is read."""

    LOADED = "loaded"
    STREAMED = "streamed"
    REBUILT = "rebuilt"


def choose_state(
    storage: Storage,
    version: int | None,
    options: ReadOptions,
    *,
    rebuild: bool | None = None,
    may_rebuild: bool = True,
    may_stream: bool = True,
    rebuild_threshold: int | None = None,
    stream_threshold: int | None = None,
) -> StateKind:
    """The state `version` (latest when None) is read as (see the module).

    Args:
        storage: the table's storage.
        version: the version.
        options: the thresholds (`rebuild_threshold` and `stream_threshold` win over them).
        rebuild: True or False forces a rebuild or none; None decides from the log's size.
        may_rebuild: whether the caller can take a rebuilt state (when `rebuild` is None).
        may_stream: whether the caller can take a streamed state.
        rebuild_threshold: the commits' JSON bytes from which the state is rebuilt.
        stream_threshold: the checkpoint bytes from which the state is streamed.
    """
    if rebuild is None:
        rebuild = may_rebuild and needs_rebuild(
            storage, version, rebuild_threshold_bytes(rebuild_threshold, options)
        )
    if rebuild:
        return StateKind.REBUILT
    if may_stream and large_state(
        storage, version, stream_threshold_bytes(stream_threshold, options)
    ):
        return StateKind.STREAMED
    return StateKind.LOADED


__all__ = ["StateKind", "choose_state"]
