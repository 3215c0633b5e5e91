"""Columns of most types statistics can hold (float widths, decimal scale, dates, timestamps
with a time zone, a nested struct, booleans, nulls), for the tests of typed statistics (`crc
verify`, checkpoints after ones that kept only `stats_parsed`)."""

from __future__ import annotations

import datetime
import decimal

import pyarrow as pa

UTC = datetime.timezone.utc


def _data() -> pa.Table:
    """Columns of most types statistics can hold (float widths, decimal scale, dates,
    timestamps with a time zone, a nested struct, booleans, nulls)."""
    return pa.table({
        "i": pa.array([1, 2, None], pa.int32()),
        "l": pa.array([10, 20, 30], pa.int64()),
        "f": pa.array([0.1, 0.2, None], pa.float32()),
        "d": pa.array([0.1, 2.5, -1.0], pa.float64()),
        "dec": pa.array(
            [decimal.Decimal("1.23"), decimal.Decimal("-4.50"), None], pa.decimal128(10, 2)
        ),
        "dt": pa.array([datetime.date(2020, 1, 1), datetime.date(2021, 5, 6), None]),
        "ts": pa.array(
            [
                datetime.datetime(2020, 1, 1, 10, 0, 0, 123000, tzinfo=UTC),
                datetime.datetime(2022, 1, 1, tzinfo=UTC),
                None,
            ],
            pa.timestamp("us", tz="UTC"),
        ),
        "s": pa.array(["a", "zz", None]),
        "b": pa.array([True, False, None]),
        "nested": pa.array([{"x": 1}, {"x": 5}, None], pa.struct([("x", pa.int64())])),
    })
