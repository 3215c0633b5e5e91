"""How big a table is, read cheaply: live files and bytes at the latest version, without a
snapshot replay (what picks the engine of a table's maintenance, `delta_ops.defs.engines`).

The count starts from the newest `.crc` in the listing (`numFiles`, `tableSizeBytes`), else
from the checkpoint `_last_checkpoint` names (`numOfAddFiles`; bytes unknown), else from an
empty table before version 0, and adds the add and remove actions of the commits after that
version (a remove and an add of one path, as a deletion vector update writes, cancel out).
Only commits are read: at most the commits since the last checkpoint, one small JSON each.
A checkpoint without a count in `_last_checkpoint` and without a `.crc` at or after it
leaves the size unknown.

Spec sections: "Version Checksum File" (`numFiles`, `tableSizeBytes`), "Last Checkpoint
File" (`numOfAddFiles`), "Add File and Remove File".
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from delta_ops.log.files.crc_files import read_checksum
from delta_ops.log.files.json_actions import parse_json_actions
from delta_ops.log.segment.log_state import LogState
from delta_ops.protocol.filenames import LogFileKind
from delta_ops.storage import Storage


@dataclass(frozen=True)
class TableSize:
    """A table's size at `version`.

    Attributes:
        version: the table version.
        num_files: live data files; None when no cheap read tells.
        size_bytes: their bytes; None when no cheap read tells (a count from
            `_last_checkpoint`, or a remove action without a size).
        source: where the numbers come from, for messages (`12.crc + 2 commits`).
    """

    version: int
    num_files: int | None
    size_bytes: int | None
    source: str


def table_size(storage: Storage, state: LogState) -> TableSize:
    """The table's size at `state.version` from the newest `.crc` or `_last_checkpoint` and
    the commits after it (see the module docstring).

    Raises:
        InvalidChecksumError: the newest `.crc` is not a valid checksum file.
        CorruptLogError: a commit after it is not valid JSON.
        StorageError: a file could not be read.
    """
    checkpoint = state.checkpoint_version
    crc_version = state.newest_checksum
    hint = state.segment.last_checkpoint
    files: int | None
    size: int | None
    if crc_version is not None and (checkpoint is None or crc_version >= checkpoint):
        crc = read_checksum(storage, crc_version)
        if crc is None:  # listed, then gone: count from what else there is
            return table_size(storage, _without_checksum(state, crc_version))
        base, files, size, source = crc_version, crc.num_files, crc.table_size_bytes, (
            f"{crc_version}.crc")
    elif checkpoint is None:
        base, files, size, source = -1, 0, 0, "the commits"
    elif hint is not None and hint.version == checkpoint and hint.num_of_add_files is not None:
        base, files, size, source = checkpoint, hint.num_of_add_files, None, (
            f"_last_checkpoint (version {checkpoint})")
    else:
        return TableSize(state.version, None, None,
                         f"unknown: checkpoint {checkpoint} without a file count, no .crc")
    commits = [
        (lf.version, info) for lf, info in state.listing
        if lf.kind == LogFileKind.COMMIT and base < lf.version <= state.version
    ]
    for version, info in commits:
        actions = parse_json_actions(storage.read(info.path), table=storage.root,
                                     version=version, file=info.path)
        for action in actions:
            add, remove = action.get("add"), action.get("remove")
            if isinstance(add, dict):
                files += 1
                if size is not None:
                    size += int(add.get("size") or 0)
            elif isinstance(remove, dict):
                files -= 1
                removed = remove.get("size")
                size = size - int(removed) if size is not None and removed is not None else None
    if commits and base >= 0:
        source += f" + {len(commits)} commit{'s' if len(commits) > 1 else ''}"
    return TableSize(state.version, max(files, 0), size, source)


def _without_checksum(state: LogState, version: int) -> LogState:
    return replace(state, checksum_versions=state.checksum_versions - {version})


__all__ = ["TableSize", "table_size"]
