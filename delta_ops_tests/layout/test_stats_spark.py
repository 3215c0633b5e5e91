"""Our statistics against real Spark's aggregates on the same Parquet file.

Delta Spark computes file statistics with Spark SQL aggregates (`StatisticsCollection.
statsCollector`): `count(*)`, `min`/`max`, `sum(when(c is null, 1) else 0)` for null
counts, rendered by `to_json`. This test runs those expressions in a local Spark session
(time zone UTC) over files pyarrow wrote, and compares them with `file_stats` field by
field: string ordering, NaN and -0.0 ordering, timestamp truncation and format, decimals,
nested fields.

The min and max of a string column are Spark's `min` and `max` passed through Delta's
`truncateMinStringAgg` and `truncateMaxStringAgg` (Scala functions of Delta, not of Spark,
so not runnable here without the Delta jars): they are compared after our
`truncate_min_string` and `truncate_max_string`; the truncation itself is checked against
Delta's source rules in `test_stats_rules.py`.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from delta_ops.layout.file_stats import file_stats
from delta_ops.layout.statistics import truncate_max_string, truncate_min_string
from delta_ops.storage import Storage
from delta_ops_tests.support.stats_compare import configuration, differences, field, struct

pytestmark = pytest.mark.spark

UTC = dt.timezone.utc
FIELDS = [
    field("i", "long"), field("f", "double"), field("s", "string"), field("d", "date"),
    field("t", "timestamp"), field("n", "timestamp_ntz"), field("m", "decimal(12,3)"),
    field("st", struct(field("x", "integer"), field("y", "string"))),
]
ARROW = pa.schema([
    ("i", pa.int64()), ("f", pa.float64()), ("s", pa.string()), ("d", pa.date32()),
    ("t", pa.timestamp("us", "UTC")), ("n", pa.timestamp("us")), ("m", pa.decimal128(12, 3)),
    ("st", pa.struct([("x", pa.int32()), ("y", pa.string())])),
])
LEAVES = ("i", "f", "s", "d", "t", "n", "m", "st.x", "st.y")


def _row(i, f, s, t_us, m=None, y=None):
    t = None if t_us is None else dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(
        microseconds=t_us)
    return {
        "i": i, "f": f, "s": s, "d": None if t is None else t.date(), "t": t,
        "n": None if t is None else t.replace(tzinfo=None),
        "m": m, "st": None if y is None else {"x": None if i is None else i % 2**31, "y": y},
    }


def _random_rows(seed: int, n: int) -> list[dict]:
    rng = random.Random(seed)
    alphabet = "ab\u00e9\u4e2d\U0001F600\uffff\ufffd z"
    rows = []
    for _ in range(n):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 45)))
        f = rng.choice([rng.uniform(-1e9, 1e9), float("nan"), -0.0, 0.0, float("inf"), None])
        t_us = rng.choice([rng.randint(-(10**15), 10**16), None])
        m = rng.choice([Decimal(rng.randint(-(10**9), 10**9)) / 1000, None])
        rows.append(_row(rng.randint(-(2**40), 2**40), f, rng.choice([s, None]), t_us, m,
                         rng.choice([s[::-1], None])))
    return rows


DATASETS = {
    "long strings and unicode": [
        _row(1, 1.5, "z" * 40, 1_500_999), _row(2, 2.5, "a" * 33 + "\U0001F600", -1),
        _row(3, None, "\U0001F600" * 40, None, y="y" * 50),
    ],
    "nan is largest": [_row(1, float("nan"), "x", 0), _row(2, -3.0, "y", 1)],
    "only nan": [_row(1, float("nan"), None, None), _row(2, None, None, None)],
    "zero signs": [_row(1, -0.0, "a", 0), _row(2, 0.0, "b", 0)],
    "zero signs reversed": [_row(1, 0.0, "a", 0), _row(2, -0.0, "b", 0)],
    "all null": [_row(None, None, None, None)],
    "random 1": _random_rows(1, 200),
    "random 2": _random_rows(2, 50),
}


def _spark_stats(session, path: str) -> dict:
    cols = {leaf: "`" + leaf.replace(".", "`.`") + "`" for leaf in LEAVES}

    def tree(agg) -> str:
        top = [agg(leaf, c) for leaf, c in cols.items() if "." not in leaf]
        nested = [agg(leaf, c) for leaf, c in cols.items() if "." in leaf]
        return f"struct({', '.join(top)}, struct({', '.join(nested)}) AS st)"

    def name(leaf):
        return "`" + leaf.split(".")[-1] + "`"

    def low(leaf, c):
        return f"min({c}) AS {name(leaf)}"

    def high(leaf, c):
        return f"max({c}) AS {name(leaf)}"

    def nulls(leaf, c):
        return f"sum(CASE WHEN {c} IS NULL THEN 1 ELSE 0 END) AS {name(leaf)}"

    session.read.parquet(path).createOrReplaceTempView("f")
    sql = (
        "SELECT to_json(struct(count(*) AS numRecords, "
        f"{tree(low)} AS minValues, {tree(high)} AS maxValues, "
        f"{tree(nulls)} AS nullCount)) FROM f"
    )
    out = json.loads(session.sql(sql).collect()[0][0], parse_float=Decimal)
    for bounds, cut in (("minValues", truncate_min_string), ("maxValues", truncate_max_string)):
        if "s" in out[bounds]:
            out[bounds]["s"] = cut(out[bounds]["s"])
        if "y" in out[bounds].get("st", {}):
            out[bounds]["st"]["y"] = cut(out[bounds]["st"]["y"])
    return out


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_our_stats_equal_sparks_aggregates(spark_engine, tmp_path, name):
    session = spark_engine.session
    session.conf.set("spark.sql.session.timeZone", "UTC")
    pq.write_table(pa.Table.from_pylist(DATASETS[name], schema=ARROW), tmp_path / "f.parquet",
                   row_group_size=7)
    ours = json.loads(
        file_stats(Storage.for_uri(str(tmp_path)), configuration(FIELDS), {"path": "f.parquet"}),
        parse_float=Decimal,
    )
    spark = _spark_stats(session, str(tmp_path / "f.parquet"))
    diffs = differences(spark, ours)
    # Doubles: Spark prints like Java (4.661261177E7); the same number either way.
    assert [d for d in diffs if not _same_number(d.recorded, d.ours)] == []
    # -0.0 and 0.0 are equal numbers: their sign is compared as text.
    for key in ("minValues", "maxValues"):
        if isinstance(spark[key].get("f"), Decimal):
            assert str(spark[key]["f"]).startswith("-") == str(ours[key]["f"]).startswith("-")


def _same_number(a, b) -> bool:
    return isinstance(a, Decimal) and isinstance(b, Decimal) and a == b
