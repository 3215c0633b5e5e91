"""The log's checkpoint-file inspector (`delta_ops.log.files.checkpoint_files`, issue 14).

- Every checkpoint in the corpus: shape, action and add counts and size agree with the
  `_last_checkpoint` Spark wrote for it, with deltalake's file count, and with a count
  made here with pyarrow alone; every readable one passes the full read.
- Generated shapes (our writer on deltalake-written tables and on a copy of Spark's V2
  table): classic, multi-part with a garbage, truncated or page-corrupted part, V2
  UUID-named with a JSON or Parquet top-level file, V2 classic-named, V2 with a garbage or
  missing sidecar. Errors name the table, version and file.
- The one sidecar-path rule: relative to `_delta_log/_sidecars`, absolute paths taken as
  they are, nothing outside `_delta_log/_sidecars`; the log reader, `find_existing` and
  metadata cleanup all follow it.
- `cleanup_metadata(clock=...)`: the injected clock, `now_ms=` still accepted, not both.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable as RsTable
from deltalake import write_deltalake

from delta_ops.clock import fixed_clock
from delta_ops.errors import CorruptLogError
from delta_ops.log.files.checkpoint_files import (
    inspect_checkpoint,
    read_sidecar_references,
    sidecar_file_path,
    verify_checkpoint,
)
from delta_ops.log.files.existing_checkpoints import find_existing
from delta_ops.log.replay.full_replay import read_checkpoint
from delta_ops.log.segment.log_segment import CheckpointFiles, list_log
from delta_ops.log.segment.log_segment import complete_checkpoints as _complete_checkpoints
from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
from delta_ops.maintenance.checkpoint import write_checkpoint
from delta_ops.maintenance.checkpoint.plan import CheckpointKind
from delta_ops.maintenance.cleanup import DAY_MS, cleanup_metadata
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import all_corpus_tables, copy_corpus_table, corpus_path

LOG = "_delta_log"
SIDECARS = f"{LOG}/_sidecars"
HOUR_MS = 3_600_000
NOW = 1_700_000_000_000 - 1_700_000_000_000 % DAY_MS + 12 * HOUR_MS
V2_TABLE = "kernel-defaults__kernel-pagination-v2-checkpoint-parquet"
# Deliberately broken corpus tables: an action was taken out of the checkpoint after Spark
# wrote `_last_checkpoint`, so its `size` no longer describes the file.
EDITED_CHECKPOINTS = {
    "golden__deltalog-state-reconstruction-from-checkpoint-missing-metadata",
    "golden__deltalog-state-reconstruction-from-checkpoint-missing-protocol",
}
# Checkpoints the full read refuses: the two above, and two whose metaData has no
# schemaString (a reader cannot rebuild the table's schema from them).
UNUSABLE_CHECKPOINTS = EDITED_CHECKPOINTS | {
    "golden__corrupted-last-checkpoint",
    "golden__update-deleted-directory",
}


# --------------------------------------------------------------------------------------
# Helpers: independent readings (pyarrow and JSON only)
# --------------------------------------------------------------------------------------


def checkpoints(root: Path) -> list[CheckpointFiles]:
    return _complete_checkpoints(list_log(Storage.for_uri(str(root))), None)


def checkpoint_at(root: Path, version: int, identity_part: str = "") -> CheckpointFiles:
    return next(
        c for c in checkpoints(root) if c.version == version and identity_part in c.identity
    )


def pyarrow_counts(path: Path) -> tuple[int, int, list[str]]:
    """(actions, adds, sidecar paths as written) of one checkpoint file, read here."""
    if path.suffix == ".json":
        actions = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        adds = sum(1 for a in actions if a.get("add") is not None)
        sidecars = [a["sidecar"]["path"] for a in actions if a.get("sidecar") is not None]
        return len(actions), adds, sidecars
    table = pq.read_table(path)
    adds = 0
    if "add" in table.column_names:
        adds = sum(1 for a in table.column("add").to_pylist() if a and a.get("path"))
    sidecars = []
    if "sidecar" in table.column_names:
        sidecars = [s["path"] for s in table.column("sidecar").to_pylist() if s]
    return table.num_rows, adds, sidecars


def independent_totals(root: Path, checkpoint: CheckpointFiles) -> tuple[int, int, int]:
    """(actions, adds, bytes) of a checkpoint, its sidecars (bare names) included."""
    actions = adds = size = 0
    for info in checkpoint.files:
        path = root / info.path
        n, a, sidecars = pyarrow_counts(path)
        actions, adds, size = actions + n, adds + a, size + path.stat().st_size
        for name in sidecars:
            side = root / SIDECARS / name.rsplit("/", 1)[-1]
            n, a, _ = pyarrow_counts(side)
            actions, adds, size = actions + n, adds + a, size + side.stat().st_size
    return actions, adds, size


def deltalake_files(root: Path, version: int) -> int:
    return len(RsTable(str(root), version=version).file_uris())


def writable(root: Path) -> Path:
    for p in [root, *root.rglob("*")]:
        p.chmod(p.stat().st_mode | 0o200)
    return root


def deltalake_table(root: Path, commits: int = 7) -> Path:
    """Commits by deltalake (partitioned, one delete), so checkpoints hold removes too."""
    for i in range(commits):
        if i == 4:
            RsTable(str(root)).delete("x = 1")
            continue
        rows = pa.table({"x": [i, i + 100], "p": [str(i % 3), str((i + 1) % 3)]})
        write_deltalake(str(root), rows, mode="append", partition_by=["p"])
    return root


def v2_copy(tmp_path: Path) -> Path:
    """Spark's V2 table (checkpoints at 2 and 4, commits 0-4), writable."""
    return writable(copy_corpus_table(V2_TABLE, tmp_path / "v2"))


def corrupt(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "garbage":
        path.write_bytes(bytes((i * 7 + 3) % 256 for i in range(len(data))))
    elif how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "pages":  # data pages overwritten, footer intact
        footer_len = int.from_bytes(data[-8:-4], "little") + 8
        body = bytearray(data)
        body[4 : len(data) - footer_len] = b"\xff" * (len(data) - footer_len - 4)
        path.write_bytes(bytes(body))
    elif how == "missing":
        path.unlink()
    else:
        raise AssertionError(how)


# --------------------------------------------------------------------------------------
# The corpus: counts agree with Spark's _last_checkpoint, deltalake and pyarrow
# --------------------------------------------------------------------------------------


def _corpus_checkpoints() -> list[tuple[str, int, str]]:
    out = []
    for name in all_corpus_tables():
        root = corpus_path(name)
        if not any("checkpoint" in p.name for p in (root / LOG).iterdir()):
            continue
        for cp in checkpoints(root):
            out.append((name, cp.version, cp.identity))
    return out


CORPUS_CHECKPOINTS = _corpus_checkpoints()


def test_the_corpus_has_every_shape():
    shapes = set()
    for name, version, identity in CORPUS_CHECKPOINTS:
        root = corpus_path(name)
        shapes.add(inspect_checkpoint(
            Storage.for_uri(str(root)), checkpoint_at(root, version, identity)
        ).shape)
    assert shapes == {CheckpointKind.CLASSIC, CheckpointKind.MULTI_PART,
                      CheckpointKind.V2_UUID}
    assert len(CORPUS_CHECKPOINTS) >= 30


@pytest.mark.parametrize(("name", "version", "identity"), CORPUS_CHECKPOINTS,
                         ids=[f"{n}@{v}" for n, v, _ in CORPUS_CHECKPOINTS])
def test_corpus_checkpoint_counts(name, version, identity):
    root = corpus_path(name)
    storage = Storage.for_uri(str(root))
    cp = checkpoint_at(root, version, identity)
    found = inspect_checkpoint(storage, cp)

    assert (found.num_actions, found.num_adds, found.size_in_bytes) == independent_totals(
        root, cp
    )
    expected_shape = {
        "checkpoint.parquet": CheckpointKind.CLASSIC,
    }.get(identity[21:], None)
    if len(cp.files) > 1:
        expected_shape = CheckpointKind.MULTI_PART
    elif expected_shape is None:
        expected_shape = CheckpointKind.V2_UUID
    assert found.shape is expected_shape
    assert found.format == identity.rsplit(".", 1)[-1]
    assert found.parts == (len(cp.files) if expected_shape is CheckpointKind.MULTI_PART
                           else None)
    assert found.is_valid_shape
    assert [s.path for s in found.sidecars] == [r.path for r in found.sidecar_references]
    assert read_sidecar_references(storage, cp) == found.sidecar_references

    # Spark's own _last_checkpoint for this checkpoint, where it wrote the fields.
    last = json.loads((root / LOG / "_last_checkpoint").read_text() or "{}") if (
        root / LOG / "_last_checkpoint"
    ).exists() else {}
    if last.get("version") == version and name not in EDITED_CHECKPOINTS:
        assert found.num_actions == last["size"]
        if "numOfAddFiles" in last:
            assert found.num_adds == last["numOfAddFiles"]
        if "sizeInBytes" in last:
            assert found.size_in_bytes == last["sizeInBytes"]
        assert found.parts == last.get("parts")

    # The full read agrees with the log reader; every checkpoint here reads in full
    # except those the corpus broke on purpose.
    problem = verify_checkpoint(storage, cp)
    if name in UNUSABLE_CHECKPOINTS:
        assert problem is not None and problem.file == cp.files[0].path
        assert problem.version == version and problem.table == storage.root
    else:
        assert problem is None, problem
        assert read_checkpoint(storage, cp).adds.num_rows == found.num_adds


def test_corpus_adds_match_deltalake():
    """Where deltalake reads the version a checkpoint is at, its live files are exactly
    the checkpoint's adds (a checkpoint holds the live files of its version)."""
    checked = 0
    for name, version, identity in CORPUS_CHECKPOINTS:
        if name in EDITED_CHECKPOINTS or name.startswith("golden__corrupted-last-checkpoint"):
            continue
        root = corpus_path(name)
        try:
            expected = deltalake_files(root, version)
        except Exception:  # noqa: BLE001 - deltalake's errors have no common class
            continue
        found = inspect_checkpoint(Storage.for_uri(str(root)), checkpoint_at(root, version,
                                                                             identity))
        assert found.num_adds == expected, (name, version)
        checked += 1
    assert checked >= 30


# --------------------------------------------------------------------------------------
# Generated: classic and multi-part (our writer on a deltalake table)
# --------------------------------------------------------------------------------------


def test_classic_checkpoint(tmp_path):
    root = deltalake_table(tmp_path / "t")
    write_checkpoint(str(root), version=6, kind="classic", now_ms=NOW)
    storage = Storage.for_uri(str(root))
    cp = checkpoint_at(root, 6)
    found = inspect_checkpoint(storage, cp)
    assert found.shape is CheckpointKind.CLASSIC and found.format == "parquet"
    assert found.num_adds == deltalake_files(root, 6) == 11
    assert (found.num_actions, found.num_adds, found.size_in_bytes) == independent_totals(
        root, cp
    )
    assert found.num_actions > found.num_adds  # protocol, metaData and removes too
    assert found.sidecar_references == () and found.parts is None
    assert verify_checkpoint(storage, cp) is None
    existing = find_existing(storage, 6, CheckpointKind.CLASSIC)
    assert existing is not None
    assert (existing.num_actions, existing.num_add_files, existing.size_in_bytes) == (
        found.num_actions, found.num_adds, found.size_in_bytes
    )
    assert find_existing(storage, 6, CheckpointKind.V2_CLASSIC) is None


def test_adds_are_counted_without_footer_statistics(tmp_path):
    """A checkpoint written without column statistics (no null counts in the footer) is
    counted the same: the count comes from the `add.path` column itself."""
    root = deltalake_table(tmp_path / "t")
    write_checkpoint(str(root), version=6, kind="classic", now_ms=NOW)
    path = root / LOG / f"{6:020d}.checkpoint.parquet"
    table = pq.read_table(path)
    pq.write_table(table, path, write_statistics=False)
    meta = pq.ParquetFile(path).metadata
    assert all(meta.row_group(0).column(j).statistics is None
               for j in range(meta.num_columns))
    found = inspect_checkpoint(Storage.for_uri(str(root)), checkpoint_at(root, 6))
    assert found.num_adds == deltalake_files(root, 6) == 11
    assert found.num_adds == len(table) - pc.struct_field(table.column("add"), "path").null_count


def test_multipart_checkpoint(tmp_path):
    root = deltalake_table(tmp_path / "t")
    write_checkpoint(str(root), version=6, kind="multi-part", parts=3, now_ms=NOW)
    storage = Storage.for_uri(str(root))
    cp = checkpoint_at(root, 6)
    found = inspect_checkpoint(storage, cp)
    assert found.shape is CheckpointKind.MULTI_PART and found.parts == 3
    assert [f.path for f in found.files] == [i.path for i in cp.files]
    assert found.num_adds == deltalake_files(root, 6) == 11
    assert (found.num_actions, found.num_adds, found.size_in_bytes) == independent_totals(
        root, cp
    )
    assert verify_checkpoint(storage, cp) is None
    existing = find_existing(storage, 6, CheckpointKind.MULTI_PART)
    assert existing is not None and existing.parts == 3
    assert existing.num_add_files == found.num_adds


@pytest.mark.parametrize("how", ["garbage", "truncated", "pages"])
def test_multipart_checkpoint_with_a_bad_part(tmp_path, how):
    root = deltalake_table(tmp_path / "t")
    write_checkpoint(str(root), version=6, kind="multi-part", parts=3, now_ms=NOW)
    storage = Storage.for_uri(str(root))
    cp = checkpoint_at(root, 6)
    bad = cp.files[1].path
    corrupt(root / bad, how)

    problem = verify_checkpoint(storage, cp)
    assert isinstance(problem, CorruptLogError)
    assert (problem.table, problem.version, problem.file) == (storage.root, 6, bad)
    if how != "pages":  # the footer is gone: even the cheap inspection refuses
        with pytest.raises(CorruptLogError, match="cannot be read as Parquet") as info:
            inspect_checkpoint(storage, cp)
        assert (info.value.table, info.value.version, info.value.file) == (
            storage.root, 6, bad
        )
        assert find_existing(storage, 6, CheckpointKind.MULTI_PART) is None


# --------------------------------------------------------------------------------------
# Generated: V2 (our writer on a copy of Spark's V2 table)
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "fmt"), [("v2-uuid", "json"), ("v2-uuid", "parquet"),
                                           ("v2-classic", "parquet")])
def test_v2_checkpoint(tmp_path, kind, fmt):
    root = v2_copy(tmp_path)
    result = write_checkpoint(str(root), version=3, kind=kind, fmt=fmt, sidecar_actions=2,
                              now_ms=NOW)
    storage = Storage.for_uri(str(root))
    cp = checkpoint_at(root, 3, result.files[0].split(".checkpoint", 1)[1][:9])
    found = inspect_checkpoint(storage, cp)
    assert found.shape is CheckpointKind(kind) and found.format == fmt
    assert found.has_checkpoint_metadata and found.is_valid_shape
    assert len(found.sidecars) == 3  # 5 adds and a remove, at most 2 per sidecar
    assert [f"_sidecars/{r.name}" for r in found.sidecar_references] == list(result.files[1:])
    assert found.files[0].num_adds == 0  # every file action is in a sidecar
    assert found.num_adds == deltalake_files(root, 3) == result.num_add_files == 5
    assert (found.num_actions, found.num_adds, found.size_in_bytes) == independent_totals(
        root, cp
    )
    assert found.num_actions == result.num_actions
    assert verify_checkpoint(storage, cp) is None
    assert read_checkpoint(storage, cp).adds.num_rows == 5


@pytest.mark.parametrize("how", ["garbage", "truncated", "missing"])
@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_v2_checkpoint_with_a_bad_sidecar(tmp_path, how, fmt):
    root = v2_copy(tmp_path)
    result = write_checkpoint(str(root), version=3, kind="v2-uuid", fmt=fmt,
                              sidecar_actions=2, now_ms=NOW)
    storage = Storage.for_uri(str(root))
    cp = checkpoint_at(root, 3)
    bad = f"{LOG}/{result.files[2]}"
    corrupt(root / bad, how)

    with pytest.raises(CorruptLogError) as info:
        inspect_checkpoint(storage, cp)
    assert (info.value.table, info.value.version, info.value.file) == (storage.root, 3, bad)
    assert ("does not exist" if how == "missing" else "Parquet") in info.value.reason
    problem = verify_checkpoint(storage, cp)
    assert isinstance(problem, CorruptLogError)
    assert (problem.table, problem.version, problem.file) == (storage.root, 3, bad)
    # The references themselves still read: cleanup protects the other sidecars.
    assert [r.path for r in read_sidecar_references(storage, cp)] == [
        f"{LOG}/{n}" for n in result.files[1:]
    ]
    assert find_existing(storage, 3, CheckpointKind.V2_UUID) is None


def test_v2_json_checkpoint_that_is_not_json(tmp_path):
    root = v2_copy(tmp_path)
    write_checkpoint(str(root), version=3, kind="v2-uuid", fmt="json", now_ms=NOW)
    storage = Storage.for_uri(str(root))
    cp = checkpoint_at(root, 3)
    path = root / cp.files[0].path
    path.write_text(path.read_text() + "{not json\n")
    with pytest.raises(CorruptLogError, match="not valid JSON") as info:
        inspect_checkpoint(storage, cp)
    assert (info.value.version, info.value.file) == (3, cp.files[0].path)
    problem = verify_checkpoint(storage, cp)
    assert problem is not None and problem.file == cp.files[0].path


def test_uuid_named_checkpoint_without_checkpoint_metadata_is_not_a_v2_checkpoint(tmp_path):
    root = v2_copy(tmp_path)
    write_checkpoint(str(root), version=3, kind="v2-uuid", fmt="json", now_ms=NOW)
    storage = Storage.for_uri(str(root))
    cp = checkpoint_at(root, 3)
    path = root / cp.files[0].path
    lines = [ln for ln in path.read_text().splitlines() if "checkpointMetadata" not in ln]
    path.write_text("\n".join(lines) + "\n")
    found = inspect_checkpoint(storage, cp)
    assert found.shape is CheckpointKind.V2_UUID
    assert not found.has_checkpoint_metadata and not found.is_valid_shape
    assert find_existing(storage, 3, CheckpointKind.V2_UUID) is None


# --------------------------------------------------------------------------------------
# The sidecar-path rule
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("written", "expected"), [
    ("a.parquet", f"{SIDECARS}/a.parquet"),
    ("a%20b.parquet", f"{SIDECARS}/a b.parquet"),  # URI-encoded, decoded once
    ("sub/a.parquet", f"{SIDECARS}/sub/a.parquet"),  # relative to _sidecars, not the root
    (f"{SIDECARS}/a.parquet", f"{SIDECARS}/{SIDECARS}/a.parquet"),
    ("file:///data/t/_delta_log/_sidecars/a.parquet", f"{SIDECARS}/a.parquet"),
    ("file:/data/t/_delta_log/_sidecars/a.parquet", f"{SIDECARS}/a.parquet"),
    ("/data/t/_delta_log/_sidecars/a.parquet", f"{SIDECARS}/a.parquet"),
    ("file:///data/t/_delta_log/_sidecars/x/../a%2Bb.parquet", f"{SIDECARS}/a+b.parquet"),
])
def test_sidecar_path_rule(written, expected):
    assert sidecar_file_path(written, "file:///data/t") == expected


def test_sidecar_path_rule_on_object_stores():
    assert sidecar_file_path("s3a://b/t/_delta_log/_sidecars/a.parquet", "s3://b/t") == (
        f"{SIDECARS}/a.parquet"
    )
    with pytest.raises(CorruptLogError):
        sidecar_file_path("s3://other/t/_delta_log/_sidecars/a.parquet", "s3://b/t")


@pytest.mark.parametrize("written", [
    "../a.parquet",  # climbs out of _sidecars
    "..",
    "",
    "file:///elsewhere/_delta_log/_sidecars/a.parquet",  # another table
    "file:///data/t/part-0.parquet",  # inside the table, not a sidecar
    "file:///data/t/_delta_log/00000000000000000001.json",
])
def test_sidecar_paths_outside_the_sidecar_directory_are_refused(written):
    with pytest.raises(CorruptLogError, match="does not lead inside") as info:
        sidecar_file_path(written, "file:///data/t", version=7, file=f"{LOG}/cp.json")
    assert (info.value.table, info.value.version, info.value.file) == (
        "file:///data/t", 7, f"{LOG}/cp.json"
    )


def _absolute_sidecars(root: Path, storage: Storage) -> tuple[CheckpointFiles, list[str]]:
    """Our V2 JSON checkpoint at 3 with its three sidecars named by absolute paths, each
    in another form (file:/// URI, file: URI, plain absolute path)."""
    result = write_checkpoint(str(root), version=3, kind="v2-uuid", fmt="json",
                              sidecar_actions=2, now_ms=NOW)
    cp = checkpoint_at(root, 3)
    path = root / cp.files[0].path
    base = storage.root.removeprefix("file://") + f"/{SIDECARS}/"
    forms = [f"file://{base}", f"file:{base}", base]
    lines, n = [], 0
    for line in path.read_text().splitlines():
        obj = json.loads(line)
        if "sidecar" in obj:
            obj["sidecar"]["path"] = forms[n] + obj["sidecar"]["path"]
            n += 1
        lines.append(json.dumps(obj))
    assert n == 3
    path.write_text("\n".join(lines) + "\n")
    cp = checkpoint_at(root, 3)  # its size changed
    return cp, [f"{LOG}/{f}" for f in result.files[1:]]


def test_absolute_sidecar_paths_are_read_everywhere(tmp_path):
    root = v2_copy(tmp_path)
    storage = Storage.for_uri(str(root))
    before = sorted(load_snapshot(storage, 3).files.column("path").to_pylist())
    cp, sidecars = _absolute_sidecars(root, storage)

    found = inspect_checkpoint(storage, cp)
    assert [r.path for r in found.sidecar_references] == sidecars
    assert all(r.written.endswith(r.name) and r.written != r.name
               for r in found.sidecar_references)
    assert found.num_adds == 5
    assert verify_checkpoint(storage, cp) is None
    # The log reader follows the same rule: version 3 reads the same from this checkpoint.
    assert sorted(load_snapshot(storage, 3).files.column("path").to_pylist()) == before
    # The checkpoint writer finds it and reports its sidecars as they are.
    existing = find_existing(storage, 3, CheckpointKind.V2_UUID)
    assert existing is not None
    assert list(existing.names[1:]) == [s.removeprefix(f"{LOG}/") for s in sidecars]
    assert [f["path"] for f in existing.v2_checkpoint["sidecarFiles"]] == [
        r.written for r in found.sidecar_references
    ]


def test_a_sidecar_path_outside_the_table_makes_the_checkpoint_unusable(tmp_path):
    root = v2_copy(tmp_path)
    storage = Storage.for_uri(str(root))
    cp, _ = _absolute_sidecars(root, storage)
    path = root / cp.files[0].path
    path.write_text(path.read_text().replace(f"/{SIDECARS}/", "/elsewhere/", 1))
    cp = checkpoint_at(root, 3)
    with pytest.raises(CorruptLogError, match="does not lead inside") as info:
        inspect_checkpoint(storage, cp)
    assert (info.value.version, info.value.file) == (3, cp.files[0].path)
    problem = verify_checkpoint(storage, cp)
    assert problem is not None and problem.file == cp.files[0].path
    assert find_existing(storage, 3, CheckpointKind.V2_UUID) is None


def _age(root: Path, *, kept: int, latest: int) -> None:
    """Commits up to `kept` older than the 30-day retention, later ones an hour old; every
    other log file (checkpoints by their version, sidecars) as old as its commit or older."""
    for p in (root / LOG).rglob("*"):
        if not p.is_file():
            continue
        head = p.name.lstrip(".")[:20]
        v = int(head) if head.isdigit() else 0
        ms = NOW - (30 + kept - v + 1) * DAY_MS if v <= kept else NOW - (latest - v + 1) * HOUR_MS
        os.utime(p, ns=(ms * 1_000_000, ms * 1_000_000))


def test_cleanup_keeps_sidecars_referenced_by_absolute_paths(tmp_path):
    """Cleanup relies on the checkpoint at 3 (its sidecars found through absolute paths),
    deletes what is older, and keeps every sidecar a remaining checkpoint references."""
    root = v2_copy(tmp_path)
    storage = Storage.for_uri(str(root))
    _cp, ours = _absolute_sidecars(root, storage)
    _age(root, kept=3, latest=4)
    before = {v: sorted(load_snapshot(storage, v).files.column("path").to_pylist())
              for v in (3, 4)}
    old_sidecars = {f"{SIDECARS}/{p.name}" for p in (root / SIDECARS).iterdir()} - set(ours)
    of_4 = {r.path for r in read_sidecar_references(storage, checkpoint_at(root, 4))}
    assert len(old_sidecars - of_4) == 2  # checkpoint 2's
    expected = {f"{LOG}/{v:020d}.json" for v in range(3)}
    expected |= {c.files[0].path for c in checkpoints(root) if c.version == 2}
    expected |= old_sidecars - of_4
    assert len(expected) == 6

    result = cleanup_metadata(str(root), clock=fixed_clock(NOW), dry_run=False)

    assert result.cutoff_version == 3 and result.checkpoint_version == 3, result.messages
    assert set(result.files) == expected
    assert not any((root / p).exists() for p in expected)
    assert all((root / p).exists() for p in [*ours, *of_4])
    for v in (3, 4):
        assert sorted(load_snapshot(storage, v).files.column("path").to_pylist()) == before[v]


# --------------------------------------------------------------------------------------
# cleanup_metadata's clock
# --------------------------------------------------------------------------------------


def test_cleanup_clock_and_now_ms_agree_and_exclude_each_other(tmp_path):
    root = v2_copy(tmp_path)
    _age(root, kept=4, latest=4)
    by_clock = cleanup_metadata(str(root), dry_run=True, clock=fixed_clock(NOW))
    by_number = cleanup_metadata(str(root), dry_run=True, now_ms=NOW)
    assert by_clock.to_dict() == by_number.to_dict()
    assert by_clock.cutoff_version == 4 and by_clock.num_files > 0
    # The clock is what decides: 40 days earlier nothing is old enough.
    earlier = cleanup_metadata(str(root), dry_run=True, clock=fixed_clock(NOW - 40 * DAY_MS))
    assert earlier.cutoff_version is None and earlier.files == ()
    with pytest.raises(ValueError, match="not both"):
        cleanup_metadata(str(root), clock=fixed_clock(NOW), now_ms=NOW, dry_run=False)
