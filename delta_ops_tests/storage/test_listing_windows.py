"""Windows of a listing: a directory's key ranges shared between workers
(`parallel.windows_of`, `Storage.list_many` with a window per spec), on every backend.

The windows of one directory must together list exactly what the whole listing lists:
nothing missed, nothing twice, on S3 (moto on 127.0.0.1) with awkward keys as on the local
file system and in memory.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delta_ops.storage import Storage
from delta_ops.storage.parallel import ranges_of, windows_of
from delta_ops_tests.support.s3_keys import listing_page_size, storage_holding

_NAMES = st.text(alphabet=st.sampled_from(list("ab/=_-.~é") + ["😀"]), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(bounds=st.lists(_NAMES, max_size=12, unique=True).map(sorted),
       per=st.integers(1, 14))
def test_the_windows_ranges_are_the_ranges_of_the_bounds(bounds, per):
    windows = windows_of(bounds, per)
    assert [r for window, inner in windows for r in ranges_of(inner, window)] == \
        ranges_of(bounds)
    assert len(windows) == -(-(len(bounds) + 1) // per)
    # Disjoint and in order: each window starts where the one before stopped.
    edges = [w for (w, _inner) in windows]
    assert edges[0][0] is None and edges[-1][1] is None
    assert all(a[1] == b[0] for a, b in zip(edges, edges[1:], strict=False))


def test_bounds_outside_their_window_are_refused():
    with pytest.raises(ValueError, match="strictly ascending"):
        ranges_of(["b", "c"], ("b", None))
    with pytest.raises(ValueError, match="strictly ascending"):
        ranges_of(["b"], (None, "a"))
    with pytest.raises(ValueError, match="per_window"):
        windows_of(["b"], 0)
    storage = Storage.for_uri("memory://windows-refused")
    with pytest.raises(ValueError, match="strictly ascending"):
        storage.list_many([("", ["m"], False, ("n", None))])


class TestWindows:
    def _tree(self, storage):
        names = [f"f{i:02d}.parquet" for i in range(12)] + ["a b.parquet", "z%41.parquet"]
        names += [f"p=1/q={j}/g{i}.parquet" for j in range(2) for i in range(4)]
        for n in names:
            storage.put_atomic(n, n.encode())

    @pytest.mark.parametrize("per", [1, 2, 5])
    def test_windows_together_are_the_whole_listing(self, storage, per):
        self._tree(storage)
        cases = [("", ["a", "f03.parquet", "f07.parquet", "g"], False),
                 ("p=1", ["q=0/g1.parquet", "q=0/g3.parquet", "q=1/g2.parquet"], True)]
        for directory, bounds, recursive in cases:
            whole = storage.list_many([(directory, bounds, recursive)])
            pieces = [(directory, inner, recursive, window)
                      for window, inner in windows_of(bounds, per)]
            # Each window alone, then all in one call: the same files, once each.
            alone = [f for piece in pieces for f in storage.list_many([piece])]
            assert sorted(alone, key=lambda f: f.path) == whole != []
            assert storage.list_many(pieces) == whole


_KEYS = st.lists(
    st.lists(st.text(alphabet=st.sampled_from(list("aZ09 -_.=%+~'é日") + ["😀"]),
                     min_size=1, max_size=5), min_size=1, max_size=3).map("/".join),
    max_size=25, unique=True,
).map(lambda ks: [k for k in ks if all(p not in (".", "..") for p in k.split("/"))])


@pytest.mark.s3
@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(keys=_KEYS, cut=st.lists(st.integers(0, 30), max_size=6), per=st.integers(1, 4),
       recursive=st.booleans(), page=st.integers(1, 3))
def test_windows_on_s3_are_the_serial_listing(s3_server, keys, cut, per, recursive, page):
    storage = storage_holding(s3_server, "windows", keys)
    with listing_page_size(page):
        serial = sorted(storage.walk("") if recursive else storage.list_dir(""),
                        key=lambda f: f.path)
        pool = sorted(set(keys) | {k + "~" for k in keys}) or ["m"]
        bounds = sorted({pool[i % len(pool)] for i in cut})
        pieces = [("", inner, recursive, window) for window, inner in windows_of(bounds, per)]
        alone = sorted((f for piece in pieces for f in storage.list_many([piece])),
                       key=lambda f: f.path)
        together = storage.list_many(pieces)
    assert [f.path for f in alone] == [f.path for f in serial]
    assert together == serial
