"""Property tests of statistics from data.

1. Files we write (random columns and nulls, several row groups): the statistics
   `file_stats` reads row group by row group equal an oracle computed with pyarrow compute
   over the whole table at once, with Spark's rules applied to its result (32-character
   string prefix and tie-breaker, NaN largest, timestamps floored to milliseconds).
1b. Files the rewrite writes (bounds from the footer pyarrow writes, a chunk with a bound
   too long for the footer read back): the same oracle.
2. Generated histories (partitioned or not, deletion vectors, column mapping, row tracking,
   files with and without statistics): after `compute_stats`, every live file has
   statistics equal to the oracle over its valid rows, the rows read by `deltalake` and by
   our reader are unchanged, and every file keeps its path, deletion vector and row IDs.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delta_ops.layout.file_stats import file_stats
from delta_ops.layout.statistics import truncate_max_string, truncate_min_string
from delta_ops.layout.stats import compute_stats
from delta_ops.log import load_snapshot
from delta_ops.protocol.deletion_vectors import DeletionVectorDescriptor, inline_dv_bitmap
from delta_ops.storage import Storage
from delta_ops_tests.support.histories import (
    StepClock,
    build_history,
    histories,
    table_rows,
)
from delta_ops_tests.support.stats_compare import DV_PROTOCOL, configuration, field, struct

# ---- 1. files we write, against pyarrow compute -----------------------------------------------

UTC = dt.timezone.utc
FIELDS = [
    field("i", "long"), field("f", "double"), field("s", "string"), field("d", "date"),
    field("t", "timestamp"), field("n", "timestamp_ntz"), field("m", "decimal(9,3)"),
    field("st", struct(field("x", "integer"), field("y", "string"))), field("b", "boolean"),
]
ARROW = pa.schema([
    ("i", pa.int64()), ("f", pa.float64()), ("s", pa.string()), ("d", pa.date32()),
    ("t", pa.timestamp("us", "UTC")), ("n", pa.timestamp("us")), ("m", pa.decimal128(9, 3)),
    ("st", pa.struct([("x", pa.int32()), ("y", pa.string())])), ("b", pa.bool_()),
])
_instants = st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1))
_text = st.text(st.characters(max_codepoint=0x2FFFF, exclude_categories=("Cs",)), max_size=40)


def _maybe(s):
    return st.one_of(st.none(), s)


_ROW_FIELDS = {
    "i": _maybe(st.integers(-(2**63), 2**63 - 1)),
    "f": _maybe(st.floats(allow_nan=True).map(lambda x: 0.0 if x == 0 else x)),
    "s": _maybe(_text),
    "d": _maybe(st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31))),
    "t": _maybe(_instants.map(lambda x: x.replace(tzinfo=UTC))),
    "n": _maybe(_instants),
    "m": _maybe(st.decimals(-999999, 999999, places=3, allow_nan=False, allow_infinity=False)),
    "st": _maybe(st.fixed_dictionaries({"x": _maybe(st.integers(-(2**31), 2**31 - 1)),
                                        "y": _maybe(_text)})),
    "b": _maybe(st.booleans()),
}
_row = st.fixed_dictionaries(_ROW_FIELDS)


def _leaf(table: pa.Table, path: tuple[str, ...]) -> pa.Array:
    col = table.column(path[0]).combine_chunks()
    for name in path[1:]:
        col = pc.struct_field(col, name)
    return col


def _millis(value: dt.datetime) -> str:
    value = value.replace(microsecond=value.microsecond // 1000 * 1000)
    text = value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}"
    return text + ("Z" if value.tzinfo is not None else "")


def _oracle(table: pa.Table) -> dict:
    """Spark's statistics of `table` from whole-table pyarrow compute results."""
    low: dict = {}
    high: dict = {}
    nulls: dict = {}
    for path in [("i",), ("f",), ("s",), ("d",), ("t",), ("n",), ("m",), ("st", "x"),
                 ("st", "y"), ("b",)]:
        col = _leaf(table, path)
        _put(nulls, path, col.null_count)
        if path == ("b",) or col.null_count == len(col):
            continue
        if path == ("f",):
            finite = col.filter(pc.invert(pc.is_nan(col)))
            lo = pc.min(finite).as_py() if len(finite.drop_null()) else math.nan
            hi = math.nan if pc.any(pc.is_nan(col)).as_py() else pc.max(col).as_py()
        else:
            lo, hi = pc.min(col).as_py(), pc.max(col).as_py()
        if path[0] in ("t", "n"):
            lo, hi = _millis(lo), _millis(hi)
        elif path[-1] in ("s", "y"):
            # The cut is checked against Delta's rules in test_stats_rules.py.
            lo, hi = truncate_min_string(lo), truncate_max_string(hi)
        elif path == ("d",):
            lo, hi = lo.isoformat(), hi.isoformat()
        _put(low, path, lo)
        _put(high, path, hi)
    for tree in (low, high):
        tree.setdefault("st", {})
    return {"numRecords": table.num_rows, "minValues": low, "maxValues": high,
            "nullCount": nulls, "tightBounds": True}


def _put(tree: dict, path: tuple[str, ...], value) -> None:
    for name in path[:-1]:
        tree = tree.setdefault(name, {})
    tree[path[-1]] = value


def _normalized(obj):
    """Numbers as floats or ints, NaN as the string Spark writes, for comparing."""
    if isinstance(obj, dict):
        return {k: _normalized(v) for k, v in obj.items()}
    if isinstance(obj, float) and math.isnan(obj):
        return "NaN"
    if isinstance(obj, Decimal):
        return obj
    return obj


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rows=st.lists(_row, min_size=1, max_size=30), group=st.integers(1, 8))
def test_file_stats_equal_pyarrow_compute_over_the_whole_file(tmp_path_factory, rows, group):
    root = tmp_path_factory.mktemp("files")
    table = pa.Table.from_pylist(rows, schema=ARROW)
    pq.write_table(table, root / "f.parquet", row_group_size=group)
    cfg = configuration(FIELDS, protocol=DV_PROTOCOL)
    ours = json.loads(
        file_stats(Storage.for_uri(str(root)), cfg, {"path": "f.parquet"}),
        parse_float=Decimal,
    )
    want = json.loads(json.dumps(_normalized(_oracle(table)), default=str), parse_float=Decimal)
    # Decimals and floats: compared as numbers (the oracle's text is Python's).
    assert _numbers(ours) == _numbers(want)


def _numbers(obj):
    if isinstance(obj, dict):
        return {k: _numbers(v) for k, v in obj.items()}
    if isinstance(obj, Decimal):
        return float(obj)
    if isinstance(obj, str):
        try:
            return float(Decimal(obj)) if obj not in ("NaN",) else obj
        except ArithmeticError:
            return obj
    return obj


# ---- 1b. files the rewrite writes: bounds from the footer pyarrow writes --------------------

#: A string pyarrow's writer keeps out of its footer (longer than its 4 KiB statistics
#: limit): the chunk holding it is read back and its bounds computed from the data.
_LONG = "\U0001f600" * 1100 + "z"


def _rewritten(root: Path, rows: list[dict], group: int, long_at: int | None,
               ) -> tuple[pa.Table, dict]:
    """`rows` (the one at `long_at` given a string too long for the footer) written by the
    rewrite's writer into one file of row groups of `group` rows: the table and the add."""
    from delta_ops.layout.plan import Bin
    from delta_ops.layout.rewrite import RewriteSettings, RewriteTask, _Writer

    if long_at is not None and long_at < len(rows):
        rows[long_at] = dict(rows[long_at], s=_LONG + (rows[long_at]["s"] or ""))
    table = pa.Table.from_pylist(rows, schema=ARROW)
    cfg = configuration(FIELDS, protocol=DV_PROTOCOL)
    settings_ = RewriteSettings(
        table=str(root), protocol=dict(cfg.protocol), metadata=dict(cfg.metadata.raw),
        file_schema=ARROW, column_mapping_mode="none", row_id_column=None,
        row_commit_version_column=None, compression="SNAPPY", target_size=1 << 40,
        row_group_bytes=1)  # every write is a row group of its own
    writer = _Writer(Storage.for_uri(str(root)), RewriteTask(Bin(0, {}, "", ()), settings_))
    for start in range(0, table.num_rows, group):
        writer.write(table.slice(start, group))
    writer.finish()
    (add,) = writer.adds
    assert pq.ParquetFile(root / add["path"]).metadata.num_row_groups == -(-len(rows) // group)
    return table, add


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rows=st.lists(_row, min_size=1, max_size=30), group=st.integers(1, 8),
       long_at=st.one_of(st.none(), st.integers(0, 29)))
def test_rewritten_file_stats_equal_pyarrow_compute_over_the_whole_file(
        tmp_path_factory, rows, group, long_at):
    """The rewrite's writer takes integer, date, timestamp and string bounds from the footer
    of the file it wrote (`StatsCollector(footer_bounds=True)`), several row groups per
    file, a long string in one of them at times: the statistics equal the oracle's."""
    table, add = _rewritten(tmp_path_factory.mktemp("rewritten"), rows, group, long_at)
    ours = json.loads(add["stats"], parse_float=Decimal)
    want = json.loads(json.dumps(_normalized(_oracle(table)), default=str), parse_float=Decimal)
    assert _numbers(ours) == _numbers(want)


def test_footer_columns_are_found_past_maps_lists_and_dotted_names(tmp_path):
    """`_leaf_columns` numbers Parquet's leaves depth first: a struct leaf after a map and a
    list (whose own leaves take columns but are no stats leaf, even when one is called
    like a top-level column) and a dotted field name get the column whose path is theirs."""
    from delta_ops.layout.statistics import _leaf_columns

    schema = pa.schema([
        ("m", pa.map_(pa.string(), pa.struct([("x", pa.int64())]))),
        ("l", pa.list_(pa.struct([("key", pa.int32())]))),
        ("key", pa.int64()),
        ("st", pa.struct([("a.b", pa.int16()), ("c", pa.list_(pa.int8()))])),
        ("z", pa.string()),
    ])
    pq.write_table(schema.empty_table(), tmp_path / "f.parquet")
    footer = pq.ParquetFile(tmp_path / "f.parquet").metadata.schema
    index = _leaf_columns(schema)
    assert index == {("key",): 3, ("st", "a.b"): 4, ("z",): 6}
    assert all(footer.column(i).path == ".".join(path) for path, i in index.items())


_float_row = st.fixed_dictionaries({
    **_ROW_FIELDS,
    "f": _maybe(st.one_of(st.sampled_from([0.0, -0.0, math.nan, math.inf, -math.inf]),
                          st.floats(allow_nan=True))),
})


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rows=st.lists(_float_row, min_size=1, max_size=30), group=st.integers(1, 8),
       long_at=st.one_of(st.none(), st.integers(0, 29)))
def test_rewritten_file_stats_are_the_text_the_rows_give(tmp_path_factory, rows, group,
                                                         long_at):
    """Byte for byte the statistics `StatsCollector` computes from the rows (the path the
    corpus tests check against Spark's), with -0.0 and 0.0 told apart (the oracle above
    compares numbers), NaN and infinities, long strings."""
    from delta_ops.layout.statistics import StatsCollector

    table, add = _rewritten(tmp_path_factory.mktemp("rewritten"), rows, group, long_at)
    rows_given = StatsCollector(configuration(FIELDS, protocol=DV_PROTOCOL))
    for start in range(0, table.num_rows, group):
        rows_given.update(table.slice(start, group))
    assert add["stats"] == rows_given.to_json()


# ---- 2. histories: compute_stats keeps the table and gives every file its statistics ---------


def _deltalake_rows(root: Path) -> list[str]:
    import deltalake

    dt_ = deltalake.DeltaTable(str(root))
    data = pa.table(
        deltalake.QueryBuilder().register("t", dt_).execute("select * from t").read_all()
    )
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in data.to_pylist())


def _files(storage: Storage) -> dict[str, dict]:
    snap = load_snapshot(storage)
    return {r["path"]: r for r in snap.files.to_pylist()}


def _valid_oracle(storage: Storage, add: dict, physical: dict[str, str]) -> dict:
    """numRecords and the id/value bounds of the file's valid rows, by pyarrow alone."""
    with storage.open_input(add["path"]) as fh:
        data = pq.read_table(fh)
    n = data.num_rows
    dv = add.get("deletionVector")
    if dv:
        deleted = set(inline_dv_bitmap(DeletionVectorDescriptor.from_dict(dv)))
        data = data.filter(pa.array([i not in deleted for i in range(n)]))
    id_, value = physical["id"], physical["value"]
    # Spark's null-count sums over no rows are null, so an empty file counts none.
    out: dict = {"numRecords": n, "minValues": {}, "maxValues": {},
                 "nullCount": {id_: 0, value: 0} if n else {}}
    if data.num_rows:
        out["minValues"] = {id_: pc.min(data[id_]).as_py(), value: pc.min(data[value]).as_py()}
        out["maxValues"] = {id_: pc.max(data[id_]).as_py(), value: pc.max(data[value]).as_py()}
    return out


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(spec=histories(row_tracking=None, max_steps=6))
def test_compute_stats_on_generated_histories(tmp_path_factory, spec):
    root = tmp_path_factory.mktemp("history")
    storage = Storage.for_uri(str(root))
    build_history(storage, spec, clock=StepClock())
    before = _files(storage)
    rows_before = table_rows(storage)
    lake_before = _deltalake_rows(root)
    result = compute_stats(storage, dry_run=False, recompute_all=True, batch_size=2,
                           clock=StepClock(1_800_000_000_000))
    assert result.files_updated == len(before) and result.files_skipped == 0
    after = _files(storage)
    assert table_rows(storage) == rows_before
    assert _deltalake_rows(root) == lake_before
    assert set(after) == set(before)
    snap = load_snapshot(storage)
    mode = snap.table_configuration.column_mapping_mode
    physical = {f.name: (f.physical_name if mode != "none" else f.name)
                for f in snap.schema.fields}
    for path, add in after.items():
        old = before[path]
        for key in ("deletionVector", "baseRowId", "defaultRowCommitVersion", "size",
                    "partitionValues", "modificationTime"):
            assert add[key] == old[key], (path, key)
        got = json.loads(add["stats"])
        tight = got.pop("tightBounds", None)
        assert tight in (None, True)
        assert (tight is not None) == snap.table_configuration.is_feature_supported(
            "deletionVectors")
        assert got == _valid_oracle(storage, add, physical)
