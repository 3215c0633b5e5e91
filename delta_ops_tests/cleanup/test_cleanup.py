"""Metadata cleanup (spec "Metadata Cleanup") on real corpus tables and generated histories.

Corpus tables are copied and their log files aged with `os.utime`; the expected deletions are
computed here from file names and ages alone (an independent reading of the spec's rules) and
compared file for file. Generated histories (`RawHistory`, below; also used by
test_vacuum.py) hold every checkpoint kind (classic, multi-part, V2 UUID-named JSON and
Parquet with sidecars, V2 classic-named), compactions, `.crc` and Hadoop side files,
`u` deletion vectors with real DV files, in-commit timestamps and random ages; after cleanup
every version from the kept checkpoint on must read exactly as before. Crash tests fail the
k-th delete for every k.
"""

from __future__ import annotations

import json
import os
import re
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delta_ops.errors import StorageError, UnsupportedFeatureError
from delta_ops.maintenance.cleanup import DAY_MS, cleanup_metadata, midnight_utc
from delta_ops.protocol.last_checkpoint import build_last_checkpoint, parse_last_checkpoint
from delta_ops.storage import Storage
from delta_ops.table import DeltaTable
from delta_ops_tests.support.raw_histories import (
    BASE_MS,
    HOUR_MS,
    FailingStorage,
    RawHistory,
    _cli,
    _simple_spec,
    build_raw,
    log_names,
    raw_specs,
    set_mtime,
)

# --------------------------------------------------------------------------------------
# Helpers shared with test_vacuum.py
# --------------------------------------------------------------------------------------


def signature(storage: Storage, version: int) -> tuple:
    """What a reader sees at `version`: protocol, metadata, live files, tombstones."""
    snap = DeltaTable(storage=storage).snapshot(version)

    def keys(t: pa.Table) -> list:
        return sorted(
            (r["path"], json.dumps(r["deletionVector"], sort_keys=True))
            for r in t.select(["path", "deletionVector"]).to_pylist()
        )

    md = snap.metadata
    return (
        json.dumps({k: sorted(v) if isinstance(v, list) else v for k, v in snap.protocol.items()},
                   sort_keys=True),
        (md.id, md.schema_string, tuple(md.partition_columns),
         tuple(sorted(md.configuration.items()))),
        keys(snap.files),
        keys(snap.tombstones),
    )


# --------------------------------------------------------------------------------------
# A raw history generator: commits, checkpoints of every kind, compactions, DVs, ages
# --------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------
# The spec's rules, computed naively from names and ages (the test oracle)
# --------------------------------------------------------------------------------------

_NAME = re.compile(r"^(\d{20})\.(json|crc|checkpoint\.parquet|checkpoint\.\d{10}\.\d{10}\.parquet"
                   r"|checkpoint\.[0-9a-f-]{36}\.(json|parquet))$")
_COMPACTION = re.compile(r"^(\d{20})\.(\d{20})\.compacted\.json$")


def naive_cutoff(commit_ms: dict[int, int], cutoff_ms: int) -> int | None:
    older = [v for v, t in commit_ms.items() if t <= cutoff_ms]
    return max(older) if older else None


def complete_checkpoints(root: Path) -> set[int]:
    names = log_names(root)
    out = set()
    for name in names:
        if re.match(r"^\d{20}\.checkpoint\.(parquet|[0-9a-f-]{36}\.(json|parquet))$", name):
            out.add(int(name[:20]))
        elif m := re.match(r"^(\d{20})\.checkpoint\.\d{10}\.(\d{10})\.parquet$", name):
            parts = [x for x in names if x.startswith(f"{m.group(1)}.checkpoint.")
                     and x.endswith(f".{m.group(2)}.parquet")]
            if len(parts) == int(m.group(2)):
                out.add(int(m.group(1)))
    return out


# --------------------------------------------------------------------------------------
# Corpus tables
# --------------------------------------------------------------------------------------

CORPUS_TABLES = [
    "kernel-defaults__basic-dv-with-checkpoint",  # classic checkpoints every 10, Hadoop .crc
    "kernel-defaults__kernel-pagination-single-checkpoint",  # checkpoints at 9 and 10
    "kernel-defaults__kernel-pagination-multi-part-checkpoints",  # 3-part checkpoint at 0
    "kernel-defaults__kernel-pagination-v2-checkpoint-json",  # V2 JSON + sidecars
    "kernel-defaults__kernel-pagination-v2-checkpoint-parquet",  # V2 JSON and Parquet
    "golden__v2-checkpoint-parquet",
    "spark__transaction_log_schema_evolvability",  # .crc version checksums
    "spark__delta-1.2.1",
    "golden__basic-with-inserts-deletes-checkpoint",
    "no_replay",  # the log starts at version 2
]


def _age_log(root: Path, now_ms: int, days_per_version: int = 1) -> dict[int, int]:
    """Commit v (and every log file of version v) modified at 01:00 UTC on the day
    (latest - v + 1) * days_per_version before now; returns commit times."""
    log = root / "_delta_log"
    versions = sorted({int(p.name[:20]) for p in log.iterdir() if p.name[:20].isdigit()})
    latest = versions[-1]
    commit_ms = {}
    for p in log.iterdir():
        name = p.name.lstrip(".")
        if not name[:20].isdigit():
            continue
        m = _COMPACTION.match(name.removesuffix(".crc") if p.name.startswith(".") else name)
        v = int(m.group(2)) if m else int(name[:20])
        ms = midnight_utc(now_ms) - (latest - v + 1) * days_per_version * DAY_MS + HOUR_MS
        set_mtime(p, ms)
        if re.match(r"^\d{20}\.json$", p.name):
            commit_ms[v] = ms
    side = log / "_sidecars"
    if side.is_dir():
        for p in side.iterdir():
            set_mtime(p, midnight_utc(now_ms) - 400 * DAY_MS)
    return commit_ms


def _sidecars_referenced(root: Path, versions: set[int]) -> set[str]:
    out = set()
    for p in (root / "_delta_log").iterdir():
        name = p.name
        if not name[:20].isdigit() or int(name[:20]) not in versions or ".checkpoint" not in name:
            continue
        if p.name.endswith(".json"):
            for line in p.read_text().splitlines():
                obj = json.loads(line)
                if "sidecar" in obj:
                    out.add(obj["sidecar"]["path"].rsplit("/", 1)[-1])
        elif "sidecar" in pq.read_schema(p).names:
            col = pq.read_table(p, columns=["sidecar"]).column("sidecar").to_pylist()
            out |= {c["path"].rsplit("/", 1)[-1] for c in col if c}
    return out


@pytest.mark.parametrize("name", CORPUS_TABLES)
@pytest.mark.parametrize("back", [0, 3, 7])
def test_corpus_cleanup_matches_spec_rules(table_copy, name, back):
    """Retention of `back` days: the cutoff lands `back` versions before the latest."""
    root = table_copy(name)
    now = BASE_MS + 100 * DAY_MS
    commit_ms = _age_log(root, now)
    latest = max(commit_ms)
    before = {v: signature(Storage.for_uri(str(root)), v) for v in range(latest - back, latest + 1)
              if v >= min(complete_checkpoints(root) | {min(commit_ms)})}
    retention_days = back
    cutoff_ms = midnight_utc(now - retention_days * DAY_MS)
    cutoff_v = naive_cutoff(commit_ms, cutoff_ms)
    cps = [c for c in complete_checkpoints(root) if cutoff_v is not None and c <= cutoff_v]
    names_before = log_names(root)
    expected: set[str] = set()
    if cps:
        expected = naive_expected_from(names_before, max(cps))
        kept = {int(n[:20]) for n in names_before
                if n[:20].isdigit() and ".checkpoint" in n and f"_delta_log/{n}" not in expected}
        sidecar_dir = root / "_delta_log" / "_sidecars"
        if sidecar_dir.is_dir():
            referenced = _sidecars_referenced(root, kept)
            # A Hadoop side file `.X.crc` goes with X.
            expected |= {f"_delta_log/_sidecars/{p.name}" for p in sidecar_dir.iterdir()
                         if _unhide(p.name) not in referenced}

    result = cleanup_metadata(str(root), force_retention=True,
                              retention=timedelta(days=retention_days), now_ms=now, dry_run=False)

    assert result.cutoff_timestamp == cutoff_ms
    assert result.cutoff_version == cutoff_v
    if not cps:
        assert result.checkpoint_version is None
        assert result.files == ()
        why = "no commit is older" if cutoff_v is None else "no complete checkpoint"
        assert why in result.reason
        assert log_names(root) == names_before
        return
    cp = max(cps)
    assert result.checkpoint_version == cp
    assert set(result.files) == expected
    assert all(not (root / f).exists() for f in result.files)
    store = Storage.for_uri(str(root))
    for v, sig in before.items():
        if v >= cp:
            assert signature(store, v) == sig, f"version {v} reads differently after cleanup"
    again = cleanup_metadata(str(root), force_retention=True,
                             retention=timedelta(days=retention_days),
                             now_ms=now, dry_run=False)
    assert again.files == ()
    assert again.reason and "nothing to delete" in again.reason


def _unhide(name: str) -> str:
    return name[1:-4] if name.startswith(".") and name.endswith(".crc") else name


def naive_expected_from(names: set[str], checkpoint_version: int) -> set[str]:
    out = set()
    for name in names:
        main = name[1:-4] if name.startswith(".") and name.endswith(".crc") else name
        if m := _NAME.match(main):
            if int(m.group(1)) < checkpoint_version:
                out.add(f"_delta_log/{name}")
        elif m := _COMPACTION.match(main):
            if int(m.group(1)) <= checkpoint_version:
                out.add(f"_delta_log/{name}")
    return out


@pytest.mark.parametrize(
    "name",
    [
        "kernel-defaults__basic-dv-with-checkpoint",
        "kernel-defaults__kernel-pagination-multi-part-checkpoints",
        "kernel-defaults__kernel-pagination-v2-checkpoint-json",
        "kernel-defaults__kernel-pagination-v2-checkpoint-parquet",
        "golden__v2-checkpoint-parquet",
    ],
)
def test_last_checkpoint_rewrite_matches_what_spark_wrote(table_copy, name):
    """A stale `_last_checkpoint` (pointing at version 0) is moved forward before deleting,
    with the counts Spark itself wrote for that checkpoint."""
    root = table_copy(name)
    lc_path = root / "_delta_log" / "_last_checkpoint"
    spark = json.loads(lc_path.read_text())
    stale = build_last_checkpoint(version=0, size=1, size_in_bytes=1, num_of_add_files=0)
    lc_path.write_bytes(stale.to_json_bytes())
    now = BASE_MS + 100 * DAY_MS
    _age_log(root, now)
    result = cleanup_metadata(str(root), force_retention=True, retention=timedelta(0), now_ms=now,
                              dry_run=False)
    written = parse_last_checkpoint(lc_path.read_bytes())
    if result.checkpoint_version == 0:  # nothing older than version 0 to delete
        assert not result.last_checkpoint_updated
        return
    assert result.last_checkpoint_updated
    assert written.checksum_valid is True
    for key in ("version", "size", "parts", "sizeInBytes", "numOfAddFiles"):
        assert written.raw.get(key) == spark.get(key), key
    assert (root / "_delta_log").joinpath(
        next(n for n in log_names(root) if n.startswith(f"{written.version:020d}.checkpoint"))
    ).exists()


def test_disabled_by_table_property_deletes_nothing(tmp_path):
    spec = _simple_spec(6, checkpoints={3: "classic"},
                        configuration={"delta.enableExpiredLogCleanup": "false"})
    hist = build_raw(tmp_path / "t", spec)
    names = log_names(hist.root)
    result = cleanup_metadata(str(hist.root), now_ms=hist.commit_ms[-1] + 400 * DAY_MS,
                              dry_run=False)
    assert not result.enabled
    assert result.files == () and result.num_files == 0
    assert "enableExpiredLogCleanup is false" in result.reason
    assert log_names(hist.root) == names


def test_unknown_writer_feature_is_refused(tmp_path):
    spec = _simple_spec(6, checkpoints={3: "classic"}, extra_writer_features=["futureFeature"])
    hist = build_raw(tmp_path / "t", spec)
    names = log_names(hist.root)
    with pytest.raises(UnsupportedFeatureError, match="futureFeature"):
        cleanup_metadata(str(hist.root), now_ms=hist.commit_ms[-1] + 400 * DAY_MS, dry_run=False)
    assert log_names(hist.root) == names


def test_in_commit_timestamps_decide_the_cutoff_not_file_times(tmp_path):
    """ICT enabled from version 0; every commit file looks ancient, but the in-commit
    timestamps are recent: only the commits whose ICT is before the cutoff count."""
    spec = _simple_spec(8, checkpoints={2: "classic", 5: "classic"}, ict_from=0)
    spec["gaps_h"] = [24] * 8
    hist = build_raw(tmp_path / "t", spec)
    for p in (hist.root / "_delta_log").iterdir():
        if p.is_file():
            set_mtime(p, 0)
    now = hist.commit_ms[5] + DAY_MS + 1  # cutoff (retention 1 day) = midnight of day 5
    result = cleanup_metadata(str(hist.root), force_retention=True,
                              retention=timedelta(days=1), now_ms=now, dry_run=False)
    expected_cutoff = naive_cutoff(dict(enumerate(hist.commit_ms)), midnight_utc(now - DAY_MS))
    assert result.cutoff_version == expected_cutoff
    assert result.checkpoint_version == max(c for c in hist.complete if c <= expected_cutoff)


def test_file_times_are_made_monotonic(tmp_path):
    """Without ICT a commit whose file looks older than its predecessor's counts as no
    older than it (Spark's adjustment), so it cannot drag the cutoff past a newer commit."""
    spec = _simple_spec(6, checkpoints={1: "classic", 4: "classic"})
    spec["gaps_h"] = [24] * 6
    hist = build_raw(tmp_path / "t", spec)
    log = hist.root / "_delta_log"
    set_mtime(log / f"{4:020d}.json", hist.commit_ms[0])  # version 4 "older" than version 1
    now = hist.commit_ms[2] + 12 * HOUR_MS
    result = cleanup_metadata(str(hist.root), force_retention=True,
                              retention=timedelta(0), now_ms=now, dry_run=False)
    # Versions 0-2 are before the cutoff; 3 is not, so 4 cannot be either.
    older = [v for v in range(6) if hist.commit_ms[v] <= midnight_utc(now)]
    assert result.cutoff_version == max(older) == 2
    assert result.checkpoint_version == 1


def test_young_unreferenced_sidecars_are_kept(tmp_path):
    spec = _simple_spec(7, checkpoints={2: "v2-json", 5: "v2-parquet"}, v2=True)
    hist = build_raw(tmp_path / "t", spec)
    now = hist.commit_ms[-1] + 10 * DAY_MS
    sidecar_of_2 = hist.root / "_delta_log" / "_sidecars" / hist.sidecars[2][0]
    set_mtime(sidecar_of_2, now - HOUR_MS)  # younger than a day
    checkpoint_2 = hist.checkpoint_file(2)
    result = cleanup_metadata(str(hist.root), force_retention=True,
                              retention=timedelta(0), now_ms=now, dry_run=False)
    assert result.checkpoint_version == 5
    assert f"_delta_log/{checkpoint_2}" in result.files
    assert sidecar_of_2.exists()
    set_mtime(sidecar_of_2, midnight_utc(now) - DAY_MS - 1)  # older than a day (midnight)
    again = cleanup_metadata(str(hist.root), force_retention=True,
                             retention=timedelta(0), now_ms=now, dry_run=False)
    assert again.files == (f"_delta_log/_sidecars/{hist.sidecars[2][0]}",)
    assert not sidecar_of_2.exists()
    assert (hist.root / "_delta_log" / "_sidecars" / hist.sidecars[5][0]).exists()


def test_no_checkpoint_deletes_nothing_and_says_why(tmp_path):
    hist = build_raw(tmp_path / "t", _simple_spec(5, checkpoints={}))
    names = log_names(hist.root)
    now = hist.commit_ms[-1] + 400 * DAY_MS
    result = cleanup_metadata(str(hist.root), now_ms=now, dry_run=False)
    assert result.cutoff_version == 4 and result.checkpoint_version is None
    assert "no complete checkpoint at or before the cutoff version 4" in result.reason
    assert "--ensure-checkpoint" in result.reason
    assert log_names(hist.root) == names
    dry = cleanup_metadata(str(hist.root), now_ms=now, ensure_checkpoint=True, dry_run=True)
    assert dry.checkpoint_written == 4 and dry.checkpoint_version == 4
    assert set(dry.files) == {f"_delta_log/{v:020d}.json" for v in range(4)}
    assert log_names(hist.root) == names


def test_ensure_checkpoint_writes_one_at_the_cutoff_then_cleans(tmp_path):
    hist = build_raw(tmp_path / "t", _simple_spec(5, checkpoints={1: "classic"}))
    now = hist.commit_ms[-1] + 400 * DAY_MS
    store = hist.storage
    latest = signature(store, 4)
    result = cleanup_metadata(str(hist.root), now_ms=now, ensure_checkpoint=True, dry_run=False)
    assert result.checkpoint_written == 4 and result.checkpoint_version == 4
    assert {f"_delta_log/{v:020d}.json" for v in range(4)} <= set(result.files)
    assert any(n.startswith(f"{4:020d}.checkpoint") for n in log_names(hist.root))
    assert signature(store, 4) == latest


# --------------------------------------------------------------------------------------
# Generated histories: safety and the exact rules
# --------------------------------------------------------------------------------------


def _expected_for(hist: RawHistory, names: set[str], now: int, retention_days: int):
    """(cutoff version, checkpoint version, files) the spec's rules give, naively."""
    cutoff_ms = midnight_utc(now - retention_days * DAY_MS)
    cutoff_v = naive_cutoff(dict(enumerate(hist.commit_ms)), cutoff_ms)
    cps = [c for c in hist.complete if cutoff_v is not None and c <= cutoff_v]
    if not cps:
        return cutoff_v, None, set()
    cp = max(cps)
    files = naive_expected_from(names, cp)
    referenced = {s for v, scs in hist.sidecars.items() if v >= cp for s in scs}
    young = midnight_utc(now) - DAY_MS
    files |= {
        f"_delta_log/_sidecars/{s}" for v, scs in hist.sidecars.items() for s in scs
        if s not in referenced and hist.mtimes[v] + 2 < young
    }
    return cutoff_v, cp, files


def _check_last_checkpoint(root: Path) -> None:
    path = root / "_delta_log" / "_last_checkpoint"
    if not path.exists():
        return
    lc = parse_last_checkpoint(path.read_bytes())
    assert lc.checksum_valid is not False
    assert lc.version in complete_checkpoints(root), (
        f"_last_checkpoint points at version {lc.version}, which has no complete checkpoint"
    )


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(spec=raw_specs(), retention_days=st.integers(0, 8), extra_h=st.integers(0, 24 * 12))
def test_property_every_kept_version_reads_as_before(tmp_path_factory, spec, retention_days,
                                                     extra_h):
    root = tmp_path_factory.mktemp("hist") / "t"
    hist = build_raw(root, spec)
    store = hist.storage
    now = hist.commit_ms[-1] + extra_h * HOUR_MS
    before = {v: signature(store, v) for v in range(hist.latest + 1)}
    names = log_names(root)
    cutoff_v, cp, expected = _expected_for(hist, names, now, retention_days)

    dry = cleanup_metadata(store, force_retention=True,
                           retention=timedelta(days=retention_days), now_ms=now,
                           dry_run=True)
    assert log_names(root) == names
    result = cleanup_metadata(store, force_retention=True,
                              retention=timedelta(days=retention_days), now_ms=now, dry_run=False)

    assert (result.cutoff_version, result.checkpoint_version) == (cutoff_v, cp)
    assert set(result.files) == expected
    assert dry.files == result.files
    assert len(set(result.files)) == len(result.files)
    for v in range(cp if cp is not None else 0, hist.latest + 1):
        assert signature(store, v) == before[v], f"version {v} reads differently"
    _check_last_checkpoint(root)


CRASH_SPECS = {
    "v1": dict(
        _simple_spec(9, checkpoints={2: "multipart", 4: "multipart-incomplete", 6: "classic"}),
        crc={0, 1, 3, 6}, side_crc=True, compactions=[(1, 3), (4, 7)], last_checkpoint="oldest",
    ),
    "v2": dict(
        _simple_spec(9, checkpoints={1: "v2-json", 3: "v2-parquet", 6: "v2-classic"}, v2=True),
        crc={2, 5}, side_crc=True, compactions=[(2, 4)], last_checkpoint="oldest",
    ),
}


@pytest.mark.parametrize("kind", sorted(CRASH_SPECS))
def test_crash_at_every_delete_leaves_kept_versions_readable(tmp_path, kind):
    spec = CRASH_SPECS[kind]
    reference = build_raw(tmp_path / "reference", spec)
    now = reference.commit_ms[7] + 2 * DAY_MS
    full = cleanup_metadata(reference.storage, force_retention=True,
                            retention=timedelta(days=1), now_ms=now, dry_run=False)
    assert full.checkpoint_version == 6 and full.num_files > 10
    final_names = log_names(reference.root)
    sidecar_dir = reference.root / "_delta_log" / "_sidecars"
    final_sidecars = set(os.listdir(sidecar_dir)) if sidecar_dir.exists() else set()
    for k in range(1, full.num_files + 1):
        hist = build_raw(tmp_path / f"crash{k}", spec)
        store = hist.storage
        before = {v: signature(store, v) for v in range(6, hist.latest + 1)}
        with pytest.raises(StorageError, match=f"injected failure on delete #{k}"):
            cleanup_metadata(FailingStorage.at(hist.root, k), force_retention=True,
                             retention=timedelta(days=1),
                             now_ms=now, dry_run=False)
        for v, sig in before.items():
            assert signature(store, v) == sig, f"crash at delete {k}: version {v} broken"
        _check_last_checkpoint(hist.root)
        rerun = cleanup_metadata(store, force_retention=True,
                                 retention=timedelta(days=1), now_ms=now, dry_run=False)
        assert rerun.checkpoint_version == 6
        assert log_names(hist.root) == final_names
        if final_sidecars or sidecar_dir.exists():
            assert set(os.listdir(hist.root / "_delta_log" / "_sidecars")) == final_sidecars


def test_deletion_order_is_oldest_first_and_checkpoint_last_within_a_version(tmp_path):
    hist = build_raw(tmp_path / "t", CRASH_SPECS["v1"])
    now = hist.commit_ms[7] + 2 * DAY_MS
    result = cleanup_metadata(hist.storage, force_retention=True,
                              retention=timedelta(days=1), now_ms=now, dry_run=True)
    log_files = [f for f in result.files if "/_sidecars/" not in f]

    def rank(path: str) -> tuple:
        name = path.rsplit("/", 1)[-1]
        main = _unhide(name)
        if m := _COMPACTION.match(main):
            return (int(m.group(1)), 0)
        kind = 3 if ".checkpoint" in main else 2 if main.endswith(".crc") else 1
        return (int(main[:20]), kind)

    assert [rank(p) for p in log_files] == sorted(rank(p) for p in log_files)
    for i, path in enumerate(log_files):  # every side file comes right before its file
        name = path.rsplit("/", 1)[-1]
        if name.startswith("."):
            assert log_files[i + 1] == f"_delta_log/{_unhide(name)}"


# --------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------


def test_cli_cleanup_json(tmp_path, monkeypatch, capsys):
    hist = build_raw(tmp_path / "t", _simple_spec(5, checkpoints={3: "classic"}))
    code, out, err = _cli(monkeypatch, capsys, ["cleanup", str(hist.root), "--dry-run", "--json"])
    assert code == 0, err
    obj = json.loads(out)
    assert obj["dry_run"] is True
    assert obj["cutoff_version"] == 4 and obj["checkpoint_version"] == 3
    assert obj["files"] == [f"_delta_log/{v:020d}.json" for v in range(3)]
    assert obj["num_files"] == 3
    assert isinstance(obj["cutoff_timestamp"], int)
    assert log_names(hist.root) >= {f"{v:020d}.json" for v in range(3)}

    code, out, err = _cli(monkeypatch, capsys, ["cleanup", str(hist.root), "--retention", "7d",
                                                 "--force-retention"])
    assert code == 0, err
    assert "deleted 3 files" in out
    assert not (hist.root / "_delta_log" / f"{0:020d}.json").exists()


def test_cli_cleanup_rejects_bad_retention(tmp_path, monkeypatch, capsys):
    hist = build_raw(tmp_path / "t", _simple_spec(2, checkpoints={}))
    with pytest.raises(SystemExit):
        _cli(monkeypatch, capsys, ["cleanup", str(hist.root), "--retention", "3 months"])
    assert "months" in capsys.readouterr().err
