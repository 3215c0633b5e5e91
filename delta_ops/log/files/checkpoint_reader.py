"""Reading a checkpoint: every part and V2 sidecar, file actions kept in Arrow.

Spec sections: "Checkpoints" (V1 and V2, classic, multi-part and UUID-named, JSON or
Parquet), "Sidecar File Information", "Checkpoint Schema". A checkpoint with millions of adds
is read row group by row group on threads, each row group skipping the action columns its
statistics say are all null, and never turned into Python objects. `log.replay.full_replay`
reconciles what this reads with the commits after it.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.engine.threads import io_map
from delta_ops.errors import (
    CorruptLogError,
    StorageError,
    UnusableCheckpointError,
)
from delta_ops.log.files.json_actions import parse_json_actions
from delta_ops.log.files.log_listing import CheckpointFiles
from delta_ops.log.files.sidecars import require_sidecar, sidecar_files
from delta_ops.protocol.actions import (
    ADD_SCHEMA,
    ADD_TYPE,
    REMOVE_SCHEMA,
    REMOVE_TYPE,
    DomainMetadata,
    Metadata,
    Txn,
    conform,
)
from delta_ops.protocol.arrays import empty_table, to_numpy
from delta_ops.protocol.stats_json import stats_json
from delta_ops.storage import Storage

if TYPE_CHECKING:
    import pyarrow.parquet as pq


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


def _struct_array(rows: list[dict], typ: pa.StructType) -> pa.StructArray:
    if not rows:
        return pa.array([], typ)
    try:
        return pa.array(rows, typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        # Some writers put numbers or booleans into string maps (e.g. partition values
        # written as JSON numbers); coerce those values to strings and retry.
        return pa.array([_stringify_maps(r) for r in rows], typ)


def read_json_part(storage: Storage, version: int, path: str) -> list[dict]:
    """The actions of a JSON checkpoint file (a V2 top-level file or a JSON sidecar); one
    that does not parse makes the checkpoint unusable (`UnusableCheckpointError` naming it),
    so readers fall back to an older checkpoint."""
    table = storage.root
    try:
        return parse_json_actions(storage.read(path), table=table, version=version, file=path)
    except CorruptLogError as exc:
        raise UnusableCheckpointError(exc.reason, table=table, version=version, file=path) from exc


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
    #: The files holding the checkpoint's file actions, in reading order: every part (or
    #: the V2 top-level file) as (path, "parquet" | "json"), then every sidecar.
    file_sources: tuple[tuple[str, str], ...] = ()
    #: Bytes of those files (sidecars by their `sizeInBytes`), to size the state cheaply.
    source_bytes: int = 0


#: Empty targets: reading a checkpoint's header only (no add or remove column is decoded).
_NO_FIELDS = pa.struct([])


def read_checkpoint(
    storage: Storage, checkpoint: CheckpointFiles, *, file_actions: bool = True
) -> CheckpointContent:
    """Read every action of a checkpoint: V1 (classic, multi-part) or V2 (with sidecars).

    Args:
        storage: the table's storage.
        checkpoint: the checkpoint's files.
        file_actions: False reads the non-file actions only (protocol, metadata, txns,
            domains, sidecar and checkpointMetadata actions): no add or remove column of a
            Parquet file is decoded and no sidecar is read (sidecars hold file actions
            only). `adds`/`removes` are then empty, and `file_sources` says where the file
            actions are, for `log.replay.streamed_actions` to read them one row group at a time.
    """
    table = storage.root
    sources: list[tuple[str, str]] = []
    source_bytes = 0
    non_file: list[dict] = []
    add_tables: list[pa.Table] = []
    remove_tables: list[pa.Table] = []
    sidecars: list[str] = []
    num_actions = 0
    for lf, info in zip(checkpoint.log_files, checkpoint.files, strict=True):
        sources.append((info.path, lf.format))
        source_bytes += info.size
        if lf.format == "json":
            actions = read_json_part(storage, lf.version, info.path)
            num_actions += len(actions)
            rows_add = [a["add"] for a in actions if a.get("add") is not None]
            rows_rm = [a["remove"] for a in actions if a.get("remove") is not None]
            if file_actions:
                add_tables.append(pa.Table.from_struct_array(_struct_array(rows_add, ADD_TYPE)))
                remove_tables.append(
                    pa.Table.from_struct_array(_struct_array(rows_rm, REMOVE_TYPE))
                )
            non_file.extend(a for a in actions if a.get("add") is None and a.get("remove") is None)
        else:
            kinds = {} if file_actions else {"add_type": _NO_FIELDS, "remove_type": _NO_FIELDS}
            part = _read_parquet_actions(storage, info.path, lf.version, **kinds)
            num_actions += part.num_actions
            if file_actions:
                add_tables.append(part.adds)
                remove_tables.append(part.removes)
            non_file.extend(part.non_file)
    checkpoint_metadata = None
    for obj in non_file:
        if (sc := obj.get("sidecar")) is not None:
            sidecars.append(sc["path"])
        elif (cm := obj.get("checkpointMetadata")) is not None:
            checkpoint_metadata = cm
    sidecar_paths = sidecar_files(sidecars, table, checkpoint.version, checkpoint.files[0].path)
    for obj in non_file:
        if (sc := obj.get("sidecar")) is not None:
            source_bytes += int(sc.get("sizeInBytes") or 0)
    sources.extend((p, "parquet") for p in sidecar_paths)

    def read_sidecar(path: str) -> _ParquetActions:
        require_sidecar(storage, path, checkpoint.version)
        return _read_parquet_actions(storage, path, checkpoint.version)

    if not file_actions:
        for path in sidecar_paths:
            require_sidecar(storage, path, checkpoint.version)
        parts: list[_ParquetActions] = []
    elif len(sidecar_paths) > 1:
        # Sidecars are independent files: decode them side by side (results in order).
        parts = io_map(read_sidecar, sidecar_paths)
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
        file_sources=tuple(sources),
        source_bytes=source_bytes,
    )


#: The column of typed statistics in a checkpoint's adds (spec "Checkpoint Schema").
STATS_PARSED = "stats_parsed"


def read_parsed_stats(storage: Storage, checkpoint: CheckpointFiles) -> list[pa.Table]:
    """The typed statistics of a checkpoint's adds (`add.stats_parsed`), where it has them.

    One table per Parquet file (part or sidecar) whose `add` has `stats_parsed`, with the
    columns `path`, `deletionVector` and `stats_parsed` (of the type that file gives it, a
    struct following the table's schema); rows of adds only. Files without the column
    (JSON parts, checkpoints written with `delta.checkpoint.writeStatsAsStruct` off) give
    nothing. A checkpoint whose adds keep only typed statistics (no JSON `stats`, as
    delta-kernel-rs and Spark write with `writeStatsAsJson` off) is read here when the
    statistics themselves are wanted, e.g. to compare them with a `.crc`'s `allFiles`.

    Raises:
        UnusableCheckpointError: a file cannot be read as Parquet.
    """
    import pyarrow.parquet as pq  # here, not at module level: JSON-only logs never need it

    content = read_checkpoint(storage, checkpoint, file_actions=False)
    out: list[pa.Table] = []
    for path, fmt in content.file_sources:
        if fmt != "parquet":
            continue
        try:
            with storage.open_input(path) as fh:
                schema = pq.ParquetFile(fh).schema_arrow
        except (OSError, pa.ArrowInvalid) as exc:
            raise UnusableCheckpointError(
                f"checkpoint file cannot be read as Parquet: {exc}",
                table=storage.root, version=checkpoint.version, file=path,
            ) from exc
        if "add" not in schema.names:
            continue
        add = schema.field("add").type
        idx = add.get_field_index(STATS_PARSED)
        if idx < 0:
            continue
        target = pa.struct(
            [
                ADD_TYPE.field("path"),
                ADD_TYPE.field("deletionVector"),
                pa.field(STATS_PARSED, add.field(idx).type),
            ]
        )
        part = _read_parquet_actions(
            storage, path, checkpoint.version, add_type=target,
            remove_type=_NO_FIELDS, non_file_columns=(),
        )
        out.append(part.adds)
    return out


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
    import pyarrow.parquet as pq  # here, not at module level: JSON-only logs never need it

    table_uri = storage.root
    try:
        with storage.open_input(path) as fh:
            # A file the storage read whole (a small one on an object store) is decoded
            # from those bytes: one request for the file, not one more per row group.
            whole = fh.getvalue() if isinstance(fh, io.BytesIO) else None
            pf = pq.ParquetFile(fh)
            meta = pf.metadata
            schema = pf.schema_arrow
        require_add_column(schema, table=table_uri, version=version, file=path)
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
            if whole is not None:
                return pq.ParquetFile(pa.BufferReader(whole), metadata=meta).read_row_group(
                    i, columns=cols, use_threads=False
                )
            with storage.open_input(path) as handle:
                return pq.ParquetFile(handle, metadata=meta).read_row_group(
                    i, columns=cols, use_threads=False
                )

        n = meta.num_row_groups
        if n > 1:
            groups = io_map(read_group, range(n))
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
    nulls: dict[str, int | None] = {}
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
        if leaf in ("add.path", "add.stats"):
            nulls[leaf] = stats.null_count if stats is not None and stats.has_null_count else None
    if f"add.{STATS_PARSED}" in columns:
        json_nulls, path_nulls = nulls.get("add.stats"), nulls.get("add.path")
        if json_nulls is not None and json_nulls == path_nulls:
            # Every add of the group has JSON statistics: typed ones would fill nothing.
            columns = [c for c in columns if c != f"add.{STATS_PARSED}"]
    out = []
    for c in columns:
        top = c.split(".", 1)[0]
        # An action is present in the group when its path is (add, remove) or when any of
        # its leaves is (other actions).
        decisive = f"{top}.path" if top in ("add", "remove") else top
        if not all_null.get(decisive, all_null.get(top, False)):
            out.append(c)
    return out


def require_add_column(schema: pa.Schema, *, table: str, version: int, file: str) -> None:
    """Refuse a checkpoint Parquet file (a V1 file or part, a sidecar, a V2 top-level file
    without sidecars) that has no `add` column. Spark, deltalake and the kernels always
    write it, nulls where a row holds another action; a file that lost it would read as
    a table without live files, and VACUUM would delete them all.

    Raises:
        UnusableCheckpointError: the column is missing (readers fall back to an older
            checkpoint, or refuse).
    """
    if "add" not in schema.names and "sidecar" not in schema.names:
        raise UnusableCheckpointError(
            "checkpoint file has no `add` column (every writer writes one): it would read "
            "as holding no live files", table=table, version=version, file=file,
        )


def _action_columns(
    schema: pa.Schema, column: str, target: pa.StructType, *, typed_stats: bool = False
) -> list[str]:
    """The nested column paths of `column` that `target` wants and the file has; with
    `typed_stats`, also `add.stats_parsed` when `target` wants `stats` and the file has
    typed statistics (see `fill_stats_from_parsed`)."""
    if column not in schema.names:
        return []
    struct_type = schema.field(column).type
    out = [f"{column}.{f.name}" for f in target if struct_type.get_field_index(f.name) >= 0]
    if (
        typed_stats
        and column == "add"
        and target.get_field_index("stats") >= 0
        and struct_type.get_field_index(STATS_PARSED) >= 0
    ):
        out.append(f"add.{STATS_PARSED}")
    return out


def fill_stats_from_parsed(chunk: pa.StructArray) -> pa.StructArray:
    """Adds whose JSON `stats` is missing get it from their typed `stats_parsed`.

    Spec "Checkpoint Schema": a checkpoint written with `delta.checkpoint.writeStatsAsJson`
    off keeps a file's statistics only as `stats_parsed`; they are the same statistics, so
    whoever carries them on (the checkpoint writer) reads them as the JSON Spark would
    write (`protocol.stats_json`). The result has no `stats_parsed` field; a chunk without
    one is returned as it is.
    """
    typ = chunk.type
    idx = typ.get_field_index(STATS_PARSED)
    if idx < 0:
        return chunk
    parsed = chunk.field(idx)
    s_idx = typ.get_field_index("stats")
    stats = chunk.field(s_idx) if s_idx >= 0 else pa.nulls(len(chunk), pa.string())
    if stats.type != pa.string():
        stats = stats.cast(pa.string())
    need = pc.and_(pc.is_null(stats), pc.is_valid(parsed))
    if pc.any(need).as_py():
        stats = pc.coalesce(stats, stats_json(parsed))
    names = [f.name for f in typ if f.name not in ("stats", STATS_PARSED)]
    arrays = [chunk.field(n) for n in names] + [stats]
    mask = chunk.is_null() if chunk.null_count else None
    return pa.StructArray.from_arrays(arrays, names=[*names, "stats"], mask=mask)


def _file_action_table(
    tables: list[pa.Table], column: str, target: pa.StructType, *, typed_stats: bool = False
) -> pa.Table:
    """The rows of `column` (add or remove) that hold an action, as `target`, chunk by
    chunk (only chunks holding other actions are filtered; nothing is concatenated).
    With `typed_stats`, adds read with `stats_parsed` get their missing JSON `stats` from
    it (`fill_stats_from_parsed`)."""
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
            if typed_stats:
                chunk = fill_stats_from_parsed(chunk)
            out.append(conform(chunk, target))
    if not out:
        return empty_table(schema)
    return pa.Table.from_batches([pa.RecordBatch.from_struct_array(c) for c in out], schema=schema)
