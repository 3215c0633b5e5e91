"""`delta_ops.fsck` on corpus copies hurt on purpose: each hurt is found, with its code,
severity and file, and nothing else is reported. The files are dated so that VACUUM's
retention has not passed (`clock`), so leftovers are only what the hurt left."""

from __future__ import annotations

import os
import uuid
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from delta_ops.log import load_snapshot
from delta_ops.maintenance.checksum import write_checksum
from delta_ops.maintenance.fsck import fsck
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import copy_corpus_table

OLD_S = 1_600_000_000
SOON_MS = (OLD_S + 3600) * 1000
#: A partitioned table with deletion vectors and a checkpoint.
PARTITIONED = "golden__dv-partitioned-with-checkpoint"
#: DAT's deletion-vector table: one data file, one DV file, commits 0..2, no checkpoint.
DV_TABLE = "deletion_vectors"


def _copy(name: str, tmp_path: Path) -> Path:
    root = copy_corpus_table(name, tmp_path / "t")
    for folder, _dirs, files in os.walk(root):
        for f in files:
            os.utime(os.path.join(folder, f), (OLD_S, OLD_S))
    return root


def _check(root: Path, **kwargs):
    result = fsck(str(root), clock=lambda: SOON_MS, **kwargs)
    return result, Counter((p.code, p.severity) for p in result.problems)


def _live(root: Path) -> list[dict]:
    return load_snapshot(Storage.for_uri(str(root))).files.to_pylist()


def _dv_file(row: dict) -> str:
    from delta_ops.protocol.deletion_vectors import DeletionVectorDescriptor

    return DeletionVectorDescriptor.from_dict(row["deletionVector"]).relative_path()


def test_deleted_data_file(tmp_path):
    root = _copy(PARTITIONED, tmp_path)
    gone = unquote(sorted(r["path"] for r in _live(root))[0])
    (root / gone).unlink()
    result, found = _check(root)
    assert found == {("missing_file", "error"): 1}
    (problem,) = result.problems
    assert problem.file == gone and "does not exist" in problem.reason
    assert problem.version == result.version and not result.ok


def test_deleted_partition_directory(tmp_path):
    root = _copy(PARTITIONED, tmp_path)
    in_part = sorted(unquote(r["path"]) for r in _live(root) if r["path"].startswith("part=3/"))
    assert in_part
    for f in (root / "part=3").iterdir():
        f.unlink()
    (root / "part=3").rmdir()
    result, found = _check(root)
    assert found == {("missing_file", "error"): len(in_part)}
    assert sorted(p.file for p in result.problems) == in_part


def test_deleted_dv_file(tmp_path):
    root = _copy(PARTITIONED, tmp_path)
    rows = [r for r in _live(root) if r["deletionVector"]]
    dv = _dv_file(rows[0])
    users = sorted(unquote(r["path"]) for r in rows if _dv_file(r) == dv)
    (root / dv).unlink()
    result, found = _check(root)
    assert found == {("missing_dv", "error"): len(users)}
    assert {p.file for p in result.problems} == {dv}
    assert sorted(p.data_file for p in result.problems) == users


def test_corrupted_dv_file_fails_its_checksum(tmp_path):
    root = _copy(DV_TABLE, tmp_path)
    (row,) = [r for r in _live(root) if r["deletionVector"]]
    dv = root / _dv_file(row)
    data = bytearray(dv.read_bytes())
    at = row["deletionVector"]["offset"] + 4 + 6  # inside the bitmap: only the CRC-32 sees it
    data[at] ^= 0xFF
    dv.write_bytes(bytes(data))
    os.utime(dv, (OLD_S, OLD_S))
    result, found = _check(root)
    assert found == {("corrupt_dv", "error"): 1}
    (problem,) = result.problems
    assert problem.file == _dv_file(row) and "CRC-32 mismatch" in problem.reason
    assert problem.data_file == unquote(row["path"])


@pytest.mark.parametrize("descriptor", ["cardinality", "no offset"])
def test_a_dv_that_decodes_but_disagrees_with_its_descriptor_is_not_repaired(
    tmp_path, descriptor
):
    """The DV file is whole (its CRC-32 holds); only the descriptor in the log is off: a
    wrong `cardinality`, or no `offset` (deltalake reads the file's first DV then). fsck
    reports an error, and the repair keeps the file: deltalake reads the same rows after
    it. Before the fix the repair removed the file, and deltalake then read none of its
    rows."""
    import json

    import deltalake

    root = _copy(DV_TABLE, tmp_path)
    (row,) = [r for r in _live(root) if r["deletionVector"]]
    commit = next(p for p in sorted((root / "_delta_log").glob("*.json"))
                  if '"deletionVector"' in p.read_text())
    lines = []
    for line in commit.read_text().splitlines():
        action = json.loads(line)
        dv = (action.get("add") or {}).get("deletionVector")
        if dv:
            if descriptor == "cardinality":
                dv["cardinality"] -= 1
            else:
                assert dv.pop("offset") == 1  # the file's first DV
        lines.append(json.dumps(action))
    commit.write_text("\n".join(lines) + "\n")
    os.utime(commit, (OLD_S, OLD_S))

    def rows() -> int:
        return deltalake.QueryBuilder().register("t", deltalake.DeltaTable(str(root))).execute(
            "select count(*) as n from t").read_all().column("n")[0].as_py()

    before = rows()
    result, found = _check(root)
    assert found == {("dv_mismatch", "error"): 1}
    assert result.problems[0].file == _dv_file(row)
    repaired = fsck(str(root), clock=lambda: SOON_MS, repair=True, confirm=True)
    assert repaired.repair.entries == () and repaired.repair.version is None
    assert rows() == before > 0


def test_truncated_dv_file(tmp_path):
    root = _copy(DV_TABLE, tmp_path)
    (row,) = [r for r in _live(root) if r["deletionVector"]]
    dv = root / _dv_file(row)
    dv.write_bytes(dv.read_bytes()[:5])
    os.utime(dv, (OLD_S, OLD_S))
    result, found = _check(root)
    assert found == {("corrupt_dv", "error"): 1}
    assert "past the end" in result.problems[0].reason


def test_truncated_parquet(tmp_path):
    root = _copy(DV_TABLE, tmp_path)
    (row,) = _live(root)
    data = root / unquote(row["path"])
    data.write_bytes(data.read_bytes()[: row["size"] // 2])
    result, found = _check(root)
    assert found == {("size_mismatch", "error"): 1}
    assert f"the log records {row['size']}" in result.problems[0].reason
    result, found = _check(root, verify_data=True)
    assert found == {("size_mismatch", "error"): 1, ("unreadable_parquet", "error"): 1}
    assert result.verified_data


def test_footer_row_count_against_stats(tmp_path):
    root = _copy("basic_append", tmp_path)
    rows = _live(root)
    assert _check(root, verify_data=True)[1] == Counter()
    target = root / unquote(rows[0]["path"])
    table = pq.read_table(target)
    pq.write_table(pa.concat_tables([table, table]), target)
    result, found = _check(root, verify_data=True)
    assert found == {("size_mismatch", "error"): 1, ("row_count_mismatch", "error"): 1}
    (mismatch,) = [p for p in result.problems if p.code == "row_count_mismatch"]
    assert f"holds {2 * table.num_rows} rows" in mismatch.reason


def test_missing_checkpoint_part(tmp_path):
    root = _copy("golden__multi-part-checkpoint", tmp_path)
    part = "_delta_log/00000000000000000001.checkpoint.0000000002.0000000002.parquet"
    (root / part).unlink()
    result, found = _check(root)
    # _last_checkpoint names the two-part checkpoint; readers fall back to the commits.
    assert found == {("incomplete_checkpoint", "warning"): 1, ("last_checkpoint", "error"): 1}
    by_code = {p.code: p for p in result.problems}
    assert by_code["incomplete_checkpoint"].file == part
    assert by_code["last_checkpoint"].file == "_delta_log/_last_checkpoint"


def _sidecars(root: Path) -> list[Path]:
    return sorted(f for f in (root / "_delta_log" / "_sidecars").iterdir()
                  if not f.name.startswith("."))


def test_missing_sidecar(tmp_path):
    root = _copy("golden__v2-checkpoint-parquet", tmp_path)
    sidecar = _sidecars(root)[0]  # of two
    sidecar.unlink()
    result, found = _check(root)
    assert found == {("missing_sidecar", "error"): 1}
    assert result.problems[0].file == f"_delta_log/_sidecars/{sidecar.name}"


def test_orphan_sidecar_and_temp_litter(tmp_path):
    root = _copy("golden__v2-checkpoint-parquet", tmp_path)
    sidecars = root / "_delta_log" / "_sidecars"
    sidecar = _sidecars(root)[0]
    orphan = sidecars / f"00000000000000000002.checkpoint.{uuid.uuid4()}.parquet"
    orphan.write_bytes(sidecar.read_bytes())
    temp = root / "_delta_log" / f".00000000000000000003.json.{uuid.uuid4().hex}.tmp"
    temp.write_bytes(b'{"commitInfo":{}}\n')
    side_temp = sidecars / f".{sidecar.name}.{uuid.uuid4()}.tmp"
    side_temp.write_bytes(b"PAR1")
    result, found = _check(root)
    assert found == {("orphan_sidecar", "warning"): 1, ("temp_file", "warning"): 2}
    assert result.ok  # warnings only
    assert {p.file for p in result.problems} == {
        f"_delta_log/_sidecars/{orphan.name}", f"_delta_log/{temp.name}",
        f"_delta_log/_sidecars/{side_temp.name}"}


@pytest.mark.parametrize("content", [b"{not json", b'{"version": 99, "size": 1}'])
def test_broken_last_checkpoint(tmp_path, content):
    root = _copy("with_checkpoint", tmp_path)
    (root / "_delta_log" / "_last_checkpoint").write_bytes(content)
    result, found = _check(root)
    assert found == {("last_checkpoint", "error"): 1}
    assert result.problems[0].file == "_delta_log/_last_checkpoint"


def test_gap_in_commits(tmp_path):
    root = _copy(DV_TABLE, tmp_path)
    (root / "_delta_log" / "00000000000000000001.json").unlink()
    result, found = _check(root)
    assert found == {("log_gap", "error"): 1}
    assert result.problems[0].file == "_delta_log/00000000000000000001.json"
    assert result.notes == ("data files not checked: the latest version does not read",)


def test_gap_below_the_checkpoint_is_history(tmp_path):
    root = _copy("with_checkpoint", tmp_path)
    (root / "_delta_log" / "00000000000000000001.json").unlink()
    result, found = _check(root)
    assert found == {("history_gap", "warning"): 1}
    assert result.ok and "time travel" in result.problems[0].reason


def test_latest_checksum_disagrees(tmp_path):
    root = _copy("basic_append", tmp_path)
    write_checksum(Storage.for_uri(str(root)))
    assert _check(root)[1] == Counter()
    (crc,) = [f for f in (root / "_delta_log").glob("*.crc") if not f.name.startswith(".")]
    crc.write_text(crc.read_text().replace('"numFiles":', '"numFiles":1', 1))
    result, found = _check(root)
    assert found == {("checksum_mismatch", "error"): 1}
    assert result.problems[0].file == f"_delta_log/{crc.name}"
    assert "numFiles" in result.problems[0].reason


@pytest.mark.parametrize("stream", [False, True])
def test_truncated_checkpoint(tmp_path, monkeypatch, stream):
    """Read in full (small) or by its footers (past the stream threshold), a truncated
    checkpoint is named; readers fall back to the commits, so the data is still checked."""
    from delta_ops.log.read_options import STREAM_THRESHOLD_ENV

    if stream:
        monkeypatch.setenv(STREAM_THRESHOLD_ENV, "0")
    root = _copy("with_checkpoint", tmp_path)
    (cp,) = (root / "_delta_log").glob("0*.checkpoint.parquet")
    cp.write_bytes(cp.read_bytes()[:-100])
    result, found = _check(root)
    assert found == {("corrupt_checkpoint", "error"): 1}
    assert result.problems[0].file == f"_delta_log/{cp.name}"
    assert result.num_files == len(_live(root)) > 0
