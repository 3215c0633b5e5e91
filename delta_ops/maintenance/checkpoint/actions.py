"""Checkpoint rows, built columnar: non-file actions, and file actions in batches.

Spec sections: "Checkpoint Schema" (one struct column per action; `add.partitionValues_parsed`
and `add.stats_parsed` typed from the table schema, physical names under column mapping;
`remove` without stats and tags; readerFeatures/writerFeatures values), "Checkpoints"
(which actions a checkpoint holds: protocol, metadata, live adds, unexpired tombstones,
transaction identifiers, domain metadata; never commitInfo or cdc), "Checkpoint Metadata",
"Sidecar File Information".

File actions never become Python objects (except for the JSON top-level file of a V2
checkpoint with embedded actions, which is serialized a batch at a time): the live files of
the snapshot are sliced into record batches, typed columns are parsed per batch with Arrow
kernels (partition values: once per distinct value; statistics: Arrow's JSON reader).
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from delta_ops.errors import CorruptLogError
from delta_ops.log import Snapshot
from delta_ops.protocol.actions import conform
from delta_ops.protocol.arrays import from_pylist
from delta_ops.protocol.checkpoint_schema import (
    CHECKPOINT_METADATA_TYPE,
    CHECKPOINT_REMOVE_TYPE,
    DOMAIN_METADATA_TYPE,
    METADATA_TYPE,
    PARTITION_VALUES_PARSED,
    PROTOCOL_TYPE,
    SIDECAR_TYPE,
    STATS_PARSED,
    TXN_TYPE,
    CheckpointLayout,
)
from delta_ops.protocol.schema import (
    UnsupportedTypeError,
    is_variant_field,
    partition_value_to_arrow,
)
from delta_ops.protocol.variant import InvalidVariantError, decode_variant_stat

#: Rows per record batch (and Parquet row group) of file actions.
BATCH_ROWS = 100_000

# ---- non-file actions ----------------------------------------------------------------------


def _string(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


def _string_map(value: Any) -> list[tuple[str, str | None]] | None:
    if value is None:
        return None
    if isinstance(value, Mapping):
        return [(str(k), _string(v)) for k, v in value.items()]
    return [(str(k), _string(v)) for k, v in value]


def checkpoint_protocol(protocol: Mapping[str, Any], layout: CheckpointLayout) -> dict[str, Any]:
    """The protocol as a checkpoint row holds it: feature lists non-null exactly where the
    spec requires them (reader version 3 / writer version 7), null otherwise."""
    reader = protocol.get("readerFeatures")
    writer = protocol.get("writerFeatures")
    return {
        "minReaderVersion": protocol.get("minReaderVersion"),
        "minWriterVersion": protocol.get("minWriterVersion"),
        "readerFeatures": list(reader or []) if layout.reader_features_required else None,
        "writerFeatures": list(writer or []) if layout.writer_features_required else None,
    }


def checkpoint_metadata_row(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The metaData action restricted to the checkpoint's fields, maps as string maps."""
    fmt = metadata.get("format") or {"provider": "parquet", "options": {}}
    return {
        "id": _string(metadata.get("id")),
        "name": _string(metadata.get("name")),
        "description": _string(metadata.get("description")),
        "format": {
            "provider": _string(fmt.get("provider")),
            "options": _string_map(fmt.get("options") or {}),
        },
        "schemaString": _string(metadata.get("schemaString")),
        "partitionColumns": [str(c) for c in metadata.get("partitionColumns") or []],
        "configuration": _string_map(metadata.get("configuration") or {}),
        "createdTime": metadata.get("createdTime"),
    }


def non_file_columns(
    snapshot: Snapshot,
    layout: CheckpointLayout,
    *,
    checkpoint_version: int | None = None,
    sidecars: list[dict[str, Any]] | None = None,
) -> dict[str, pa.Array]:
    """The non-file actions of a checkpoint, one array per action column.

    V2 checkpoints (`checkpoint_version` given) start with their checkpointMetadata, then
    their sidecar actions; then come protocol, metaData, txns and live domain metadata.
    """
    out: dict[str, pa.Array] = {}
    if checkpoint_version is not None:
        out["checkpointMetadata"] = from_pylist(
            [{"version": checkpoint_version, "tags": None}], CHECKPOINT_METADATA_TYPE
        )
        rows = [
            {
                "path": s["path"],
                "sizeInBytes": s["sizeInBytes"],
                "modificationTime": s["modificationTime"],
                "tags": _string_map(s.get("tags")),
            }
            for s in sidecars or []
        ]
        out["sidecar"] = from_pylist(rows, SIDECAR_TYPE)
    out["protocol"] = from_pylist([checkpoint_protocol(snapshot.protocol, layout)], PROTOCOL_TYPE)
    out["metaData"] = from_pylist(
        [checkpoint_metadata_row(snapshot.metadata.raw)], METADATA_TYPE
    )
    txns = sorted(snapshot.txns.values(), key=lambda t: t.app_id)
    out["txn"] = from_pylist(
        [{"appId": t.app_id, "version": t.version, "lastUpdated": t.last_updated} for t in txns],
        TXN_TYPE,
    )
    domains = sorted(snapshot.domains.values(), key=lambda d: d.domain)
    out["domainMetadata"] = from_pylist(
        [{"domain": d.domain, "configuration": d.configuration, "removed": False} for d in domains],
        DOMAIN_METADATA_TYPE,
    )
    return out


def non_file_batch(columns: Mapping[str, pa.Array], schema: pa.Schema) -> pa.RecordBatch:
    """One record batch holding every non-file action, each on its own row."""
    pieces: list[pa.RecordBatch] = []
    for name, arr in columns.items():
        if not len(arr):
            continue
        pieces.append(single_column_batch(name, arr, schema))
    if not pieces:
        return pa.RecordBatch.from_pylist([], schema=schema)
    if len(pieces) == 1:
        return pieces[0]
    return pa.Table.from_batches(pieces, schema=schema).combine_chunks().to_batches()[0]


def _has_required(data_type: pa.DataType) -> bool:
    return pa.types.is_struct(data_type) and any(
        not f.nullable or _has_required(f.type) for f in data_type
    )


def null_array(n: int, data_type: pa.DataType) -> pa.Array:
    """`n` nulls of `data_type`, whose non-nullable struct children hold no null.

    Parquet writers refuse a null in a required column even below a null parent; the only
    required columns in checkpoints are the `value` and `metadata` of variant statistics.
    """
    if not _has_required(data_type):
        return pa.nulls(n, data_type)
    children = [
        null_array(n, f.type) if f.nullable else pc.cast(pa.repeat(pa.scalar(b""), n), f.type)
        for f in data_type
    ]
    mask = pa.array([True] * n, pa.bool_())
    return pa.StructArray.from_arrays(children, fields=list(data_type), mask=mask)


def single_column_batch(name: str, arr: pa.Array, schema: pa.Schema) -> pa.RecordBatch:
    """A batch of `schema` whose column `name` is `arr` and every other column null."""
    n = len(arr)
    return pa.RecordBatch.from_arrays(
        [arr if f.name == name else null_array(n, f.type) for f in schema], schema=schema
    )


def _as_dict(value: Any) -> dict[str, Any]:
    """A string map as read from JSON (dict) or from Parquet (list of pairs), as a dict."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return {str(k): _string(v) for k, v in value.items()}
    return {str(k): _string(v) for k, v in value}


def json_protocol(protocol: Mapping[str, Any]) -> dict[str, Any]:
    """The protocol action as a JSON object (nulls left out)."""
    return {k: v for k, v in protocol.items() if v is not None}


def json_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The metaData action as a JSON object: maps as objects (a metaData read from a
    Parquet checkpoint holds them as lists of pairs), nulls left out."""
    out: dict[str, Any] = {}
    for key, value in metadata.items():
        if value is None:
            continue
        if key == "configuration":
            value = _as_dict(value)
        elif key == "format" and isinstance(value, Mapping):
            value = {
                **{k: v for k, v in value.items() if v is not None},
                "options": _as_dict(value.get("options")),
            }
        out[key] = value
    out.setdefault("format", {"provider": "parquet", "options": {}})
    out.setdefault("configuration", {})
    return out


def non_file_dicts(
    snapshot: Snapshot,
    *,
    checkpoint_version: int | None = None,
    sidecars: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The non-file actions as JSON objects (V2 JSON top-level file, `_last_checkpoint`)."""
    out: list[dict[str, Any]] = []
    if checkpoint_version is not None:
        out.append({"checkpointMetadata": {"version": checkpoint_version}})
        out.extend({"sidecar": dict(s)} for s in sidecars or [])
    out.append({"protocol": json_protocol(snapshot.protocol)})
    out.append({"metaData": json_metadata(snapshot.metadata.raw)})
    for t in sorted(snapshot.txns.values(), key=lambda t: t.app_id):
        out.append({"txn": t.to_dict()})
    for d in sorted(snapshot.domains.values(), key=lambda d: d.domain):
        out.append({"domainMetadata": d.to_dict()})
    return out


# ---- file actions ----------------------------------------------------------------------------


def _column(batch: pa.RecordBatch | pa.Table, name: str) -> pa.Array:
    col = batch.column(name)
    if isinstance(col, pa.ChunkedArray):
        return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return col


def parse_partition_values(partition_values: pa.Array, layout: CheckpointLayout) -> pa.StructArray:
    """`add.partitionValues_parsed`: each partition value cast to its column's type.

    Values are parsed once per distinct value. A value that does not parse becomes null (as
    Spark's non-ANSI cast does).
    """
    assert layout.partition_values_parsed is not None
    children = []
    for key, delta_type, field in zip(
        layout.partition_keys,
        layout.partition_types,
        layout.partition_values_parsed,
        strict=True,
    ):
        strings = pc.map_lookup(partition_values, key, "first")
        encoded = pc.dictionary_encode(strings)
        parsed = []
        for value in encoded.dictionary.to_pylist():
            try:
                parsed.append(partition_value_to_arrow(value, delta_type))
            except (CorruptLogError, UnsupportedTypeError):
                parsed.append(None)
        values = pa.array(parsed, type=field.type)
        children.append(values.take(encoded.indices))
    return pa.StructArray.from_arrays(children, fields=list(layout.partition_values_parsed))


def _json_read_type(t: pa.DataType) -> pa.DataType:
    """The type Arrow's JSON reader is asked for: dates come as strings and are cast after;
    variant statistics are Z85 strings, decoded after."""
    if pa.types.is_struct(t):
        return pa.struct(
            [
                pa.field(f.name, pa.string() if is_variant_field(f) else _json_read_type(f.type))
                for f in t
            ]
        )
    if pa.types.is_date32(t):
        return pa.string()
    return t


def _variant_stats(texts: pa.Array, target: pa.Field) -> pa.StructArray:
    """Z85 variant statistics (spec "Statistics for Variant Columns") as Parquet variants.

    A value that is not a Z85-encoded variant becomes null (it carries no usable bound).
    """
    metadata: list[bytes] = []
    values: list[bytes] = []
    valid: list[bool] = []
    for text in texts.to_pylist():
        decoded = None
        if isinstance(text, str):
            try:
                decoded = decode_variant_stat(text)
            except InvalidVariantError:
                decoded = None
        valid.append(decoded is not None)
        m, v = decoded if decoded is not None else (b"", b"")
        metadata.append(m)
        values.append(v)
    children = {"metadata": pa.array(metadata, pa.binary()), "value": pa.array(values, pa.binary())}
    fields = list(target.type)
    mask = pc.invert(pa.array(valid, pa.bool_())) if not all(valid) else None
    return pa.StructArray.from_arrays([children[f.name] for f in fields], fields=fields, mask=mask)


def _cast_read(arr: pa.Array, target: pa.DataType) -> pa.Array:
    if arr.type == target:
        return arr
    if pa.types.is_struct(target):
        flat = arr.flatten()
        children = []
        for f in target:
            child = flat[arr.type.get_field_index(f.name)]
            if is_variant_field(f) and not pa.types.is_struct(child.type):
                children.append(_variant_stats(child, f))
            else:
                children.append(_cast_read(child, f.type))
        mask = arr.is_null() if arr.null_count else None
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
    return pc.cast(arr, target, safe=False)


def _read_stats_lines(data: pa.Buffer | bytes, read_schema: pa.Schema, n: int) -> pa.Table:
    block = max(1 << 20, 2 * (len(data) // max(n, 1)) + 1024)
    table = pj.read_json(
        pa.BufferReader(data) if isinstance(data, pa.Buffer) else io.BytesIO(data),
        read_options=pj.ReadOptions(use_threads=True, block_size=block),
        parse_options=pj.ParseOptions(
            explicit_schema=read_schema,
            unexpected_field_behavior="ignore",
            newlines_in_values=False,
        ),
    )
    if table.num_rows != n:
        raise pa.ArrowInvalid(f"expected {n} statistics rows, read {table.num_rows}")
    return table


def parse_stats(stats: pa.Array, target: pa.StructType) -> pa.StructArray:
    """`add.stats_parsed`: the JSON statistics read into `target` (null where stats are
    missing or do not fit the type)."""
    n = len(stats)
    read_type = _json_read_type(target)
    read_schema = pa.schema(list(read_type))
    empty = pc.or_kleene(pc.is_null(stats), pc.equal(stats, ""))
    filled = pc.if_else(empty, pa.scalar("{}"), stats)
    if filled.type != pa.string():
        filled = filled.cast(pa.string())
    # One line per row: value + "\n"; the joined array's data buffer is the whole document.
    lines = pc.binary_join_element_wise(filled, "", "\n")
    if n:
        offsets = np.frombuffer(lines.buffers()[1], np.int32, count=n + 1, offset=lines.offset * 4)
        data = lines.buffers()[2].slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    else:
        data = pa.py_buffer(b"")
    mask = empty
    try:
        table = _read_stats_lines(data, read_schema, n)
        arr = pa.StructArray.from_arrays(
            [_column(table, f.name) for f in read_type], fields=list(read_type)
        )
        arr = _cast_read(arr, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        arr, bad = _parse_stats_rows(filled, read_schema, target)
        mask = pc.or_(mask, bad)
    return pa.StructArray.from_arrays(
        arr.flatten(), fields=list(target), mask=mask if pc.any(mask).as_py() else None
    )


def _parse_stats_rows(
    filled: pa.Array, read_schema: pa.Schema, target: pa.StructType
) -> tuple[pa.StructArray, pa.Array]:
    """Slow path: one row at a time, so that one malformed statistics string only loses
    its own row."""
    pieces: list[pa.StructArray] = []
    bad: list[bool] = []
    null_row = null_array(1, target)
    for text in filled.to_pylist():
        try:
            t = _read_stats_lines(text.encode("utf-8") + b"\n", read_schema, 1)
            row = pa.StructArray.from_arrays(
                [_column(t, f.name) for f in read_schema], fields=list(read_schema)
            )
            pieces.append(_cast_read(row, target))
            bad.append(False)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            pieces.append(null_row)
            bad.append(True)
    if not pieces:
        return pa.array([], target), pa.array([], pa.bool_())
    return pa.concat_arrays(pieces), pa.array(bad, pa.bool_())


#: The fields every `add` action has (spec "Add File and Remove File": required).
REQUIRED_ADD_FIELDS = ("path", "partitionValues", "size", "modificationTime", "dataChange")


def require_add_fields(batch: pa.RecordBatch | pa.Table) -> None:
    """Refuse to publish a live file whose action lacks a field the protocol requires (a
    checkpoint holding it would stop readers that load the table from it, as deltalake
    does).

    Raises:
        CorruptLogError: names the file and the missing field (no table or version: the
            checkpoint writer adds them).
    """
    for name in REQUIRED_ADD_FIELDS:
        col = _column(batch, name)
        if col.null_count:
            at = pc.index(pc.is_null(col), True).as_py()
            path = _column(batch, "path")[at].as_py() if name != "path" else None
            raise CorruptLogError(
                f"the live file {path!r} has no {name}, which every add action must "
                "have (spec \"Add File and Remove File\"), so no checkpoint is written "
                "that would carry it" if path is not None else
                "a live file has no path, which every add action must have (spec \"Add "
                "File and Remove File\"), so no checkpoint is written that would carry it")


def add_struct(batch: pa.RecordBatch | pa.Table, layout: CheckpointLayout) -> pa.StructArray:
    """The `add` column of a batch of live files (ADD_SCHEMA rows).

    Raises:
        CorruptLogError: a live file lacks a field the protocol requires
            (`require_add_fields`).
    """
    require_add_fields(batch)
    children = []
    for f in layout.add:
        if f.name == PARTITION_VALUES_PARSED:
            children.append(parse_partition_values(_column(batch, "partitionValues"), layout))
        elif f.name == STATS_PARSED:
            assert layout.stats_parsed is not None
            children.append(parse_stats(_column(batch, "stats"), layout.stats_parsed))
        else:
            col = _column(batch, f.name)
            children.append(col if col.type == f.type else conform(col, f.type))
    return pa.StructArray.from_arrays(children, fields=list(layout.add))


def remove_struct(batch: pa.RecordBatch | pa.Table) -> pa.StructArray:
    """The `remove` column of a batch of tombstones (REMOVE_SCHEMA rows)."""
    children = []
    for f in CHECKPOINT_REMOVE_TYPE:
        col = _column(batch, f.name)
        children.append(col if col.type == f.type else conform(col, f.type))
    return pa.StructArray.from_arrays(children, fields=list(CHECKPOINT_REMOVE_TYPE))


def iter_slices(
    table: pa.Table, start: int, stop: int, rows: int | None = None
) -> Iterator[pa.RecordBatch]:
    """`table[start:stop]` as record batches of `rows` rows (the last one shorter): a
    zero-copy view when a slice lies in one chunk, a copy of just that slice otherwise.
    `rows` defaults to BATCH_ROWS."""
    rows = rows or BATCH_ROWS
    pos = start
    while pos < stop:
        n = min(rows, stop - pos)
        part = table.slice(pos, n)
        if part.num_columns and part.column(0).num_chunks != 1:
            part = part.combine_chunks()
        yield from part.to_batches()
        pos += n


def file_action_batches(
    files: pa.Table,
    tombstones: pa.Table,
    layout: CheckpointLayout,
    schema: pa.Schema,
    *,
    start: int = 0,
    stop: int | None = None,
    rows: int | None = None,
) -> Iterator[pa.RecordBatch]:
    """Record batches of `schema` for file actions `start:stop`, counting the live files
    first and the tombstones after them (a sidecar takes one such range)."""
    num_adds = files.num_rows
    total = num_adds + tombstones.num_rows
    stop = total if stop is None else min(stop, total)
    if start < num_adds:
        for part in iter_slices(files, start, min(stop, num_adds), rows):
            yield single_column_batch("add", add_struct(part, layout), schema)
    if stop > num_adds:
        for part in iter_slices(tombstones, max(start, num_adds) - num_adds, stop - num_adds, rows):
            yield single_column_batch("remove", remove_struct(part), schema)


# ---- JSON (V2 top-level file) ----------------------------------------------------------------


def _json_file_action(row: dict[str, Any]) -> dict[str, Any]:
    """A file action row as the JSON log writes it: absent (null) fields left out, also in
    the deletion vector; maps (partitionValues, tags) kept whole, null values included."""
    out = {k: v for k, v in row.items() if v is not None}
    dv = out.get("deletionVector")
    if isinstance(dv, dict):
        out["deletionVector"] = {k: v for k, v in dv.items() if v is not None}
    return out


def carries_stats(layout: CheckpointLayout) -> bool:
    """Whether a checkpoint of this layout carries file statistics in some form (JSON
    `stats`, typed `stats_parsed`); both table properties off leave them out."""
    return layout.stats_as_json or layout.stats_parsed is not None


def json_file_action_lines(
    files: pa.Table, tombstones: pa.Table, layout: CheckpointLayout, rows: int | None = None
) -> Iterator[bytes]:
    """Newline-terminated JSON lines of every live file then every tombstone (adds with
    their JSON `stats` whenever the layout carries statistics: see below)."""
    add_fields = [
        f.name for f in layout.add if f.name not in (PARTITION_VALUES_PARSED, STATS_PARSED)
    ]
    if "stats" not in add_fields and carries_stats(layout):
        # A JSON file cannot hold typed statistics: it keeps them as JSON when the table
        # asks for the struct only (`writeStatsAsJson` off), so none are lost.
        at = add_fields.index("dataChange") + 1 if "dataChange" in add_fields else 0
        add_fields.insert(at, "stats")
    remove_fields = [f.name for f in CHECKPOINT_REMOVE_TYPE]
    for table, name, fields in ((files, "add", add_fields), (tombstones, "remove", remove_fields)):
        for part in iter_slices(table, 0, table.num_rows, rows):
            if name == "add":
                require_add_fields(part)
            for row in part.select(fields).to_pylist(maps_as_pydicts="strict"):
                yield orjson.dumps({name: _json_file_action(row)}) + b"\n"


def json_lines(objs: Iterable[Mapping[str, Any]]) -> Iterator[bytes]:
    for obj in objs:
        yield orjson.dumps(obj) + b"\n"
