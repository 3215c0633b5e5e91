"""The state of a table at one version.

Spec sections: "Delta Table Specification" (a snapshot is protocol, metadata, files,
tombstones, transactions and domain metadata), "Action Reconciliation", "Requirements for
Readers". A Snapshot is immutable; its file actions are Arrow tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cached_property

import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.errors import CorruptLogError, UnusableCheckpointError, VersionNotFoundError
from delta_ops.log.files.checkpoint_reader import read_checkpoint
from delta_ops.log.replay.checkpoint_fallback import read_with_usable_checkpoint
from delta_ops.log.replay.full_replay import ReplayState, replay
from delta_ops.log.replay.streamed_actions import StreamedActions
from delta_ops.log.segment.log_segment import LogSegment, build_log_segment
from delta_ops.log.segment.timestamps import version_at_timestamp
from delta_ops.log.snapshot.snapshot_base import SnapshotBase, check_readable
from delta_ops.protocol.actions import CommitInfo, DomainMetadata, Metadata, Txn
from delta_ops.protocol.arrays import from_numpy, int_values
from delta_ops.storage import Storage


@dataclass(frozen=True)
class Snapshot(SnapshotBase):
    """One version of a Delta table.

    Attributes:
        storage: the table's storage.
        segment: the log files this snapshot was built from.
        protocol: the protocol action as in the log.
        metadata: the metaData action.
        files: live add actions (pyarrow Table, ADD_SCHEMA); in a streamed snapshot
            (`load_snapshot(stream=True)`) a `log.replay.streamed_actions.StreamedActions` read on
            demand.
        tombstones: remove actions still in the state (pyarrow Table, REMOVE_SCHEMA, or
            `StreamedActions`), expired ones included; `unexpired_tombstones(now)` filters
            them.
        txns: latest transaction identifier per appId.
        all_domains: latest domainMetadata per domain, removed ones included.
        commit_infos: commitInfo actions of the commits read, by version.
    """

    storage: Storage
    segment: LogSegment
    protocol: dict
    metadata: Metadata
    files: pa.Table | StreamedActions
    tombstones: pa.Table | StreamedActions
    txns: dict[str, Txn]
    all_domains: dict[str, DomainMetadata]
    commit_infos: dict[int, CommitInfo]
    checkpoint_sidecars: tuple[str, ...] = ()

    def arrow_schema(self, *, physical: bool = False) -> pa.Schema:
        """The table schema as Arrow; with `physical`, the column-mapping physical names
        and Parquet field ids the data files use. ValueError without a schemaString."""
        from delta_ops.protocol.schema import to_arrow

        if self.schema is None:
            raise ValueError(f"table {self.table} version {self.version} has no schemaString")
        mode = self.table_configuration.column_mapping_mode
        return to_arrow(self.schema, physical=physical, mode=mode)

    @property
    def streamed(self) -> bool:
        """Whether the file actions are read on demand (`load_snapshot(stream=True)`)."""
        return isinstance(self.files, StreamedActions)

    @property
    def num_files(self) -> int:
        return self.files.num_rows

    @cached_property
    def size_bytes(self) -> int:
        if isinstance(self.files, StreamedActions):
            return self.files.sum("size")
        if not self.files.num_rows:
            return 0
        return int(pc.sum(self.files.column("size")).as_py() or 0)

    @property
    def num_tombstones(self) -> int:
        return self.tombstones.num_rows

    def file_rows(self) -> list[tuple[str, int | None, dict | None]]:
        """(path, size, deletionVector) of each live file, in the order of `files`."""
        files = self.files
        return list(zip(
            files.column("path").to_pylist(),
            files.column("size").to_pylist(),
            files.column("deletionVector").to_pylist(),
            strict=True,
        ))

    def unexpired_tombstones(self, now_ms: int) -> pa.Table | StreamedActions:
        """Tombstones younger than `delta.deletedFileRetentionDuration` at `now_ms`."""
        cutoff = now_ms - int(self.properties.deleted_file_retention.total_seconds() * 1000)

        def unexpired(t: pa.Table) -> pa.Array:
            ts, valid = int_values(t.column("deletionTimestamp"))
            return from_numpy(valid & (ts > cutoff))

        if isinstance(self.tombstones, StreamedActions):
            return self.tombstones.where(unexpired)
        if not self.tombstones.num_rows:
            return self.tombstones
        return self.tombstones.filter(unexpired(self.tombstones))


def load_snapshot(
    storage: Storage,
    version: int | None = None,
    *,
    timestamp: datetime | int | None = None,
    stream: bool = False,
) -> Snapshot:
    """Load the snapshot of `version` (latest when None), or of the version current at
    `timestamp` (a datetime, or milliseconds since the epoch).

    Raises:
        NotATableError, VersionNotFoundError, CorruptLogError: see `build_log_segment`;
            also CorruptLogError when the reconstructed state has no protocol or metadata.
        UnsupportedFeatureError: the table cannot be read: a reader version beyond what
            delta_ops implements (e.g. reader version 99) or a reader feature it does not
            know (the writer side is checked by the operations that write).

    With `stream=True` the checkpoint's file actions are not loaded: `files` and
    `tombstones` are `StreamedActions`, read again (one row group at a time) each time they
    are iterated, so memory does not grow with the table. The segment is then read from
    commits only when they are all there (no compaction files): a streamed state is its own
    independent replay, and publishing operations need no second one held in memory.
    """
    if version is not None and timestamp is not None:
        raise ValueError("give either a version or a timestamp, not both")
    if timestamp is not None:
        latest = load_snapshot(storage)
        ts_ms = _to_ms(timestamp)
        earliest = _earliest_reconstructable(latest)
        version = version_at_timestamp(storage, ts_ms, latest.ict, earliest_version=earliest)
        if version == latest.version:
            return latest
    # A corrupt checkpoint, or a V2 one missing a sidecar: an older one (or the commits).
    def read(segment: LogSegment) -> ReplayState:
        return replay(storage, segment, stream=stream)

    if stream:
        if version is None:
            # The latest version counting compactions: the commits-only segment alone would
            # stop at the last commit left when later ones were cleaned up.
            version = build_log_segment(storage).version
        try:
            segment, state = read_with_usable_checkpoint(
                storage, read, version=version, use_compactions=False
            )
        except (CorruptLogError, VersionNotFoundError):
            # Commits were cleaned up and only compaction files cover them.
            segment, state = read_with_usable_checkpoint(storage, read, version=version)
    else:
        segment, state = read_with_usable_checkpoint(storage, read, version=version)
    return snapshot_from_state(storage, segment, state)


def large_state(storage: Storage, version: int | None, threshold_bytes: int) -> bool:
    """Whether the state of `version` is large enough to stream (`load_snapshot(stream=True)`):
    its checkpoint's files (parts, or the V2 top-level file and its sidecars) hold at least
    `threshold_bytes` bytes. A log without a checkpoint is not: its commits are replayed in
    memory either way. 0 streams every table (tests use it to run the streamed path on the
    whole corpus)."""
    if threshold_bytes <= 0:
        return True
    segment = build_log_segment(storage, version)
    if segment.checkpoint is None:
        return False
    size = sum(info.size for info in segment.checkpoint.files)
    if size >= threshold_bytes:
        return True
    # A small top-level file may name large V2 sidecars: their sizes are in its header.
    try:
        content = read_checkpoint(storage, segment.checkpoint, file_actions=False)
    except UnusableCheckpointError:
        return False  # the loader falls back to an older checkpoint and says why
    return content.source_bytes >= threshold_bytes


def _to_ms(ts: datetime | int) -> int:
    if isinstance(ts, datetime):
        if ts.tzinfo is None:
            ts = ts.replace(tzinfo=timezone.utc)
        return int(ts.timestamp() * 1000)
    return int(ts)


def _earliest_reconstructable(latest: Snapshot) -> int | None:
    from delta_ops.log.segment.log_segment import complete_checkpoints, list_log
    from delta_ops.protocol.filenames import LogFileKind

    listing = list_log(latest.storage)
    commits = sorted(lf.version for lf, _ in listing if lf.kind == LogFileKind.COMMIT)
    if commits and commits[0] == 0:
        return 0
    checkpoints = complete_checkpoints(listing, None)
    return min((c.version for c in checkpoints), default=None)


def snapshot_from_state(storage: Storage, segment: LogSegment, state: ReplayState) -> Snapshot:
    check_readable(storage.root, segment.version, state.protocol, state.metadata)
    return Snapshot(
        storage=storage,
        segment=segment,
        protocol=state.protocol,
        metadata=state.metadata,
        files=state.adds,
        tombstones=state.removes,
        txns=state.txns,
        all_domains=state.domains,
        commit_infos=state.commit_infos,
        checkpoint_sidecars=tuple(state.checkpoint_sidecars),
    )
