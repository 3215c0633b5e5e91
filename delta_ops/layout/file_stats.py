"""Statistics of one data file, read from its Parquet data row group by row group.

Spec sections: "Per-file Statistics", "Column Mapping" (physical names; in `id` mode a
column is found by its Parquet field id when its name differs), "Deletion Vectors" (the
rows a DV marks are not valid rows) and "Add File and Remove File" (paths are URIs
relative to the table root).

`file_stats(storage, config, add)` opens the file's Parquet data, reads only the top-level
columns statistics are collected for, one row group at a time (memory follows the row
group), and feeds `StatsCollector`. `numRecords` is always the file's physical row count
(the spec's, what a deletion vector's cardinality is subtracted from). With a deletion
vector the other statistics are taken over the valid rows only, so they are tight (Delta
Spark's COMPUTE STATS commits tight bounds even when DVs are present); `apply_dv=False`
takes them over every physical row with `tightBounds` false instead (wide bounds).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from delta_ops.errors import DeletionVectorError, StatsReadError, StorageError
from delta_ops.layout.field_match import file_mismatch
from delta_ops.layout.statistics import StatsCollector
from delta_ops.protocol.deletion_vectors import (
    DeletionVectorDescriptor,
    inline_dv_bitmap,
    read_dv_from_file_bytes,
)
from delta_ops.protocol.path_identity import relative_key
from delta_ops.protocol.table_configuration import TableConfiguration
from delta_ops.storage import Storage

__all__ = ["StatsReadError", "deleted_rows", "file_stats"]

_FIELD_ID = b"PARQUET:field_id"


def _key(storage: Storage, path: str, what: str, table: str | None) -> str:
    key = relative_key(path, storage.root)
    if key is None:
        raise StatsReadError(f"{what} is not inside the table root", table=table, file=path)
    return key


def deleted_rows(
    storage: Storage, dv: Mapping[str, Any], *, table: str | None = None
) -> np.ndarray:
    """The sorted row indexes a deletion vector descriptor marks deleted (uint64)."""
    d = DeletionVectorDescriptor.from_dict(dv)
    if d.is_inline:
        bitmap = inline_dv_bitmap(d)
    else:
        uri = d.absolute_path(storage.root)
        assert uri is not None
        key = _key(storage, uri, "deletion vector file", table)
        assert d.offset is not None
        data = storage.read(key)
        bitmap = read_dv_from_file_bytes(
            data, d.offset, d.size_in_bytes, expected_cardinality=d.cardinality, file=key
        )
    return np.frombuffer(bitmap.to_array(), dtype=np.uint64)


def _columns(pf: Any, wanted: list[str], by_id: Mapping[str, int]) -> dict[str, str]:
    """Physical column name -> the file's column name (same name, or same field id)."""
    schema = pf.schema_arrow
    names = set(schema.names)
    ids = {}
    for f in schema:
        if f.metadata and _FIELD_ID in f.metadata:
            ids[int(f.metadata[_FIELD_ID])] = f.name
    out: dict[str, str] = {}
    for name in wanted:
        if name in names:
            out[name] = name
        elif name in by_id and by_id[name] in ids:
            out[name] = ids[by_id[name]]
    return out


def file_stats(
    storage: Storage,
    config: TableConfiguration,
    add: Mapping[str, Any],
    *,
    apply_dv: bool = True,
) -> str:
    """The `stats` JSON of the file an `add` action names, computed from its data.

    Args:
        storage: the table's storage.
        config: the table's configuration (which columns, column mapping).
        add: the `add` action (its `path` and `deletionVector`).
        apply_dv: take min/max/nullCount over the valid rows (tight bounds); False takes
            them over every physical row and marks them wide.

    Raises:
        StatsReadError: the file or its deletion vector cannot be read (names the table
            and the file).
    """
    import pyarrow.parquet as pq

    table = storage.root
    path = add["path"]
    dv = add.get("deletionVector")
    deleted = None
    if dv and apply_dv:
        try:
            deleted = deleted_rows(storage, dv, table=table)
        except (StorageError, DeletionVectorError) as exc:
            raise StatsReadError(
                f"cannot read the deletion vector of the data file: {exc}",
                table=table, file=path,
            ) from exc
    collector = StatsCollector(config, tight_bounds=not (dv and not apply_dv))
    top = {p[0] for p in collector.columns}
    by_id = _top_level_ids(config)
    key = _key(storage, path, "data file", table)
    try:
        with storage.open_input(key) as fh:
            pf = pq.ParquetFile(fh)
            problem = file_mismatch(pf.schema_arrow, _stats_schema(config, top),
                                    config.column_mapping_mode)
            if problem is not None:
                raise StatsReadError(
                    f"{problem}: statistics read by name would not describe what readers "
                    "read, so none are computed", table=table, file=path)
            mapping = _columns(pf, sorted(top), by_id)
            file_cols = sorted(set(mapping.values()))
            start = 0
            for i in range(pf.num_row_groups):
                rg = pf.read_row_group(i, columns=file_cols)
                rg = rg.rename_columns(
                    [next((k for k, v in mapping.items() if v == n), n) for n in rg.column_names]
                )
                n = pf.metadata.row_group(i).num_rows
                if rg.num_rows != n:  # no column read: a table of no columns has no rows
                    rg = pa.table({"__rows__": pa.nulls(n)})
                collector.update(rg, valid=_valid(deleted, start, n))
                start += n
    except (OSError, pa.ArrowException, StorageError) as exc:
        raise StatsReadError(
            f"cannot read the data file to compute statistics: {exc}", table=table, file=path,
        ) from exc
    return collector.to_json()


def _valid(deleted: np.ndarray | None, start: int, n: int) -> pa.Array | None:
    if deleted is None or not len(deleted):
        return None
    lo, hi = np.searchsorted(deleted, [start, start + n])
    if lo == hi:
        return None
    mask = np.ones(n, dtype=bool)
    mask[(deleted[lo:hi] - np.uint64(start)).astype(np.int64)] = False
    return pa.array(mask)


def _stats_schema(config: TableConfiguration, top: set[str]) -> pa.Schema:
    """The Arrow schema (physical names, field ids) of the top-level columns in `top`."""
    from delta_ops.protocol.schema import to_arrow

    if config.schema is None:
        return pa.schema([])
    full = to_arrow(config.schema, physical=True, mode=config.column_mapping_mode)
    return pa.schema([f for f in full if f.name in top])


def _top_level_ids(config: TableConfiguration) -> dict[str, int]:
    """Physical name -> field id of the top-level columns (column mapping `id` mode)."""
    schema = config.schema
    if schema is None or config.column_mapping_mode == "none":
        return {}
    return {
        f.physical_name: f.field_id for f in schema.fields if f.field_id is not None
    }
