"""What a table's log says now, read cheaply: the latest version, its checkpoint, the `.crc`
files, and the protocol and table properties in force. No snapshot replay.

Spec sections: "Last Checkpoint File" (the hint a listing starts from), "Checkpoints",
"Version Checksum File", "Log Compaction Files", "Protocol Evolution", "Change Metadata".

`inspect_log` reads `_last_checkpoint` once and lists `_delta_log` once, from the checkpoint
it names (the log segment falls back to the whole log when the hint is stale and keeps the
listing it made: `LogSegment.listing`). `read_settings` learns the protocol and properties
through the log's light replay (`delta_ops.log.segment.protocol_metadata`): seeded with what was
seen at an older version (the Dagster sensor keeps it in its cursor, `TableSettings.to_json`),
only the deltas newer than that are read; without a seed, the newest deltas and then the
checkpoint's protocol/metaData columns.

What each table needs given this state is decided in `delta_ops.maintenance.due`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from delta_ops.log.segment.log_segment import LogSegment, build_log_segment
from delta_ops.log.segment.protocol_metadata import read_protocol_metadata
from delta_ops.protocol.actions import Metadata
from delta_ops.protocol.filenames import LogFile, LogFileKind
from delta_ops.protocol.properties import InvalidTablePropertyError
from delta_ops.protocol.table_configuration import TableConfiguration
from delta_ops.storage import FileInfo, Storage

#: `delta.checkpointInterval` when the table does not set it (or sets it badly).
DEFAULT_CHECKPOINT_INTERVAL = 10


@dataclass(frozen=True)
class LogState:
    """What a listing from the last checkpoint shows.

    Attributes:
        table: the table root URI.
        version: the latest version.
        checkpoint_version: the newest complete checkpoint, None when there is none.
        checksum_versions: versions with a `.crc` among the listed files.
        listing: the parsed listing (from the checkpoint on, or the whole log).
        segment: the log segment of the latest version (no file read).
    """

    table: str
    version: int
    checkpoint_version: int | None
    checksum_versions: frozenset[int]
    listing: tuple[tuple[LogFile, FileInfo], ...]
    segment: LogSegment

    @classmethod
    def of(cls, segment: LogSegment) -> LogState:
        """The state a log segment of the latest version (and its listing) shows."""
        return cls(
            table=segment.table,
            version=segment.version,
            checkpoint_version=segment.checkpoint_version,
            checksum_versions=frozenset(
                lf.version for lf, _ in segment.listing if lf.kind == LogFileKind.CHECKSUM
            ),
            listing=segment.listing,
            segment=segment,
        )

    @property
    def commits_since_checkpoint(self) -> int:
        """Commits a reader replays on top of the checkpoint (all of them without one)."""
        if self.checkpoint_version is None:
            return self.version + 1
        return self.version - self.checkpoint_version

    @property
    def newest_checksum(self) -> int | None:
        return max(self.checksum_versions, default=None)


@dataclass(frozen=True)
class TableSettings:
    """The protocol and table properties in force at `version` (cached in the sensor cursor:
    `to_json`/`from_json` keep the format `{"version", "protocol", "configuration"}`;
    `table`, named in errors, is known when read, not when taken from a cursor)."""

    version: int
    protocol: dict
    configuration: dict
    table: str | None = field(default=None, compare=False)

    @cached_property
    def table_configuration(self) -> TableConfiguration:
        """The configuration at `version` (its metaData holds only `configuration`)."""
        return TableConfiguration(
            self.protocol, Metadata({"configuration": self.configuration}), self.version,
            self.table,
        )

    @property
    def checkpoint_interval(self) -> int:
        """`delta.checkpointInterval` (10 when unset or invalid)."""
        try:
            return self.table_configuration.properties.checkpoint_interval
        except InvalidTablePropertyError:
            return DEFAULT_CHECKPOINT_INTERVAL

    @property
    def checkpoint_v2(self) -> bool:
        """Whether `delta.checkpointPolicy` asks for V2 checkpoints (False when invalid)."""
        try:
            return self.table_configuration.properties.checkpoint_v2
        except InvalidTablePropertyError:
            return False

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "protocol": self.protocol,
                "configuration": self.configuration}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any] | None) -> TableSettings | None:
        if not isinstance(obj, Mapping):
            return None
        try:
            return cls(int(obj["version"]), dict(obj["protocol"]), dict(obj["configuration"]))
        except (KeyError, TypeError, ValueError):
            return None


def inspect_log(storage: Storage) -> LogState:
    """The log state of the latest version: one `_last_checkpoint` read, one listing from
    the checkpoint it names (the whole log when there is none or it is stale), no replay.

    Raises:
        NotATableError: no Delta log at the location.
        CorruptLogError: the log is not contiguous.
    """
    return LogState.of(build_log_segment(storage))


def read_settings(
    storage: Storage, state: LogState, previous: TableSettings | None = None,
    blobs: Mapping[str, bytes] | None = None,
) -> TableSettings:
    """The protocol and configuration at `state.version`, reading as little as possible.

    With `previous` (e.g. from the sensor cursor) at a version the listing still covers,
    only the deltas after it are read (the log's light replay, seeded with `previous`);
    otherwise the light replay reads the newest deltas, then the checkpoint's
    protocol/metaData columns. `blobs`: deltas already read, by path (not read again).

    Raises:
        CorruptLogError: a log file that does not parse, or no protocol or metaData.
    """
    # The cursor keeps only the configuration of the metaData action: that is the seed.
    since = None if previous is None else previous.table_configuration
    found = read_protocol_metadata(storage, state.segment, since=since, blobs=blobs)
    return TableSettings(
        state.version, dict(found.protocol), found.metadata.configuration, storage.root
    )


__all__ = [
    "DEFAULT_CHECKPOINT_INTERVAL",
    "LogState",
    "TableSettings",
    "inspect_log",
    "read_settings",
]
