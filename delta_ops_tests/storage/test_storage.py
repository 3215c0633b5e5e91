"""Contract tests of `delta_ops.storage.Storage`, run against every backend.

The same `TestStorageContract` runs on the local file system, fsspec's memory file system
and S3 (a real moto server on 127.0.0.1, see `s3_server.py`). Backend-specific behaviour
(URI normalization, the generic fsspec fallback, S3 pagination and batching) follows.
"""

from __future__ import annotations

import errno
import io
import logging
import os
import pickle
import shutil
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from delta_ops.errors import AtomicityUnsupportedError, StorageError
from delta_ops.storage import FileInfo, Storage
from delta_ops.storage.names import listing_has_stats, stat_files, walk_names
from delta_ops.storage.s3 import _S3Backend

LOG = "_delta_log"


def v(version: int) -> str:
    """20-digit zero-padded version, as in Delta log file names."""
    return f"{version:020d}"


class TestStorageContract:
    def test_list_dir_sorted_by_path_with_start(self, storage):
        names = [
            f"{v(0)}.json",
            f"{v(1)}.json",
            f"{v(2)}.json",
            f"{v(9)}.json",
            f"{v(10)}.checkpoint.0000000001.0000000002.parquet",
            f"{v(10)}.checkpoint.0000000002.0000000002.parquet",
            f"{v(10)}.crc",
            f"{v(10)}.json",
            f"{v(10)}.jso-",  # between "...10.jso" and "...10.json": tests start filtering
            f"{v(11)}.json",
            f"{v(100)}.json",
            "_last_checkpoint",
        ]
        for i, name in enumerate(reversed(names)):  # written out of order
            assert storage.put_if_absent(f"{LOG}/{name}", f"content {i}".encode())
        # Files in subdirectories and next to the directory are not listed.
        storage.put_atomic(f"{LOG}/_commits/{v(12)}.uuid.json", b"{}")
        storage.put_atomic(f"{LOG}/_sidecars/a.parquet", b"x")
        storage.put_atomic(f"{LOG}x/{v(3)}.json", b"x")
        storage.put_atomic("top.txt", b"x")

        listed = storage.list_dir(LOG)
        assert [f.path for f in listed] == [f"{LOG}/{n}" for n in sorted(names)]
        assert [f.path for f in listed] == sorted(
            (f.path for f in listed), key=lambda p: p.encode("utf-8")
        )
        assert all(isinstance(f, FileInfo) for f in listed)
        assert {f.path: f.size for f in listed}[f"{LOG}/_last_checkpoint"] == len(b"content 0")

        start = f"{v(10)}.json"
        assert [f.path for f in storage.list_dir(LOG, start=start)] == [
            f"{LOG}/{n}" for n in sorted(names) if n >= start
        ]
        assert [f.path.rsplit("/", 1)[1] for f in storage.list_dir(LOG, start=v(10))] == [
            f"{v(10)}.checkpoint.0000000001.0000000002.parquet",
            f"{v(10)}.checkpoint.0000000002.0000000002.parquet",
            f"{v(10)}.crc",
            f"{v(10)}.jso-",
            f"{v(10)}.json",
            f"{v(11)}.json",
            f"{v(100)}.json",
            "_last_checkpoint",
        ]
        assert [f.path for f in storage.list_dir(LOG, start="_")] == [f"{LOG}/_last_checkpoint"]
        assert storage.list_dir(LOG, start="zzz") == []
        assert [f.path for f in storage.list_dir("")] == ["top.txt"]

    def test_list_dir_of_missing_directory_or_file_is_empty(self, storage):
        assert storage.list_dir("nope") == []
        assert storage.list_dir("nope/deeper", start="0") == []
        assert storage.list_dir("") == []
        storage.put_atomic("file.txt", b"x")
        assert storage.list_dir("file.txt") == []

    def test_list_subdirs(self, storage):
        storage.put_atomic(f"{LOG}/{v(0)}.json", b"{}")
        storage.put_atomic("part=2/x=1/a.parquet", b"a")
        storage.put_atomic("part=1/b.parquet", b"b")
        storage.put_atomic("root.parquet", b"r")
        assert storage.list_subdirs() == [LOG, "part=1", "part=2"]
        assert storage.list_subdirs("part=2") == ["part=2/x=1"]
        assert storage.list_subdirs("part=1") == []
        assert storage.list_subdirs("missing") == []

    def test_walk_is_recursive_with_root_relative_paths(self, storage):
        files = {
            "a.parquet": b"1",
            "p=1/b.parquet": b"22",
            "p=1/q=x/c.parquet": b"333",
            "p=2/q=y/r=z/d.parquet": b"4444",
            f"{LOG}/{v(0)}.json": b"{}",
        }
        for path, data in files.items():
            storage.put_atomic(path, data)
        found = {f.path: f.size for f in storage.walk()}
        assert found == {p: len(d) for p, d in files.items()}
        assert {f.path for f in storage.walk("p=1")} == {"p=1/b.parquet", "p=1/q=x/c.parquet"}
        assert {f.path for f in storage.walk("p=2/q=y")} == {"p=2/q=y/r=z/d.parquet"}
        assert list(storage.walk("missing")) == []

    def test_walk_names_and_stat_files_are_walk_in_two_steps(self, storage):
        files = {
            "a.parquet": b"1",
            "b.parquet": b"22",
            "p=1/c.parquet": b"333",
            "p=1/q=x/d.parquet": b"4444",
        }
        for path, data in files.items():
            storage.put_atomic(path, data)
        everything = {f.path: f for f in storage.walk()}

        def two_steps(directory, recursive=True):
            found = []
            for rel_dir, names in walk_names(storage, directory, recursive=recursive):
                assert names
                found += stat_files(storage, rel_dir, names)
            return sorted(found, key=lambda f: f.path)

        assert two_steps("") == sorted(everything.values(), key=lambda f: f.path)
        assert two_steps("", recursive=False) == storage.list_dir("")
        assert two_steps("p=1") == [everything["p=1/c.parquet"], everything["p=1/q=x/d.parquet"]]
        assert two_steps("missing") == []
        # Names gone since they were listed (or never there) are left out.
        assert stat_files(storage, "p=1", ["gone.parquet", "c.parquet"]) == [
            everything["p=1/c.parquet"]
        ]
        assert stat_files(storage, "missing", ["x"]) == []
        assert listing_has_stats(storage) == (storage.scheme != "file")

    def test_walk_and_list_dir_leave_out_excluded_paths(self, storage):
        files = {
            "a.parquet": b"1",
            "b.parquet": b"22",
            "p=1/c.parquet": b"333",
            "p=1/q=x/d.parquet": b"4444",
            "p=1/q=x/e.parquet": b"55555",
        }
        for path, data in files.items():
            storage.put_atomic(path, data)
        everything = {f.path: f for f in storage.walk()}
        # Paths relative to the root: "c.parquet" names no file (p=1/c.parquet stays).
        exclude = {"b.parquet", "p=1/q=x/d.parquet", "p=1/missing.parquet", "c.parquet"}
        got = {f.path: f for f in storage.walk(exclude=exclude)}
        assert got == {p: f for p, f in everything.items() if p not in exclude}
        assert {f.path for f in storage.walk("p=1", exclude=exclude)} == {
            "p=1/c.parquet", "p=1/q=x/e.parquet"
        }
        assert storage.list_dir("", exclude=exclude) == [everything["a.parquet"]]
        assert storage.list_dir("p=1/q=x", exclude=frozenset()) == storage.list_dir("p=1/q=x")
        assert storage.list_dir("p=1/q=x", start="e", exclude={"p=1/q=x/d.parquet"}) == [
            everything["p=1/q=x/e.parquet"]
        ]
        assert list(storage.walk("missing", exclude=exclude)) == []
        assert storage.list_dir("missing", exclude=exclude) == []

    def test_put_if_absent_never_overwrites(self, storage):
        path = f"{LOG}/{v(0)}.json"
        assert storage.put_if_absent(path, b"original") is True
        assert storage.put_if_absent(path, b"intruder") is False
        assert storage.read(path) == b"original"
        # Zero bytes is the s3fs trap: open(path, "xb") with nothing written "touches"
        # the key unconditionally. It must not overwrite here.
        assert storage.put_if_absent(path, b"") is False
        assert storage.read(path) == b"original"
        assert storage.info(path).size == len(b"original")

    def test_put_if_absent_zero_bytes_creates(self, storage):
        assert storage.put_if_absent("deep/er/empty", b"") is True
        assert storage.read("deep/er/empty") == b""
        assert storage.put_if_absent("deep/er/empty", b"late") is False
        assert storage.read("deep/er/empty") == b""

    def test_put_if_absent_leaves_no_temporary_files(self, storage):
        for i in range(3):
            storage.put_if_absent(f"{LOG}/{v(i % 2)}.json", f"{i}".encode())
            storage.put_atomic(f"{LOG}/_last_checkpoint", f"{i}".encode())
        assert sorted(f.path for f in storage.walk()) == [
            f"{LOG}/{v(0)}.json",
            f"{LOG}/{v(1)}.json",
            f"{LOG}/_last_checkpoint",
        ]

    def test_concurrent_put_if_absent_has_exactly_one_winner(self, storage):
        threads = 8
        for round_ in range(3):
            path = f"{LOG}/{v(round_)}.json"
            results: list[bool | None] = [None] * threads
            errors: list[BaseException] = []
            barrier = threading.Barrier(threads)

            def attempt(
                i: int, path: str = path, results=results, barrier=barrier, errors=errors
            ) -> None:
                try:
                    barrier.wait()
                    results[i] = storage.put_if_absent(path, f"writer {i}".encode() * 100)
                except BaseException as exc:  # surfaced below, in the main thread
                    errors.append(exc)

            workers = [threading.Thread(target=attempt, args=(i,)) for i in range(threads)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            assert errors == []
            assert results.count(True) == 1, results
            assert results.count(False) == threads - 1
            winner = results.index(True)
            assert storage.read(path) == f"writer {winner}".encode() * 100

    def test_put_atomic_creates_and_replaces(self, storage):
        path = f"{LOG}/_last_checkpoint"
        storage.put_atomic(path, b'{"version": 10}')
        assert storage.read(path) == b'{"version": 10}'
        storage.put_atomic(path, b'{"version": 20, "size": 3}')
        assert storage.read(path) == b'{"version": 20, "size": 3}'
        assert storage.info(path).size == len(b'{"version": 20, "size": 3}')
        storage.put_atomic(path, b"")
        assert storage.read(path) == b""

    def test_delete_is_idempotent(self, storage):
        storage.put_atomic("a/b.parquet", b"x")
        assert storage.delete("a/b.parquet") is True
        assert storage.exists("a/b.parquet") is False
        assert storage.delete("a/b.parquet") is False
        assert storage.delete("never/was.parquet") is False

    def test_delete_many_counts_what_existed(self, storage):
        for name in ("a", "b", "c", "d"):
            storage.put_atomic(f"p=1/{name}.parquet", name.encode())
        count = storage.delete_many(
            ["p=1/a.parquet", "p=1/b.parquet", "p=1/missing.parquet", "p=1/a.parquet", "x/y"]
        )
        assert count == 2
        assert [f.path for f in storage.list_dir("p=1")] == ["p=1/c.parquet", "p=1/d.parquet"]
        assert storage.delete_many([]) == 0
        assert storage.delete_many(iter(["p=1/c.parquet"])) == 1

    def test_delete_many_validates_every_path_before_deleting(self, storage):
        storage.put_atomic("keep.parquet", b"x")
        with pytest.raises(StorageError):
            storage.delete_many(["keep.parquet", "../escape"])
        assert storage.exists("keep.parquet")

    def test_info_size_and_mtime(self, storage):
        before = int(time.time() * 1000)
        storage.put_atomic("dir/f.bin", b"12345")
        after = int(time.time() * 1000)
        info = storage.info("dir/f.bin")
        assert info == FileInfo("dir/f.bin", 5, info.modification_time)
        # Some stores keep whole seconds only: allow that much slack either side.
        assert before - 2000 <= info.modification_time <= after + 2000
        [listed] = storage.list_dir("dir")
        assert listed.size == 5
        assert abs(listed.modification_time - info.modification_time) <= 1000
        assert storage.info("dir/missing") is None
        assert storage.info("dir") is None  # a directory is no file
        assert storage.exists("dir/f.bin") and not storage.exists("dir/missing")

    def test_read_missing_file_raises_naming_it(self, storage):
        with pytest.raises(StorageError) as caught:
            storage.read(f"{LOG}/{v(7)}.json")
        assert f"{LOG}/{v(7)}.json" in str(caught.value)
        assert caught.value.file == storage.absolute_uri(f"{LOG}/{v(7)}.json")
        with pytest.raises(StorageError, match=f"{v(7)}"):
            storage.read_text(f"{LOG}/{v(7)}.json")
        with pytest.raises(StorageError, match=f"{v(7)}"):
            storage.open_input(f"{LOG}/{v(7)}.json")

    def test_read_text(self, storage):
        storage.put_atomic("t.json", '{"é": 1}\n'.encode())
        assert storage.read_text("t.json") == '{"é": 1}\n'
        storage.put_atomic("bad.json", b"\xff\xfe")
        with pytest.raises(StorageError, match="UTF-8"):
            storage.read_text("bad.json")

    def test_open_input_is_readable_by_pyarrow_parquet(self, storage):
        table = pa.table({"id": list(range(100)), "s": [str(i) for i in range(100)]})
        sink = io.BytesIO()
        pq.write_table(table, sink, row_group_size=10)
        storage.put_atomic("p=1/part-0.parquet", sink.getvalue())
        with storage.open_input("p=1/part-0.parquet") as f:
            assert pq.read_table(f).equals(table)
        with storage.open_input("p=1/part-0.parquet") as f:
            assert pq.ParquetFile(f).metadata.num_rows == 100

    @pytest.mark.parametrize(
        "bad",
        [
            "../x",
            "..",
            "a/../../x",
            "a/..",
            "/etc/passwd",
            "//host/share",
            "s3://other-bucket/x",
            "file:///etc/passwd",
            "memory://other/x",
            "C:\\x",
            "a\\..\\..\\x",
            "..\\x",
            "%2e%2e/x",
            "a\x00b",
        ],
    )
    def test_path_escapes_are_rejected(self, storage, bad):
        operations = [
            lambda: storage.read(bad),
            lambda: storage.info(bad),
            lambda: storage.exists(bad),
            lambda: storage.open_input(bad),
            lambda: storage.put_if_absent(bad, b"x"),
            lambda: storage.put_atomic(bad, b"x"),
            lambda: storage.delete(bad),
            lambda: storage.delete_many([bad]),
            lambda: storage.list_dir(bad),
            lambda: list(storage.walk(bad)),
            lambda: storage.list_subdirs(bad),
            lambda: storage.remove_empty_dirs(bad),
            lambda: storage.child(bad),
            lambda: storage.absolute_uri(bad),
        ]
        for operation in operations:
            with pytest.raises(StorageError) as caught:
                operation()
            assert storage.root in str(caught.value)
            assert repr(bad) in str(caught.value)
        assert list(storage.walk()) == []

    def test_empty_file_path_is_rejected(self, storage):
        for operation in (
            lambda: storage.read(""),
            lambda: storage.put_if_absent("", b"x"),
            lambda: storage.delete("./"),
        ):
            with pytest.raises(StorageError, match="empty"):
                operation()

    def test_paths_are_normalized(self, storage):
        storage.put_atomic("a//b/./c.txt", b"x")
        assert [f.path for f in storage.walk()] == ["a/b/c.txt"]
        assert storage.read("a/b/c.txt/") == b"x"
        assert [f.path for f in storage.list_dir("a/b/")] == ["a/b/c.txt"]

    def test_child_is_rooted_below(self, storage):
        storage.put_atomic(f"{LOG}/{v(0)}.json", b"zero")
        log = storage.child(LOG)
        assert log.root == storage.absolute_uri(LOG) == f"{storage.root}/{LOG}"
        assert log.read(f"{v(0)}.json") == b"zero"
        assert [f.path for f in log.list_dir("")] == [f"{v(0)}.json"]
        assert log.put_if_absent(f"{v(1)}.json", b"one")
        assert storage.read(f"{LOG}/{v(1)}.json") == b"one"
        with pytest.raises(StorageError):
            log.read(f"../{LOG}/{v(0)}.json")
        assert storage.child("") is storage

    def test_absolute_uri(self, storage):
        assert storage.absolute_uri("") == storage.root
        assert storage.absolute_uri("a/b.parquet") == f"{storage.root}/a/b.parquet"
        assert storage.root.startswith(f"{storage.scheme}://")
        assert not storage.root.endswith("/")

    def test_config_round_trip(self, storage):
        storage.put_atomic("x.txt", b"hello")
        config = storage.to_config()
        assert config == {"uri": storage.root, "storage_options": storage.storage_options}
        rebuilt = Storage.from_config(config)
        assert rebuilt.root == storage.root and rebuilt.scheme == storage.scheme
        assert rebuilt.read("x.txt") == b"hello"
        unpickled = pickle.loads(pickle.dumps(storage))
        assert unpickled.root == storage.root
        assert unpickled.read("x.txt") == b"hello"
        with pytest.raises(StorageError):
            Storage.from_config({"storage_options": {}})

    def test_repr_and_logs_hide_storage_options(self, storage, caplog):
        secret_values = [str(v) for v in storage.storage_options.values() if isinstance(v, str)]
        shown = Storage.for_uri(storage.root, {**storage.storage_options, "token": "TOPSECRET"})
        assert repr(shown) == f"Storage({storage.root!r})"
        assert str(shown) == repr(shown)
        # Only our own logs: botocore itself logs signed headers at DEBUG.
        with caplog.at_level(logging.DEBUG, logger="delta_ops"):
            shown.put_if_absent("s.txt", b"x")
            shown.read("s.txt")
            shown.list_dir("")
            shown.delete_many(["s.txt"])
        ours = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("delta_ops"))
        assert "s.txt" in ours  # something was logged, so the check below means something
        for secret in ["TOPSECRET", *[s for s in secret_values if len(s) > 3]]:
            assert secret not in repr(shown)
            assert secret not in ours

    def test_remove_empty_dirs(self, storage):
        storage.put_atomic("p=1/q=1/a.parquet", b"a")
        storage.put_atomic("p=2/b.parquet", b"b")
        storage.put_atomic(f"{LOG}/{v(0)}.json", b"{}")
        storage.delete("p=1/q=1/a.parquet")
        removed = storage.remove_empty_dirs()
        if storage.scheme == "file":
            assert removed == ["p=1/q=1", "p=1"]
        else:
            assert removed == []  # object stores have no directories to remove
        assert storage.list_subdirs() == [LOG, "p=2"]
        assert storage.remove_empty_dirs() == []
        assert storage.exists("p=2/b.parquet")

    def test_supports_atomic_put_if_absent(self, storage):
        assert storage.supports_atomic_put_if_absent is True


# ---- URI handling -------------------------------------------------------------------


def test_for_uri_normalizes_local_forms(tmp_path, monkeypatch):
    base = tmp_path / "a" / "b"
    forms = [
        str(base),
        f"{base}/",
        f"file:{base}",
        f"file://{base}",
        f"file://{base}//",
        f"file://localhost{base}",
        f"{base}/../b",
    ]
    roots = {Storage.for_uri(form).root for form in forms}
    assert roots == {f"file://{base}"}
    monkeypatch.chdir(tmp_path)
    relative = Storage.for_uri("a/b")
    assert relative.root == f"file://{base}" and relative.scheme == "file"
    assert Storage.for_uri("/a/b").root == Storage.for_uri("file:/a/b").root
    assert Storage.for_uri("file:///a/b").root == "file:///a/b"


def test_for_uri_other_schemes():
    s3 = Storage.for_uri("s3a://bucket/some/table/", {"key": "k", "secret": "s"})
    assert (s3.root, s3.scheme) == ("s3://bucket/some/table", "s3")
    assert Storage.for_uri("s3://bucket").root == "s3://bucket"
    assert Storage.for_uri("S3://bucket/x").root == "s3://bucket/x"
    assert s3.supports_atomic_put_if_absent
    mem = Storage.for_uri("memory://name/sub/")
    assert (mem.root, mem.scheme) == ("memory://name/sub", "memory")
    assert Storage.for_uri("memory:///name").root == "memory://name"


@pytest.mark.parametrize(
    "uri", ["", "   ", "file://otherhost/x", "file:relative", "s3://", "s3:bucket", "nosuch://x"]
)
def test_for_uri_rejects_bad_uris(uri):
    with pytest.raises(StorageError):
        Storage.for_uri(uri)


def test_local_put_if_absent_creates_parent_directories(tmp_path):
    st = Storage.for_uri(str(tmp_path / "t"))
    assert st.put_if_absent(f"{LOG}/_commits/{v(1)}.x.json", b"1")
    assert (tmp_path / "t" / LOG / "_commits" / f"{v(1)}.x.json").read_bytes() == b"1"


def test_local_files_are_not_private(tmp_path):
    st = Storage.for_uri(str(tmp_path))
    st.put_if_absent("a", b"1")
    st.put_atomic("b", b"2")
    umask = os.umask(0)
    os.umask(umask)
    for name in ("a", "b"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o666 & ~umask


def test_local_without_hard_links(tmp_path, monkeypatch):
    st = Storage.for_uri(str(tmp_path))

    def no_link(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_link)
    with pytest.raises(AtomicityUnsupportedError, match="accept_non_atomic"):
        st.put_if_absent("x.json", b"1")
    assert list(st.walk()) == []  # the temp file is gone too
    assert st.put_if_absent("x.json", b"1", accept_non_atomic=True) is True
    assert st.put_if_absent("x.json", b"2", accept_non_atomic=True) is False
    assert st.read("x.json") == b"1"
    assert [f.path for f in st.walk()] == ["x.json"]


def test_latency_bound(tmp_path):
    assert Storage.for_uri(str(tmp_path)).latency_bound is False
    assert Storage.for_uri("memory://latency").latency_bound is True
    assert Storage.for_uri("s3://bucket/t", {"key": "k", "secret": "s"}).latency_bound is True


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs symlinks and FIFOs")
def test_local_exclusion_lists_links_and_special_files_as_walk(tmp_path):
    root = tmp_path / "t"
    st = Storage.for_uri(str(root))
    st.put_atomic("p=1/a.parquet", b"a")
    st.put_atomic("p=1/b.parquet", b"bb")
    st.put_atomic("top.parquet", b"t")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "o.parquet").write_bytes(b"ooo")
    for directory in (root / "p=1", root):
        os.symlink(outside / "o.parquet", directory / "link.parquet")  # listed: a file
        os.symlink(outside, directory / "linked_dir")  # a directory link: not followed
        os.symlink(root / "nowhere", directory / "broken.parquet")  # skipped
        os.mkfifo(directory / "fifo")  # not a regular file: skipped
    def by_path(files):
        return sorted(files, key=lambda f: f.path)

    walked = by_path(st.walk())
    assert {f.path: f.size for f in walked} == {
        "p=1/a.parquet": 1, "p=1/b.parquet": 2, "p=1/link.parquet": 3,
        "top.parquet": 1, "link.parquet": 3,
    }
    assert by_path(st.walk(exclude=set())) == walked
    assert by_path(st.walk("p=1", exclude={"p=1/a.parquet"})) == [
        f for f in walked if f.path in ("p=1/b.parquet", "p=1/link.parquet")
    ]
    for directory in ("", "p=1"):
        assert st.list_dir(directory, exclude=set()) == st.list_dir(directory)
    assert [f.path for f in st.list_dir("")] == ["link.parquet", "top.parquet"]


def test_local_exclusion_stats_only_the_files_left(tmp_path, monkeypatch):
    st = Storage.for_uri(str(tmp_path))
    for i in range(6):
        st.put_atomic(f"p=1/f{i}.parquet", b"x")
        st.put_atomic(f"f{i}.parquet", b"x")
    stat_names: list[str] = []
    real_stat = os.stat

    def counting_stat(path, *args, **kwargs):
        stat_names.append(os.fspath(path).rsplit("/", 1)[-1])
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", counting_stat)
    exclude = {f"p=1/f{i}.parquet" for i in range(5)} | {f"f{i}.parquet" for i in range(1, 6)}
    assert [f.path for f in st.walk("p=1", exclude=exclude)] == ["p=1/f5.parquet"]
    assert [f.path for f in st.list_dir("", exclude=exclude)] == ["f0.parquet"]
    assert sorted(n for n in stat_names if n.endswith(".parquet")) == ["f0.parquet", "f5.parquet"]


def test_local_exclusion_skips_what_goes_between_listing_and_stat(tmp_path, monkeypatch):
    st = Storage.for_uri(str(tmp_path))
    for name in ("a", "b", "c"):
        st.put_atomic(f"p=1/{name}.parquet", b"x")
        st.put_atomic(f"p=2/{name}.parquet", b"x")
    backend = st._backend
    real_walk_names, real_list_names = backend.walk_names, backend.list_names

    def walk_names_then_delete(native_dir):
        for rel_dir, names in real_walk_names(native_dir):
            (tmp_path / "p=1" / "b.parquet").unlink(missing_ok=True)
            yield rel_dir, names

    def list_names_then_remove_dir(native_dir, start):
        names = real_list_names(native_dir, start)
        shutil.rmtree(tmp_path / "p=2")
        return names

    monkeypatch.setattr(backend, "walk_names", walk_names_then_delete)
    monkeypatch.setattr(backend, "list_names", list_names_then_remove_dir)
    assert {f.path for f in st.walk("p=1", exclude=set())} == {"p=1/a.parquet", "p=1/c.parquet"}
    assert st.list_dir("p=2", exclude=set()) == []


def test_local_errors_become_storage_errors(tmp_path):
    st = Storage.for_uri(str(tmp_path))
    st.put_atomic("d/f", b"x")
    with pytest.raises(StorageError, match="cannot read"):
        st.read("d")
    with pytest.raises(StorageError, match="cannot"):
        st.put_atomic("d/f/g", b"x")  # a file where a directory is needed
    with pytest.raises(StorageError, match="cannot delete"):
        st.delete("d")


def test_generic_fsspec_backend_refuses_non_atomic_puts(tmp_path):
    # 'local://' is fsspec's LocalFileSystem, reached through the generic backend.
    st = Storage.for_uri(f"local://{tmp_path}")
    assert st.scheme == "local"
    assert st.supports_atomic_put_if_absent is False
    with pytest.raises(AtomicityUnsupportedError):
        st.put_if_absent("a/x.json", b"1")
    assert st.put_if_absent("a/x.json", b"1", accept_non_atomic=True) is True
    assert st.put_if_absent("a/x.json", b"2", accept_non_atomic=True) is False
    st.put_atomic("a/y.json", b"22")
    assert [(f.path, f.size) for f in st.list_dir("a")] == [("a/x.json", 1), ("a/y.json", 2)]
    assert [f.path for f in st.list_dir("a", start="y")] == ["a/y.json"]
    assert {f.path for f in st.walk()} == {"a/x.json", "a/y.json"}
    assert st.list_subdirs() == ["a"]
    assert st.info("a/x.json").size == 1 and st.info("a/nope") is None
    assert st.read("a/y.json") == b"22"
    assert st.delete_many(["a/x.json", "a/nope"]) == 1
    with pytest.raises(StorageError, match="not found"):
        st.read("a/x.json")


# ---- S3 specifics -------------------------------------------------------------------


@pytest.mark.s3
def test_s3_listing_pages_and_start_after(s3_server, monkeypatch):
    monkeypatch.setattr(_S3Backend, "page_size", 3)
    st = Storage.for_uri(s3_server.fresh_uri("pages"), s3_server.storage_options)
    names = [f"{v(i)}.json" for i in range(11)] + ["_last_checkpoint"]
    for name in names:
        st.put_atomic(f"{LOG}/{name}", b"x")
    st.put_atomic(f"{LOG}/_commits/{v(11)}.u.json", b"x")
    assert [f.path for f in st.list_dir(LOG)] == [f"{LOG}/{n}" for n in names]
    assert [f.path for f in st.list_dir(LOG, start=v(5))] == [f"{LOG}/{n}" for n in names[5:]]
    assert len(list(st.walk())) == len(names) + 1
    assert st.list_subdirs(LOG) == [f"{LOG}/_commits"]


@pytest.mark.s3
def test_s3_delete_many_batches_and_existence_listing(s3_server, monkeypatch):
    monkeypatch.setattr(_S3Backend, "delete_batch", 2)
    monkeypatch.setattr(_S3Backend, "list_threshold", 3)
    monkeypatch.setattr(_S3Backend, "page_size", 2)
    st = Storage.for_uri(s3_server.fresh_uri("batches"), s3_server.storage_options)
    for i in range(7):
        st.put_atomic(f"p=1/f{i}.parquet", b"x")
    st.put_atomic("p=2/g.parquet", b"x")
    # p=1 has enough keys to be checked by a listing, p=2 by HEAD requests.
    doomed = [f"p=1/f{i}.parquet" for i in (1, 2, 4, 5)] + ["p=1/nope.parquet", "p=1/f9"]
    doomed += ["p=2/g.parquet", "p=2/nope.parquet"]
    assert st.delete_many(doomed) == 5
    assert {f.path for f in st.walk()} == {f"p=1/f{i}.parquet" for i in (0, 3, 6)}


@pytest.mark.s3
def test_s3_conditional_put_is_enforced_by_the_server(s3_server):
    """The 'exactly one writer' guarantee comes from S3's If-None-Match, not a pre-check."""
    uri = s3_server.fresh_uri("cond")
    st = Storage.for_uri(uri, s3_server.storage_options)
    bucket_key = uri[len("s3://") :].split("/", 1)
    # Another client creates the key behind our back; no cache may hide it.
    assert st.exists("k") is False
    s3_server.client().put_object(Bucket=bucket_key[0], Key=f"{bucket_key[1]}/k", Body=b"them")
    assert st.put_if_absent("k", b"us") is False
    assert st.read("k") == b"them"


@pytest.mark.s3
def test_s3_accepts_object_store_option_names(s3_server):
    st = Storage.for_uri(s3_server.fresh_uri("aws-names"), s3_server.object_store_options)
    assert st.put_if_absent("a.json", b"1")
    assert st.read("a.json") == b"1"
    assert st.storage_options == s3_server.object_store_options


# ---- listing for deletion: symbolic links are neither listed nor followed -------------


def _linked_tree(tmp_path):
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "o.bin").write_bytes(b"o")
    (outside / "deep" / "d.bin").write_bytes(b"d")
    (outside / "empty").mkdir()
    (root / "real" / "sub").mkdir(parents=True)
    (root / "real" / "f.bin").write_bytes(b"f")
    (root / "real" / "sub" / "g.bin").write_bytes(b"g")
    (root / "top.bin").write_bytes(b"t")
    (root / "linkdir").symlink_to(outside, target_is_directory=True)
    (root / "real" / "nested").symlink_to(outside / "deep", target_is_directory=True)
    (root / "linkfile.bin").symlink_to(outside / "o.bin")
    (root / "real" / "to_f.bin").symlink_to(root / "real" / "f.bin")
    return root, outside


def test_local_names_come_in_pages_and_without_links(tmp_path, monkeypatch):
    import delta_ops.storage.local as local_backend

    monkeypatch.setattr(local_backend, "NAMES_PAGE", 2)
    root, _outside = _linked_tree(tmp_path)
    s = Storage.for_uri(str(root))
    for i in range(5):
        s.put_atomic(f"real/many{i}.bin", b"m")
        s.put_atomic(f"top{i}.bin", b"t")
    pages = list(walk_names(s, "", recursive=False, follow_symlinks=False))
    assert all(len(names) <= 2 and rel == "" for rel, names in pages)
    assert sorted(n for _, names in pages for n in names) == sorted(
        f.path for f in s.list_dir("", follow_symlinks=False)
    )
    pages = list(walk_names(s, "real", follow_symlinks=False))
    assert all(len(names) <= 2 for _rel, names in pages)
    walked = sorted(f"{rel}/{n}" for rel, names in pages for n in names)
    assert walked == sorted(f.path for f in s.walk("real", follow_symlinks=False))
    assert list(walk_names(s, "linkdir", follow_symlinks=False)) == []
    # A link among the names is not a regular file when links are not followed.
    assert stat_files(s, "", ["linkfile.bin", "top.bin"], follow_symlinks=False) == [
        f for f in s.list_dir("") if f.path == "top.bin"
    ]
    assert [f.path for f in stat_files(s, "", ["linkfile.bin"])] == ["linkfile.bin"]
    assert stat_files(s, "linkdir", ["o.bin"], follow_symlinks=False) == []


def test_listing_without_links(tmp_path):
    root, _outside = _linked_tree(tmp_path)
    s = Storage.for_uri(str(root))
    assert [f.path for f in s.list_dir("")] == ["linkfile.bin", "top.bin"]
    assert [f.path for f in s.list_dir("", follow_symlinks=False)] == ["top.bin"]
    assert s.list_subdirs("") == ["linkdir", "real"]
    assert s.list_subdirs("", follow_symlinks=False) == ["real"]
    for exclude in (None, set()):
        walked = sorted(f.path for f in s.walk("real", exclude=exclude, follow_symlinks=False))
        assert walked == ["real/f.bin", "real/sub/g.bin"]
        assert list(s.walk("linkdir", exclude=exclude, follow_symlinks=False)) == []
        assert s.list_dir("linkdir", exclude=exclude, follow_symlinks=False) == []
        assert list(s.walk("linkdir/deep", exclude=exclude, follow_symlinks=False)) == []
    assert s.list_subdirs("linkdir", follow_symlinks=False) == []
    # Following links (the log reader's listing) is unchanged.
    assert sorted(f.path for f in s.walk("linkdir")) == ["linkdir/deep/d.bin", "linkdir/o.bin"]


def test_deletion_hazards(tmp_path):
    root, _outside = _linked_tree(tmp_path)
    s = Storage.for_uri(str(root))
    hazards = dict(s.deletion_hazards([
        "top.bin", "real/f.bin", "real/sub/g.bin", "missing.bin",
        "linkfile.bin", "real/to_f.bin", "linkdir/o.bin", "real/nested/d.bin", "real/sub",
    ]))
    assert set(hazards) == {
        "linkfile.bin", "real/to_f.bin", "linkdir/o.bin", "real/nested/d.bin", "real/sub",
    }
    assert "symbolic link" in hazards["linkfile.bin"]
    assert "not below the table root" in hazards["linkdir/o.bin"]
    assert "not a regular file" in hazards["real/sub"]
    # A table root that is itself reached through a link is fine.
    (tmp_path / "alias").symlink_to(root, target_is_directory=True)
    alias = Storage.for_uri(str(tmp_path / "alias"))
    assert alias.deletion_hazards(["top.bin", "real/f.bin"]) == []


def test_remove_empty_dirs_never_goes_through_a_link(tmp_path):
    root, outside = _linked_tree(tmp_path)
    (root / "real" / "gone").mkdir()
    s = Storage.for_uri(str(root))
    assert s.remove_empty_dirs("linkdir") == []
    assert s.remove_empty_dirs("linkdir/deep") == []
    assert (outside / "empty").is_dir()
    assert s.remove_empty_dirs("") == ["real/gone"]
    assert (outside / "empty").is_dir() and (root / "linkdir").is_symlink()


def test_names_with_a_colon_are_plain_names(tmp_path):
    s = Storage.for_uri(str(tmp_path))
    for name in ("C:d.parquet", "time=1971-07-22T03:06:40Z/a.parquet", "file:/t/a.parquet",
                 "ab:c/d"):
        s.put_atomic(name, b"x")
        assert (tmp_path / name).read_bytes() == b"x"  # below the root, under that name
        assert s.read(name) == b"x"
        assert s.delete(name)
        assert not (tmp_path / name).exists()
    for bad in ("s3://b/x", "file:///etc/passwd", "memory://x/y"):
        with pytest.raises(StorageError, match="URIs"):
            s.read(bad)


def test_remove_empty_dirs_leaves_what_keep_names_and_all_below_it(tmp_path):
    """A directory `keep` accepts is neither removed nor entered (VACUUM leaves hidden
    directories: `_temporary`, a nested table's `_delta_log`, ...)."""
    for d in ("_tmp/0", "p=1/_tmp/0", "p=1/q=1", "x/.aux"):
        (tmp_path / d).mkdir(parents=True)
    storage = Storage.for_uri(str(tmp_path))
    removed = storage.remove_empty_dirs(keep=lambda name: name.startswith(("_", ".")))
    assert removed == ["p=1/q=1"]
    assert all((tmp_path / d).is_dir() for d in ("_tmp/0", "p=1/_tmp/0", "x/.aux"))
