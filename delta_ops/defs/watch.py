"""Cheap log inspection for the sensor and the freshness check: what does a table need?

Spec sections: "Last Checkpoint File" (the hint a listing starts from), "Checkpoints"
(delta.checkpointInterval), "Version Checksum File", "Log Compaction Files", "Protocol
Evolution" (whether we may maintain the table at all).

Nothing here replays a snapshot or starts Spark. One tick reads `_last_checkpoint`, lists
`_delta_log` from the checkpoint it names (falling back to a full listing when the hint is
stale), and learns the table's protocol and properties through the log's light replay
(`delta_ops.log.protocol_metadata`): seeded with what it saw last time, only the deltas newer
than that are read; the first time, the newest deltas and then the checkpoint's two columns.
What it learned is kept in the sensor cursor (`TableSettings.to_json`).

`decide` turns a `LogState` and a table's policy into maintenance requests (pure).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from delta_ops.errors import (
    CorruptLogError,
    NotATableError,
    UnsupportedFeatureError,
    VersionNotFoundError,
)
from delta_ops.log.last_checkpoint import read_last_checkpoint
from delta_ops.log.protocol_metadata import ProtocolMetadata, read_protocol_metadata
from delta_ops.log.segment import LogSegment, build_log_segment, list_log
from delta_ops.maintenance.compaction import compaction_interval, compaction_plan
from delta_ops.protocol import features
from delta_ops.protocol.actions import Metadata
from delta_ops.protocol.filenames import LogFile, LogFileKind
from delta_ops.protocol.properties import InvalidTablePropertyError, TableProperties
from delta_ops.storage import FileInfo, Storage

DEFAULT_CHECKPOINT_INTERVAL = 10

CHECKPOINT = "checkpoint"
VERSION_CHECKSUM = "version_checksum"
LOG_COMPACTION = "log_compaction"
#: The operation each requested component performs (the `ensure_supported` gate).
OPERATIONS = {CHECKPOINT: "checkpoint", VERSION_CHECKSUM: "checksum", LOG_COMPACTION: "compaction"}


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
    """The protocol and table properties in force at `version` (cached in the cursor)."""

    version: int
    protocol: dict
    configuration: dict

    @property
    def checkpoint_interval(self) -> int:
        try:
            props = TableProperties.from_configuration(self.configuration)
        except InvalidTablePropertyError:
            return DEFAULT_CHECKPOINT_INTERVAL
        return props.checkpoint_interval

    def compaction_interval(self, override: int | None) -> int | None:
        try:
            return compaction_interval(self.configuration, override=override)
        except ValueError:
            return None

    def unsupported(self, component: str) -> list[str]:
        """Features that keep `component` from running (empty: it may run)."""
        try:
            features.ensure_supported(self.protocol, OPERATIONS[component])
        except UnsupportedFeatureError as exc:
            return exc.features
        except CorruptLogError as exc:
            return [exc.reason]
        return []

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
    """List the log from the checkpoint `_last_checkpoint` names (whole log without one).

    Raises:
        NotATableError: no Delta log at the location.
        CorruptLogError: the log is not contiguous.
    """
    hint, _problem = read_last_checkpoint(storage)
    start = hint.version if hint is not None else None
    listing = list_log(storage, start)
    try:
        segment = build_log_segment(storage, listing=listing)
    except (CorruptLogError, NotATableError, VersionNotFoundError):
        if start is None:
            raise
        # A stale hint (the checkpoint it names is gone or incomplete): list everything.
        listing = list_log(storage, None)
        segment = build_log_segment(storage, listing=listing)
    return LogState(
        table=storage.root,
        version=segment.version,
        checkpoint_version=segment.checkpoint_version,
        checksum_versions=frozenset(
            lf.version for lf, _ in listing if lf.kind == LogFileKind.CHECKSUM
        ),
        listing=tuple(listing),
        segment=segment,
    )


def read_settings(
    storage: Storage, state: LogState, previous: TableSettings | None
) -> TableSettings:
    """The protocol and configuration at `state.version`, reading as little as possible.

    With `previous` (from the cursor) at a version the listing still covers, only the
    deltas after it are read (the log's light replay, seeded with `previous`); otherwise the
    light replay reads the newest deltas, then the checkpoint's protocol/metaData columns.
    """
    since = None
    if previous is not None:
        # The cursor keeps only the configuration of the metaData action: that is the seed.
        since = ProtocolMetadata(
            previous.version, previous.protocol,
            Metadata({"configuration": previous.configuration}),
        )
    found = read_protocol_metadata(storage, state.segment, since=since)
    return TableSettings(state.version, dict(found.protocol), found.metadata.configuration)


@dataclass(frozen=True)
class MaintenanceRequest:
    """A component a table needs now, at `version` (the sensor's run key)."""

    table: str
    component: str
    version: int
    reason: str

    @property
    def run_key(self) -> str:
        return f"{self.table}:{self.component}:{self.version}"


def checkpoint_interval(policy_interval: int | None, settings: TableSettings | None) -> int:
    """The registry's interval, else the table's delta.checkpointInterval (10)."""
    if policy_interval is not None:
        return policy_interval
    return settings.checkpoint_interval if settings is not None else DEFAULT_CHECKPOINT_INTERVAL


def decide(
    name: str, policy: Any, state: LogState, settings: TableSettings
) -> tuple[list[MaintenanceRequest], list[str]]:
    """What `name` needs now (pure). Returns (requests, notes on what was not requested).

    - checkpoint: commits since the last checkpoint reached the interval;
    - version_checksum: checksums are on and the latest version has no `.crc`;
    - log_compaction: the compaction policy plans a window that has no file yet.
    A component the table's protocol forbids is never requested (a note says why).
    """
    wanted: list[MaintenanceRequest] = []
    interval = checkpoint_interval(policy.checkpoint.interval, settings)
    since = state.commits_since_checkpoint
    if since >= interval:
        wanted.append(MaintenanceRequest(
            name, CHECKPOINT, state.version,
            f"{since} commits since the last checkpoint (interval {interval})",
        ))
    if policy.checksum.enabled and state.version not in state.checksum_versions:
        wanted.append(MaintenanceRequest(
            name, VERSION_CHECKSUM, state.version, f"version {state.version} has no .crc"
        ))
    c_interval = settings.compaction_interval(policy.compaction.interval)
    plan = compaction_plan(list(state.listing), c_interval)
    if plan:
        wanted.append(MaintenanceRequest(
            name, LOG_COMPACTION, plan[-1][1],
            f"{len(plan)} compaction window(s) of {c_interval} commits to write",
        ))
    requests: list[MaintenanceRequest] = []
    notes: list[str] = []
    for req in wanted:
        blocked = settings.unsupported(req.component)
        if blocked:
            notes.append(
                f"{name}: {req.component} needed ({req.reason}) but the table uses features "
                f"delta_ops cannot maintain: {', '.join(blocked)}"
            )
        else:
            requests.append(req)
    return requests, notes


__all__ = [
    "LogState",
    "MaintenanceRequest",
    "TableSettings",
    "checkpoint_interval",
    "decide",
    "inspect_log",
    "read_settings",
]
