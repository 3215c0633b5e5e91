"""VACUUM never deletes what a reader needs, whatever the spelling of its path.

Tables are written by hand: a `_delta_log` commit with protocol, metaData and adds whose
paths take the shapes other writers produce (relative paths with colons, absolute URIs
with `//` inside or `localhost`, table roots whose names hold `%XX`), data files aged with
os.utime, then a real `vacuum(..., now_ms=...)`. Live files must survive and unreferenced
old ones go. Where deltalake can open the table, the files it reads must exist afterwards
and never be among our dry run's candidates. Symbolic links inside the table are neither
followed nor deleted; nothing outside the root is touched.

What deltalake 1.x reads, for the record (checked here where it matters): relative paths
decoded once (`a%2541` is `a%41`), colons in relative paths as they are (`C:d.parquet` is
the file of that name), empty segments dropped (`a//b` is `a/b`), and *every* path joined
to the root, absolute URIs included (`file:///t/a` opens `<root>/file:/t/a`); a table
whose directory name holds `%XX` it cannot open at all (it decodes the root).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from delta_ops.errors import UnsafeDeletionError
from delta_ops.maintenance.vacuum import vacuum

DAY_MS = 86_400_000
OLD_MS = 1_700_000_000_000
NOW_MS = OLD_MS + 30 * DAY_MS
SCHEMA = {
    "type": "struct",
    "fields": [{"name": "x", "type": "long", "nullable": True, "metadata": {}}],
}


def age(path: Path, ms: int = OLD_MS) -> None:
    os.utime(path, ns=(ms * 1_000_000, ms * 1_000_000), follow_symlinks=False)


def data_file(path: Path, value: int = 0) -> int:
    """A small Parquet file at `path`, aged; its size."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"x": pa.array([value], pa.int64())}), path)
    age(path)
    return path.stat().st_size


def write_table(
    root: Path, adds: list[tuple[str, str]], *, removes: list[tuple[str, int]] = ()
) -> None:
    """A one-commit table: `adds` are (path as written in the log, path on disk relative to
    the root, or "" for no file); `removes` are (path, deletionTimestamp)."""
    (root / "_delta_log").mkdir(parents=True, exist_ok=True)
    actions: list[dict] = [
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {"metaData": {
            "id": "t", "format": {"provider": "parquet", "options": {}},
            "schemaString": json.dumps(SCHEMA), "partitionColumns": [],
            "configuration": {}, "createdTime": OLD_MS,
        }},
    ]
    for i, (written, disk) in enumerate(adds):
        size = data_file(root / disk, i) if disk else 1
        actions.append({"add": {
            "path": written, "partitionValues": {}, "size": size,
            "modificationTime": OLD_MS, "dataChange": True,
        }})
    for written, ts in removes:
        actions.append({"remove": {"path": written, "deletionTimestamp": ts, "dataChange": True}})
    log = root / "_delta_log" / f"{0:020}.json"
    log.write_text("".join(json.dumps(a) + "\n" for a in actions))


def files_below(root: Path) -> set[str]:
    out = set()
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            out.add((Path(dirpath) / n).relative_to(root).as_posix())
    return out


def deltalake_reads(root: Path) -> list[str] | None:
    """Paths (relative to root) of the files deltalake reads, after reading them all;
    None when deltalake cannot open or read the table."""
    import deltalake

    try:
        dt = deltalake.DeltaTable(str(root))
        uris = dt.file_uris()
        dt.to_pyarrow_table()
    except Exception:  # noqa: BLE001 - any failure means "deltalake cannot tell"
        return None
    return [os.path.relpath(u.removeprefix("file://"), root) for u in uris]


def run_checked(root: Path, live: list[str], orphans: list[str]) -> None:
    """Dry run, then real run; live files survive, orphans go, deltalake agrees."""
    read = deltalake_reads(root)
    dry = vacuum(str(root), now_ms=NOW_MS, dry_run=True)
    assert set(dry.files) == set(orphans)
    result = vacuum(str(root), now_ms=NOW_MS, dry_run=False)
    assert set(result.files) == set(dry.files)
    for rel in live:
        assert (root / rel).is_file(), rel
    for rel in orphans:
        assert not (root / rel).exists(), rel
    if read is not None:
        for rel in read:
            assert rel not in dry.files
            assert (root / rel).is_file(), rel
        assert deltalake_reads(root) == read


# --------------------------------------------------------------------------------------
# Relative paths with colons: no URI scheme (RFC 3986), or a one-letter one (a drive).
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "time=1971-07-22T03:06:40.000000Z/part-00000.parquet",
        "EventTime=2024-01-01 10:00:00/a.parquet",
        "C:d.parquet",
    ],
)
def test_colon_in_a_relative_path_is_not_a_scheme(tmp_path, path):
    root = tmp_path / "t"
    write_table(root, [(path, path)])
    data_file(root / "orphan.parquet")
    assert deltalake_reads(root) == [path]  # deltalake reads the file of that name
    run_checked(root, [path], ["orphan.parquet"])


def test_encoded_colons_name_the_same_file(tmp_path):
    root = tmp_path / "t"
    disk = "time=1971-07-22T03:06:40Z/part-00000.parquet"
    write_table(root, [("time=1971-07-22T03%3A06%3A40Z/part-00000.parquet", disk)])
    data_file(root / "time=1971-07-22T03:06:40Z" / "orphan.parquet")
    run_checked(root, [disk], ["time=1971-07-22T03:06:40Z/orphan.parquet"])


# --------------------------------------------------------------------------------------
# Absolute URIs in forms the old code did not normalise.
# --------------------------------------------------------------------------------------


def test_file_uri_with_a_double_slash_inside(tmp_path):
    root = tmp_path / "t"
    write_table(root, [(f"file://{root}//a.parquet", "a.parquet")])
    data_file(root / "orphan.parquet")
    run_checked(root, ["a.parquet"], ["orphan.parquet"])


def test_file_uri_with_localhost(tmp_path):
    root = tmp_path / "t"
    write_table(root, [(f"file://localhost{root}/sub/a.parquet", "sub/a.parquet")])
    data_file(root / "sub" / "orphan.parquet")
    run_checked(root, ["sub/a.parquet"], ["sub/orphan.parquet"])


@pytest.mark.parametrize("name", ["t%41b", "t%2541 b", "t:ü%20x"])
def test_percent_in_the_table_directory_with_absolute_uri_adds(tmp_path, name):
    root = tmp_path / name
    encoded = "file://" + quote(str(root))  # the directory name encoded once
    write_table(root, [
        (f"{encoded}/a.parquet", "a.parquet"),
        (f"file:{quote(str(root))}/b%20c.parquet", "b c.parquet"),
        (f"{quote(str(root))}/d.parquet", "d.parquet"),
    ])
    data_file(root / "orphan.parquet")
    run_checked(root, ["a.parquet", "b c.parquet", "d.parquet"], ["orphan.parquet"])


def test_deltalake_reading_of_an_absolute_uri_is_protected_too(tmp_path):
    """deltalake joins `file:///<root>/a.parquet` to the root: it reads
    `<root>/file:/<root>/a.parquet`. Both that file and `<root>/a.parquet` are kept."""
    root = tmp_path / "t"
    written = f"file://{root}/a.parquet"
    literal = f"file:{root}/a.parquet"
    write_table(root, [(written, "a.parquet")])
    data_file(root / literal)
    data_file(root / "orphan.parquet")
    assert deltalake_reads(root) == [literal]
    run_checked(root, ["a.parquet", literal], ["orphan.parquet"])


# --------------------------------------------------------------------------------------
# Symbolic links: never followed, never deleted; nothing outside the root touched.
# --------------------------------------------------------------------------------------


def _outside(tmp_path: Path) -> tuple[Path, set[str]]:
    outside = tmp_path / "outside"
    for rel in ("x.parquet", "deep/y.parquet", "deep/deeper/z.bin"):
        data_file(outside / rel)
    return outside, files_below(outside)


def test_symlinked_directory_inside_the_table_is_not_followed(tmp_path):
    root = tmp_path / "t"
    write_table(root, [("live.parquet", "live.parquet")])
    data_file(root / "orphan.parquet")
    data_file(root / "part=1" / "old.parquet")
    outside, before = _outside(tmp_path)
    sentinel = tmp_path / "sentinel.parquet"
    data_file(sentinel)
    (root / "linked").symlink_to(outside, target_is_directory=True)
    (root / "part=1" / "nested").symlink_to(outside / "deep", target_is_directory=True)
    run_checked(root, ["live.parquet"], ["orphan.parquet", "part=1/old.parquet"])
    assert "linked" in " ".join(vacuum(str(root), now_ms=NOW_MS, dry_run=True).messages)
    assert files_below(outside) == before
    assert sentinel.is_file()
    assert (root / "linked").is_symlink() and (root / "part=1" / "nested").is_symlink()


def test_symlinked_file_is_left_in_place(tmp_path):
    root = tmp_path / "t"
    write_table(root, [("live.parquet", "live.parquet")])
    data_file(root / "orphan.parquet")
    outside, before = _outside(tmp_path)
    link = root / "link.parquet"
    link.symlink_to(outside / "x.parquet")
    age(link)
    inner = root / "sub" / "to_live.parquet"
    inner.parent.mkdir()
    inner.symlink_to(root / "live.parquet")
    age(inner)
    run_checked(root, ["live.parquet"], ["orphan.parquet"])
    assert link.is_symlink() and inner.is_symlink()
    assert files_below(outside) == before


def test_lite_mode_refuses_a_tombstone_reached_through_a_symlinked_directory(tmp_path):
    root = tmp_path / "t"
    outside, before = _outside(tmp_path)
    write_table(root, [("live.parquet", "live.parquet")],
                removes=[("linked/x.parquet", OLD_MS)])
    (root / "linked").symlink_to(outside, target_is_directory=True)
    with pytest.raises(UnsafeDeletionError, match=r"symbolic link.*linked/x\.parquet|linked/x"):
        vacuum(str(root), now_ms=NOW_MS, lite=True, dry_run=False)
    assert files_below(outside) == before


# --------------------------------------------------------------------------------------
# The independent check: when two normalisations disagree, nothing is deleted.
# --------------------------------------------------------------------------------------


def test_disagreeing_normalisations_refuse_the_whole_run(tmp_path):
    """`a%2541.parquet` is the file `a%41.parquet` (decoded once); decoded fully it would
    be `aA.parquet`, which is old and unreferenced. A reader that decodes twice would need
    it, so VACUUM refuses instead of guessing, naming table and file."""
    root = tmp_path / "t"
    write_table(root, [("a%2541.parquet", "a%41.parquet")])
    data_file(root / "aA.parquet")
    data_file(root / "orphan.parquet")
    with pytest.raises(UnsafeDeletionError, match=r"aA\.parquet.*table file://"):
        vacuum(str(root), now_ms=NOW_MS, dry_run=True)
    with pytest.raises(UnsafeDeletionError):
        vacuum(str(root), now_ms=NOW_MS, dry_run=False)
    assert {"a%41.parquet", "aA.parquet", "orphan.parquet"} <= files_below(root)


# --------------------------------------------------------------------------------------
# Errors a user can act on (issue 12, item 9) and the catalog-managed opt-in.
# --------------------------------------------------------------------------------------


def test_a_name_that_is_not_utf8_is_left_and_reported(tmp_path):
    root = tmp_path / "t"
    write_table(root, [("live.parquet", "live.parquet")])
    data_file(root / "orphan.parquet")
    raw_root = os.fsencode(str(root))
    for rel in (b"bad\xff.parquet", b"d\xfe/x.parquet"):
        path = os.path.join(raw_root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(b"x")
        os.utime(path, ns=(OLD_MS * 1_000_000,) * 2)
    dry = vacuum(str(root), now_ms=NOW_MS, dry_run=True)
    result = vacuum(str(root), now_ms=NOW_MS, dry_run=False)
    assert dry.files == result.files == ("orphan.parquet",)
    for r in (dry, result):
        note = " ".join(r.messages)
        assert "not valid UTF-8" in note and r"bad\xff.parquet" in note
        assert r"d\xfe/x.parquet" in note
    assert os.path.exists(os.path.join(raw_root, b"bad\xff.parquet"))
    assert os.path.exists(os.path.join(raw_root, b"d\xfe/x.parquet"))


def test_a_name_with_a_backslash_is_left_and_reported_not_a_refusal(tmp_path):
    # A legal POSIX name the storage layer will not address: one such unreferenced file
    # made every VACUUM of the table refuse ("backslashes are not allowed", no table named).
    root = tmp_path / "t"
    write_table(root, [("live.parquet", "live.parquet")])
    data_file(root / "orphan.parquet")
    for name in ("back\\slash.parquet", "d/x\\y.parquet"):
        (root / name).parent.mkdir(exist_ok=True)
        (root / name).write_bytes(b"x")
        os.utime(root / name, ns=(OLD_MS * 1_000_000,) * 2)
    dry = vacuum(str(root), now_ms=NOW_MS, dry_run=True)
    result = vacuum(str(root), now_ms=NOW_MS, dry_run=False)
    assert dry.files == result.files == ("orphan.parquet",)
    for r in (dry, result):
        note = " ".join(r.messages)
        assert "left 2 file(s) whose names hold a backslash" in note
        assert "back\\slash.parquet" in note and "d/x\\y.parquet" in note
    assert (root / "back\\slash.parquet").exists() and (root / "d/x\\y.parquet").exists()
    assert not (root / "orphan.parquet").exists()


def test_missing_v2_sidecar_without_older_commits_names_the_sidecar(tmp_path):
    from delta_ops.errors import CorruptLogError
    from delta_ops_tests.support.corpus import copy_corpus_table

    root = copy_corpus_table(
        "kernel-defaults__kernel-pagination-v2-checkpoint-parquet", tmp_path / "t"
    )
    log = root / "_delta_log"
    for p in log.iterdir():
        p.chmod(p.stat().st_mode | 0o200)
        if p.name[:20].isdigit() and int(p.name[:20]) < 4:
            p.unlink()
    sidecar = ("00000000000000000004.checkpoint.0000000001.0000000001."
               "87b3aafd-6627-401d-b9aa-83f6b2450f0a.parquet")
    (log / "_sidecars" / sidecar).unlink()
    with pytest.raises(CorruptLogError, match=rf"sidecar.*version 4, file .*{sidecar}"):
        vacuum(str(root), now_ms=NOW_MS, dry_run=True)


@pytest.mark.parametrize("hours", [float("inf"), 1e12, float("nan"), -1, "12"])
def test_impossible_retentions_are_a_retention_error(tmp_path, hours):
    from delta_ops.errors import RetentionError

    root = tmp_path / "t"
    write_table(root, [("live.parquet", "live.parquet")])
    data_file(root / "orphan.parquet")
    with pytest.raises(RetentionError, match=r"retention.*\(table file://"):
        vacuum(str(root), now_ms=NOW_MS, retention_hours=hours, dry_run=False)
    assert (root / "orphan.parquet").exists()


def test_hdfs_is_one_clear_error_before_anything_is_touched(capfd):
    from delta_ops.errors import StorageError
    from delta_ops.storage import Storage

    with pytest.raises(StorageError, match=r"unsupported storage scheme 'hdfs'"):
        Storage.for_uri("hdfs://nn/x")
    captured = capfd.readouterr()
    assert "dlopen" not in captured.out + captured.err


def test_unknown_s3_options_are_named_never_their_values():
    from delta_ops.errors import StorageError
    from delta_ops.storage import Storage

    with pytest.raises(StorageError, match=r"unknown S3 storage option.*'bogus'") as caught:
        Storage.for_uri("s3://bucket/t", {"bogus": "1", "secret": "SECRET-VALUE-42",
                                          "other_thing": "SECRET-VALUE-43"})
    assert "'other_thing'" in str(caught.value)
    assert "SECRET-VALUE" not in str(caught.value)
    assert "s3://bucket/t" in str(caught.value)
    # delta-rs spellings are still accepted.
    Storage.for_uri("s3://bucket/t", {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b",
                                      "AWS_REGION": "eu-west-1", "AWS_ALLOW_HTTP": "true"})
    Storage.for_uri("s3://bucket/t", {"AWS_PROFILE": "p", "config_kwargs": {}, "anon": "true"})


def test_catalog_managed_tables_need_the_opt_in(tmp_path):
    from delta_ops.errors import UnsupportedFeatureError

    root = tmp_path / "t"
    write_table(root, [("live.parquet", "live.parquet")])
    log = root / "_delta_log" / f"{0:020}.json"
    lines = log.read_text().splitlines()
    lines[0] = json.dumps({"protocol": {
        "minReaderVersion": 3, "minWriterVersion": 7,
        "readerFeatures": ["catalogManaged"], "writerFeatures": ["catalogManaged"],
    }})
    log.write_text("\n".join(lines) + "\n")
    data_file(root / "orphan.parquet")
    with pytest.raises(UnsupportedFeatureError, match="catalogManaged"):
        vacuum(str(root), now_ms=NOW_MS, dry_run=False)
    assert (root / "orphan.parquet").exists()
    result = vacuum(str(root), now_ms=NOW_MS, allow_catalog_managed=True, dry_run=False)
    assert result.files == ("orphan.parquet",)
    assert (root / "live.parquet").exists()
