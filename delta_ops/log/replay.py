"""Columnar action reconciliation: from a log segment to the state of one version.

Spec sections: "Action Reconciliation", "Checkpoints" (V1 and V2 with sidecars), "Log
Compaction Files". Among the commits (and compactions) the newest action for a file key
`(canonical path, deletion vector unique id)` wins, and the checkpoint's file actions are
kept only for keys no later action touched. The commits are reconciled columnar
(`log.commits`, Arrow's JSON reader) and, when that path steps aside, action by action
with orjson. File actions stay in Arrow: a checkpoint with millions of adds is read row
group by row group on threads and filtered with vectorized kernels, never turned into
Python objects.

Compaction files come in two forms, and one rule reads both (`delta_lines_oldest_first`):
inside a compaction file the FIRST line for a key wins. The spec's form is reconciled (one
line per key: order does not matter); Databricks writes the covered commits' actions
unreconciled, newest commit first, with several lines per key (a `remove` above the older
`add` it cancels, superseded txns and domains below the newer ones), as delta-kernel-rs
reads them. Reversing a compaction's lines turns either form into an oldest-first stream in
which the last line wins, like the commits around it; across deltas the newer one wins.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from delta_ops.errors import CorruptLogError, StorageError, VersionNotFoundError
from delta_ops.log.checkpoint_files import sidecar_file_path
from delta_ops.log.commits import CommitFile
from delta_ops.log.commits import reconcile as reconcile_commits
from delta_ops.log.segment import CheckpointFiles, LogSegment
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
    canonical_path,
    conform,
    dv_unique_id,
    file_keys,
)
from delta_ops.protocol.arrays import empty_table, string_array, to_numpy
from delta_ops.storage import Storage

_IO_THREADS = 16

#: TEST-ONLY switch, never set it outside tests. True makes every reader of the log that goes
#: through `delta_lines_oldest_first` (snapshot replay, columnar and action by action, and
#: whatever else uses that helper) read compaction files with the old, wrong rule: lines as
#: written, the last line for a key wins. Read at call time, so `monkeypatch.setattr` works;
#: tests use it to prove that a wrong reading rule cannot reach a published file unseen.
TEST_COMPACTION_LAST_LINE_WINS: bool = False


def _reverses(is_compaction: bool) -> bool:
    """Whether a delta's lines are reversed to be read oldest first (the one rule)."""
    return is_compaction and not TEST_COMPACTION_LAST_LINE_WINS


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


class UnusableCheckpointError(CorruptLogError):
    """A checkpoint cannot be read (corrupt Parquet or JSON, or a V2 checkpoint whose
    sidecar is missing); readers fall back to an older checkpoint or the commits."""


class SidecarMissingError(UnusableCheckpointError):
    """A V2 checkpoint names a sidecar file that is not there (the checkpoint is unusable)."""


@dataclass
class ReplayState:
    """Reconciled state of one version.

    Attributes:
        protocol: the latest protocol action as in the log, or None.
        metadata: the latest metaData action, or None.
        adds: live add actions (ADD_SCHEMA).
        removes: remove tombstones (REMOVE_SCHEMA), expired or not.
        txns: latest txn per appId.
        domains: latest domainMetadata per domain, removed ones included.
        commit_infos: commitInfo of each commit read (not those inside a checkpoint).
        checkpoint_sidecars: sidecar file names the checkpoint referenced.
        checkpoint_metadata: the V2 checkpoint's checkpointMetadata action, if any.
    """

    protocol: dict | None = None
    metadata: Metadata | None = None
    adds: pa.Table = field(default_factory=lambda: empty_table(ADD_SCHEMA))
    removes: pa.Table = field(default_factory=lambda: empty_table(REMOVE_SCHEMA))
    txns: dict[str, Txn] = field(default_factory=dict)
    domains: dict[str, DomainMetadata] = field(default_factory=dict)
    commit_infos: dict[int, CommitInfo] = field(default_factory=dict)
    checkpoint_sidecars: list[str] = field(default_factory=list)
    checkpoint_metadata: dict | None = None


def parse_json_actions(data: bytes, *, table: str, version: int | None, file: str) -> list[dict]:
    """Parse newline-delimited JSON actions; CorruptLogError naming the file on bad lines."""
    body = data.strip()
    if not body:
        return []
    if b"\r" not in body and b"\n\n" not in body:
        # One parser call for the whole file: lines joined as the elements of one array.
        try:
            out = orjson.loads(b"[" + body.replace(b"\n", b",") + b"]")
        except orjson.JSONDecodeError:
            out = None
        if out is not None and all(isinstance(o, dict) for o in out):
            return out
    out = []
    for lineno, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise CorruptLogError(
                f"line {lineno} is not valid JSON: {exc}", table=table, version=version, file=file
            ) from exc
        if not isinstance(obj, dict):
            raise CorruptLogError(
                f"line {lineno} is not a JSON object", table=table, version=version, file=file
            )
        out.append(obj)
    return out


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


class _Reconciler:
    """Newest-first reconciliation of the non-checkpoint part of a segment."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.seen: set[str] = set()
        self.adds: list[dict] = []
        self.removes: list[dict] = []
        self.state = ReplayState()
        self._have_protocol = False
        self._have_metadata = False

    def apply_newest_first(
        self, actions: list[dict], *, table: str, version: int, file: str
    ) -> None:
        root = self.root
        seen = self.seen
        seen_add = seen.add
        # Hot loop (one iteration per action of every commit): locals, no helper calls for
        # the common case of a relative path without a deletion vector.
        for obj in reversed(actions):
            a = obj.get("add")
            out = self.adds
            if a is None:
                a = obj.get("remove")
                out = self.removes
            if a is not None:
                path = a.get("path")
                if path.__class__ is not str:
                    raise CorruptLogError(
                        f"file action without a path: {obj!r}",
                        table=table,
                        version=version,
                        file=file,
                    )
                if "%" in path or ":" in path or path[:1] == "/":
                    path = canonical_path(path, root)
                dv = a.get("deletionVector")
                key = f"{path}\x00{dv_unique_id(dv)}" if dv else path
                if key not in seen:
                    seen_add(key)
                    out.append(a)
            else:
                self.apply_other(obj, table=table, version=version, file=file)

    def apply_other(self, obj: dict, *, table: str, version: int, file: str) -> None:
        """Apply one non-file action (newest first): protocol, metaData, txn, domain
        metadata, commitInfo; anything else is ignored."""
        state = self.state
        if (m := obj.get("metaData")) is not None:
            if not self._have_metadata:
                state.metadata = Metadata(m)
                self._have_metadata = True
        elif (p := obj.get("protocol")) is not None:
            if not self._have_protocol:
                state.protocol = p
                self._have_protocol = True
        elif (t := obj.get("txn")) is not None:
            try:
                txn = Txn.from_dict(t)
            except (KeyError, TypeError, ValueError) as exc:
                raise CorruptLogError(
                    f"invalid txn action {t!r}", table=table, version=version, file=file
                ) from exc
            state.txns.setdefault(txn.app_id, txn)
        elif (d := obj.get("domainMetadata")) is not None:
            try:
                dm = DomainMetadata.from_dict(d)
            except (KeyError, TypeError) as exc:
                raise CorruptLogError(
                    f"invalid domainMetadata action {d!r}",
                    table=table,
                    version=version,
                    file=file,
                ) from exc
            state.domains.setdefault(dm.domain, dm)
        elif (c := obj.get("commitInfo")) is not None:
            state.commit_infos.setdefault(version, CommitInfo(c))

    def file_tables(self) -> tuple[pa.Table, pa.Table]:
        adds = pa.Table.from_struct_array(_struct_array(self.adds, ADD_TYPE))
        removes = pa.Table.from_struct_array(_struct_array(self.removes, REMOVE_TYPE))
        return adds, removes


def _struct_array(rows: list[dict], typ: pa.StructType) -> pa.StructArray:
    if not rows:
        return pa.array([], typ)
    try:
        return pa.array(rows, typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        # Some writers put numbers or booleans into string maps (e.g. partition values
        # written as JSON numbers); coerce those values to strings and retry.
        return pa.array([_stringify_maps(r) for r in rows], typ)


def _stringify_maps(row: dict) -> dict:
    out = dict(row)
    for k in ("partitionValues", "tags"):
        v = out.get(k)
        if isinstance(v, dict):
            out[k] = {
                kk: (
                    None if vv is None else vv if isinstance(vv, str) else orjson.dumps(vv).decode()
                )
                for kk, vv in v.items()
            }
    return out


def read_log_files(storage: Storage, paths: list[str]) -> list[bytes]:
    """The contents of log files: concurrently where each read waits on the network
    (`Storage.latency_bound`), else one after the other (a local read takes microseconds,
    less than handing it to a thread)."""
    if not storage.latency_bound or len(paths) <= 1:
        return [storage.read(p) for p in paths]
    with ThreadPoolExecutor(min(_IO_THREADS, len(paths))) as pool:
        return list(pool.map(storage.read, paths))


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
        actions = parse_json_actions(data, table=table, version=f.version, file=f.path)
        if _reverses(d.is_compaction):
            actions.reverse()
        rec.apply_newest_first(actions, table=table, version=f.version, file=f.path)
    adds, removes = rec.file_tables()
    keys = string_array(list(rec.seen)) if rec.seen else None
    return adds, removes, keys


def replay(storage: Storage, segment: LogSegment) -> ReplayState:
    """Reconcile the actions of `segment` into the state of `segment.version`.

    Raises:
        CorruptLogError: unparsable files, or file actions without a path.
        SidecarMissingError: the checkpoint is V2 and a sidecar is missing.
    """
    table = storage.root
    rec = _Reconciler(table)
    # The checkpoint first: its partition columns tell the commits' reader how to type
    # partition values (as strings, whatever they look like).
    cp = None if segment.checkpoint is None else read_checkpoint(storage, segment.checkpoint)
    hint = () if cp is None or cp.metadata is None else tuple(cp.metadata.partition_columns)
    deltas = list(segment.deltas)
    keys = None
    if deltas:
        adds, removes, keys = _replay_commits(storage, deltas, rec, hint)
    else:
        adds, removes = empty_table(ADD_SCHEMA), empty_table(REMOVE_SCHEMA)
    state = rec.state
    if cp is not None:
        if not rec._have_protocol and cp.protocol is not None:
            state.protocol = cp.protocol
        if not rec._have_metadata and cp.metadata is not None:
            state.metadata = cp.metadata
        for app_id, txn in cp.txns.items():
            state.txns.setdefault(app_id, txn)
        for domain, dm in cp.domains.items():
            state.domains.setdefault(domain, dm)
        state.checkpoint_sidecars = cp.sidecars
        state.checkpoint_metadata = cp.checkpoint_metadata
        cp_adds, cp_removes = cp.adds, cp.removes
        if keys is not None and len(keys):
            cp_adds = _drop_superseded(cp_adds, keys, table)
            cp_removes = _drop_superseded(cp_removes, keys, table)
        adds = pa.concat_tables([cp_adds, adds]) if adds.num_rows else cp_adds
        removes = pa.concat_tables([cp_removes, removes]) if removes.num_rows else cp_removes
    state.adds = adds
    state.removes = removes
    return state


def _drop_superseded(actions: pa.Table, value_set: pa.Array, root: str) -> pa.Table:
    """Checkpoint actions minus those whose key a later commit touched. Only record
    batches that hold such a key are filtered (copied); the others are kept as they are."""
    if not actions.num_rows:
        return actions
    batches = []
    for batch in actions.to_batches():
        keys = file_keys(
            pa.StructArray.from_arrays(
                [batch.column("path"), batch.column("deletionVector")],
                names=["path", "deletionVector"],
            ),
            root,
        )
        hit = pc.is_in(keys, value_set=value_set)
        batches.append(batch.filter(pc.invert(hit)) if pc.any(hit).as_py() else batch)
    return pa.Table.from_batches(batches, schema=actions.schema)


@dataclass
class CheckpointContent:
    """Everything read from one checkpoint (all parts and sidecars)."""

    protocol: dict | None
    metadata: Metadata | None
    adds: pa.Table
    removes: pa.Table
    txns: dict[str, Txn]
    domains: dict[str, DomainMetadata]
    sidecars: list[str]
    checkpoint_metadata: dict | None
    num_actions: int


def read_checkpoint(storage: Storage, checkpoint: CheckpointFiles) -> CheckpointContent:
    """Read every action of a checkpoint: V1 (classic, multi-part) or V2 (with sidecars)."""
    table = storage.root
    non_file: list[dict] = []
    add_tables: list[pa.Table] = []
    remove_tables: list[pa.Table] = []
    sidecars: list[str] = []
    num_actions = 0
    for lf, info in zip(checkpoint.log_files, checkpoint.files, strict=True):
        if lf.format == "json":
            try:
                actions = parse_json_actions(
                    storage.read(info.path), table=table, version=lf.version, file=info.path
                )
            except CorruptLogError as exc:
                raise UnusableCheckpointError(
                    exc.reason, table=table, version=lf.version, file=info.path
                ) from exc
            num_actions += len(actions)
            rows_add = [a["add"] for a in actions if a.get("add") is not None]
            rows_rm = [a["remove"] for a in actions if a.get("remove") is not None]
            add_tables.append(pa.Table.from_struct_array(_struct_array(rows_add, ADD_TYPE)))
            remove_tables.append(pa.Table.from_struct_array(_struct_array(rows_rm, REMOVE_TYPE)))
            non_file.extend(a for a in actions if a.get("add") is None and a.get("remove") is None)
        else:
            part = _read_parquet_actions(storage, info.path, lf.version)
            num_actions += part.num_actions
            add_tables.append(part.adds)
            remove_tables.append(part.removes)
            non_file.extend(part.non_file)
    checkpoint_metadata = None
    for obj in non_file:
        if (sc := obj.get("sidecar")) is not None:
            sidecars.append(sc["path"])
        elif (cm := obj.get("checkpointMetadata")) is not None:
            checkpoint_metadata = cm
    sidecar_paths = [
        sidecar_file_path(name, table, version=checkpoint.version, file=checkpoint.files[0].path)
        for name in sidecars
    ]

    def read_sidecar(path: str) -> _ParquetActions:
        if not storage.exists(path):
            raise SidecarMissingError(
                "V2 checkpoint references a sidecar that does not exist",
                table=table,
                version=checkpoint.version,
                file=path,
            )
        return _read_parquet_actions(storage, path, checkpoint.version)

    if len(sidecar_paths) > 1:
        # Sidecars are independent files: decode them side by side (results in order).
        with ThreadPoolExecutor(min(len(sidecar_paths), max(2, os.cpu_count() or 2))) as pool:
            parts = list(pool.map(read_sidecar, sidecar_paths))
    else:
        parts = [read_sidecar(p) for p in sidecar_paths]
    for part in parts:
        num_actions += part.num_actions
        add_tables.append(part.adds)
        remove_tables.append(part.removes)
    protocol = metadata = None
    txns: dict[str, Txn] = {}
    domains: dict[str, DomainMetadata] = {}
    for obj in non_file:
        if (p := obj.get("protocol")) is not None:
            protocol = p
        elif (m := obj.get("metaData")) is not None:
            metadata = Metadata(m)
        elif (t := obj.get("txn")) is not None:
            txn = Txn.from_dict(t)
            txns[txn.app_id] = txn
        elif (d := obj.get("domainMetadata")) is not None:
            dm = DomainMetadata.from_dict(d)
            domains[dm.domain] = dm
    return CheckpointContent(
        protocol=protocol,
        metadata=metadata,
        adds=pa.concat_tables(add_tables) if add_tables else empty_table(ADD_SCHEMA),
        removes=pa.concat_tables(remove_tables) if remove_tables else empty_table(REMOVE_SCHEMA),
        txns=txns,
        domains=domains,
        sidecars=sidecars,
        checkpoint_metadata=checkpoint_metadata,
        num_actions=num_actions,
    )


def _valid_rows(chunk: pa.StructArray, path: pa.Array) -> pa.StructArray:
    """Rows whose path is set; a zero-copy slice when they are contiguous (the usual case:
    other actions sit at the start of the first row group)."""
    n_valid = len(path) - path.null_count
    valid = pc.is_valid(path)
    first = int(np.argmax(to_numpy(valid)))  # valid has no nulls; n_valid > 0 here
    if path.slice(first, n_valid).null_count == 0:
        return chunk.slice(first, n_valid)
    return chunk.filter(valid)


def _drop_nulls(value: Any) -> Any:
    """A non-file action read from Parquet, shaped as the JSON log writes it: absent fields
    (null struct children) dropped, maps as objects."""
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


@dataclass
class _ParquetActions:
    adds: pa.Table
    removes: pa.Table
    non_file: list[dict]
    num_actions: int


_NON_FILE_COLUMNS = (
    "metaData",
    "protocol",
    "txn",
    "domainMetadata",
    "checkpointMetadata",
    "sidecar",
)


def _read_parquet_actions(
    storage: Storage,
    path: str,
    version: int,
    *,
    add_type: pa.StructType = ADD_TYPE,
    remove_type: pa.StructType = REMOVE_TYPE,
    non_file_columns: tuple[str, ...] = _NON_FILE_COLUMNS,
) -> _ParquetActions:
    """Every action of one Parquet checkpoint file (a V1 checkpoint or part, a V2 top-level
    file or sidecar). Row groups are decoded concurrently, each through its own handle.
    Adds and removes are read as `add_type` and `remove_type` (only the fields those name
    are decoded), and of the other actions only `non_file_columns`."""
    table_uri = storage.root
    try:
        with storage.open_input(path) as fh:
            pf = pq.ParquetFile(fh)
            meta = pf.metadata
            schema = pf.schema_arrow
        top = set(schema.names)
        columns: list[str] = []
        for name, target in (("add", add_type), ("remove", remove_type)):
            columns += _action_columns(schema, name, target)
        wanted = [c for c in non_file_columns if c in top]
        columns += wanted

        def read_group(i: int) -> pa.Table:
            cols = _columns_with_values(meta.row_group(i), columns)
            if not cols:
                return pa.table({})
            with storage.open_input(path) as handle:
                return pq.ParquetFile(handle, metadata=meta).read_row_group(
                    i, columns=cols, use_threads=False
                )

        n = meta.num_row_groups
        if n > 1:
            with ThreadPoolExecutor(min(n, max(2, os.cpu_count() or 2))) as pool:
                groups = list(pool.map(read_group, range(n)))
        else:
            groups = [read_group(i) for i in range(n)]
        adds = _file_action_table(groups, "add", add_type)
        removes = _file_action_table(groups, "remove", remove_type)
        non_file: list[dict] = []
        for name in wanted:
            for group in groups:
                if name not in group.column_names:
                    continue
                col = group.column(name)
                if col.null_count == len(col):
                    continue
                valid = col.filter(pc.is_valid(col))
                non_file.extend(
                    {name: _drop_nulls(v)} for v in valid.to_pylist(maps_as_pydicts="strict")
                )
    except (OSError, pa.ArrowInvalid) as exc:
        raise UnusableCheckpointError(
            f"checkpoint file cannot be read as Parquet: {exc}",
            table=table_uri,
            version=version,
            file=path,
        ) from exc
    except StorageError:
        raise
    return _ParquetActions(adds, removes, non_file, meta.num_rows)


def _columns_with_values(group: pq.RowGroupMetaData, columns: list[str]) -> list[str]:
    """The columns of `columns` (top-level actions or their nested fields) that may hold a
    value in this row group. A checkpoint holds one action per row, so most action columns
    of a row group are entirely null; their column statistics say so and they are not
    decoded. Without statistics a column is read."""
    all_null: dict[str, bool] = {}
    for j in range(group.num_columns):
        chunk = group.column(j)
        leaf = chunk.path_in_schema
        top = leaf.split(".", 1)[0]
        stats = chunk.statistics
        null = (
            stats is not None and stats.has_null_count and stats.null_count == group.num_rows
        )
        all_null[top] = all_null.get(top, True) and null
        if leaf.startswith(("add.path", "remove.path")) and leaf.count(".") == 1:
            all_null[leaf] = null
    out = []
    for c in columns:
        top = c.split(".", 1)[0]
        # An action is present in the group when its path is (add, remove) or when any of
        # its leaves is (other actions).
        decisive = f"{top}.path" if top in ("add", "remove") else top
        if not all_null.get(decisive, all_null.get(top, False)):
            out.append(c)
    return out


def _action_columns(schema: pa.Schema, column: str, target: pa.StructType) -> list[str]:
    """The nested column paths of `column` that `target` wants and the file has."""
    if column not in schema.names:
        return []
    struct_type = schema.field(column).type
    return [f"{column}.{f.name}" for f in target if struct_type.get_field_index(f.name) >= 0]


def _file_action_table(tables: list[pa.Table], column: str, target: pa.StructType) -> pa.Table:
    """The rows of `column` (add or remove) that hold an action, as `target`, chunk by
    chunk (only chunks holding other actions are filtered; nothing is concatenated)."""
    schema = pa.schema(list(target))
    out = []
    for t in tables:
        if column in t.column_names:
            chunks = t.column(column).chunks
        elif f"{column}.path" in t.column_names:
            # Some pyarrow versions flatten a nested selection to top-level columns.
            names = [n for n in t.column_names if n.startswith(f"{column}.")]
            chunks = [
                pa.StructArray.from_arrays(
                    [t.column(n).chunk(i) for n in names],
                    names=[n[len(column) + 1 :] for n in names],
                    mask=pc.is_null(t.column(f"{column}.path").chunk(i)),
                )
                for i in range(t.column(names[0]).num_chunks)
            ]
        else:
            continue
        for chunk in chunks:
            valid = pc.struct_field(chunk, "path")  # honours the struct's own nulls
            if valid.null_count == len(valid):
                continue
            if valid.null_count:
                chunk = _valid_rows(chunk, valid)
            out.append(conform(chunk, target))
    if not out:
        return empty_table(schema)
    return pa.Table.from_batches([pa.RecordBatch.from_struct_array(c) for c in out], schema=schema)


def read_file_action_column(
    pf: pq.ParquetFile, column: str, target: pa.StructType, top: Iterable[str]
) -> pa.Table:
    """The `column` (add or remove) actions of an open checkpoint file, as `target`."""
    if column not in top:
        return empty_table(pa.schema(list(target)))
    t = pf.read(columns=_action_columns(pf.schema_arrow, column, target), use_threads=True)
    return _file_action_table([t], column, target)
