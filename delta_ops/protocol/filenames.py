"""One parser and formatter for every file name in `_delta_log`.

Spec sections: "Delta Log Entries", "Checkpoints" (classic, multi-part, UUID-named V2),
"V2 Checkpoint Table Feature" (sidecars), "Log Compaction Files", "Version Checksum File",
"Last Checkpoint File". Everything that needs to know what a log file is asks `parse`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

LOG_DIR = "_delta_log"
SIDECAR_DIR = "_sidecars"
#: Catalog-managed tables: proposed commits `<v>.<uuid>.json`, in `_delta_log` (spec
#: "Catalog-managed tables", "Staged commit").
STAGED_COMMITS_DIR = "_staged_commits"
LAST_CHECKPOINT = "_last_checkpoint"
#: delta-spark's record of the last VACUUM (`VacuumCommand`'s `LastVacuumInfo`).
LAST_VACUUM_INFO = "_last_vacuum_info"
#: The largest table version: versions are Java longs in every writer (delta-spark,
#: delta-kernel, delta-rs), so a 20-digit name above this was not written by one.
MAX_VERSION = 2**63 - 1


class LogFileKind(str, Enum):
    COMMIT = "commit"
    CHECKPOINT_CLASSIC = "checkpoint-classic"  # n.checkpoint.parquet (V1 or V2 content)
    CHECKPOINT_MULTIPART = "checkpoint-multipart"  # n.checkpoint.i.p.parquet
    CHECKPOINT_UUID = "checkpoint-uuid"  # n.checkpoint.<uuid>.json|parquet
    COMPACTION = "compaction"  # x.y.compacted.json
    CHECKSUM = "checksum"  # n.crc


_COMMIT = re.compile(r"^(\d{20})\.json$")
_CLASSIC = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_MULTIPART = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")
_UUID = re.compile(
    r"^(\d{20})\.checkpoint\.([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}"
    r"-[0-9a-fA-F]{12})\.(json|parquet)$"
)
_COMPACTION = re.compile(r"^(\d{20})\.(\d{20})\.compacted\.json$")
_CHECKSUM = re.compile(r"^(\d{20})\.crc$")


@dataclass(frozen=True, slots=True)
class LogFile:
    """A parsed `_delta_log` file name.

    Attributes:
        name: the file name inside `_delta_log` (no directory).
        kind: what the file is.
        version: the version it describes (the end version for compactions).
        start_version: first version of a compaction; equal to `version` otherwise.
        part: 1-based part number of a multi-part checkpoint.
        num_parts: number of parts of a multi-part checkpoint.
        uuid: the UUID of a UUID-named checkpoint.
        format: "json" or "parquet" for checkpoints and commits.
    """

    name: str
    kind: LogFileKind
    version: int
    start_version: int
    part: int | None = None
    num_parts: int | None = None
    uuid: str | None = None
    format: str = "json"

    @property
    def is_checkpoint(self) -> bool:
        return self.kind in _CHECKPOINT_KINDS

    @property
    def path(self) -> str:
        """Path relative to the table root."""
        return f"{LOG_DIR}/{self.name}"


_CHECKPOINT_KINDS = frozenset(
    {LogFileKind.CHECKPOINT_CLASSIC, LogFileKind.CHECKPOINT_MULTIPART, LogFileKind.CHECKPOINT_UUID}
)


def parse(name: str) -> LogFile | None:
    """Parse a `_delta_log` file name; None for anything that is not a Delta log file.

    Hadoop side files (`.00000000000000000000.json.crc`), `_last_checkpoint`, temporary
    files and directories are not log files and give None. So are names whose version is
    above `MAX_VERSION` (e.g. `99999999999999999999.json`): no writer can produce such a
    version, so the file is stray, not a commit. A valid name far beyond the next version
    is a log file, and the reader reports the gap before it.
    """
    lf = _parse(name)
    if lf is None or lf.version > MAX_VERSION:
        return None
    return lf


def _parse(name: str) -> LogFile | None:
    if not name or not name[0].isdigit():
        return None
    if m := _COMMIT.match(name):
        v = int(m.group(1))
        return LogFile(name, LogFileKind.COMMIT, v, v)
    if m := _CHECKSUM.match(name):
        v = int(m.group(1))
        return LogFile(name, LogFileKind.CHECKSUM, v, v)
    if m := _CLASSIC.match(name):
        v = int(m.group(1))
        return LogFile(name, LogFileKind.CHECKPOINT_CLASSIC, v, v, format="parquet")
    if m := _MULTIPART.match(name):
        v, part, parts = int(m.group(1)), int(m.group(2)), int(m.group(3))
        if parts < 1 or not 1 <= part <= parts:
            return None
        return LogFile(
            name,
            LogFileKind.CHECKPOINT_MULTIPART,
            v,
            v,
            part=part,
            num_parts=parts,
            format="parquet",
        )
    if m := _UUID.match(name):
        v = int(m.group(1))
        return LogFile(
            name, LogFileKind.CHECKPOINT_UUID, v, v, uuid=m.group(2).lower(), format=m.group(3)
        )
    if m := _COMPACTION.match(name):
        start, end = int(m.group(1)), int(m.group(2))
        if start > end:
            return None
        return LogFile(name, LogFileKind.COMPACTION, end, start)
    return None


def version_prefix(version: int) -> str:
    """The 20-digit zero-padded version, the sort key of every log file name."""
    if version < 0:
        raise ValueError(f"a Delta version cannot be negative: {version}")
    return f"{version:020d}"


def commit_name(version: int) -> str:
    return f"{version_prefix(version)}.json"


def checksum_name(version: int) -> str:
    return f"{version_prefix(version)}.crc"


def classic_checkpoint_name(version: int) -> str:
    return f"{version_prefix(version)}.checkpoint.parquet"


def multipart_checkpoint_name(version: int, part: int, num_parts: int) -> str:
    return f"{version_prefix(version)}.checkpoint.{part:010d}.{num_parts:010d}.parquet"


def uuid_checkpoint_name(version: int, uuid: str, fmt: str = "parquet") -> str:
    if fmt not in ("json", "parquet"):
        raise ValueError(f"V2 checkpoint format must be json or parquet, not {fmt!r}")
    return f"{version_prefix(version)}.checkpoint.{uuid}.{fmt}"


def compaction_name(start: int, end: int) -> str:
    if start > end:
        raise ValueError(f"compaction start {start} is after its end {end}")
    return f"{version_prefix(start)}.{version_prefix(end)}.compacted.json"


_STAGED = re.compile(r"^(\d{20})\.([^./]+)\.json$")


def staged_commit_version(name: str) -> int | None:
    """The version a staged commit named `<v>.<uuid>.json` (20 digits) proposes, else None."""
    match = _STAGED.match(name)
    return int(match.group(1)) if match else None


def sidecar_path(name: str) -> str:
    """Table-relative path of a sidecar file named in a `sidecar` action.

    The spec stores the sidecar's path relative to `_delta_log/_sidecars`; a reader must
    also accept an absolute path.
    """
    return f"{LOG_DIR}/{SIDECAR_DIR}/{name}"
