"""Where an object-store listing is cut (`engine.local.range_specs`): every
`KEYS_PER_RANGE`-th referenced path below each directory, taken from one sorted Arrow
array without turning it into Python strings, equal to the cut the plain definition
(`parallel.range_bounds` of each directory's sorted names) gives."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

import delta_ops.engine.local as local
from delta_ops.engine.local import range_specs
from delta_ops.engine.spill import KeyBuckets
from delta_ops.protocol.arrays import sorted_strings
from delta_ops.storage.parallel import range_bounds


def _cut(directories, keep, per_range):
    old = local.KEYS_PER_RANGE
    local.KEYS_PER_RANGE = per_range
    try:
        return range_specs(directories, keep)
    finally:
        local.KEYS_PER_RANGE = old


def _plainly(directories, paths, per_range):
    names: dict[str, list[str]] = {d: [] for d in directories}
    for path in sorted(paths):
        head, sep, rest = path.partition("/")
        if not sep:
            if "" in names:
                names[""].append(path)
        elif head in names:
            names[head].append(rest)
    return [(d, range_bounds(names[d], per_range), d != "") for d in directories]


def test_range_specs_take_bounds_from_the_referenced_paths():
    keep = pa.array([f"p=1/f{i:02d}" for i in range(9)] + [f"r{i:02d}" for i in range(5)])
    assert _cut(["", "p=1", "p=2"], keep, 2) == [
        ("", ["r01", "r03"], False),
        ("p=1", ["f01", "f03", "f05", "f07"], True),
        ("p=2", [], True),
    ]


# Directory names that sort next to each other around '/' ("a" and "a0", "a.b", "a b"),
# and names outside Latin.
_SEGMENT = st.sampled_from(["a", "a0", "a.b", "a b", "b", "p=1", "p=10", "é", "日", "z/"])
_PATHS = st.lists(
    st.lists(_SEGMENT, min_size=1, max_size=3).map("/".join).filter(
        lambda p: not p.endswith("/") and "//" not in p),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(paths=_PATHS, per_range=st.integers(1, 5), shuffle=st.randoms())
def test_the_cut_is_the_plain_one(paths, per_range, shuffle):
    directories = ["", "a", "a0", "a.b", "a b", "p=1", "p=10", "é", "missing"]
    unsorted = list(paths)
    shuffle.shuffle(unsorted)
    keep = pa.array(unsorted, pa.string())
    assert _cut(directories, keep, per_range) == _plainly(directories, paths, per_range)
    # Sorted once (as VACUUM's plan does), the same array is taken as it is.
    ordered = sorted_strings(keep)
    assert ordered.to_pylist() == sorted(paths)
    assert sorted_strings(ordered) is ordered
    assert _cut(directories, ordered, per_range) == _plainly(directories, paths, per_range)


class _TwoBuckets(KeyBuckets):
    """Keys split by parity of their position: bucket 0 holds every other one."""

    buckets = 2

    def __init__(self, keys: list[str]) -> None:
        self.keys = keys

    def bucket(self, b: int) -> pa.Array:
        return pa.array(self.keys[b::2], pa.string())


def test_buckets_are_cut_by_a_share_of_the_bounds():
    paths = [f"p=1/f{i:03d}" for i in range(40)] + [f"r{i:03d}" for i in range(40)]
    keep = _TwoBuckets(paths[::-1])
    got = _cut(["", "p=1"], keep, 4)
    # Bucket 0 holds half the keys: every (4 / 2)-th of its sorted paths.
    assert got == _plainly(["", "p=1"], keep.bucket(0).to_pylist(), 2)
    assert got[0][1] and got[1][1]
