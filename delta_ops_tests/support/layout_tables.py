"""Tables for the layout wing's tests (OPTIMIZE, PURGE), and the row readers that judge them.

- `LayoutSpec` + `build_layout_table(storage, spec)`: a table with `id long, value string`
  (plus `part string` when partitioned), column mapping none/name/id, row tracking, change
  data feed and deletion vectors as asked, built by appends of small files (partition values
  drawn from awkward ones: spaces, `=`, `%`, unicode, null) and inline-DV deletes, through
  delta_ops' own commit API. Ids are unique, so a row names itself.
- `layout_specs()`: a hypothesis strategy of specs.
- `our_rows(storage)`: every live row with its stable row ID and row commit version
  (materialized column when non-null, else `baseRowId` + physical index and
  `defaultRowCommitVersion`), deletion vectors applied, read with pyarrow and delta_ops'
  DV decoding.
- `deltalake_rows(storage)`: (id, value, part) rows read by `deltalake` (its DataFusion
  query engine over delta-kernel, which applies deletion vectors and column mapping).
"""

from __future__ import annotations

import io
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import strategies as st

from delta_ops.commit import Transaction, append_files, create_table
from delta_ops.log import load_snapshot
from delta_ops.protocol.deletion_vectors import (
    DeletionVectorDescriptor,
    inline_dv_bitmap,
    read_dv_from_file_bytes,
)
from delta_ops.protocol.schema import PrimitiveType, StructField, StructType
from delta_ops.storage import Storage
from delta_ops_tests.support.dv_writer import inline_descriptor
from delta_ops_tests.support.histories import StepClock

__all__ = [
    "AWKWARD_VALUES",
    "LayoutSpec",
    "build_layout_table",
    "deltalake_rows",
    "layout_specs",
    "our_rows",
]

#: Partition values that need escaping somewhere (None is the null partition).
AWKWARD_VALUES = ("a b", "x=y", "50%", "ünï", None, "plain")
_HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


@dataclass(frozen=True)
class LayoutSpec:
    """What `build_layout_table` builds.

    Attributes:
        partitioned: Partition by `part`.
        mapping: Column mapping mode: "none", "name" or "id".
        row_tracking: Enable row tracking at creation.
        cdf: Enable the change data feed.
        appends: Each append commit: a tuple of (rows, partition index) per file.
        deletes: Each DV commit: (live file index, row indexes to delete).
    """

    partitioned: bool = False
    mapping: str = "none"
    row_tracking: bool = False
    cdf: bool = False
    appends: tuple[tuple[tuple[int, int], ...], ...] = ()
    deletes: tuple[tuple[int, tuple[int, ...]], ...] = ()


def _schema(spec: LayoutSpec) -> StructType:
    names = ["id", "value"] + (["part"] if spec.partitioned else [])
    types = {"id": "long", "value": "string", "part": "string"}
    fields = []
    for i, name in enumerate(names, start=1):
        meta: dict[str, Any] = {}
        if spec.mapping != "none":
            meta = {"delta.columnMapping.id": i,
                    "delta.columnMapping.physicalName": f"col-{i}-{name}"}
        fields.append(StructField(name, PrimitiveType(types[name]), True, meta))
    return StructType(tuple(fields))


def _escape(value: str) -> str:
    """Hive-style escaping of a partition directory value (as Spark writes it)."""
    out = []
    for ch in value:
        if ch in '"#%\'*/:=?\\\x7f{[]^' or ord(ch) < 32:
            out.append(f"%{ord(ch):02X}")
        else:
            out.append(ch)
    return "".join(out)


def build_layout_table(storage: Storage, spec: LayoutSpec) -> int:
    """Create the table and commit the appends then the deletes; returns the next id."""
    clock = StepClock()
    config: dict[str, str] = {"delta.enableDeletionVectors": "true"}
    if spec.mapping != "none":
        config["delta.columnMapping.mode"] = spec.mapping
        config["delta.columnMapping.maxColumnId"] = "3"
    if spec.row_tracking:
        config["delta.enableRowTracking"] = "true"
    if spec.cdf:
        config["delta.enableChangeDataFeed"] = "true"
    schema = _schema(spec)
    create_table(storage, schema, ["part"] if spec.partitioned else [], config, clock=clock)
    phys = {f.name: (f.physical_name if spec.mapping != "none" else f.name)
            for f in schema.fields}
    ids = {f.name: f.field_id for f in schema.fields}
    next_id = 0
    for commit in spec.appends:
        adds = []
        for rows, part_index in commit:
            values = list(range(next_id, next_id + rows))
            next_id += rows
            id_field = pa.field(phys["id"], pa.int64())
            value_field = pa.field(phys["value"], pa.string())
            if spec.mapping == "id":
                id_field = id_field.with_metadata({b"PARQUET:field_id": str(ids["id"]).encode()})
                value_field = value_field.with_metadata(
                    {b"PARQUET:field_id": str(ids["value"]).encode()})
            table = pa.table([pa.array(values, pa.int64()), pa.array([f"v{i}" for i in values])],
                             schema=pa.schema([id_field, value_field]))
            buf = io.BytesIO()
            pq.write_table(table, buf, compression="snappy")
            data = buf.getvalue()
            pv: dict[str, str | None] = {}
            directory = ""
            if spec.partitioned:
                value = AWKWARD_VALUES[part_index % len(AWKWARD_VALUES)]
                pv = {phys["part"]: value}
                directory = f"{phys['part']}={_HIVE_NULL if value is None else _escape(value)}/"
            key = f"{directory}part-00000-{uuid.uuid4()}-c000.snappy.parquet"
            storage.put_atomic(key, data)
            stats = {"numRecords": rows}
            if rows:
                stats.update(minValues={phys["id"]: values[0], phys["value"]: min(
                    f"v{i}" for i in values)}, maxValues={phys["id"]: values[-1], phys[
                        "value"]: max(f"v{i}" for i in values)},
                    nullCount={phys["id"]: 0, phys["value"]: 0})
            adds.append({"path": quote(key, safe="/="), "partitionValues": pv,
                         "size": len(data), "modificationTime": clock(), "dataChange": True,
                         "stats": orjson.dumps(stats).decode()})
        if adds:
            append_files(storage, adds, clock=clock)
    for index, rows in spec.deletes:
        live = sorted(load_snapshot(storage).files.to_pylist(),
                      key=lambda r: (r["modificationTime"], r["path"]))
        if not live:
            break
        add = live[index % len(live)]
        n = orjson.loads(add["stats"])["numRecords"] if add.get("stats") else 0
        old = set(_deleted(storage, add))
        new_rows = sorted(old | {r % n for r in rows}) if n else []
        if not new_rows or set(new_rows) == old:
            continue
        body = {k: v for k, v in add.items() if v is not None}
        body["partitionValues"] = dict(body["partitionValues"])
        if "tags" in body:
            body["tags"] = dict(body["tags"])
        rm = {"path": add["path"], "deletionTimestamp": clock(), "dataChange": True,
              "extendedFileMetadata": True, "partitionValues": body["partitionValues"],
              "size": add["size"]}
        if add.get("deletionVector") and add["deletionVector"].get("storageType"):
            rm["deletionVector"] = {k: v for k, v in add["deletionVector"].items()
                                    if v is not None}
        new = dict(body)
        new["deletionVector"] = inline_descriptor(new_rows).to_dict()
        new["dataChange"] = True
        Transaction(storage, operation="DELETE", clock=clock).remove_files([rm]).add_files(
            [new]).commit()
    return next_id


def _deleted(storage: Storage, add: dict[str, Any]) -> list[int]:
    dv = add.get("deletionVector")
    if not dv or dv.get("storageType") is None:
        return []
    d = DeletionVectorDescriptor.from_dict({k: v for k, v in dv.items() if v is not None})
    if d.is_inline:
        return list(inline_dv_bitmap(d))
    path = d.relative_path()
    if path is None:
        raise ValueError(f"absolute DV paths are not read here: {dv}")
    return list(read_dv_from_file_bytes(storage.read(path), d.offset, d.size_in_bytes,
                                        file=path))


def our_rows(storage: Storage) -> list[tuple]:
    """Sorted (id, value, part, stable row ID, stable row commit version) of every live row
    (row tracking values None when the table has none). Column mapping by physical name."""
    from urllib.parse import unquote

    snap = load_snapshot(storage)
    cfg = snap.metadata.configuration
    mode = cfg.get("delta.columnMapping.mode", "none")
    phys = {f.name: (f.physical_name if mode != "none" else f.name) for f in snap.schema.fields}
    rid_col = cfg.get("delta.rowTracking.materializedRowIdColumnName")
    rcv_col = cfg.get("delta.rowTracking.materializedRowCommitVersionColumnName")
    out = []
    adds = snap.files.to_pylist()
    # The files are fetched 8 at a time: on the moto server one GET after another was most
    # of a read of a few hundred small files.
    with ThreadPoolExecutor(8) as pool:
        bodies = pool.map(lambda add: storage.read(unquote(add["path"])), adds)
        for add, body in zip(adds, bodies, strict=True):
            out.extend(_rows_of(storage, add, pq.read_table(pa.BufferReader(body)), phys,
                                rid_col, rcv_col))
    return sorted(out, key=repr)


def _rows_of(storage: Storage, add: dict[str, Any], data: pa.Table, phys: dict[str, str],
             rid_col: str | None, rcv_col: str | None) -> list[tuple]:
    """`our_rows`' tuples of one live file read as `data`."""
    out = []
    pv = dict(add["partitionValues"] or [])
    deleted = set(_deleted(storage, add))
    ids = data.column(phys["id"]).to_pylist()
    values = data.column(phys["value"]).to_pylist()
    mat_ids = (data.column(rid_col).to_pylist() if rid_col in data.column_names
               else [None] * data.num_rows)
    mat_vs = (data.column(rcv_col).to_pylist() if rcv_col in data.column_names
              else [None] * data.num_rows)
    base, default_v = add.get("baseRowId"), add.get("defaultRowCommitVersion")
    for i in range(data.num_rows):
        if i in deleted:
            continue
        row_id = mat_ids[i] if mat_ids[i] is not None else (
            None if base is None else base + i)
        row_v = mat_vs[i] if mat_vs[i] is not None else default_v
        out.append((ids[i], values[i], pv.get(phys.get("part", "part")), row_id, row_v))
    return out


def deltalake_rows(storage: Storage) -> list[tuple]:
    """Sorted (id, value, part) rows as `deltalake` reads the table (DVs applied)."""
    import deltalake
    from deltalake import QueryBuilder

    t = deltalake.DeltaTable(storage.root)
    names = [f.name for f in t.schema().fields]
    cols = ", ".join(f'"{n}"' for n in names)
    result = pa.table(QueryBuilder().register("t", t).execute(f"select {cols} from t")
                      .read_all())
    data = result.to_pydict()
    n = result.num_rows
    parts = data.get("part", [None] * n)
    return sorted(zip(data["id"], data["value"], parts, strict=True), key=repr)


def layout_specs(*, max_appends: int = 4) -> st.SearchStrategy[LayoutSpec]:
    """Specs over every option (partitioning, column mapping, row tracking, CDF, DVs)."""

    @st.composite
    def build(draw: Any) -> LayoutSpec:
        appends = draw(st.lists(
            st.lists(st.tuples(st.integers(0, 6), st.integers(0, len(AWKWARD_VALUES) - 1)),
                     min_size=1, max_size=4).map(tuple),
            min_size=1, max_size=max_appends).map(tuple))
        deletes = draw(st.lists(
            st.tuples(st.integers(0, 30),
                      st.lists(st.integers(0, 10), min_size=1, max_size=4).map(tuple)),
            max_size=4).map(tuple))
        return LayoutSpec(
            partitioned=draw(st.booleans()),
            mapping=draw(st.sampled_from(["none", "name", "id"])),
            row_tracking=draw(st.booleans()),
            cdf=draw(st.booleans()),
            appends=appends,
            deletes=deletes,
        )

    return build()
