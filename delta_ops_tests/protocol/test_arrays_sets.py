"""The set operations VACUUM's references are built with (`protocol.arrays.sorted_unique`
and `not_in`), against the plain Python definitions: a sorted set of the strings, and a
filter by membership. The kept set is what protects live files, so a value these lose is
a file deleted."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from delta_ops.protocol.arrays import not_in, sorted_unique

# Awkward names: empty, one character apart, prefixes of each other, non-ASCII (whose
# UTF-8 bytes sort as their code points), control characters.
_NAMES = st.one_of(
    st.sampled_from(["", "a", "a/", "a/b", "a0", "b", "é", "ß", "\u00ff", "\U0001f600",
                     "a\x00", "a\x01", "part-1", "part-10", "part-2"]),
    st.text(max_size=6),
)
_VALUES = st.lists(st.one_of(st.none(), _NAMES), max_size=60)


def _array(values: list[str | None], chunks: int) -> pa.Array | pa.ChunkedArray:
    if chunks <= 1 or len(values) < 2:
        return pa.array(values, pa.string())
    step = max(1, len(values) // chunks)
    return pa.chunked_array(
        [pa.array(values[i:i + step], pa.string()) for i in range(0, len(values), step)],
        type=pa.string(),
    )


@settings(max_examples=300, deadline=None)
@given(values=_VALUES, chunks=st.integers(1, 3))
def test_sorted_unique_is_the_sorted_set(values, chunks):
    got = sorted_unique(_array(values, chunks))
    assert isinstance(got, pa.Array)
    assert got.null_count == 0
    # str order is code point order, which is UTF-8 byte order: S3's listing order.
    assert got.to_pylist() == sorted({v for v in values if v is not None})


@settings(max_examples=100, deadline=None)
@given(values=_VALUES)
def test_sorted_unique_of_a_sorted_set_is_that_array(values):
    done = sorted_unique(pa.array(values, pa.string()))
    assert sorted_unique(done) is done


def test_sorted_unique_keeps_the_first_of_each_run():
    got = sorted_unique(pa.array(["b", "a", "b", "a", "c", "c", None, "a"]))
    assert got.to_pylist() == ["a", "b", "c"]
    assert sorted_unique(pa.chunked_array([], type=pa.string())).to_pylist() == []


@settings(max_examples=300, deadline=None)
@given(values=st.lists(_NAMES, max_size=40), other=st.lists(_NAMES, max_size=80))
def test_not_in_is_the_filter_by_membership(values, other):
    held = set(other)
    got = not_in(pa.array(values, pa.string()), pa.array(other, pa.string()))
    assert got.to_pylist() == [v for v in values if v not in held]


def test_not_in_hashes_the_smaller_side_with_the_same_answer():
    values = pa.array(["x", "b", "y"])
    other = pa.array([f"k{i}" for i in range(1000)] + ["b"])
    assert not_in(values, other).to_pylist() == ["x", "y"]
    assert not_in(other, values).to_pylist() == [f"k{i}" for i in range(1000)]
