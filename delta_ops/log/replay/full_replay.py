"""Columnar action reconciliation: from a log segment to the state of one version.

Spec sections: "Action Reconciliation", "Checkpoints" (V1 and V2 with sidecars), "Log
Compaction Files". Among the commits (and compactions) the newest action for a file key
`(canonical path, deletion vector unique id)` wins, and the checkpoint's file actions are
kept only for keys no later action touched. The commits are reconciled columnar
(`log.replay.columnar_commits`, Arrow's JSON reader) and, when that path steps aside, action by
action with orjson (`log.replay.action_replay`, the one action-by-action rule). File actions stay in
Arrow: a checkpoint with millions of adds is read row group by row group on threads and
filtered with vectorized kernels, never turned into Python objects.

Compaction files come in two forms, and one rule reads both (`delta_lines_oldest_first`):
inside a compaction file the FIRST line for a key wins. The spec's form is reconciled (one
line per key: order does not matter); Databricks writes the covered commits' actions
unreconciled, newest commit first, with several lines per key (a `remove` above the older
`add` it cancels, superseded txns and domains below the newer ones), as delta-kernel-rs
reads them. Reversing a compaction's lines turns either form into an oldest-first stream in
which the last line wins, like the commits around it; across deltas the newer one wins.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

# Re-exported: the names callers import from here since the checkpoint reading (and these
# errors) moved out of this module.
from delta_ops.errors import SidecarMissingError as SidecarMissingError
from delta_ops.errors import StorageError, VersionNotFoundError
from delta_ops.errors import UnusableCheckpointError as UnusableCheckpointError
from delta_ops.log.files.checkpoint_reader import CheckpointContent as CheckpointContent
from delta_ops.log.files.checkpoint_reader import _drop_nulls as _drop_nulls
from delta_ops.log.files.checkpoint_reader import _read_parquet_actions as _read_parquet_actions
from delta_ops.log.files.checkpoint_reader import _struct_array, read_checkpoint
from delta_ops.log.files.json_actions import parse_json_actions
from delta_ops.log.replay.action_replay import ActionReconciler
from delta_ops.log.replay.action_replay import read_log_files as read_log_files
from delta_ops.log.replay.columnar_commits import CommitFile
from delta_ops.log.replay.columnar_commits import reconcile as reconcile_commits
from delta_ops.log.replay.streamed_actions import StreamedActions
from delta_ops.log.segment.log_segment import LogSegment
from delta_ops.protocol import filenames
from delta_ops.protocol.actions import (
    ADD_SCHEMA,
    ADD_TYPE,
    REMOVE_SCHEMA,
    REMOVE_TYPE,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Txn,
    file_keys,
)
from delta_ops.protocol.arrays import empty_table, string_array
from delta_ops.storage import Storage


def _reverses(is_compaction: bool) -> bool:
    """Whether a delta's lines are reversed to be read oldest first (the one rule)."""
    return is_compaction


def delta_lines_oldest_first(data: bytes, *, is_compaction: bool) -> bytes:
    """A delta's newline-delimited actions in oldest-first order, where the last line for a
    key wins (as in a commit, where each key appears once anyway).

    A commit is returned as it is. A compaction file (`x.y.compacted.json`) is returned with
    its lines reversed: within one compaction the first line for a key wins (Databricks
    writes the covered commits newest first and unreconciled; a reconciled file, the spec's
    form, has one line per key, so its order does not matter). Line endings of a reversed
    file become `\n` and it ends with one; blank lines are kept.

    Every reader of deltas uses this one rule (joining deltas oldest first, last line wins).

    Args:
        data: the file's bytes.
        is_compaction: the file is a compaction (`Delta.is_compaction`).

    Returns:
        The lines, oldest first (`data` itself when nothing changes).
    """
    if not _reverses(is_compaction):
        return data
    lines = data.splitlines()  # JSON strings cannot hold a raw CR or LF: only line ends
    if len(lines) <= 1:
        return data
    lines.reverse()
    lines.append(b"")
    return b"\n".join(lines)


@dataclass
class ReplayState:
    """Reconciled state of one version.

    Attributes:
        protocol: the latest protocol action as in the log, or None.
        metadata: the latest metaData action, or None.
        adds: live add actions (ADD_SCHEMA), or `StreamedActions` from `replay(stream=True)`.
        removes: remove tombstones (REMOVE_SCHEMA), expired or not (or `StreamedActions`).
        txns: latest txn per appId.
        domains: latest domainMetadata per domain, removed ones included.
        commit_infos: commitInfo of each commit read (not those inside a checkpoint).
        checkpoint_sidecars: sidecar file names the checkpoint referenced.
        checkpoint_metadata: the V2 checkpoint's checkpointMetadata action, if any.
    """

    protocol: dict | None = None
    metadata: Metadata | None = None
    adds: pa.Table | StreamedActions = field(default_factory=lambda: empty_table(ADD_SCHEMA))
    removes: pa.Table | StreamedActions = field(
        default_factory=lambda: empty_table(REMOVE_SCHEMA)
    )
    txns: dict[str, Txn] = field(default_factory=dict)
    domains: dict[str, DomainMetadata] = field(default_factory=dict)
    commit_infos: dict[int, CommitInfo] = field(default_factory=dict)
    checkpoint_sidecars: list[str] = field(default_factory=list)
    checkpoint_metadata: dict | None = None


def read_commit(storage: Storage, version: int) -> list[dict]:
    """The actions of commit `version`.

    Raises:
        VersionNotFoundError: the commit file does not exist.
        CorruptLogError: it is not valid newline-delimited JSON.
    """
    path = f"{filenames.LOG_DIR}/{filenames.commit_name(version)}"
    try:
        data = storage.read(path)
    except StorageError as exc:
        if not storage.exists(path):
            raise VersionNotFoundError(
                "the commit does not exist", table=storage.root, version=version, file=path
            ) from exc
        raise
    return parse_json_actions(data, table=storage.root, version=version, file=path)


class _Reconciler(ActionReconciler):
    """The action-by-action reconciliation (`log.replay.action_replay`) into a ReplayState, with
    the winning file actions as Arrow tables."""

    def __init__(self, root: str) -> None:
        super().__init__(root, ReplayState())

    def file_tables(self) -> tuple[pa.Table, pa.Table]:
        adds, removes = self.winners()
        adds = pa.Table.from_struct_array(_struct_array(adds, ADD_TYPE))
        removes = pa.Table.from_struct_array(_struct_array(removes, REMOVE_TYPE))
        return adds, removes


def _replay_commits(
    storage: Storage, deltas: list, rec: _Reconciler, partition_columns: tuple[str, ...] = ()
) -> tuple[pa.Table, pa.Table, pa.Array | None]:
    """Reconcile the segment's commits: columnar when the commits allow, else action by
    action. Returns the winning adds and removes and the keys of every file action."""
    table = storage.root
    paths = [d.file.path for d in deltas]
    # Every delta's lines oldest first (a compaction's reversed): one last-wins stream.
    files = [
        CommitFile(d.end, d.file.path, delta_lines_oldest_first(b, is_compaction=d.is_compaction))
        for d, b in zip(deltas, read_log_files(storage, paths), strict=True)
    ]
    fast = reconcile_commits(files, table, partition_columns=partition_columns)
    if fast is not None:
        for version, file, obj in fast.others:
            rec.apply_other(obj, table=table, version=version, file=file)
        return fast.adds, fast.removes, fast.keys
    # The columnar path took the files' bytes and stepped aside: read them again, parse them
    # as written (errors name the line in the file) and order the actions by the same rule.
    blobs = read_log_files(storage, paths)
    for f, d, data in reversed(list(zip(files, deltas, blobs, strict=True))):
        rec.apply_file(
            data, table=table, version=f.version, file=f.path, reverse=_reverses(d.is_compaction)
        )
    adds, removes = rec.file_tables()
    keys = string_array(list(rec.seen)) if rec.seen else None
    return adds, removes, keys


def fill_from_checkpoint(state: ReplayState, rec: _Reconciler, cp: CheckpointContent) -> None:
    """Complete `state` (built from the commits after a checkpoint) with the checkpoint's
    non-file actions: its protocol and metadata when no commit replaced them, and its txns
    and domains where no commit named the same app id or domain."""
    if not rec._have_protocol and cp.protocol is not None:
        state.protocol = cp.protocol
    if not rec._have_metadata and cp.metadata is not None:
        state.metadata = cp.metadata
    for app_id, txn in cp.txns.items():
        state.txns.setdefault(app_id, txn)
    for domain, dm in cp.domains.items():
        state.domains.setdefault(domain, dm)


def replay(storage: Storage, segment: LogSegment, *, stream: bool = False) -> ReplayState:
    """Reconcile the actions of `segment` into the state of `segment.version`.

    Args:
        storage: the table's storage.
        segment: the log files to read.
        stream: leave the checkpoint's file actions where they are: `adds` and `removes`
            are then `log.replay.streamed_actions.StreamedActions`, which read the checkpoint again,
            one row group at a time, each time they are iterated (memory bounded by a row group and
            the commits after the checkpoint, whatever the size of the table).

    Raises:
        CorruptLogError: unparsable files, or file actions without a path.
        SidecarMissingError: the checkpoint is V2 and a sidecar is missing.
    """
    table = storage.root
    rec = _Reconciler(table)
    # The checkpoint first: its partition columns tell the commits' reader how to type
    # partition values (as strings, whatever they look like).
    cp = (
        None
        if segment.checkpoint is None
        else read_checkpoint(storage, segment.checkpoint, file_actions=not stream)
    )
    hint = () if cp is None or cp.metadata is None else tuple(cp.metadata.partition_columns)
    deltas = list(segment.deltas)
    keys = None
    if deltas:
        adds, removes, keys = _replay_commits(storage, deltas, rec, hint)
    else:
        adds, removes = empty_table(ADD_SCHEMA), empty_table(REMOVE_SCHEMA)
    state = rec.state
    if cp is not None:
        fill_from_checkpoint(state, rec, cp)
        state.checkpoint_sidecars = cp.sidecars
        state.checkpoint_metadata = cp.checkpoint_metadata
        if stream:
            assert segment.checkpoint is not None
            superseded = keys if keys is not None and len(keys) else None
            version = segment.checkpoint.version
            state.adds = StreamedActions(
                storage, "add", cp.file_sources, version, superseded, adds
            )
            state.removes = StreamedActions(
                storage, "remove", cp.file_sources, version, superseded, removes
            )
            return state
        if keys is not None and len(keys):
            cp_adds = _drop_superseded(*_take_batches(cp, "adds"), keys, table)
            cp_removes = _drop_superseded(*_take_batches(cp, "removes"), keys, table)
        else:
            cp_adds, cp_removes = cp.adds, cp.removes
        adds = pa.concat_tables([cp_adds, adds]) if adds.num_rows else cp_adds
        removes = pa.concat_tables([cp_removes, removes]) if removes.num_rows else cp_removes
    if stream:
        # No checkpoint: the commits' winners are the whole state (held, as they are read).
        state.adds = StreamedActions(storage, "add", (), segment.version, None, adds)
        state.removes = StreamedActions(storage, "remove", (), segment.version, None, removes)
        return state
    state.adds = adds
    state.removes = removes
    return state


def _take_batches(
    cp: CheckpointContent, attr: str
) -> tuple[list[pa.RecordBatch], pa.Schema]:
    """The record batches of the checkpoint's `adds` or `removes`, which `cp` then no longer
    holds: the caller owns the only reference to the checkpoint's file actions."""
    actions = getattr(cp, attr)
    setattr(cp, attr, None)
    return actions.to_batches(), actions.schema


def _drop_superseded(
    batches: list[pa.RecordBatch], schema: pa.Schema, value_set: pa.Array, root: str
) -> pa.Table:
    """Checkpoint actions minus those whose key a later commit touched. Only record
    batches that hold such a key are filtered (copied); the others are kept as they are.

    Consumes `batches` (empties the list): a batch is released as soon as its filtered copy
    exists, so when later commits touch every row group (removes spread over the table)
    the peak is the filtered table plus one batch, not the checkpoint's actions twice."""
    batches.reverse()
    out = []
    while batches:
        batch = batches.pop()
        keys = file_keys(
            pa.StructArray.from_arrays(
                [batch.column("path"), batch.column("deletionVector")],
                names=["path", "deletionVector"],
            ),
            root,
        )
        hit = pc.is_in(keys, value_set=value_set)
        out.append(batch.filter(pc.invert(hit)) if pc.any(hit).as_py() else batch)
        del batch, keys, hit
    return pa.Table.from_batches(out, schema=schema)
