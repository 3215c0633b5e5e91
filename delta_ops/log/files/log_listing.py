"""The sorted listing of `_delta_log` and the complete checkpoints in it.

Spec sections: "Delta Log Entries", "Checkpoints" (a multi-part checkpoint is complete when
every part is there). The lowest layer of `log/`: the log segment (`log.segment.log_segment`) and
the
`_last_checkpoint` writer's repair (`log.files.last_checkpoint_file`) both list through here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from delta_ops.protocol import filenames
from delta_ops.protocol.filenames import LOG_DIR, LogFile, LogFileKind
from delta_ops.storage import FileInfo, Storage


@dataclass(frozen=True)
class CheckpointFiles:
    """One checkpoint: a classic or UUID-named file, or every part of a multi-part one."""

    version: int
    kind: LogFileKind
    files: tuple[FileInfo, ...]
    log_files: tuple[LogFile, ...]

    @property
    def names(self) -> list[str]:
        return [lf.name for lf in self.log_files]

    @property
    def identity(self) -> str:
        return self.log_files[0].name


def list_log(storage: Storage, start_version: int | None = None) -> list[tuple[LogFile, FileInfo]]:
    """Sorted `_delta_log` listing from `start_version`, parsed; non-log files skipped."""
    start = filenames.version_prefix(start_version) if start_version else None
    out = []
    for info in storage.list_dir(LOG_DIR, start=start):
        name = info.path.rsplit("/", 1)[-1]
        lf = filenames.parse(name)
        if lf is not None:
            out.append((lf, info))
    return out


def complete_checkpoints(
    listing: Iterable[tuple[LogFile, FileInfo]], max_version: int | None
) -> list[CheckpointFiles]:
    """Complete checkpoints from a listing, newest first (multi-part: all parts present)."""
    multipart: dict[tuple[int, int], dict[int, tuple[LogFile, FileInfo]]] = defaultdict(dict)
    found: list[CheckpointFiles] = []
    for lf, info in listing:
        if not lf.is_checkpoint or (max_version is not None and lf.version > max_version):
            continue
        if lf.kind == LogFileKind.CHECKPOINT_MULTIPART:
            multipart[(lf.version, lf.num_parts or 0)][lf.part or 0] = (lf, info)
        else:
            found.append(CheckpointFiles(lf.version, lf.kind, (info,), (lf,)))
    for (version, num_parts), parts in multipart.items():
        if len(parts) == num_parts:
            ordered = [parts[i] for i in sorted(parts)]
            found.append(
                CheckpointFiles(
                    version,
                    LogFileKind.CHECKPOINT_MULTIPART,
                    tuple(i for _, i in ordered),
                    tuple(lf for lf, _ in ordered),
                )
            )
    # Newest first; at one version prefer V2 UUID-named, then classic, then multi-part.
    rank = {
        LogFileKind.CHECKPOINT_UUID: 0,
        LogFileKind.CHECKPOINT_CLASSIC: 1,
        LogFileKind.CHECKPOINT_MULTIPART: 2,
    }
    found.sort(key=lambda c: (-c.version, rank[c.kind], c.identity))
    return found


__all__ = ["CheckpointFiles", "list_log"]
