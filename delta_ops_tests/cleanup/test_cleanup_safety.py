"""Metadata cleanup never deletes what a reader needs (issue 12 items 4, 8, 9; issue 14).

- A checkpoint that does not read in full (a multi-part checkpoint with a garbage,
  truncated or page-corrupted part; a V2 checkpoint whose sidecar is garbage or missing) is
  never the cutoff: cleanup keeps an older checkpoint that reads, or refuses. Every version
  readable before (by delta_ops, and by deltalake where deltalake could read it) reads the
  same afterwards.
- A retention shorter than `delta.logRetentionDuration` is refused unless forced.
- Catalog-managed tables are cleaned only when explicitly allowed.
- Temporary files killed writers left in `_delta_log` go once older than the retention.
- `_last_checkpoint` never moves backward when a checkpoint writer races cleanup.

Tables come from deltalake (an independent writer) and from corpus copies; checkpoints are
written with our writer and then damaged on purpose. Ages are set with os.utime and the clock
is injected.
"""

from __future__ import annotations

import json
import random
import shutil
import uuid
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake

from delta_ops.errors import CorruptLogError, RetentionError, UnsupportedFeatureError
from delta_ops.log.replay.full_replay import read_checkpoint
from delta_ops.log.segment.log_segment import complete_checkpoints as _complete_checkpoints
from delta_ops.log.segment.log_segment import list_log
from delta_ops.maintenance.checkpoint import write_checkpoint
from delta_ops.maintenance.cleanup import (
    DAY_MS,
    apply_cleanup,
    cleanup_metadata,
    describe,
    is_writer_temp_file,
    plan_cleanup,
)
from delta_ops.protocol.last_checkpoint import build_last_checkpoint, parse_last_checkpoint
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import copy_corpus_table
from delta_ops_tests.support.multipart_tables import (
    HOUR_MS,
    LOG,
    NOW,
    RETENTION_DAYS,
    age_log,
    multipart_table,
    ours,
    set_mtime,
    theirs,
)

# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def readable_by_deltalake(root: Path, versions: range) -> dict[int, tuple[int, list[str]]]:
    out = {}
    for v in versions:
        try:
            out[v] = theirs(root, v)
        except Exception:  # noqa: BLE001 - deltalake's errors have no common class
            continue
    return out


def log_names(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in (root / LOG).rglob("*") if p.is_file()}


def corrupt(path: Path, how: str) -> None:
    """Damage a Parquet file: `garbage` (not Parquet at all), `truncated` (cut in half: no
    footer), `pages` (the data pages overwritten, the footer intact: only a full read finds
    it), `null-column` (only the pages of the all-null `remove.path` column overwritten: the
    footer's statistics say it holds nothing, so only a decode of every column finds it),
    `missing` (deleted)."""
    data = path.read_bytes()
    if how == "garbage":
        path.write_bytes(bytes((i * 7 + 3) % 256 for i in range(len(data))))
    elif how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "pages":
        footer_len = int.from_bytes(data[-8:-4], "little") + 8
        body = bytearray(data)
        for i in range(4, len(data) - footer_len):
            body[i] = 0xFF
        path.write_bytes(bytes(body))
        pq.ParquetFile(path)  # the footer still opens: a footer check would pass it
    elif how == "null-column":
        meta = pq.ParquetFile(path).metadata
        group = meta.row_group(0)
        chunk = next(group.column(j) for j in range(group.num_columns)
                     if group.column(j).path_in_schema == "remove.path")
        assert chunk.statistics.null_count == group.num_rows
        body = bytearray(data)
        start = chunk.data_page_offset
        body[start : start + chunk.total_compressed_size] = b"\xff" * chunk.total_compressed_size
        path.write_bytes(bytes(body))
    elif how == "missing":
        path.unlink()
    else:
        raise AssertionError(how)


# --------------------------------------------------------------------------------------
# Multi-part checkpoint with a bad part
# --------------------------------------------------------------------------------------


def bad_part(root: Path) -> Path:
    return root / LOG / f"{6:020d}.checkpoint.{2:010d}.{2:010d}.parquet"


@pytest.mark.parametrize("with_newer", [True, False], ids=["newer-checkpoint", "latest-is-bad"])
@pytest.mark.parametrize("how", ["garbage", "truncated", "pages", "null-column"])
def test_multipart_checkpoint_with_a_bad_part_is_never_the_cutoff(tmp_path, how, with_newer):
    root = multipart_table(tmp_path / "t", with_valid_older=True, with_newer=with_newer)
    corrupt(bad_part(root), how)
    before = {v: ours(root, v) for v in range(10)}
    rs_before = readable_by_deltalake(root, range(10))
    # deltalake reads every version not rebuilt through the bad checkpoint; damage confined
    # to an all-null column it (and our log reader) never decodes, so it reads them all.
    through_bad = {6, 7, 8} | (set() if with_newer else {9})
    if how == "null-column":
        through_bad = set()
        checkpoint = next(c for c in _complete_checkpoints(list_log(Storage.for_uri(str(root))),
                                                           None) if c.version == 6)
        assert read_checkpoint(Storage.for_uri(str(root)), checkpoint).metadata is not None
    assert set(rs_before) == set(range(10)) - through_bad
    names = log_names(root)

    result = cleanup_metadata(str(root), now_ms=NOW, dry_run=False)

    assert result.cutoff_version == 6
    assert result.checkpoint_version == 3, result.messages
    assert any("not usable" in m and bad_part(root).name in m for m in result.messages)
    deleted = {f"{LOG}/{v:020d}.json" for v in range(3)}
    assert set(result.files) == deleted
    assert log_names(root) == names - deleted
    for v in range(3, 10):
        assert ours(root, v) == before[v], f"version {v} reads differently after cleanup"
    assert ours(root) == before[9]
    for v, state in rs_before.items():
        if v >= 3:
            assert theirs(root, v) == state, f"deltalake reads version {v} differently"
    if with_newer:
        assert theirs(root) == rs_before[9]
    # A re-run finds nothing more to delete and still refuses the bad checkpoint.
    again = cleanup_metadata(str(root), now_ms=NOW, dry_run=False)
    assert again.files == () and again.checkpoint_version == 3


def test_bad_checkpoint_and_no_older_one_refuses_and_deletes_nothing(tmp_path):
    root = multipart_table(tmp_path / "t", with_valid_older=False, with_newer=False)
    corrupt(bad_part(root), "garbage")
    names = log_names(root)
    before = {v: ours(root, v) for v in range(10)}
    with pytest.raises(CorruptLogError, match=r"refusing to clean up.*version 6.*"
                       + bad_part(root).name) as info:
        cleanup_metadata(str(root), now_ms=NOW, dry_run=False)
    assert info.value.table == Storage.for_uri(str(root)).root
    assert info.value.version == 6
    assert info.value.file == f"{LOG}/{bad_part(root).name}"
    with pytest.raises(CorruptLogError, match="refusing to clean up"):
        cleanup_metadata(str(root), now_ms=NOW, dry_run=True)
    assert log_names(root) == names
    assert {v: ours(root, v) for v in range(10)} == before


def test_ensure_checkpoint_writes_a_good_one_when_the_only_old_one_is_bad(tmp_path):
    """With ensure_checkpoint, a readable checkpoint is written past the bad one and only
    what that one makes unnecessary goes."""
    root = multipart_table(tmp_path / "t", with_valid_older=False, with_newer=False)
    # Move the cutoff to 7 so a new checkpoint goes beside (not on top of) the bad one.
    age_log(root, cutoff=7, latest=9, retention_days=RETENTION_DAYS)
    corrupt(bad_part(root), "truncated")
    before = {v: ours(root, v) for v in range(10)}
    result = cleanup_metadata(str(root), now_ms=NOW, ensure_checkpoint=True, dry_run=False)
    assert result.checkpoint_written == 7 and result.checkpoint_version == 7
    for v in range(7, 10):
        assert ours(root, v) == before[v]
    assert theirs(root) == (9, before[9][1])


# --------------------------------------------------------------------------------------
# V2 checkpoint with a bad sidecar (Spark-written table from the corpus)
# --------------------------------------------------------------------------------------

V2_TABLE = "kernel-defaults__kernel-pagination-v2-checkpoint-parquet"
V2_BAD_SIDECAR = (
    "00000000000000000004.checkpoint.0000000001.0000000001."
    "87b3aafd-6627-401d-b9aa-83f6b2450f0a.parquet"
)


def v2_table(root: Path, *, with_newer: bool) -> Path:
    """Spark's table: commits 0-4, V2 checkpoints at 2 (Parquet, two sidecars) and 4 (JSON,
    one sidecar); with `with_newer` a commit 5 adding a file and our V2 checkpoint at 5."""
    copy_corpus_table(V2_TABLE, root)
    for p in [root, *root.rglob("*")]:
        p.chmod(p.stat().st_mode | 0o200)
    latest = 4
    if with_newer:
        src = next(root.glob("part-00000-*.parquet"))
        shutil.copyfile(src, root / "part-00099-added-by-test.parquet")
        add = {"add": {
            "path": "part-00099-added-by-test.parquet", "partitionValues": {},
            "size": src.stat().st_size, "modificationTime": NOW - HOUR_MS, "dataChange": True,
        }}
        info = {"commitInfo": {"timestamp": NOW - HOUR_MS, "operation": "WRITE"}}
        (root / LOG / f"{5:020d}.json").write_text(f"{json.dumps(info)}\n{json.dumps(add)}\n")
        write_checkpoint(str(root), version=5, kind="v2-uuid", sidecar_actions=2, now_ms=NOW)
        latest = 5
    age_log(root, cutoff=4, latest=latest, retention_days=30)
    return root


@pytest.mark.parametrize("with_newer", [True, False], ids=["newer-checkpoint", "latest-is-bad"])
@pytest.mark.parametrize("how", ["garbage", "truncated", "missing"])
def test_v2_checkpoint_with_a_bad_sidecar_is_never_the_cutoff(tmp_path, how, with_newer):
    root = v2_table(tmp_path / "t", with_newer=with_newer)
    latest = 5 if with_newer else 4
    sidecar = root / LOG / "_sidecars" / V2_BAD_SIDECAR
    corrupt(sidecar, how)
    before = {v: ours(root, v) for v in range(latest + 1)}
    rs_before = readable_by_deltalake(root, range(latest + 1))
    assert set(rs_before) == {0, 1, 2, 3} | ({5} if with_newer else set())
    names = log_names(root)

    result = cleanup_metadata(str(root), now_ms=NOW, dry_run=False)

    assert result.cutoff_version == 4
    assert result.checkpoint_version == 2, result.messages
    deleted = {f"{LOG}/{v:020d}.json" for v in range(2)}
    assert set(result.files) == deleted
    assert log_names(root) == names - deleted
    for v in range(2, latest + 1):
        assert ours(root, v) == before[v], f"version {v} reads differently after cleanup"
    for v in (2, 3, *([5] if with_newer else [])):
        assert theirs(root, v) == rs_before[v], f"deltalake reads version {v} differently"
    if with_newer:
        assert theirs(root) == rs_before[5] == (5, before[5][1])


def test_v2_bad_sidecar_without_an_older_checkpoint_refuses(tmp_path):
    root = v2_table(tmp_path / "t", with_newer=False)
    (root / LOG / f"{2:020d}.checkpoint.e8fa2696-9728-4e9c-b285-634743fdd4fb.parquet").unlink()
    corrupt(root / LOG / "_sidecars" / V2_BAD_SIDECAR, "garbage")
    names = log_names(root)
    with pytest.raises(CorruptLogError, match=V2_BAD_SIDECAR):
        cleanup_metadata(str(root), now_ms=NOW, dry_run=False)
    assert log_names(root) == names
    assert ours(root) == (4, ours(root, 4)[1])


# --------------------------------------------------------------------------------------
# Retention shorter than the table's
# --------------------------------------------------------------------------------------


def sixty_day_table(root: Path) -> Path:
    for i in range(6):
        write_deltalake(
            str(root), pa.table({"x": [i]}), mode="append",
            configuration={"delta.logRetentionDuration": "interval 60 days"} if i == 0 else None,
        )
    write_checkpoint(str(root), version=4, now_ms=NOW)
    age_log(root, cutoff=4, latest=5, retention_days=1)
    return root


def test_retention_shorter_than_the_table_is_refused_unless_forced(tmp_path):
    root = sixty_day_table(tmp_path / "t")
    names = log_names(root)
    for dry_run in (True, False):
        with pytest.raises(
            RetentionError,
            match=r"retention of 24 hours, shorter than delta\.logRetentionDuration "
            r"\(1440 hours\).*force_retention \(--force-retention on the command line\)",
        ) as info:
            cleanup_metadata(str(root), retention=timedelta(days=1), now_ms=NOW, dry_run=dry_run)
        assert info.value.table == Storage.for_uri(str(root)).root and info.value.version == 5
    assert log_names(root) == names
    # The table's own retention (60 days): nothing is old enough, nothing refused.
    own = cleanup_metadata(str(root), now_ms=NOW, dry_run=False)
    assert own.cutoff_version is None and own.files == ()
    # A longer retention than the table's needs no force.
    longer = cleanup_metadata(str(root), retention=timedelta(days=90), now_ms=NOW, dry_run=False)
    assert longer.files == ()
    forced = cleanup_metadata(
        str(root), retention=timedelta(days=1), now_ms=NOW, force_retention=True, dry_run=False
    )
    assert forced.checkpoint_version == 4
    assert set(forced.files) == {f"{LOG}/{v:020d}.json" for v in range(4)}
    assert ours(root) == (5, theirs(root)[1])


def _cli(capsys, argv: list[str]) -> tuple[int, str, str]:
    import delta_ops.cli as cli

    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_refuses_short_retention_without_force_retention(tmp_path, capsys):
    root = sixty_day_table(tmp_path / "t")
    names = log_names(root)
    # The CLI reads the system clock: make every commit but the latest far older.
    import time

    now = int(time.time() * 1000)
    for path in (root / LOG).iterdir():
        if path.name[:20].isdigit() and int(path.name[:20]) < 5:
            set_mtime(path, now - 400 * DAY_MS + int(path.name[:20]) * HOUR_MS)
    code, out, err = _cli(capsys, ["cleanup", str(root), "--retention", "1d"])
    assert code != 0
    assert "delta.logRetentionDuration" in err + out and "--force-retention" in err + out
    assert log_names(root) == names
    code, out, err = _cli(capsys, ["cleanup", str(root), "--retention", "1d",
                                   "--force-retention", "--json"])
    assert code == 0, err
    assert json.loads(out)["checkpoint_version"] == 4
    assert not (root / LOG / f"{0:020d}.json").exists()


# --------------------------------------------------------------------------------------
# Catalog-managed tables
# --------------------------------------------------------------------------------------


def test_catalog_managed_table_needs_explicit_permission(table_copy, capsys):
    root = table_copy("kernel-defaults__catalog-owned-preview")
    names = log_names(root)
    with pytest.raises(UnsupportedFeatureError, match="catalogManaged"):
        cleanup_metadata(str(root), now_ms=NOW, force_retention=True, retention=timedelta(0),
                         dry_run=False)
    assert log_names(root) == names
    result = cleanup_metadata(
        str(root), now_ms=NOW, force_retention=True, retention=timedelta(0),
        allow_catalog_managed=True, dry_run=True,
    )
    assert result.files == ()
    code, _out, err = _cli(capsys, ["cleanup", str(root), "--dry-run"])
    assert code != 0 and "catalogManaged" in err
    code, _out, err = _cli(capsys, ["cleanup", str(root), "--dry-run", "--allow-catalog-managed"])
    assert code == 0, err


# --------------------------------------------------------------------------------------
# Temporary files of killed writers
# --------------------------------------------------------------------------------------

#: Fixed draws, not `uuid4()`: the names are test ids, and every process collecting the
#: tests (pytest-xdist's workers) must see the same ones.
_UUIDS = random.Random("temp-file-names")


def _uuid() -> uuid.UUID:
    return uuid.UUID(int=_UUIDS.getrandbits(128), version=4)


REAL_NAMES = [
    "00000000000000000005.json",
    "00000000000000000005.crc",
    "00000000000000000005.checkpoint.parquet",
    "00000000000000000005.checkpoint.0000000001.0000000002.parquet",
    f"00000000000000000005.checkpoint.{_uuid()}.json",
    f"00000000000000000005.checkpoint.{_uuid()}.parquet",
    "00000000000000000003.00000000000000000005.compacted.json",
    "_last_checkpoint",
    ".00000000000000000005.json.crc",
    "._last_checkpoint.crc",
]
LOOK_ALIKES = [
    f".00000000000000000005.json.{_uuid().hex}.tmp.crc",  # Hadoop side file of a temp
    f".00000000000000000005.json.{_uuid().hex[:31]}.tmp",  # not a uuid
    f".00000000000000000005.json.{_uuid().hex.upper()}.tmp",  # not as writers spell it
    f".notes.txt.{_uuid().hex}.tmp",  # not a log file's temp
    f"00000000000000000005.json.{_uuid().hex}.tmp",  # not hidden
    f"..00000000000000000005.json.{_uuid().hex}.tmp",
    f".00000000000000000005.json.{_uuid().hex}.tmp.x",
    f".{_uuid().hex}.tmp",
]


@pytest.mark.parametrize("name", REAL_NAMES + LOOK_ALIKES)
def test_no_real_or_look_alike_name_is_a_temp_file(name):
    assert not is_writer_temp_file(name)
    assert not is_writer_temp_file(name, sidecar_dir=True)


def test_writer_temp_names_are_recognised(tmp_path):
    """The names our storage's writer gives its temp files (made by the writer's own code),
    and the dashed-uuid form Hadoop-based writers use."""
    store = Storage.for_uri(str(tmp_path))
    backend = store._backend
    for target in ("00000000000000000007.json", "_last_checkpoint",
                   "00000000000000000007.checkpoint.parquet"):
        tmp = Path(backend._write_temp(str(tmp_path / LOG / target), b"{}"))
        assert tmp.exists() and is_writer_temp_file(tmp.name), tmp.name
    assert is_writer_temp_file(f".00000000000000000007.json.{uuid.uuid4()}.tmp")
    assert is_writer_temp_file(f".00000000000000000007.checkpoint.{uuid.uuid4()}.parquet."
                               f"{uuid.uuid4().hex}.tmp")
    assert is_writer_temp_file(f".{uuid.uuid4()}.parquet.{uuid.uuid4().hex}.tmp",
                               sidecar_dir=True)


def test_old_temp_files_are_removed_young_ones_and_look_alikes_kept(tmp_path):
    root = sixty_day_table(tmp_path / "t")
    log = root / LOG
    backend = Storage.for_uri(str(root))._backend
    # A killed writer's leftovers, named by the writer's own code.
    old = [Path(backend._write_temp(str(log / f"{6:020d}.json"), b"{}")),
           Path(backend._write_temp(str(log / "_last_checkpoint"), b"{}"))]
    young = Path(backend._write_temp(str(log / f"{7:020d}.json"), b"{}"))
    sidecars = log / "_sidecars"
    sidecars.mkdir()
    old_sidecar_tmp = Path(backend._write_temp(str(sidecars / f"{uuid.uuid4()}.parquet"), b"x"))
    look_alikes = [log / n for n in LOOK_ALIKES]
    for p in look_alikes:
        p.write_bytes(b"x")
    retention = 60 * DAY_MS
    for p in [*old, old_sidecar_tmp, *look_alikes]:
        set_mtime(p, NOW - retention - DAY_MS)
    set_mtime(young, NOW - retention + HOUR_MS)  # a day younger than those: still live

    dry = cleanup_metadata(str(root), now_ms=NOW, dry_run=True)
    expected = sorted(str(p.relative_to(root)) for p in [*old, old_sidecar_tmp])
    assert sorted(dry.temp_files) == expected
    assert all(p.exists() for p in [*old, old_sidecar_tmp])

    result = cleanup_metadata(str(root), now_ms=NOW, dry_run=False)
    assert sorted(result.temp_files) == expected
    assert result.files == ()  # nothing in the log is older than 60 days
    assert not any(p.exists() for p in [*old, old_sidecar_tmp])
    assert young.exists()
    assert all(p.exists() for p in look_alikes)
    assert "leftover temporary files" in describe(result)
    assert ours(root) == (5, theirs(root)[1])


def test_forced_short_retention_never_takes_a_temp_file_younger_than_a_day(tmp_path):
    root = sixty_day_table(tmp_path / "t")
    tmp = Path(Storage.for_uri(str(root))._backend._write_temp(
        str(root / LOG / f"{6:020d}.json"), b"{}"))
    set_mtime(tmp, NOW - 2 * HOUR_MS)
    result = cleanup_metadata(str(root), now_ms=NOW, retention=timedelta(0), force_retention=True,
                              dry_run=False)
    assert result.temp_files == () and tmp.exists()
    set_mtime(tmp, NOW - DAY_MS - HOUR_MS)
    result = cleanup_metadata(str(root), now_ms=NOW, retention=timedelta(0), force_retention=True,
                              dry_run=False)
    assert result.temp_files == (str(tmp.relative_to(root)),) and not tmp.exists()


# --------------------------------------------------------------------------------------
# _last_checkpoint only moves forward
# --------------------------------------------------------------------------------------


def _hint(root: Path) -> int:
    return parse_last_checkpoint((root / LOG / "_last_checkpoint").read_bytes()).version


def test_last_checkpoint_never_moves_back_when_a_checkpoint_is_written_between_plan_and_apply(
    tmp_path,
):
    root = multipart_table(tmp_path / "t", with_valid_older=True, with_newer=False)
    # A stale hint at 3: the plan moves it to 6 before deleting what is older than 6.
    stale = build_last_checkpoint(
        version=3, size=1, size_in_bytes=1, num_of_add_files=1, parts=2
    )
    (root / LOG / "_last_checkpoint").write_bytes(stale.to_json_bytes())
    assert _hint(root) == 3
    store = Storage.for_uri(str(root))
    plan = plan_cleanup(store, now_ms=NOW)
    assert plan.checkpoint_version == 6
    assert plan.last_checkpoint is not None and plan.last_checkpoint.version == 6

    # A checkpoint writer runs between plan and apply: checkpoint 9 and its hint.
    write_checkpoint(str(root), version=9, now_ms=NOW)
    assert _hint(root) == 9

    written = apply_cleanup(store, plan)
    assert not written
    assert _hint(root) == 9, "_last_checkpoint moved backward"
    assert ours(root) == theirs(root)


def test_ensure_checkpoint_at_the_cutoff_never_moves_the_hint_back(tmp_path):
    root = multipart_table(tmp_path / "t", with_valid_older=False, with_newer=True)
    age_log(root, cutoff=7, latest=9, retention_days=RETENTION_DAYS)
    assert _hint(root) == 9
    result = cleanup_metadata(str(root), now_ms=NOW, ensure_checkpoint=True, dry_run=False)
    assert result.checkpoint_written == 7
    assert _hint(root) == 9
    assert ours(root) == theirs(root)


@pytest.mark.parametrize("hint", ["bad checksum", "not json"])
def test_an_unusable_hint_naming_a_deleted_checkpoint_is_replaced(tmp_path, hint):
    """`_last_checkpoint` names checkpoint 1 with a checksum that does not match (or is not
    JSON at all); cleanup keeps checkpoint 3 and deletes 1. Before the fix the hint was left
    naming the deleted checkpoint (an unusable hint was not read, so never moved)."""
    from delta_ops.maintenance.cleanup import DAY_MS, cleanup_metadata
    from delta_ops.protocol.last_checkpoint import parse_last_checkpoint
    from delta_ops_tests.support.raw_histories import _simple_spec, build_raw

    hist = build_raw(tmp_path / "t", _simple_spec(5, checkpoints={1: "classic", 3: "classic"}))
    path = hist.root / "_delta_log" / "_last_checkpoint"
    if hint == "bad checksum":
        lc = json.loads(path.read_text())
        lc.update(version=1, checksum="0" * 32)
        path.write_text(json.dumps(lc))
    else:
        path.write_text('{"version": 1, "size"')
    now = hist.commit_ms[-1] + 400 * DAY_MS
    result = cleanup_metadata(str(hist.root), now_ms=now, dry_run=False)
    assert result.checkpoint_version == 3 and result.last_checkpoint_updated
    assert f"_delta_log/{1:020d}.checkpoint.parquet" in result.files
    assert parse_last_checkpoint(path.read_bytes()).version == 3


def test_a_gap_bridged_by_a_newer_checkpoint_does_not_stop_cleanup(tmp_path):
    """Checkpoints at 1 and 4, commit 4 itself gone (cleaned by another tool), the cutoff
    at commit 3: the spec keeps checkpoint 1 and everything after, and deletes before it.
    Before, cleanup refused because commits alone no longer lead from 1 to 5; they did not
    before either, and checkpoint 4 bridges it. Every version that read still reads."""
    from datetime import timedelta

    from delta_ops.log import load_snapshot
    from delta_ops.maintenance.cleanup import DAY_MS, cleanup_metadata
    from delta_ops.storage import Storage
    from delta_ops_tests.support.raw_histories import _simple_spec, build_raw

    spec = _simple_spec(6, checkpoints={1: "classic", 4: "classic"}, gaps_h=[48] * 6)
    hist = build_raw(tmp_path / "t", spec)
    (hist.root / "_delta_log" / f"{4:020d}.json").unlink()
    storage = Storage.for_uri(str(hist.root))
    readable = [v for v in range(1, 6) if v != 4]
    before = {v: load_snapshot(storage, v).files.num_rows for v in readable}
    now = hist.commit_ms[3] + DAY_MS + 30 * DAY_MS
    result = cleanup_metadata(str(hist.root), now_ms=now, retention=timedelta(days=30),
                              dry_run=False)
    assert (result.cutoff_version, result.checkpoint_version) == (3, 1)
    assert result.files == (f"_delta_log/{0:020d}.json",)
    assert any("bridges the gap" in m for m in result.messages), result.messages
    assert {v: load_snapshot(storage, v).files.num_rows for v in readable} == before
    assert load_snapshot(storage).version == 5
