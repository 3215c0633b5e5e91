"""OPTIMIZE, then PURGE, then COMPUTE STATS on a copy of every corpus table that allows
writes (the gate passes, every live file and deletion vector is there): `deltalake` reads
the same rows afterwards
(or, where deltalake cannot read the table, our reading of the files with deletion vectors
applied does), the files OPTIMIZE wrote carry the statistics their data gives, no live file
keeps a deletion vector, our snapshot equals the independent
replay (`support/oracle.py`) and a `.crc` written now agrees with that replay. Every other
table is refused with an error naming the table (a feature by name, or the missing file)."""

from __future__ import annotations

import json
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from delta_ops.errors import DeltaOpsError, UnsupportedFeatureError
from delta_ops.layout.commit import ensure_layout_supported
from delta_ops.layout.file_stats import file_stats
from delta_ops.layout.optimize import optimize
from delta_ops.layout.purge import purge
from delta_ops.layout.stats import compute_stats
from delta_ops.log import load_snapshot
from delta_ops.maintenance.checksum import write_checksum
from delta_ops.protocol.deletion_vectors import (
    DeletionVectorDescriptor,
    inline_dv_bitmap,
    read_dv_from_file_bytes,
)
from delta_ops.protocol.filenames import LOG_DIR, checksum_name
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import all_corpus_tables
from delta_ops_tests.support.oracle import _abs_key, _dv, oracle_replay

pytestmark = pytest.mark.slow


def _dv_rows(storage: Storage, dv: dict | None) -> set[int]:
    if not dv or dv.get("storageType") is None:
        return set()
    d = DeletionVectorDescriptor.from_dict({k: v for k, v in dv.items() if v is not None})
    if d.is_inline:
        return set(inline_dv_bitmap(d))
    rel = d.relative_path()
    if rel is None or not storage.exists(rel):
        raise FileNotFoundError(dv)
    return set(read_dv_from_file_bytes(storage.read(rel), d.offset, d.size_in_bytes))


def _writable(storage: Storage) -> bool:
    """The gate passes and every live file and DV file exists."""
    try:
        snap = load_snapshot(storage)
        ensure_layout_supported(snap.table_configuration, "optimize")
    except DeltaOpsError:
        return False
    if snap.schema is None:
        return False
    for row in snap.files.to_pylist():
        if not storage.exists(unquote(row["path"])):
            return False
        try:
            _dv_rows(storage, row["deletionVector"])
        except (FileNotFoundError, DeltaOpsError):
            return False
    return True


def _canonical(table: pa.Table) -> pa.Table:
    """`table` as a multiset of rows that compares with `equals`: columns by name, values of
    types Arrow sorts kept, the others (floats, for NaN and -0.0; nested and other types) as
    their Python repr, then sorted by every column. Arrow does the work: a corpus table of a
    million rows compared as Python tuples took half a minute."""
    names = sorted(table.column_names)
    if not names:
        return table
    cols = []
    for name in names:
        col = table.column(name)
        if not _sortable(col.type):
            col = pa.array([repr(v) for v in col.to_pylist()], pa.string())
        cols.append(col)
    return pa.table(cols, names=names).sort_by([(n, "ascending") for n in names])


def _sortable(t: pa.DataType) -> bool:
    return (pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_decimal(t)
            or pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_date(t) or pa.types.is_timestamp(t))


def _file_rows(storage: Storage) -> pa.Table:
    """Our reading: every live row (data columns by physical name as the newest schema names
    them, cast to its types, then the partition values as strings), deletion vectors
    applied; `_canonical`."""
    from delta_ops.protocol.schema import to_arrow

    snap = load_snapshot(storage)
    mode = snap.table_configuration.column_mapping_mode
    parts = set(snap.partition_columns)
    full = to_arrow(snap.schema, physical=True, mode=mode)
    fields = [f for f, s in zip(full, snap.schema.fields, strict=False) if s.name not in parts]
    names = [f.name for f in fields]
    pieces = []
    for add in snap.files.to_pylist():
        data = pq.read_table(storage.open_input(unquote(add["path"])))
        cols = []
        for f in fields:
            if f.name in data.column_names:
                col = data.column(f.name)
                cols.append(col.cast(f.type) if col.type != f.type else col)
            else:
                cols.append(pa.nulls(data.num_rows, f.type))
        pv = dict(add["partitionValues"] or [])
        for key in sorted(pv):
            cols.append(pa.array([pv[key]] * data.num_rows, pa.string()))
        table = pa.table(cols, names=names + [f"partition {k}" for k in sorted(pv)])
        deleted = _dv_rows(storage, add["deletionVector"])
        if deleted:
            table = table.filter(pa.array([i not in deleted for i in range(table.num_rows)]))
        pieces.append(table)
    if not pieces:
        return _canonical(pa.table([pa.array([], f.type) for f in fields], names=names))
    return _canonical(pa.concat_tables(pieces, promote_options="permissive"))


def _deltalake_rows(root: str) -> pa.Table | None:
    import deltalake
    from deltalake import QueryBuilder

    try:
        t = deltalake.DeltaTable(root)
        result = pa.table(QueryBuilder().register("t", t).execute("select * from t").read_all())
    except Exception:  # noqa: BLE001 - deltalake raises its own many kinds; None = unreadable
        return None
    return _canonical(result)


@pytest.mark.parametrize("name", all_corpus_tables())
def test_optimize_then_purge_then_stats_on_every_corpus_table(name, table_copy):
    root = table_copy(name)
    storage = Storage.of(str(root))
    if not _writable(storage):
        try:
            version = load_snapshot(storage).version
        except DeltaOpsError:
            version = None
        try:
            optimize(storage, dry_run=False, target_size=2000)
            purge(storage, dry_run=False)
        except UnsupportedFeatureError as exc:
            assert exc.features and exc.table is not None
        except DeltaOpsError as exc:
            assert exc.table is not None and (exc.file is not None or exc.version is not None)
        if version is not None:  # refused, or nothing to rewrite: nothing was committed
            assert load_snapshot(storage).version == version
        return
    theirs = _deltalake_rows(storage.root)
    ours = _file_rows(storage)
    before = set(load_snapshot(storage).files.column("path").to_pylist())
    first = optimize(storage, dry_run=False, target_size=2000)
    # The new files' statistics (integer, date, timestamp and string bounds from the footer
    # the writer wrote) equal the statistics computed from their data.
    optimized = load_snapshot(storage)
    for add in optimized.files.to_pylist():
        if add["path"] not in before:
            assert add["stats"] == file_stats(storage, optimized.table_configuration, add)
    second = purge(storage, dry_run=False)
    assert not first.failed and not second.failed
    compute_stats(storage, dry_run=False, recompute_all=True)
    assert _file_rows(storage).equals(ours)
    if theirs is not None:
        after = _deltalake_rows(storage.root)
        assert after is not None and after.equals(theirs)
    snap = load_snapshot(storage)
    assert all(dv is None or dv.get("storageType") is None
               for dv in snap.files.column("deletionVector").to_pylist())
    # After COMPUTE STATS every live file carries statistics with its row count.
    assert all(stats is not None and "numRecords" in json.loads(stats)
               for stats in snap.files.column("stats").to_pylist())
    expected = oracle_replay(root)
    assert snap.version == expected.version
    ours_state = {(_abs_key(r["path"], root), _dv(r["deletionVector"])): r["size"]
                  for r in snap.files.select(["path", "size", "deletionVector"]).to_pylist()}
    assert ours_state == {k: a["size"] for k, a in expected.files.items()}
    written = write_checksum(storage)
    crc = json.loads(storage.read_text(f"{LOG_DIR}/{checksum_name(snap.version)}"))
    assert written.version == snap.version
    assert crc["numFiles"] == len(expected.files)
    assert crc["tableSizeBytes"] == sum(a["size"] for a in expected.files.values())
