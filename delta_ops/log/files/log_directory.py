"""Everything that lies in `_delta_log`, not only log files: Hadoop side checksums, sidecars
and the temporary files writers leave, as metadata cleanup needs to see them.

Spec sections: "Delta Log Entries", "Sidecar Files". The sorted listing of log files alone
is `log.files.log_listing.list_log`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from delta_ops.log.files.sidecars import SIDECARS
from delta_ops.protocol import filenames
from delta_ops.protocol.filenames import LAST_CHECKPOINT, LOG_DIR, LogFile
from delta_ops.storage import FileInfo, Storage

# A writer's temporary file: `.<target name>.<uuid>.tmp` (`Storage` writes a 32-digit hex
# uuid; Hadoop-based writers the dashed form). No Delta log file starts with "." and ends
# with ".tmp" (Hadoop side checksums are `.<name>.crc`), and the target must itself be a
# log file name, `_last_checkpoint` or (under `_sidecars`) a Parquet file.
_TEMP = re.compile(
    r"\.(?P<target>[^/]+)\."
    r"(?:[0-9a-f]{32}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
    r"\.tmp"
)


def is_writer_temp_file(name: str, *, sidecar_dir: bool = False) -> bool:
    """Whether `name` (a bare file name in `_delta_log`, or in `_delta_log/_sidecars` when
    `sidecar_dir`) is a temporary file a writer creates before publishing its target."""
    m = _TEMP.fullmatch(name)
    if m is None:
        return False
    target = m.group("target")
    if target.startswith("."):
        return False
    if sidecar_dir:
        return target.endswith(".parquet") and not target.startswith("_")
    return target == LAST_CHECKPOINT or filenames.parse(target) is not None


@dataclass(frozen=True)
class LogListing:
    """`_delta_log` parsed: log files, Hadoop side checksums, sidecars, writers' temp files."""

    log: list[tuple[LogFile, FileInfo]]
    side: list[tuple[LogFile, FileInfo]]  # (the main file's parse, the side file)
    sidecars: dict[str, FileInfo]  # name -> file
    sidecar_side: dict[str, FileInfo]  # main sidecar name -> its side file
    temp: list[FileInfo]  # `.<name>.<uuid>.tmp` left by writers (log and sidecar folders)


def list_log_dir(storage: Storage) -> LogListing:
    """Everything in `_delta_log` and `_delta_log/_sidecars`, sorted by kind (see
    `LogListing`); files of no known kind are left out."""
    log: list[tuple[LogFile, FileInfo]] = []
    side: list[tuple[LogFile, FileInfo]] = []
    temp: list[FileInfo] = []
    for info in storage.list_dir(LOG_DIR):
        name = info.path.rsplit("/", 1)[-1]
        lf = filenames.parse(name)
        if lf is not None:
            log.append((lf, info))
        elif name.startswith(".") and name.endswith(".crc"):
            main = filenames.parse(name[1:-4])
            if main is not None:
                side.append((main, info))
        elif is_writer_temp_file(name):
            temp.append(info)
    sidecars: dict[str, FileInfo] = {}
    sidecar_side: dict[str, FileInfo] = {}
    for info in storage.list_dir(SIDECARS):
        name = info.path.rsplit("/", 1)[-1]
        if name.startswith(".") and name.endswith(".crc"):
            sidecar_side[name[1:-4]] = info
        elif is_writer_temp_file(name, sidecar_dir=True):
            temp.append(info)
        elif not name.startswith((".", "_")):
            sidecars[name] = info
    return LogListing(log, side, sidecars, sidecar_side, temp)


def has_log(storage: Storage) -> bool:
    """Whether the storage's root holds a Delta log (its first commit, or any file in
    `_delta_log`)."""
    return storage.exists(f"{LOG_DIR}/{filenames.commit_name(0)}") or bool(
        storage.list_dir(LOG_DIR)
    )


__all__ = ["LogListing", "has_log", "is_writer_temp_file", "list_log_dir"]
