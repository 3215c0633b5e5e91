"""Listing in key ranges and deleting in batches at an object store's request limit.

The contract part (`Storage.list_ranges`, `list_many`, `delete_files`) runs on the local
file system, memory and S3 (moto on 127.0.0.1); the rest runs VACUUM on S3 through
`s3_proxy.S3Proxy`, a real HTTP proxy that counts requests by kind and can answer
``503 SlowDown``: the requests VACUUM makes, a plan equal to a serial listing's with
SlowDown answers and concurrent `deltalake` appends, and a run killed with SIGKILL in the
middle of its deletes.
"""

from __future__ import annotations

import math
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delta_ops.engine.local import LocalEngine
from delta_ops.maintenance.vacuum import vacuum
from delta_ops.storage import Storage
from delta_ops.storage.parallel import (
    AdaptiveLimit,
    RequestPolicy,
    range_bounds,
    range_prefix,
    ranges_of,
)
from delta_ops.storage.s3 import _S3Backend
from delta_ops_tests.support.s3_keys import listing_page_size, storage_holding
from delta_ops_tests.support.s3_proxy import S3Proxy, request_kind

# ---- the ranges themselves ----------------------------------------------------------


def test_range_bounds_and_ranges_partition_the_names():
    names = sorted(f"f{i:03d}" for i in range(10)) + ["f009"]
    bounds = range_bounds(sorted(names), 3)
    assert bounds == ["f002", "f005", "f008"]
    ranges = ranges_of(bounds)
    assert ranges == [(None, "f002"), ("f002", "f005"), ("f005", "f008"), ("f008", None)]
    with pytest.raises(ValueError, match="strictly ascending"):
        ranges_of(["b", "a"])
    with pytest.raises(ValueError, match="at least 1"):
        range_bounds(names, 0)


def test_adaptive_limit_halves_on_slowdown_and_grows_back():
    import asyncio

    async def run() -> tuple[int, int, int]:
        limit = AdaptiveLimit(8)
        await limit.acquire()
        await limit.release(throttled=True)
        after_one = limit.limit
        await limit.acquire()
        await limit.release(throttled=True)
        after_two = limit.limit
        for _ in range(2 + 3):
            await limit.acquire()
            await limit.release(throttled=False)
        return after_one, after_two, limit.limit

    assert asyncio.run(run()) == (4, 2, 4)


# ---- the contract on every backend --------------------------------------------------


class TestRangesAndBatches:
    def _tree(self, storage):
        names = [f"f{i:02d}.parquet" for i in range(12)] + ["a b.parquet", "z%41.parquet"]
        names += [f"p=1/q={j}/g{i}.parquet" for j in range(2) for i in range(4)]
        names += ["p=2/h.parquet", "_delta_log/00000000000000000000.json"]
        for n in names:
            storage.put_atomic(n, n.encode())
        return names

    @pytest.mark.parametrize(
        "bounds",
        [[], ["f03.parquet"], ["a", "f05.parquet", "f06", "zz"], ["f00.parquet", "f11.parquet"]],
    )
    def test_list_ranges_is_the_serial_listing(self, storage, bounds):
        self._tree(storage)
        serial = storage.list_dir("")
        assert storage.list_ranges("", bounds) == serial
        walked = sorted(storage.walk(""), key=lambda f: f.path)
        assert storage.list_ranges("", bounds, recursive=True) == walked
        sub = sorted(storage.walk("p=1"), key=lambda f: f.path)
        assert storage.list_ranges("p=1", ["q=0/g2.parquet", "q=1"], recursive=True) == sub

    def test_list_many_lists_every_directory_and_reports_progress(self, storage):
        self._tree(storage)
        seen = [0, 0, 0]

        def progress(pages: int, files: int, size: int) -> None:
            seen[0] += pages
            seen[1] += files
            seen[2] += size

        got = storage.list_many(
            [("", ["f05.parquet"], False), ("p=1", [], True), ("p=2", ["x"], True)],
            follow_symlinks=False, policy=RequestPolicy(concurrency=2), progress=progress,
        )
        want = sorted(
            storage.list_dir("") + list(storage.walk("p=1")) + list(storage.walk("p=2")),
            key=lambda f: f.path,
        )
        assert got == want
        assert seen[1] == len(want) and seen[2] == sum(f.size for f in want) and seen[0] >= 3
        # Left out by their paths from the root, in the root and in subdirectories alike.
        left_out = {f.path for f in want[::3]} | {"p=1/not-there.parquet"}
        assert {f.path.split("/")[0] for f in want[::3]} >= {"p=1", "p=2"}
        assert storage.list_many(
            [("", ["f05.parquet"], False), ("p=1", [], True), ("p=2", ["x"], True)],
            follow_symlinks=False, exclude=left_out,
        ) == [f for f in want if f.path not in left_out]

    def test_list_subdirs_in_ranges_is_list_subdirs(self, storage):
        self._tree(storage)
        storage.put_atomic("g/x.parquet", b"x")
        want = storage.list_subdirs("")
        assert want == ["_delta_log", "g", "p=1", "p=2"]
        for bounds in ([], ["f03.parquet"], ["a", "f05.parquet", "g", "p=1", "zz"]):
            assert storage.list_subdirs("", bounds=bounds) == want
        with pytest.raises(ValueError, match="without '/'"):
            storage.list_subdirs("", bounds=["p=1/x"])

    def test_list_ranges_refuses_unsorted_bounds(self, storage):
        with pytest.raises(ValueError, match="strictly ascending"):
            storage.list_ranges("", ["b", "a"])

    def test_delete_files_deletes_and_a_rerun_finishes(self, storage):
        names = self._tree(storage)
        doomed = [n for n in names if n.startswith(("f", "p=1/"))]
        report = storage.delete_files(doomed + doomed[:2], policy=RequestPolicy(concurrency=3))
        assert report.failed == ()
        assert report.deleted == len(doomed)
        left = {f.path for f in storage.walk("")}
        assert left == set(names) - set(doomed)
        again = storage.delete_files(doomed)
        assert again.failed == ()
        assert {f.path for f in storage.walk("")} == left
        assert storage.delete_files([]).deleted == 0

    def test_delete_files_validates_every_path_first(self, storage):
        storage.put_atomic("keep.parquet", b"x")
        from delta_ops.errors import StorageError

        with pytest.raises(StorageError):
            storage.delete_files(["keep.parquet", "../escape"])
        assert storage.exists("keep.parquet")


# ---- the union of the ranges is the serial listing: a property, on S3 and memory ------

_AWKWARD = st.text(
    alphabet=st.sampled_from(list("aZ09 -_.=%+!~'()&,;@$[]#^`{}<>\"é日ü")
                             + ["\u00a0", "😀", "\r", "\t", "\x01"]),  # moto takes no '\n'
    min_size=1, max_size=6,
)
_KEYS = st.lists(
    st.lists(_AWKWARD, min_size=1, max_size=3).map("/".join), min_size=0, max_size=30,
    unique=True,
).filter(lambda ks: all(k not in {"."} and "/./" not in f"/{k}/" for k in ks))


def _no_dot_segments(keys):
    return [k for k in keys if all(part not in (".", "..") for part in k.split("/"))]


@pytest.mark.s3
@settings(
    max_examples=25, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(keys=_KEYS, cut=st.lists(st.integers(0, 40), max_size=6), recursive=st.booleans(),
       page=st.integers(1, 4))
def test_union_of_ranges_is_the_serial_listing_on_s3(s3_server, keys, cut, recursive, page):
    keys = _no_dot_segments(keys)
    storage = storage_holding(s3_server, "prop", keys)
    with listing_page_size(page):
        serial = list(storage.walk("")) if recursive else storage.list_dir("")
        serial = sorted(serial, key=lambda f: f.path)
        # Bounds: known names, names between them, and names past both ends.
        pool = sorted(set(keys) | {k + "~" for k in keys} | {"", "\U0001f600" * 7})
        bounds = sorted({pool[i % len(pool)] for i in cut} - {""})
        got = storage.list_ranges("", bounds, recursive=recursive,
                                  policy=RequestPolicy(concurrency=3))
        # Referenced files left out as the pages arrive: the rest, still all counted.
        counted = []
        left_out = {f.path for f in serial[::2]}
        rest = storage.list_many([("", bounds, recursive)], exclude=left_out,
                                 progress=lambda _r, files, _b: counted.append(files))
    assert [f.path for f in got] == [f.path for f in serial]  # nothing missed or doubled
    assert got == serial
    assert rest == [f for f in serial if f.path not in left_out]
    assert sum(counted) == len(serial)


@settings(max_examples=60, deadline=None)
@given(keys=_KEYS, cut=st.lists(st.integers(0, 40), max_size=6), recursive=st.booleans())
def test_union_of_ranges_is_the_serial_listing_in_memory(keys, cut, recursive):
    keys = _no_dot_segments(keys)
    # A file system cannot hold a file and a directory of one name (S3 can: tested above).
    keys = [k for k in keys if not any(o.startswith(k + "/") for o in keys)]
    storage = Storage.for_uri(f"memory://prop-{uuid.uuid4().hex}")
    try:
        for k in keys:
            storage.put_atomic(k, b"x")
        serial = list(storage.walk("")) if recursive else storage.list_dir("")
        serial = sorted(serial, key=lambda f: f.path)
        pool = sorted(set(keys) | {"", "\U0001f600" * 7})
        bounds = sorted({pool[i % len(pool)] for i in cut} - {""})
        assert storage.list_ranges("", bounds, recursive=recursive) == serial
        left_out = {f.path for f in serial[1::2]}
        assert storage.list_many([("", bounds, recursive)], exclude=left_out) == [
            f for f in serial if f.path not in left_out]
    finally:
        storage.delete_many([f.path for f in storage.walk()])


_NAME_CHARS = st.text(alphabet=st.sampled_from(list("ab/=-_.~é") + ["😀", "\u00a0"]),
                      max_size=8)


@settings(max_examples=300, deadline=None)
@given(names=st.lists(_NAME_CHARS, min_size=3, max_size=3, unique=True),
       recursive=st.booleans())
def test_every_name_of_a_range_starts_with_its_prefix(names, recursive):
    after, inside, stop = sorted(names)
    common = range_prefix(after, stop, recursive)
    assert inside.startswith(common) and stop.startswith(common)
    assert after.startswith(common)
    # With a delimiter the prefix holds no '/' (subdirectories roll up as in the directory).
    assert recursive or "/" not in common
    # UTF-8 byte order (S3's) agrees with the code point order the prefix is taken in.
    assert sorted(names, key=lambda n: n.encode()) == [after, inside, stop]
    assert range_prefix(None, stop) == range_prefix(after, None) == ""


@pytest.mark.s3
@pytest.mark.parametrize("recursive", [True, False])
def test_a_range_is_listed_under_the_prefix_of_its_bounds(s3_server, recursive):
    """A store gathers the keys under a request's prefix for every page (moto sorts them
    all): a range asks only for its bounds' common prefix, and still lists every key."""
    storage = Storage.for_uri(s3_server.fresh_uri("narrow"), s3_server.storage_options)
    client = s3_server.client()
    root = storage.root.split("/", 3)[3]
    keys = [f"p={p}/part-{i:03d}-{h}.parquet" for p in (0, 1) for i in range(0, 40, 3)
            for h in ("a", "b")] + [f"part-{i:03d}.parquet" for i in range(20)]
    for k in keys:
        client.put_object(Bucket=s3_server.bucket, Key=f"{root}/{k}", Body=b"x")
    bounds = (["p=0/part-010-a.parquet", "p=0/part-020-b.parquet", "p=1/part-030-a.parquet",
               "part-004.parquet", "part-015.parquet"] if recursive
              else ["part-004.parquet", "part-015.parquet"])
    serial = sorted(storage.walk("") if recursive else storage.list_dir(""),
                    key=lambda f: f.path)
    with S3Proxy(s3_server.endpoint_url, latency=0.0) as proxy:
        proxied = Storage.for_uri(storage.root, proxy.storage_options())
        got = proxied.list_ranges("", bounds, recursive=recursive)
        asked = {urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)["prefix"][0]
                 for kind, path in proxy.requests if kind == "LIST"}
    assert got == serial
    expected = {f"{root}/" + range_prefix(a, b, recursive) for a, b in ranges_of(bounds)}
    assert asked == expected
    # Narrowed: into a partition, and (with or without a delimiter) to the files' stem.
    assert f"{root}/part-0" in asked
    assert not recursive or {f"{root}/p=0/part-0", f"{root}/p="} <= asked


# ---- VACUUM on S3 through the proxy ---------------------------------------------------


def _backdate(bucket: str, prefix: str, days: int) -> None:
    """Set the LastModified of every key under `prefix` `days` back (in the moto server
    this process runs)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    fake = s3_backends[DEFAULT_ACCOUNT_ID]["global"].buckets[bucket]
    when = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(days=days)
    for name in list(fake.keys.keys()):
        if name.startswith(prefix):
            for key in fake.keys.getlist(name):
                key.last_modified = when


def _make_table(s3_server, *, partitioned: bool, appends: int = 6, junk: int = 40):
    """A deltalake table on S3 (appends, one overwrite: removes with fresh tombstones) plus
    `junk` unreferenced files, everything dated 30 days back. Returns (uri, junk paths)."""
    from deltalake import write_deltalake

    uri = s3_server.fresh_uri("vac")
    opts = s3_server.object_store_options
    for i in range(appends):
        data = pa.table({
            "id": pa.array(range(i * 10, i * 10 + 10), pa.int64()),
            "p": pa.array([f"v{j % 3}" for j in range(10)]),
            "q": pa.array([f"w{j % 2}" for j in range(10)]),
        })
        write_deltalake(uri, data, mode="overwrite" if i == 2 else "append",
                        partition_by=["p", "q"] if partitioned else None,
                        storage_options=opts)
    client = s3_server.client()
    prefix = uri.split("/", 3)[3]
    junk_paths = []
    for i in range(junk):
        rel = (f"p=v{i % 3}/q=w{i % 2}/junk-{i:04d}.parquet" if partitioned
               else f"junk-{i:04d}.parquet")
        client.put_object(Bucket=s3_server.bucket, Key=f"{prefix}/{rel}", Body=b"j")
        junk_paths.append(rel)
    _backdate(s3_server.bucket, prefix + "/", 30)
    return uri, sorted(junk_paths)


def _live(uri: str, opts) -> set[str]:
    from deltalake import DeltaTable

    return set(DeltaTable(uri, storage_options=opts).file_uris())


def _serial_plan(uri: str, storage_options) -> tuple[str, ...]:
    """The dry run's files with one listing per directory (no key ranges)."""
    import delta_ops.engine.local as local

    old = local.KEYS_PER_RANGE
    local.KEYS_PER_RANGE = 10**9
    try:
        return vacuum(uri, storage_options=storage_options, dry_run=True,
                      retention_hours=1, force_retention=True).files
    finally:
        local.KEYS_PER_RANGE = old


@pytest.fixture
def tiny_ranges(monkeypatch):
    """Many ranges and pages on a small table: 3 known names a range, 2 keys a page."""
    import delta_ops.engine.local as local

    monkeypatch.setattr(local, "KEYS_PER_RANGE", 3)
    monkeypatch.setattr(_S3Backend, "page_size", 2)
    monkeypatch.setattr(_S3Backend, "delete_batch", 7)


@pytest.mark.s3
@pytest.mark.parametrize("partitioned", [False, True])
def test_vacuum_sends_no_head_and_batched_deletes(s3_server, partitioned, monkeypatch):
    """The listing proved the candidates exist: deleting sends DeleteObjects batches only
    (the old code sent one HEAD and one DELETE per file)."""
    monkeypatch.setattr(_S3Backend, "delete_batch", 7)
    uri, junk = _make_table(s3_server, partitioned=partitioned, junk=30)
    with S3Proxy(s3_server.endpoint_url, latency=0.0) as proxy:
        opts = proxy.storage_options()
        planned = vacuum(uri, storage_options=opts, dry_run=True, retention_hours=1,
                         force_retention=True)
        assert list(planned.files) == junk
        dry = proxy.counts()
        proxy.reset()
        done = vacuum(uri, storage_options=opts, retention_hours=1, force_retention=True,
                      dry_run=False)
        counts = proxy.counts()
    assert done.files == planned.files and done.messages == ()
    # The run is the dry run's requests plus the DeleteObjects batches, the re-read right
    # before deleting of what was committed since the plan (`prove_unchanged_since_plan`:
    # the log after the plan's version, `_staged_commits` and its subdirectories, three
    # LISTs) and the record of the run in `_delta_log/_last_vacuum_info` (one HEAD for the
    # record it may replace, one PUT); nothing else: no HEAD or DELETE per file.
    assert counts.pop("DeleteObjects") == math.ceil(len(junk) / 7), counts
    expected = dict(dry)
    for kind, extra in (("LIST", 3), ("HEAD", 1), ("PUT", 1)):
        expected[kind] = expected.get(kind, 0) + extra
    assert counts == expected
    left = {f.path for f in Storage.for_uri(uri, s3_server.storage_options).walk("")}
    assert not set(junk) & left


@pytest.mark.s3
@pytest.mark.parametrize("partitioned", [False, True])
def test_ranges_plan_equals_serial_plan_with_slowdown(s3_server, partitioned, tiny_ranges):
    uri, junk = _make_table(s3_server, partitioned=partitioned, junk=25)
    serial = _serial_plan(uri, s3_server.storage_options)
    assert list(serial) == junk
    with S3Proxy(s3_server.endpoint_url, latency=0.002, slowdown=0.05, seed=7) as proxy:
        opts = proxy.storage_options()
        planned = vacuum(uri, storage_options=opts, dry_run=True, retention_hours=1,
                         force_retention=True)
        assert planned.files == serial
        done = vacuum(uri, storage_options=opts, retention_hours=1, force_retention=True,
                      dry_run=False)
        counts = proxy.counts()
    assert done.files == serial
    assert counts.get("SlowDown", 0) > 0, counts  # the run met SlowDown answers and completed
    assert counts["LIST"] > 5  # many ranges and pages
    left = {f.path for f in Storage.for_uri(uri, s3_server.storage_options).walk("")}
    assert not set(junk) & left
    live = _live(uri, s3_server.object_store_options)
    assert all(u.split("/", 4)[4] in left for u in live)


@pytest.mark.s3
def test_heavy_slowdown_still_completes(s3_server):
    storage = Storage.for_uri(s3_server.fresh_uri("slow"), s3_server.storage_options)
    client = s3_server.client()
    prefix = storage.root.split("/", 3)[3]
    names = [f"k{i:04d}" for i in range(60)]
    for n in names:
        client.put_object(Bucket=s3_server.bucket, Key=f"{prefix}/{n}", Body=b"x")
    with S3Proxy(s3_server.endpoint_url, latency=0.0, slowdown=0.4, seed=3) as proxy:
        through = Storage.for_uri(storage.root, proxy.storage_options())
        old = _S3Backend.page_size
        _S3Backend.page_size = 5
        try:
            policy = RequestPolicy(concurrency=8, attempts=40, base_delay=0.001, max_delay=0.02)
            listed = through.list_ranges("", range_bounds(names, 5), policy=policy)
        finally:
            _S3Backend.page_size = old
        assert [f.path for f in listed] == names
        report = through.delete_files(names, policy=policy)
        counts = proxy.counts()
    assert report.failed == () and report.deleted == len(names)
    assert counts["SlowDown"] > 5
    assert storage.list_dir("") == []


@pytest.mark.s3
def test_a_key_that_keeps_failing_is_reported_by_name(s3_server):
    storage = Storage.for_uri(s3_server.fresh_uri("fail"), s3_server.storage_options)
    storage.put_atomic("a.parquet", b"x")
    with S3Proxy(s3_server.endpoint_url, latency=0.0, slowdown=1.0) as proxy:
        through = Storage.for_uri(storage.root, proxy.storage_options())
        policy = RequestPolicy(attempts=3, base_delay=0.001, max_delay=0.002)
        report = through.delete_files(["a.parquet"], policy=policy)
        assert proxy.counts()["SlowDown"] == 3
    assert report.deleted == 0
    assert [p for p, _ in report.failed] == ["a.parquet"]
    assert "SlowDown" in report.failed[0][1]
    from delta_ops.errors import StorageError

    with S3Proxy(s3_server.endpoint_url, latency=0.0, slowdown=1.0) as proxy:
        through = Storage.for_uri(storage.root, proxy.storage_options())
        engine = LocalEngine(policy=RequestPolicy(attempts=2, base_delay=0.001))
        with pytest.raises(StorageError, match=r"1 of 1 files were not deleted.*a\.parquet"):
            engine.delete_files(through, ["a.parquet"])
    assert storage.exists("a.parquet")


@pytest.mark.s3
def test_concurrent_deltalake_appends_are_never_touched(s3_server, tiny_ranges):
    from deltalake import write_deltalake

    uri, junk = _make_table(s3_server, partitioned=True, junk=30)
    serial = _serial_plan(uri, s3_server.storage_options)
    stop = threading.Event()
    errors: list[BaseException] = []
    opts = s3_server.object_store_options

    def append() -> None:
        i = 0
        while not stop.is_set():
            try:
                write_deltalake(uri, pa.table({
                    "id": pa.array([1000 + i], pa.int64()), "p": ["v1"], "q": ["w0"],
                }), mode="append", partition_by=["p", "q"], storage_options=opts)
            except Exception as exc:  # noqa: BLE001 - reported by the assertion below
                errors.append(exc)
                return
            i += 1

    with S3Proxy(s3_server.endpoint_url, latency=0.01) as proxy:
        writer = threading.Thread(target=append)
        writer.start()
        try:
            time.sleep(0.3)
            done = vacuum(uri, storage_options=proxy.storage_options(), retention_hours=1,
                          force_retention=True, dry_run=False)
        finally:
            time.sleep(0.3)
            stop.set()
            writer.join()
    assert not errors
    assert done.files == serial  # nothing the appends wrote is in the plan
    left = {f.path for f in Storage.for_uri(uri, s3_server.storage_options).walk("")}
    live = _live(uri, opts)
    assert len(live) > 0
    assert all(u.split("/", 4)[4] in left for u in live)
    from deltalake import DeltaTable

    assert DeltaTable(uri, storage_options=opts).to_pyarrow_table().num_rows >= 40


_KILLED_RUN = """
import sys
from delta_ops.engine.local import LocalEngine
from delta_ops.maintenance.vacuum import vacuum
from delta_ops.storage.s3 import _S3Backend
from delta_ops.storage.parallel import RequestPolicy
_S3Backend.delete_batch = 4
endpoint = sys.argv[2]
opts = {"endpoint_url": endpoint, "key": "testing", "secret": "testing",
        "client_kwargs": {"region_name": "us-east-1"}}
print("planning", flush=True)
r = vacuum(sys.argv[1], storage_options=opts, retention_hours=1, force_retention=True,
           dry_run=False, engine=LocalEngine(policy=RequestPolicy(concurrency=2)))
print("done", r.num_files, flush=True)
"""


@pytest.mark.s3
def test_kill_9_mid_delete_ten_times_then_a_rerun_finishes(s3_server, tmp_path):
    uri, junk = _make_table(s3_server, partitioned=False, junk=400)
    opts = s3_server.object_store_options
    live_before = _live(uri, opts)
    script = tmp_path / "run.py"
    script.write_text(_KILLED_RUN)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    rng = random.Random(24)
    storage = Storage.for_uri(uri, s3_server.storage_options)
    with S3Proxy(s3_server.endpoint_url, latency=0.02) as proxy:
        for _ in range(10):
            proxy.reset()
            target = rng.randint(1, 6)
            proc = subprocess.Popen(
                [sys.executable, str(script), uri, proxy.endpoint_url], env=env,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )
            deadline = time.monotonic() + 120
            while proxy.counts().get("DeleteObjects", 0) < target:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline
                time.sleep(0.005)
            os.kill(proc.pid, signal.SIGKILL)
            proc.communicate()
            assert proc.returncode == -signal.SIGKILL
            left = {f.path for f in storage.walk("")}
            assert set(junk) & left, "every junk file went before the kill"
            # No live file lost: the log's live set and deltalake's reading of the table.
            assert all(u.split("/", 4)[4] in left for u in live_before)
            from deltalake import DeltaTable

            assert DeltaTable(uri, storage_options=opts).to_pyarrow_table().num_rows == 40
        done = subprocess.run(
            [sys.executable, str(script), uri, proxy.endpoint_url], env=env,
            capture_output=True, text=True, check=True,
        )
    assert "done" in done.stdout
    left = {f.path for f in storage.walk("")}
    assert not set(junk) & left
    assert all(u.split("/", 4)[4] in left for u in live_before)
    assert _live(uri, opts) == live_before
    again = vacuum(uri, storage_options=s3_server.storage_options, dry_run=True,
                   retention_hours=1, force_retention=True)
    assert again.files == ()


def test_request_kinds():
    assert request_kind("GET", "/bucket", "list-type=2&prefix=x") == "LIST"
    assert request_kind("GET", "/bucket/key", "") == "GET"
    assert request_kind("POST", "/bucket", "delete") == "DeleteObjects"
    assert request_kind("HEAD", "/bucket/key", "") == "HEAD"
    assert request_kind("PUT", "/bucket/key", "") == "PUT"
    assert request_kind("DELETE", "/bucket/key", "") == "DELETE"


# ---- the root is listed once: its files come in the pages of its subdirectories --------


@pytest.mark.s3
def test_subdirs_listing_remembers_the_files_for_the_next_listing(s3_server):
    uri = s3_server.fresh_uri("once")
    setup = Storage.for_uri(uri, s3_server.storage_options)
    for i in range(9):
        setup.put_atomic(f"f{i:02d}.parquet", b"x" * i)
    setup.put_atomic("p=1/a.parquet", b"y")
    with S3Proxy(s3_server.endpoint_url, latency=0.0) as proxy:
        storage = Storage.for_uri(uri, proxy.storage_options())
        serial = storage.list_dir("")
        old = _S3Backend.page_size
        _S3Backend.page_size = 2
        try:
            proxy.reset()
            dirs = storage.list_subdirs("", follow_symlinks=False, bounds=["f03.parquet"],
                                        remember_files=True)
            first = proxy.counts().get("LIST", 0)
            seen = [0, 0, 0]

            def hook(pages, files, size):
                seen[0] += pages
                seen[1] += files
                seen[2] += size

            got = storage.list_many([("", ["f05.parquet"], False)], follow_symlinks=False,
                                    progress=hook)
            assert proxy.counts().get("LIST", 0) == first  # no second listing of the root
            assert got == serial and dirs == ["p=1"]
            assert seen == [0, 9, sum(range(9))]
            # Once only: the next listing asks the store again.
            assert storage.list_many([("", [], False)]) == serial
            assert proxy.counts()["LIST"] > first
            # Remembered files pass the next listing's exclusions too.
            storage.list_subdirs("", bounds=["f03.parquet"], remember_files=True)
            again = proxy.counts()["LIST"]
            assert storage.list_many([("", [], False)], exclude={"f01.parquet"}) == [
                f for f in serial if f.path != "f01.parquet"]
            assert proxy.counts()["LIST"] == again
            # A write through the storage in between forgets the remembered files.
            storage.list_subdirs("", bounds=[], remember_files=True)
            storage.put_atomic("f99.parquet", b"new")
            assert [f.path for f in storage.list_ranges("", [])][-1] == "f99.parquet"
        finally:
            _S3Backend.page_size = old


@pytest.mark.s3
def test_a_root_of_many_files_is_not_remembered(s3_server, monkeypatch):
    """Past REMEMBER_MAX_FILES the root's files are not kept (memory does not grow with
    the root): the next listing asks the store again and still lists every file."""
    import delta_ops.storage.s3_bulk as s3_bulk

    monkeypatch.setattr(s3_bulk, "REMEMBER_MAX_FILES", 3)
    keys = [f"f{i:02d}.parquet" for i in range(9)] + ["p=1/a.parquet"]
    uri = storage_holding(s3_server, "many", keys).root
    with S3Proxy(s3_server.endpoint_url, latency=0.0) as proxy, listing_page_size(2):
        storage = Storage.for_uri(uri, proxy.storage_options())
        assert storage.list_subdirs("", bounds=["f03.parquet"], remember_files=True) == [
            "p=1"]
        first = proxy.counts()["LIST"]
        got = storage.list_many([("", ["f05.parquet"], False)])
        assert proxy.counts()["LIST"] > first  # listed again
        assert [f.path for f in got] == keys[:9]
        monkeypatch.setattr(s3_bulk, "REMEMBER_MAX_FILES", 9)  # exactly the root's files
        storage.list_subdirs("", bounds=["f03.parquet"], remember_files=True)
        again = proxy.counts()["LIST"]
        assert storage.list_many([("", [], False)]) == got
        assert proxy.counts()["LIST"] == again  # remembered


@pytest.mark.s3
def test_vacuum_lists_an_unpartitioned_root_once(s3_server, tiny_ranges, monkeypatch):
    # Ranges cut after their first page would add requests of their own: not here.
    monkeypatch.setattr(_S3Backend, "split_ranges", False)
    uri, junk = _make_table(s3_server, partitioned=False, junk=25)
    serial = _serial_plan(uri, s3_server.storage_options)
    storage = Storage.for_uri(uri, s3_server.storage_options)
    root_keys = len(storage.list_dir("")) + len(storage.list_subdirs(""))
    log_keys = len(storage.list_dir("_delta_log"))
    with S3Proxy(s3_server.endpoint_url, latency=0.0) as proxy:
        planned = vacuum(uri, storage_options=proxy.storage_options(), dry_run=True,
                         retention_hours=1, force_retention=True)
        lists = proxy.counts()["LIST"]
    assert planned.files == serial
    # Pages of 2 keys: one listing of the root is at least root_keys / 2 pages; two
    # listings (subdirectories, then files) would be twice that.
    assert lists < 2 * math.ceil(root_keys / 2), (lists, root_keys, log_keys)


# ---- a range still paging after its first page is cut into more ranges ----------------

_NAMES = st.text(alphabet=st.sampled_from(list("09afAZ-_./~é😀")), min_size=0, max_size=12)


@settings(max_examples=300, deadline=None)
@given(seen=st.lists(_NAMES, min_size=0, max_size=12), end=_NAMES,
       stop=st.one_of(st.none(), _NAMES), parts=st.integers(0, 20))
def test_extrapolated_bounds_cut_only_the_rest_of_the_range(seen, end, stop, parts):
    from delta_ops.storage.parallel import extrapolated_bounds

    seen = sorted(seen)
    cuts = extrapolated_bounds(seen, end, stop, parts)
    assert len(cuts) <= parts
    assert all("/" not in c and c > end for c in cuts)
    assert all(stop is None or c < stop for c in cuts)
    assert all(a < b for a, b in zip(cuts, cuts[1:], strict=False))


def test_extrapolated_bounds_follow_decimal_and_uuid_names():
    from delta_ops.storage.parallel import extrapolated_bounds

    tail = "-c000.snappy.parquet"
    junk = [f"junk-{i:08d}{tail}" for i in range(250_000, 251_000)]
    cuts = extrapolated_bounds(junk, junk[-1], "part-00000849" + tail)
    assert cuts[:2] == ["junk-00251998-c000", "junk-00252997-c000"] and len(cuts) == 16
    rng = random.Random(3)
    names = sorted(f"part-00000-{uuid.UUID(int=rng.getrandbits(128))}{tail}"
                   for _ in range(20_000))
    cuts = extrapolated_bounds(names[:1000], names[999], None)
    sizes = [sum(1 for n in names if a < n <= b) for a, b in zip(cuts, cuts[1:], strict=False)]
    assert len(cuts) == 16 and all(600 < s < 1500 for s in sizes), sizes


_SKEWED = st.lists(
    st.tuples(st.sampled_from(["junk", "part", "p=1/part", "q"]), st.integers(0, 999)).map(
        lambda t: f"{t[0]}-{t[1]:04d}.parquet"
    ),
    min_size=0, max_size=60, unique=True,
)


@pytest.mark.s3
@settings(
    max_examples=25, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(keys=_SKEWED, cut=st.lists(st.integers(0, 60), max_size=3), recursive=st.booleans(),
       page=st.integers(1, 4))
def test_union_of_split_ranges_is_the_serial_listing_on_s3(s3_server, keys, cut, recursive,
                                                          page):
    """Names that cut well (numbered, bunched before the first bound, as unreferenced
    files are): ranges split after their first page, and still list exactly the serial
    listing."""
    storage = storage_holding(s3_server, "split", keys)
    with listing_page_size(page):
        serial = list(storage.walk("")) if recursive else storage.list_dir("")
        serial = sorted(serial, key=lambda f: f.path)
        pool = sorted(set(keys)) or ["q"]
        bounds = sorted({pool[i % len(pool)].split("/")[0] for i in cut})
        got = storage.list_ranges("", bounds, recursive=recursive,
                                  policy=RequestPolicy(concurrency=3))
    assert [f.path for f in got] == [f.path for f in serial]
    assert got == serial


@pytest.mark.s3
def test_a_bunched_range_is_not_listed_page_after_page(s3_server):
    keys = [f"junk-{i:05d}.parquet" for i in range(120)] + [
        f"part-{i:05d}.parquet" for i in range(30)]
    storage = storage_holding(s3_server, "bunched", keys)
    with listing_page_size(5):
        try:
            got = storage.list_ranges("", ["part-00010.parquet", "part-00020.parquet"])
            backend = storage._backend
            assert [f.path for f in got] == sorted(keys)
            assert backend.longest_chain <= 8, backend.longest_chain  # serially: 27 pages
            _S3Backend.split_ranges = False
            assert storage.list_ranges("", ["part-00010.parquet", "part-00020.parquet"]) == got
            assert backend.longest_chain == 27
        finally:
            _S3Backend.split_ranges = True


@pytest.mark.s3
def test_the_listing_client_shares_the_storage_session(s3_server):
    """One botocore session per storage: the S3 service model is loaded once, not again
    for the client without retries that lists and deletes at the request limit."""
    storage = Storage.for_uri(s3_server.fresh_uri("session"), s3_server.storage_options)
    storage.put_atomic("a.parquet", b"x")
    assert [f.path for f in storage.list_ranges("", [])] == ["a.parquet"]
    backend = storage._backend
    # The bulk client is the light client's twin (not s3fs), built in its session: the
    # same loaded service model.
    assert backend.light and backend._bulk.client is not backend._client
    bulk_model = backend._bulk.client.meta.service_model._service_description
    assert bulk_model is backend._client.meta.service_model._service_description
