"""Optimistic transactions: plan against a snapshot, commit with put-if-absent, rebase, retry.

Spec sections: "Requirements for Writers" (never overwrite a log entry: commits use the
storage's atomic put-if-absent; one action per reconciliation key per commit), "Creation of
New Log Entries", "Commit Provenance Information" (commitInfo on every commit),
"In-Commit Timestamps" (commitInfo first, `inCommitTimestamp` = max(now, previous + 1),
enablement properties), "Append-only Tables", "Domain Metadata", "Row Tracking" (writers
assign fresh row IDs above the high-water mark and record it in `delta.rowTracking`;
recommitted actions keep the last committed values), "Table Features" (the writer gate).

A `Transaction` reads the snapshot at `read_version` (latest by default), collects actions,
and `commit()` writes version read_version + 1 with put-if-absent. When another writer won
that version, the winners' actions are read and checked for logical conflicts
(`delta_ops.commit.conflicts`); if there are none the commit is rebuilt for the next free
version (fresh row IDs, in-commit timestamp, enablement properties are recomputed) and
retried after a short backoff, up to `max_retries` times.

Time comes from the injected `clock` (milliseconds); waiting between attempts from the
injected `sleep`.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from delta_ops import __version__
from delta_ops.clock import Clock, system_clock
from delta_ops.commit.actions import (
    build_commit_info,
    check_append_only,
    check_protocol_change,
    check_unique_actions,
    is_true,
    normalize_metadata,
    normalize_protocol,
)
from delta_ops.commit.conflicts import (
    Footprint,
    check_winning_commit,
    footprint_of,
    landed,
    winning_commits,
)
from delta_ops.commit.row_counts import footer_row_counts
from delta_ops.commit.row_ids import (
    ENABLE_ROW_TRACKING,
    NO_ROW_IDS,
    ROW_TRACKING_DOMAIN,
    ROW_TRACKING_SUSPENDED,
    assign_row_ids,
    carry_over_row_ids,
    check_enablement,
    high_water_mark,
    high_water_mark_domain,
    num_records_from_stats,
    row_id_mark,
)
from delta_ops.errors import (
    AtomicityUnsupportedError,
    CommitRetriesExhaustedError,
    InvalidCommitError,
    TableExistsError,
    UnsupportedFeatureError,
)
from delta_ops.log import Snapshot, list_log, load_snapshot, parse_json_actions
from delta_ops.protocol import filenames
from delta_ops.protocol.actions import DomainMetadata, Metadata
from delta_ops.protocol.filenames import LOG_DIR, LogFileKind
from delta_ops.protocol.table_configuration import ICT_TIMESTAMP, ICT_VERSION, TableConfiguration
from delta_ops.protocol.upgrade import protocol_with_features
from delta_ops.storage import Storage

__all__ = [
    "DEFAULT_MAX_RETRIES",
    "ENGINE_INFO",
    "Clock",
    "CommitResult",
    "Transaction",
    "system_clock",
]

ENGINE_INFO = f"delta-ops/{__version__}"
DEFAULT_MAX_RETRIES = 30

@dataclass(frozen=True)
class CommitResult:
    """A committed transaction.

    Attributes:
        version: The version written.
        attempts: Put-if-absent attempts (1 when no concurrent writer won a race).
        read_version: The snapshot version the transaction was planned on (-1: new table).
        txn_id: The commitInfo `txnId`.
        in_commit_timestamp: The commit's `inCommitTimestamp`, None when not enabled.
        row_id_high_water_mark: The row ID high-water mark after the commit, None when the
            table does not support row tracking.
        actions: The actions written (commitInfo first), as dicts.
    """

    version: int
    attempts: int
    read_version: int
    txn_id: str
    in_commit_timestamp: int | None
    row_id_high_water_mark: int | None
    actions: tuple[dict[str, Any], ...]


_ALLOWED_ACTIONS = ("add", "remove", "txn", "cdc")


class Transaction:
    """One optimistic transaction on a table.

    Args:
        table: A `Storage`, a `DeltaTable` or a URI.
        read_version: The version to plan on; latest when None. Ignored with `snapshot`.
        snapshot: An already loaded snapshot to plan on.
        create: Create a new table (version 0); `set_protocol` and `set_metadata` required.
        operation: commitInfo `operation` ("WRITE", "OPTIMIZE", "ROW TRACKING BACKFILL"...).
        operation_parameters: commitInfo `operationParameters`.
        max_retries: Rebased retries after lost races before giving up.
        clock: Milliseconds since the epoch (default: the system clock).
        sleep: Waits between attempts, in seconds (default `time.sleep`).
        engine: Reads Parquet footers when fresh row IDs need counts stats lack.
        accept_non_atomic: Commit on a storage without atomic put-if-absent anyway
            (two writers could then both believe they wrote the same version).
        reads_whole_table: Any concurrent data change conflicts with this transaction.
        requires_row_ids: A concurrent add without row IDs conflicts.
        storage_options: For a URI `table`.
        backoff_ms: (first, largest) wait after a lost race, doubled per attempt, jittered.
        user_metadata: commitInfo `userMetadata`.
        row_counts: Known physical row counts by add path, used before stats and footers.
        operation_metrics: commitInfo `operationMetrics` (values written as strings).
        isolation_level: commitInfo `isolationLevel` (`SnapshotIsolation`: no data change).
        row_id_floor: The highest row ID the table's files hold, when the caller read them.
    """

    def __init__(
        self,
        table: Any,
        *,
        read_version: int | None = None,
        snapshot: Snapshot | None = None,
        create: bool = False,
        operation: str = "WRITE",
        operation_parameters: Mapping[str, Any] | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        clock: Clock | None = None,
        sleep: Callable[[float], None] | None = None,
        engine: Any = None,
        accept_non_atomic: bool = False,
        reads_whole_table: bool = False,
        requires_row_ids: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        backoff_ms: tuple[int, int] = (5, 500),
        user_metadata: str | None = None,
        row_counts: Mapping[str, int] | None = None,
        operation_metrics: Mapping[str, Any] | None = None,
        isolation_level: str = "Serializable",
        row_id_floor: int = NO_ROW_IDS,
    ) -> None:
        self.storage = (
            snapshot.storage if snapshot is not None else Storage.of(table, storage_options)
        )
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self._snapshot = snapshot
        self._read_version = read_version
        self.create = create
        self.operation = operation
        self.operation_parameters = dict(operation_parameters or {})
        self.max_retries = max_retries
        self.clock = clock or system_clock
        self.sleep = sleep or time.sleep
        self.engine = engine
        self.accept_non_atomic = accept_non_atomic
        self.reads_whole_table = reads_whole_table
        self.requires_row_ids = requires_row_ids
        self.backoff_ms = backoff_ms
        self.user_metadata = user_metadata
        self.row_counts = dict(row_counts or {})
        self.operation_metrics = dict(operation_metrics or {})
        self.isolation_level = isolation_level
        self.row_id_floor = row_id_floor
        self.txn_id = str(uuid.uuid4())
        self._actions: list[dict[str, Any]] = []
        self._metadata: dict[str, Any] | None = None
        self._protocol: dict[str, Any] | None = None
        self._domains: dict[str, DomainMetadata] = {}
        self._result: CommitResult | None = None

    # ---- planning ------------------------------------------------------------------------

    @property
    def table(self) -> str:
        return self.storage.root

    @property
    def snapshot(self) -> Snapshot | None:
        """The snapshot the transaction is planned on (None when creating a table)."""
        if self.create:
            return None
        if self._snapshot is None:
            self._snapshot = load_snapshot(self.storage, self._read_version)
        return self._snapshot

    @property
    def read_version(self) -> int:
        snap = self.snapshot
        return -1 if snap is None else snap.version

    @property
    def protocol(self) -> dict[str, Any]:
        """The protocol this commit leaves in place (the new one, or the snapshot's)."""
        if self._protocol is not None:
            return self._protocol
        snap = self.snapshot
        if snap is None:
            raise InvalidCommitError("a new table needs a protocol", table=self.table)
        return normalize_protocol(snap.protocol)

    @property
    def metadata(self) -> dict[str, Any]:
        """The metadata this commit leaves in place (the new one, or the snapshot's)."""
        if self._metadata is not None:
            return self._metadata
        snap = self.snapshot
        if snap is None:
            raise InvalidCommitError("a new table needs metadata", table=self.table)
        return normalize_metadata(snap.metadata.raw)

    def add_actions(self, actions: Iterable[Mapping[str, Any]]) -> Transaction:
        """Add wrapped file actions and transaction identifiers: {"add": {...}},
        {"remove": {...}}, {"txn": {...}}, {"cdc": {...}}. Use `set_metadata`,
        `set_protocol` and `set_domain` for the others."""
        for obj in actions:
            if len(obj) != 1 or next(iter(obj)) not in _ALLOWED_ACTIONS:
                raise InvalidCommitError(
                    f"add_actions takes one of {_ALLOWED_ACTIONS} per action, got keys "
                    f"{sorted(obj)}",
                    table=self.table,
                )
            self._actions.append({k: dict(v) for k, v in obj.items()})
        return self

    def add_files(self, adds: Iterable[Mapping[str, Any]]) -> Transaction:
        """Add `add` action bodies (unwrapped)."""
        return self.add_actions({"add": a} for a in adds)

    def remove_files(self, removes: Iterable[Mapping[str, Any]]) -> Transaction:
        """Add `remove` action bodies (unwrapped)."""
        return self.add_actions({"remove": r} for r in removes)

    def set_txn(self, app_id: str, version: int, *, last_updated: int | None = None) -> Transaction:
        """Record an application transaction identifier."""
        txn: dict[str, Any] = {"appId": app_id, "version": int(version)}
        if last_updated is not None:
            txn["lastUpdated"] = last_updated
        return self.add_actions([{"txn": txn}])

    def set_metadata(self, metadata: Metadata | Mapping[str, Any]) -> Transaction:
        """Replace the table metadata (the whole `metaData` action)."""
        raw = metadata.raw if isinstance(metadata, Metadata) else metadata
        self._metadata = normalize_metadata(raw)
        return self

    def update_configuration(self, updates: Mapping[str, str]) -> Transaction:
        """Set table properties, keeping the rest of the metadata."""
        md = dict(self.metadata)
        md["configuration"] = {**dict(md.get("configuration") or {}), **updates}
        return self.set_metadata(md)

    def set_protocol(self, protocol: Mapping[str, Any]) -> Transaction:
        """Replace the protocol action. Features may be added, never removed."""
        self._protocol = normalize_protocol(protocol)
        return self

    def add_features(self, names: Iterable[str]) -> Transaction:
        """Support table features (and those they require), upgrading the protocol by the
        spec's rules; a no-op when all are supported."""
        upgraded = protocol_with_features(self.protocol, names)
        if upgraded is not None:
            self.set_protocol(upgraded)
        return self

    def set_domain(self, domain: str, configuration: str, *, removed: bool = False) -> Transaction:
        """Set (or, with removed=True, remove) a user-controlled metadata domain."""
        if domain.startswith("delta."):
            raise InvalidCommitError(
                f"domain {domain!r} is system-controlled (delta.*); delta_ops manages "
                f"{ROW_TRACKING_DOMAIN} itself and writes no other system domain",
                table=self.table,
            )
        self._domains[domain] = DomainMetadata(domain, configuration, removed)
        return self

    # ---- validation ----------------------------------------------------------------------

    def _validate(self, protocol: Mapping[str, Any],
                  metadata: Mapping[str, Any]) -> TableConfiguration:
        """Check the commit; returns the configuration it leaves in place."""
        snap = self.snapshot
        table = self.table
        version = None if snap is None else snap.version
        new = TableConfiguration(protocol, Metadata(metadata), version, table)
        if snap is not None:
            snap.table_configuration.ensure_supported("commit")
        new.ensure_supported("commit")
        if snap is not None and self._protocol is not None:
            check_protocol_change(snap.table_configuration, new)
        if not metadata.get("id"):
            raise InvalidCommitError("the table metadata has no id", table=table)
        check_append_only(new, self._actions)
        if self._domains and not new.is_feature_supported("domainMetadata"):
            raise UnsupportedFeatureError(
                "cannot write domain metadata: the table does not support the domainMetadata "
                "writer feature (add it with add_features)",
                features=["domainMetadata"],
                table=table,
                version=version,
            )
        check_unique_actions(self._actions, table=table)
        return new

    # ---- row IDs -------------------------------------------------------------------------

    def _carry_over_row_ids(self) -> None:
        """Recommitted adds and removes keep the last committed add's row ID fields."""
        snap = self.snapshot
        if snap is not None:
            self._actions = carry_over_row_ids(self._actions, snap.files)

    def _row_counts(self) -> dict[str, int]:
        """Row counts of the adds: given `row_counts`, stats, else Parquet footers."""
        counts: dict[str, int] = {}
        missing: list[str] = []
        for obj in self._actions:
            a = obj.get("add")
            if a is None:
                continue
            path = a["path"]
            n = self.row_counts.get(path)
            if n is None:
                n = num_records_from_stats(a.get("stats"))
            if n is not None:
                counts[path] = n
            elif a.get("baseRowId") is None:
                missing.append(path)
        if missing:
            counts.update(footer_row_counts(self.storage, missing, engine=self.engine))
        return counts

    # ---- commit --------------------------------------------------------------------------

    def commit(self) -> CommitResult:
        """Write the next version.

        Returns:
            The result (version written, attempts...). Calling again returns it again.

        Raises:
            UnsupportedFeatureError: The table (or the new protocol) has writer features
                delta_ops does not support; nothing is written.
            AppendOnlyError, InvalidCommitError: The actions break a protocol rule.
            CommitConflictError: A concurrent commit conflicts logically.
            CommitRetriesExhaustedError: Still losing races after `max_retries` retries.
            TableExistsError: Creating a table where one exists.
            AtomicityUnsupportedError: The storage has no atomic put-if-absent and
                `accept_non_atomic` is False.
        """
        if self._result is not None:
            return self._result
        storage = self.storage
        if not storage.supports_atomic_put_if_absent and not self.accept_non_atomic:
            raise AtomicityUnsupportedError(
                f"storage scheme {storage.scheme!r} has no atomic put-if-absent, so concurrent "
                "writers could overwrite each other's commits; pass accept_non_atomic=True to "
                "accept the risk",
                table=self.table,
            )
        snap = self.snapshot
        if self.create:
            self._ensure_no_table()
        protocol = self.protocol
        metadata = self.metadata
        new = self._validate(protocol, metadata)
        row_tracking = new.is_feature_supported("rowTracking")
        # Suspended: existing row IDs are kept, no fresh ones assigned (spec "Row Tracking").
        assigning = row_tracking and not is_true(new.configuration, ROW_TRACKING_SUSPENDED)
        counts: dict[str, int] = {}
        hwm = self._recorded_mark = self.row_id_floor
        if row_tracking:
            self._carry_over_row_ids()
            counts = self._row_counts()
            if snap is not None:  # the domain's mark, raised to the IDs files hold
                self._recorded_mark = high_water_mark(snap.domains, table=self.table)
                hwm = row_id_mark(snap.domains, snap.files, snap.tombstones, floor=hwm,
                                  table=self.table)
        enabling_rt = is_true(new.configuration, ENABLE_ROW_TRACKING) and (
            snap is None or not is_true(snap.metadata.configuration, ENABLE_ROW_TRACKING)
        )
        if enabling_rt:
            check_enablement(
                None if snap is None else snap.files,
                self._actions,
                metadata,
                row_tracking=row_tracking,
                table=self.table,
                version=None if snap is None else snap.version,
            )
        ict_on = new.is_feature_enabled("inCommitTimestamp")
        ict_was_on = snap is not None and snap.table_configuration.is_feature_enabled(
            "inCommitTimestamp"
        )
        prev_ict: int | None = None
        if ict_on and snap is not None:
            prev_ict = self._previous_timestamp(snap, ict_was_on)
        footprint = footprint_of(
            self._actions,
            root=self.table,
            reads_whole_table=self.reads_whole_table,
            requires_row_ids=self.requires_row_ids or enabling_rt,
        )
        footprint = Footprint(
            footprint.touched_paths,
            footprint.app_ids,
            frozenset(self._domains),
            footprint.reads_whole_table,
            footprint.requires_row_ids,
        )
        version = self.read_version + 1
        attempts = 0
        while True:
            attempts += 1
            now = int(self.clock())
            ict = (
                max(now, prev_ict + 1)
                if ict_on and prev_ict is not None
                else (now if ict_on else None)
            )
            actions, new_hwm = self._build(
                version=version,
                now=now,
                ict=ict,
                hwm=hwm,
                counts=counts,
                row_tracking=assigning,
                enabling_ict=ict_on and not ict_was_on,
            )
            data = b"\n".join(orjson.dumps(a) for a in actions) + b"\n"
            path = f"{LOG_DIR}/{filenames.commit_name(version)}"
            if storage.put_if_absent(path, data, accept_non_atomic=self.accept_non_atomic) \
                    or landed(storage, path, data):
                self._result = CommitResult(
                    version=version,
                    attempts=attempts,
                    read_version=self.read_version,
                    txn_id=self.txn_id,
                    in_commit_timestamp=ict,
                    row_id_high_water_mark=new_hwm if row_tracking else None,
                    actions=tuple(actions),
                )
                return self._result
            if self.create:
                raise TableExistsError(
                    "another writer created the table first",
                    table=self.table,
                    version=0,
                    file=path,
                )
            if attempts > self.max_retries:
                raise CommitRetriesExhaustedError(
                    f"gave up after {attempts} attempts: concurrent writers kept winning the "
                    f"race for the next version (planned on version {self.read_version})",
                    table=self.table,
                    version=version,
                )
            winners = winning_commits(storage, version, table=self.table)
            for win_version, info in winners:
                raw = storage.read(info.path)
                win_actions = parse_json_actions(
                    raw, table=self.table, version=win_version, file=info.path
                )
                facts = check_winning_commit(
                    footprint, win_actions, version=win_version, table=self.table
                )
                if facts.high_water_mark is not None:
                    hwm = max(hwm, facts.high_water_mark)
                    self._recorded_mark = max(self._recorded_mark, facts.high_water_mark)
                if ict_on:
                    if facts.in_commit_timestamp is not None:
                        prev_ict = facts.in_commit_timestamp
                    elif not ict_was_on:
                        prev_ict = max(prev_ict or 0, info.modification_time)
            version = winners[-1][0] + 1
            first, largest = self.backoff_ms
            wait_ms = min(largest, first * 2 ** (attempts - 1)) * (0.5 + random.random() / 2)
            self.sleep(wait_ms / 1000.0)

    def _ensure_no_table(self) -> None:
        for lf, info in list_log(self.storage):
            if lf.kind == LogFileKind.COMMIT or lf.is_checkpoint:
                raise TableExistsError(
                    "a Delta table already exists here", table=self.table, file=info.path
                )

    def _previous_timestamp(self, snap: Snapshot, ict_was_on: bool) -> int:
        """The timestamp our in-commit timestamp must exceed: the read version's
        inCommitTimestamp, or (when this commit enables the feature) its file's mtime."""
        if ict_was_on and snap.ict.applies_to(snap.version):
            return int(snap.timestamp)
        info = self.storage.info(f"{LOG_DIR}/{filenames.commit_name(snap.version)}")
        if info is not None:
            return info.modification_time
        return int(snap.timestamp)

    def _build(
        self,
        *,
        version: int,
        now: int,
        ict: int | None,
        hwm: int,
        counts: Mapping[str, int],
        row_tracking: bool,
        enabling_ict: bool,
    ) -> tuple[list[dict[str, Any]], int]:
        """The actions of one attempt at `version`, and the high-water mark after it."""
        actions: list[dict[str, Any]] = []
        blind_append = (
            not self.reads_whole_table
            and self._metadata is None
            and self._protocol is None
            and all(
                "add" in obj and obj["add"].get("dataChange", True) is not False
                for obj in self._actions
            )
        )
        commit_info = build_commit_info(
            now=now,
            in_commit_timestamp=ict,
            operation=self.operation,
            operation_parameters=self.operation_parameters,
            read_version=None if self.create else self.read_version,
            blind_append=blind_append,
            engine_info=ENGINE_INFO,
            txn_id=self.txn_id,
            user_metadata=self.user_metadata,
            operation_metrics=self.operation_metrics,
            isolation_level=self.isolation_level,
        )
        actions.append({"commitInfo": commit_info})
        if self._protocol is not None:
            actions.append({"protocol": self._protocol})
        if self._metadata is not None:
            md = dict(self._metadata)
            if enabling_ict and version > 0 and ict is not None:
                md["configuration"] = {
                    **md["configuration"],
                    ICT_VERSION: str(version),
                    ICT_TIMESTAMP: str(ict),
                }
            actions.append({"metaData": md})
        new_hwm = hwm
        file_actions = self._actions
        if row_tracking:
            adds = [obj["add"] for obj in self._actions if "add" in obj]
            if adds:
                assignment = assign_row_ids(
                    adds,
                    high_water_mark=hwm,
                    version=version,
                    num_records=lambda a: counts.get(a["path"]),
                )
                it = iter(assignment.adds)
                file_actions = [{"add": next(it)} if "add" in obj else obj for obj in self._actions]
                new_hwm = assignment.high_water_mark
        for dm in self._domains.values():
            actions.append({"domainMetadata": dm.to_dict()})
        if row_tracking and new_hwm > self._recorded_mark:  # a lagging mark is set right too
            actions.append({"domainMetadata": high_water_mark_domain(new_hwm).to_dict()})
        actions.extend(obj for obj in file_actions if "txn" in obj)
        actions.extend(obj for obj in file_actions if "txn" not in obj)
        return actions, new_hwm
