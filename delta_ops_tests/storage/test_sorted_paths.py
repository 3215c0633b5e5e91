"""Referenced paths held as one sorted Arrow array (`storage.sorted_paths.SortedPaths`): a
listing's key range takes its share of them, equal to the plain definition; the root files
a subdirectory listing keeps for the next listing leave the referenced ones out, and are
reused only by a listing that leaves out the same."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delta_ops.protocol.arrays import sorted_strings
from delta_ops.storage import Storage
from delta_ops.storage.sorted_paths import SortedPaths
from delta_ops_tests.support.s3_keys import storage_holding
from delta_ops_tests.support.s3_proxy import S3Proxy

_SEGMENT = st.sampled_from(["a", "a0", "a.b", "a b", "b", "p=1", "p=10", "é", "日"])
_PATH = st.lists(_SEGMENT, min_size=1, max_size=3).map("/".join)
_HEADS = ["", "a/", "a0/", "p=1/", "a/a/", "missing/"]


def _plainly(paths, head, after, stop, recursive):
    out = set()
    for p in paths:
        if not p.startswith(head):
            continue
        rel = p[len(head):]
        if (after is None or rel > after) and (stop is None or rel <= stop) and (
                recursive or "/" not in rel):
            out.add(p)
    return out


@settings(max_examples=300, deadline=None)
@given(paths=st.lists(_PATH, max_size=40), head=st.sampled_from(_HEADS),
       after=st.none() | _PATH, stop=st.none() | _PATH, recursive=st.booleans(),
       probe=_PATH)
def test_a_range_takes_the_paths_it_may_meet(paths, head, after, stop, recursive, probe):
    held = SortedPaths(sorted_strings(pa.array(paths, pa.string())))
    assert held.in_range(head, after, stop, recursive) == _plainly(
        paths, head, after, stop, recursive)
    assert (probe in held) == (probe in set(paths))
    # Two holders agree on a directory exactly when they hold the same paths directly in it.
    root_only = SortedPaths(held.paths.filter(pc.invert(pc.match_substring(held.paths, "/"))))
    assert held.same_in(root_only, "")
    if head:  # the root's names only: nothing directly in any other directory
        assert held.same_in(root_only, head) == (
            _plainly(paths, head, None, None, False) == set())


@pytest.mark.s3
def test_kept_root_files_leave_the_referenced_out(s3_server):
    uri = storage_holding(s3_server, "keptout",
                          [f"f{i:02d}.parquet" for i in range(12)] + ["p=1/a.parquet"]).root
    referenced = sorted_strings(pa.array(
        [f"f{i:02d}.parquet" for i in range(0, 12, 2)] + ["p=1/a.parquet"]))
    with S3Proxy(s3_server.endpoint_url, latency=0.0) as proxy:
        storage = Storage.for_uri(uri, proxy.storage_options())
        serial = storage.list_dir("")
        unreferenced = [f for f in serial if f.path not in set(referenced.to_pylist())]

        def subdirs_then(exclude):
            storage.list_subdirs("", follow_symlinks=False, bounds=["f05.parquet"],
                                 remember_files=True, exclude=SortedPaths(referenced))
            kept = storage._backend._remembered[2]
            before = proxy.counts().get("LIST", 0)
            seen = [0, 0]
            got = storage.list_many(
                [("", ["f07.parquet"], False)], follow_symlinks=False, exclude=exclude,
                progress=lambda _p, files, size: seen.__setitem__(0, seen[0] + files))
            return kept, got, proxy.counts()["LIST"] - before, seen[0]

        # The same paths (another holder of the same array): no second listing, and every
        # root file still counted.
        kept, got, lists, counted = subdirs_then(SortedPaths(referenced))
        assert len(kept) == len(unreferenced) == 6
        assert got == unreferenced and lists == 0 and counted == 12
        # A holder of the root's referenced names only (as the Spark engine passes).
        root_only = referenced.filter(pc.invert(pc.match_substring(referenced, "/")))
        kept, got, lists, _ = subdirs_then(SortedPaths(root_only))
        assert got == unreferenced and lists == 0
        # Leaving out other files, or none: the root is listed again.
        for exclude, expected in (
            (None, serial),
            ({"f01.parquet"}, [f for f in serial if f.path != "f01.parquet"]),
            (SortedPaths(referenced.slice(1)),
             [f for f in serial if f.path not in set(referenced.slice(1).to_pylist())]),
        ):
            _kept, got, lists, _ = subdirs_then(exclude)
            assert got == expected and lists > 0
