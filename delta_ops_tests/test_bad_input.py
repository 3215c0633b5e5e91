"""Bad input gets one clear line: never a spin, a traceback or a leaked secret (issue 12,
items 5, 6, 7 and the CLI/registry/Spark errors of item 9).

Versions in log file names: the spec pads them to 20 digits, and every writer stores them
as a Java long, so a 20-digit name above 2^63-1 is a stray file (deltalake ignores it too)
while a valid name far beyond the next version is a gap, reported at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import deltalake
import pytest

from delta_ops.protocol import filenames
from delta_ops.table import DeltaTable

#: golden__basic-with-inserts-deletes-checkpoint: commits 0..13, classic checkpoint at 10.
TABLE = "golden__basic-with-inserts-deletes-checkpoint"
LAST = 13


def _cli(*argv: str, timeout: float = 20, env: dict | None = None):
    """Run `delta-ops` in a subprocess; a spin fails the test through the timeout."""
    return subprocess.run(
        [sys.executable, "-m", "delta_ops.cli", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def _one_line_error(proc: subprocess.CompletedProcess, command: str) -> str:
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"delta-ops {command}: "), lines[0]
    return lines[0]


# ---- item 5: huge version numbers --------------------------------------------------------

FAR = 2**63 - 1  # 09223372036854775807: a valid name (a Java long), far beyond version 13


def test_parse_ignores_versions_no_writer_can_produce():
    assert filenames.parse("99999999999999999999.json") is None
    assert filenames.parse("00000000000000000000.99999999999999999999.compacted.json") is None
    assert filenames.parse("99999999999999999999.checkpoint.parquet") is None
    assert filenames.parse("09223372036854775808.crc") is None
    far = filenames.parse(f"{FAR:020d}.json")
    assert far is not None and far.version == FAR
    compaction = filenames.parse(f"{0:020d}.{FAR:020d}.compacted.json")
    assert compaction is not None and (compaction.start_version, compaction.version) == (0, FAR)


@pytest.mark.parametrize(
    "stray", ["99999999999999999999.json", "00000000000000000000.99999999999999999999.compacted.json"]
)
@pytest.mark.parametrize("command", [["snapshot"], ["vacuum", "--dry-run"], ["cleanup", "--dry-run"]])
def test_stray_file_with_impossible_version_is_ignored(table_copy, stray, command):
    root = table_copy(TABLE)
    (root / "_delta_log" / stray).write_text("{}\n")
    (root / "_delta_log" / "_last_checkpoint").unlink()  # list the whole log
    proc = _cli(*command, str(root), "--json")
    assert proc.returncode == 0, proc.stderr
    if command[0] == "snapshot":
        assert json.loads(proc.stdout)["version"] == LAST
        assert deltalake.DeltaTable(str(root)).version() == LAST  # the same reading


@pytest.mark.parametrize(
    "far", [f"{FAR:020d}.json", f"{0:020d}.{FAR:020d}.compacted.json", f"{LAST + 10**15:020d}.json"]
)
@pytest.mark.parametrize("command", [["snapshot"], ["vacuum", "--dry-run"], ["cleanup", "--dry-run"]])
def test_far_version_is_a_gap_reported_at_once(table_copy, far, command):
    root = table_copy(TABLE)
    (root / "_delta_log" / far).write_text("{}\n")
    (root / "_delta_log" / "_last_checkpoint").unlink()
    line = _one_line_error(_cli(*command, str(root)), command[0])
    assert "not contiguous" in line
    assert f"version {LAST + 1}" in line and filenames.commit_name(LAST + 1) in line
    assert str(root.name) in line


_SEGMENT_ERROR = """
import json, sys
from delta_ops.errors import CorruptLogError
from delta_ops.log.segment import build_log_segment
from delta_ops.storage import Storage
try:
    build_log_segment(Storage.for_uri(sys.argv[1]))
except CorruptLogError as exc:
    print(json.dumps({"message": str(exc), "version": exc.version, "file": exc.file}))
"""


def test_far_gap_names_where_the_log_resumes(table_copy):
    root = table_copy(TABLE)
    (root / "_delta_log" / f"{FAR:020d}.json").write_text("{}\n")
    # In a subprocess: a reader that walks the numbers in between never returns.
    proc = subprocess.run(
        [sys.executable, "-c", _SEGMENT_ERROR, str(root)],
        capture_output=True, text=True, timeout=20, check=True,
    )
    error = json.loads(proc.stdout)
    assert f"resumes at version {FAR}" in error["message"]
    assert error["version"] == LAST + 1
    assert error["file"] == f"_delta_log/{filenames.commit_name(LAST + 1)}"
    with pytest.raises(Exception, match="gap"):
        deltalake.DeltaTable(str(root))
    # Versions before the gap stay readable.
    assert DeltaTable(str(root)).snapshot(LAST).version == LAST


# ---- item 6: a bad _last_checkpoint only means "list instead" ------------------------------

BAD_HINTS = [
    {"version": -1, "size": 3},
    {"version": -10},
    {"version": "10"},
    {"version": 10.5},
    {"version": True},
    {"version": None},
    {"size": 3},
    {"version": 10, "size": -5},
    {"version": 10, "parts": 0},
    {"version": 10, "parts": -2},
    {"version": 10, "parts": "2"},
    {"version": 10, "sizeInBytes": -1},
    {"version": 10, "numOfAddFiles": [1]},
    {"version": 10, "checkpointSchema": "x"},
    {"version": 10, "v2Checkpoint": [1]},
    [10],
    "10",
]


@pytest.mark.parametrize("hint", BAD_HINTS, ids=[json.dumps(h) for h in BAD_HINTS])
def test_invalid_last_checkpoint_is_a_problem_not_an_error(table_copy, hint):
    root = table_copy(TABLE)
    (root / "_delta_log" / "_last_checkpoint").write_text(json.dumps(hint))
    snap = DeltaTable(str(root)).snapshot()
    assert (snap.version, snap.checkpoint_version) == (LAST, 10)
    assert snap.num_files == len(deltalake.DeltaTable(str(root)).file_uris())
    assert "_last_checkpoint is unusable" in snap.segment.last_checkpoint_problem
    assert DeltaTable(str(root)).snapshot(11).version == 11


@pytest.mark.parametrize(
    "text", ['{"version": 99999999999999999999}', '{"version": 1e400}', "{", ""]
)
def test_last_checkpoint_that_is_not_json_with_a_long_version(table_copy, text):
    root = table_copy(TABLE)
    (root / "_delta_log" / "_last_checkpoint").write_text(text)
    snap = DeltaTable(str(root)).snapshot()
    assert snap.version == LAST
    assert snap.segment.last_checkpoint_problem


@pytest.mark.parametrize("hint", [{"version": -1}, {"version": 10, "parts": 0}])
@pytest.mark.parametrize("command", [["snapshot"], ["vacuum", "--dry-run"], ["cleanup", "--dry-run"]])
def test_cli_reads_past_a_bad_last_checkpoint(table_copy, capsys, hint, command):
    from delta_ops.cli import main

    root = table_copy(TABLE)
    (root / "_delta_log" / "_last_checkpoint").write_text(json.dumps(hint))
    code = main([*command, str(root), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    if command[0] == "snapshot":
        assert json.loads(out)["version"] == LAST


def test_far_last_checkpoint_version_lists_instead(table_copy):
    root = table_copy(TABLE)
    (root / "_delta_log" / "_last_checkpoint").write_text(json.dumps({"version": FAR}))
    snap = DeltaTable(str(root)).snapshot()
    assert snap.version == LAST
    assert "listing instead" in snap.segment.last_checkpoint_problem

