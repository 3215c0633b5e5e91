"""`delta-ops optimize` and `delta-ops purge`: the dry run prints the plan and writes
nothing, `--json` carries the Result, the options reach the plan, refusals are one line
with exit 1, and after `purge` no live file has a deletion vector."""

from __future__ import annotations

import json

import pytest

from delta_ops.cli import main
from delta_ops.log import load_snapshot
from delta_ops.storage import Storage
from delta_ops_tests.support.layout_tables import LayoutSpec, build_layout_table, our_rows

SPEC = LayoutSpec(partitioned=True, mapping="name", row_tracking=True,
                  appends=(((3, 0), (4, 0), (5, 1), (2, 1)), ((3, 0), (1, 4))),
                  deletes=((0, (0,)), (2, (1, 2))))


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def table(layout_storage):
    build_layout_table(layout_storage, SPEC)
    return layout_storage


def test_optimize_dry_run_prints_the_plan_and_writes_nothing(capsys, table):
    version = load_snapshot(table).version
    code, out, _ = run(capsys, "optimize", table.root, "--dry-run")
    assert code == 0
    assert "plan             2 bins, 5 files" in out
    assert "bin part=a b: 3 files" in out
    assert "dry run: nothing written" in out
    assert load_snapshot(table).version == version


def test_optimize_json_and_options(capsys, table):
    before = our_rows(table)
    code, out, _ = run(capsys, "optimize", table.root, "--json", "--where", "part = 'a b'",
                       "--target-size", "1mb", "--min-files", "2",
                       "--max-deleted-rows-ratio", "0.5")
    assert code == 0
    result = json.loads(out)
    assert result["operation"] == "optimize" and result["dry_run"] is False
    assert result["target_size"] == 1024**2
    assert result["plan"]["where"] == "part = 'a b'"
    assert (result["bins"], result["bins_committed"], result["files_removed"]) == (1, 1, 3)
    assert len(result["versions"]) == 1
    assert our_rows(table) == before


def test_optimize_min_files_holds_partitions_back_unless_a_file_must_be_purged(capsys, table):
    def bins(*extra):
        code, out, _ = run(capsys, "optimize", table.root, "--json", "--dry-run", *extra)
        assert code == 0
        return json.loads(out)["plan"]["bins"]

    assert bins("--min-files", "4") == 2  # each partition has a file past the ratio
    assert bins("--min-files", "4", "--max-deleted-rows-ratio", "1") == 0
    assert bins("--min-files", "3", "--max-deleted-rows-ratio", "1") == 1


def test_purge_leaves_no_deletion_vector(capsys, table):
    before = our_rows(table)
    code, out, _ = run(capsys, "purge", table.root, "--dry-run", "--json")
    plan = json.loads(out)["plan"]
    assert code == 0 and plan["files"] == 2
    code, out, _ = run(capsys, "purge", table.root)
    assert code == 0 and "committed        2/2 bins" in out
    dvs = load_snapshot(Storage.of(table.root)).files.column("deletionVector").to_pylist()
    assert all(dv is None for dv in dvs)
    assert our_rows(table) == before


@pytest.mark.parametrize("argv, message", [
    (["optimize", "--where", "value = 'x'"], "not a partition column"),
    (["purge", "--where", "part > 'a'"], "is not one of"),
])
def test_bad_predicates_are_one_line_errors(capsys, table, argv, message):
    code, out, err = run(capsys, argv[0], table.root, *argv[1:])
    assert code == 1
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("flag, value", [("--target-size", "huge"),
                                         ("--max-deleted-rows-ratio", "2")])
def test_bad_option_values_are_usage_errors(capsys, table, flag, value):
    with pytest.raises(SystemExit) as info:
        main(["optimize", table.root, flag, value])
    assert info.value.code == 2
    assert flag in capsys.readouterr().err
