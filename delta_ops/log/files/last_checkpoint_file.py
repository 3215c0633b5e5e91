"""`_last_checkpoint`: read it as a hint, and move it forward (its only writer).

Spec section: "Last Checkpoint File". What the file holds, its validation and its checksum
are pure and live in `delta_ops.protocol.last_checkpoint`; this module does the I/O.

Reading (`read_last_checkpoint`): the file is a hint. Missing, unreadable, not JSON, an
unusable field or a checksum that does not match are a *problem* returned beside the hint
(readers then list the log), never an error.

Writing (`advance_last_checkpoint`): the file only moves to a newer version, and every
writer in delta_ops (the checkpoint writer, metadata cleanup) goes through this function.
Storage has no compare-and-swap, so the guard is read, compare, write: a writer that
publishes a newer hint in the instant between another's read and write is overwritten by the
older hint. That cannot be prevented; it is repaired. A writer that wrote lists the log after
its write and, when a complete checkpoint newer than the one it named is there, advances the
hint to the newest such checkpoint (described from its files,
`log.files.existing_checkpoints.describe_checkpoint`). A writer always
publishes its checkpoint before its hint, so whatever hint the last write replaced names a
checkpoint that listing sees: once every writer has returned, the hint names the newest
complete checkpoint any of them published, and no writer returns leaving the hint older than
what it found. While a repair is under way a reader can see the older hint for a moment; the
hint is only a hint (readers list past it), so that costs a longer listing, never a wrong
state.
"""

from __future__ import annotations

import orjson

from delta_ops.errors import MissingFileError, StorageError
from delta_ops.log.files.log_listing import complete_checkpoints, list_log
from delta_ops.protocol import filenames
from delta_ops.protocol.filenames import LAST_CHECKPOINT, LOG_DIR
from delta_ops.protocol.last_checkpoint import LastCheckpoint, parse_last_checkpoint
from delta_ops.storage import Storage

PATH = f"{LOG_DIR}/{LAST_CHECKPOINT}"

def read_last_checkpoint(storage: Storage) -> tuple[LastCheckpoint | None, str | None]:
    """Read `_last_checkpoint`; returns (hint, problem). A bad file is a problem, not an error.

    The hint is None when the file is missing (problem None too) or unusable (the problem
    says why: unreadable, not JSON, a field that cannot be, a checksum that does not match).
    """
    try:
        data = storage.read(PATH)  # one GET; "not found" is the answer when there is none
    except MissingFileError:
        return None, None
    except StorageError as exc:
        return None, f"_last_checkpoint could not be read: {exc}"
    try:
        hint = parse_last_checkpoint(data)
    except orjson.JSONDecodeError as exc:
        return None, f"_last_checkpoint is not valid JSON ({exc}); listed the log instead"
    except ValueError as exc:
        return None, f"{exc}; listed the log instead"
    if hint.checksum_valid is False:
        return None, "_last_checkpoint checksum does not match its content"
    return hint, None


def advance_last_checkpoint(
    storage: Storage,
    lc: LastCheckpoint,
    *,
    replace_same_version: bool = True,
) -> bool:
    """Write `_last_checkpoint` unless it already names a newer version.

    The hint never moves back: a file naming a newer version is kept even if its checksum
    fails. One naming this version is replaced when `replace_same_version` (the checkpoint
    `lc` describes was just written), or when it is invalid or the checkpoint it describes
    is gone; one that is not JSON with a version is replaced.

    After a write, the log is listed past `lc.version`: a complete checkpoint there means a
    newer hint may just have been replaced (see the module docstring), and the hint is
    advanced to the newest one that reads.

    Args:
        storage: the table's storage.
        lc: the hint to publish; its checkpoint must be complete already.
        replace_same_version: see above.

    Returns:
        True when the file was written (with `lc`).
    """
    if not _write_if_newer(storage, lc, replace_same_version=replace_same_version):
        return False
    _repair(storage, lc.version)
    return True


def _write_if_newer(storage: Storage, lc: LastCheckpoint, *, replace_same_version: bool) -> bool:
    if storage.exists(PATH):
        try:
            current = parse_last_checkpoint(storage.read(PATH))
        except ValueError:
            current = None
        if current is not None:
            if current.version > lc.version:
                return False
            if (
                current.version == lc.version
                and not replace_same_version
                and current.checksum_valid is not False
                and _names_present_checkpoint(storage, current)
            ):
                return False
    storage.put_atomic(PATH, lc.to_json_bytes())
    return True


def _repair(storage: Storage, written: int) -> None:
    """Advance the hint just written at version `written` to the newest complete checkpoint
    listed after it, until none is newer than what this writer last wrote."""
    # Here, not at the top: describing reads Parquet footers (pyarrow), which the readers
    # of the hint (the log segment) do not need.
    from delta_ops.log.files.existing_checkpoints import describe_checkpoint

    while True:
        newer = None
        for version in _complete_checkpoint_versions_after(storage, written):
            newer = describe_checkpoint(storage, version)
            if newer is not None:
                break
        if newer is None:
            return
        if not _write_if_newer(storage, newer, replace_same_version=False):
            return  # a newer hint is there: whoever wrote it lists after its write
        written = newer.version


def _complete_checkpoint_versions_after(storage: Storage, version: int) -> list[int]:
    """Versions above `version` holding a complete checkpoint, newest first."""
    found = complete_checkpoints(list_log(storage, version + 1), None)
    return sorted({c.version for c in found if c.version > version}, reverse=True)


def _names_present_checkpoint(storage: Storage, lc: LastCheckpoint) -> bool:
    """Whether the checkpoint a `_last_checkpoint` describes is (still) in the log."""
    v = lc.version
    if lc.v2_checkpoint and isinstance(lc.v2_checkpoint.get("path"), str):
        return storage.exists(f"{LOG_DIR}/{lc.v2_checkpoint['path']}")
    if lc.parts:
        return all(
            storage.exists(f"{LOG_DIR}/{filenames.multipart_checkpoint_name(v, p, lc.parts)}")
            for p in range(1, lc.parts + 1)
        )
    return storage.exists(f"{LOG_DIR}/{filenames.classic_checkpoint_name(v)}")


__all__ = ["PATH", "advance_last_checkpoint", "read_last_checkpoint"]
