"""Every read of a table's log, and the only package that lists `_delta_log`. This module is
its face: code outside `log/` imports from `delta_ops.log` only, never from a room.

The one way to get a snapshot is `load_snapshot(storage, version=None, *, timestamp=None,
stream=False)`: the state of a version with its file actions in Arrow (`Snapshot`), loaded
in memory or streamed from its checkpoint. Whether a caller's state is loaded, streamed or
rebuilt by bucket (`rebuild_snapshot`, bounded memory for the checkpoint and checksum
writers of large logs) is chosen in one place, `choose_state`, from `ReadOptions`. The small
state (`load_small_snapshot`, a small log reconciled in Python) is the CLI summary's, which
tries it first.

The map of the rooms (each room imports only the rooms above it in this list, plus
`protocol/`, `storage/`, `engine/` and `errors`):

- `files/`: what lies in `_delta_log` and how one file is read. The sorted listing
  (`list_log`, `complete_checkpoints`), `_last_checkpoint` (`read_last_checkpoint` and its
  only writer `advance_last_checkpoint`), checkpoint files and parts (`inspect_checkpoint`,
  `verify_checkpoint`), the checkpoint reader (`read_checkpoint`), V2 sidecars, JSON actions
  (`parse_json_actions`).
- `segment/`: the files that make version v (`build_log_segment`, `LogSegment`) and the
  cheap questions about them: the protocol/metadata light replay (`read_protocol_metadata`),
  which commits and checkpoints one listing holds (`commit_listing`, for history),
  commit timestamps and time travel (`version_at_timestamp`), the cheap state a sensor reads
  (`inspect_log`, `read_settings`), whether the log reads (`log_problem`) and every
  finding about it for fsck (`check_log`).
- `replay/`: reconciliation, one module per strategy: full and columnar
  (`full_replay.replay`, here `replay_segment`; `columnar_commits`), action by action
  (`action_replay`), streamed (`StreamedActions`), VACUUM's references in memory
  (`file_references`) and by bucket (`read_references`), what kept versions need
  (`kept_version_references`, VACUUM's `keep_versions`), the fallback past an unusable
  checkpoint (`read_with_usable_checkpoint`), bounded delta chunks, staged commits and
  VACUUM LITE's window.
- `snapshot/`: a version's state: loaded or streamed (`load_snapshot`), small
  (`load_small_snapshot`) or rebuilt by bucket (`rebuild_snapshot`), and which one a caller
  reads (`choose_state`).

How the log reads is tuned by one value passed down, `ReadOptions` (`read_options.py`): the
thresholds that pick streamed, rebuilt or small states and the bucket counts. Only
`ReadOptions.from_env` reads the environment, and it is called where a run starts (the CLI,
the operation entries), never by a read deep inside.

Names are resolved on first use (PEP 562), so `import delta_ops.log` imports no room and no
pyarrow.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from delta_ops.log.files.checkpoint_files import (
        CheckpointInspection,
        inspect_checkpoint,
        read_sidecar_references,
        verify_checkpoint,
    )
    from delta_ops.log.files.checkpoint_reader import read_checkpoint, read_parsed_stats
    from delta_ops.log.files.crc_files import read_checksum
    from delta_ops.log.files.existing_checkpoints import (
        ExistingCheckpoint,
        find_existing,
        last_checkpoint_of,
        schema_for_last_checkpoint,
    )
    from delta_ops.log.files.json_actions import parse_json_actions
    from delta_ops.log.files.last_checkpoint_file import (
        advance_last_checkpoint,
        read_last_checkpoint,
    )
    from delta_ops.log.files.log_directory import (
        LogListing,
        has_log,
        is_writer_temp_file,
        list_log_dir,
    )
    from delta_ops.log.files.log_listing import CheckpointFiles, complete_checkpoints, list_log
    from delta_ops.log.read_options import ReadOptions
    from delta_ops.log.replay.action_replay import read_log_files
    from delta_ops.log.replay.checkpoint_fallback import read_with_usable_checkpoint
    from delta_ops.log.replay.delta_chunks import read_commit_info
    from delta_ops.log.replay.full_replay import (
        ReplayState,
        delta_lines_oldest_first,
        read_commit,
    )
    from delta_ops.log.replay.full_replay import (
        replay as replay_segment,
    )
    from delta_ops.log.replay.kept_versions import kept_version_references
    from delta_ops.log.replay.reference_buckets import SpilledReferences, read_references
    from delta_ops.log.replay.references import FileReferences, file_references, read_deltas
    from delta_ops.log.replay.staged_commits import (
        STAGED_DIR,
        read_staged_commits,
        staged_references,
    )
    from delta_ops.log.replay.streamed_actions import BATCH_ROWS, StreamedActions
    from delta_ops.log.replay.vacuum_info import (
        LiteWindow,
        expired_removed_keys,
        lite_window,
        read_last_vacuum_info,
        write_last_vacuum_info,
    )
    from delta_ops.log.segment.commit_listing import CommitListing, commit_listing
    from delta_ops.log.segment.health import LogProblem, log_problem
    from delta_ops.log.segment.log_check import LogCheck, LogFinding, check_log
    from delta_ops.log.segment.log_segment import Delta, LogSegment, build_log_segment
    from delta_ops.log.segment.log_state import (
        DEFAULT_CHECKPOINT_INTERVAL,
        LogState,
        TableSettings,
        inspect_log,
        read_settings,
    )
    from delta_ops.log.segment.protocol_metadata import read_protocol, read_protocol_metadata
    from delta_ops.log.segment.table_size import TableSize, table_size
    from delta_ops.log.segment.timestamps import (
        IctEnablement,
        commit_at_or_before,
        version_at_timestamp,
    )
    from delta_ops.log.snapshot.loaded_snapshot import Snapshot, load_snapshot, snapshot_from_state
    from delta_ops.log.snapshot.rebuild import MAX_BUCKETS, rebuild_snapshot
    from delta_ops.log.snapshot.small_snapshot import SmallSnapshot, load_small_snapshot
    from delta_ops.log.snapshot.state_choice import StateKind, choose_state

#: face name -> "room.module" (or "room.module:attribute" where the name differs)
_FACE: dict[str, str] = {
    # files/
    "CheckpointInspection": "files.checkpoint_files",
    "inspect_checkpoint": "files.checkpoint_files",
    "read_sidecar_references": "files.checkpoint_files",
    "verify_checkpoint": "files.checkpoint_files",
    "read_checkpoint": "files.checkpoint_reader",
    "read_parsed_stats": "files.checkpoint_reader",
    "read_checksum": "files.crc_files",
    "ExistingCheckpoint": "files.existing_checkpoints",
    "find_existing": "files.existing_checkpoints",
    "last_checkpoint_of": "files.existing_checkpoints",
    "schema_for_last_checkpoint": "files.existing_checkpoints",
    "parse_json_actions": "files.json_actions",
    "advance_last_checkpoint": "files.last_checkpoint_file",
    "read_last_checkpoint": "files.last_checkpoint_file",
    "LogListing": "files.log_directory",
    "has_log": "files.log_directory",
    "is_writer_temp_file": "files.log_directory",
    "list_log_dir": "files.log_directory",
    "CheckpointFiles": "files.log_listing",
    "complete_checkpoints": "files.log_listing",
    "list_log": "files.log_listing",
    # segment/
    "CommitListing": "segment.commit_listing",
    "commit_listing": "segment.commit_listing",
    "LogProblem": "segment.health",
    "log_problem": "segment.health",
    "LogCheck": "segment.log_check",
    "LogFinding": "segment.log_check",
    "check_log": "segment.log_check",
    "Delta": "segment.log_segment",
    "LogSegment": "segment.log_segment",
    "build_log_segment": "segment.log_segment",
    "DEFAULT_CHECKPOINT_INTERVAL": "segment.log_state",
    "LogState": "segment.log_state",
    "TableSettings": "segment.log_state",
    "inspect_log": "segment.log_state",
    "read_settings": "segment.log_state",
    "read_protocol": "segment.protocol_metadata",
    "read_protocol_metadata": "segment.protocol_metadata",
    "TableSize": "segment.table_size",
    "table_size": "segment.table_size",
    "IctEnablement": "segment.timestamps",
    "commit_at_or_before": "segment.timestamps",
    "version_at_timestamp": "segment.timestamps",
    # replay/
    "read_log_files": "replay.action_replay",
    "read_with_usable_checkpoint": "replay.checkpoint_fallback",
    "read_commit_info": "replay.delta_chunks",
    "ReplayState": "replay.full_replay",
    "delta_lines_oldest_first": "replay.full_replay",
    "read_commit": "replay.full_replay",
    "replay_segment": "replay.full_replay:replay",
    "kept_version_references": "replay.kept_versions",
    "SpilledReferences": "replay.reference_buckets",
    "read_references": "replay.reference_buckets",
    "FileReferences": "replay.references",
    "file_references": "replay.references",
    "read_deltas": "replay.references",
    "STAGED_DIR": "replay.staged_commits",
    "read_staged_commits": "replay.staged_commits",
    "staged_references": "replay.staged_commits",
    "BATCH_ROWS": "replay.streamed_actions",
    "StreamedActions": "replay.streamed_actions",
    "LiteWindow": "replay.vacuum_info",
    "expired_removed_keys": "replay.vacuum_info",
    "lite_window": "replay.vacuum_info",
    "read_last_vacuum_info": "replay.vacuum_info",
    "write_last_vacuum_info": "replay.vacuum_info",
    # snapshot/
    "Snapshot": "snapshot.loaded_snapshot",
    "load_snapshot": "snapshot.loaded_snapshot",
    "snapshot_from_state": "snapshot.loaded_snapshot",
    "MAX_BUCKETS": "snapshot.rebuild",
    "rebuild_snapshot": "snapshot.rebuild",
    "SmallSnapshot": "snapshot.small_snapshot",
    "load_small_snapshot": "snapshot.small_snapshot",
    "StateKind": "snapshot.state_choice",
    "choose_state": "snapshot.state_choice",
    # log/ itself
    "ReadOptions": "read_options",
}

#: the same names as `_FACE` (a test checks it), written out for static tools
__all__ = [
    "BATCH_ROWS",
    "CheckpointFiles",
    "CheckpointInspection",
    "CommitListing",
    "DEFAULT_CHECKPOINT_INTERVAL",
    "Delta",
    "ExistingCheckpoint",
    "FileReferences",
    "IctEnablement",
    "LiteWindow",
    "LogCheck",
    "LogFinding",
    "LogListing",
    "LogProblem",
    "LogSegment",
    "LogState",
    "MAX_BUCKETS",
    "ReadOptions",
    "ReplayState",
    "STAGED_DIR",
    "SmallSnapshot",
    "Snapshot",
    "SpilledReferences",
    "StateKind",
    "StreamedActions",
    "TableSettings",
    "TableSize",
    "advance_last_checkpoint",
    "build_log_segment",
    "check_log",
    "choose_state",
    "commit_listing",
    "commit_at_or_before",
    "complete_checkpoints",
    "delta_lines_oldest_first",
    "expired_removed_keys",
    "file_references",
    "find_existing",
    "has_log",
    "inspect_checkpoint",
    "inspect_log",
    "is_writer_temp_file",
    "kept_version_references",
    "last_checkpoint_of",
    "list_log",
    "list_log_dir",
    "lite_window",
    "load_small_snapshot",
    "load_snapshot",
    "log_problem",
    "parse_json_actions",
    "read_checkpoint",
    "read_checksum",
    "read_commit",
    "read_commit_info",
    "read_deltas",
    "read_last_checkpoint",
    "read_last_vacuum_info",
    "read_log_files",
    "read_parsed_stats",
    "read_protocol",
    "read_protocol_metadata",
    "read_references",
    "read_settings",
    "read_sidecar_references",
    "read_staged_commits",
    "read_with_usable_checkpoint",
    "rebuild_snapshot",
    "replay_segment",
    "schema_for_last_checkpoint",
    "snapshot_from_state",
    "staged_references",
    "table_size",
    "verify_checkpoint",
    "version_at_timestamp",
    "write_last_vacuum_info",
]


def __getattr__(name: str) -> Any:
    target = _FACE.get(name)
    if target is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, _, attribute = target.partition(":")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), attribute or name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_FACE})
