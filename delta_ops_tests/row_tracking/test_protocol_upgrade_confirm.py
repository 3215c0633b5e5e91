"""The row-tracking backfill asks before it locks writers out (issue 22, item 4).

On a table written by `deltalake`, the backfill's first commit adds the rowTracking and
domainMetadata writer features, after which `deltalake` can no longer write it. The
command line names the features and the writers that lose access, and goes ahead only with
`--confirm-protocol-upgrade` or a `y` typed at its prompt on a terminal; the Dagster job's
`confirm_protocol_upgrade` asks the same question through the same function
(`delta_ops.maintenance.row_tracking.backfill_protocol_upgrade`).
"""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from delta_ops.protocol.feature_table import FEATURES


def _delta_rs():
    """delta-rs as `KNOWN_WRITERS` records it (imported here: the module is the fix)."""
    from delta_ops.protocol.upgrade import KNOWN_WRITERS

    return next(w for w in KNOWN_WRITERS if w.name.startswith("delta-rs"))


def _deltalake_table(path: Path) -> Path:
    """A table written by deltalake (writer version 2), two files."""
    for ids in ((1, 2), (3,)):
        write_deltalake(str(path), pa.table({"id": pa.array(ids, pa.int64())}), mode="append")
    return path


def _log(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "_delta_log").iterdir())


def _backfill(root: Path, *flags: str, stdin=subprocess.DEVNULL, answer: str | None = None):
    """`delta-ops row-tracking backfill` in a subprocess; with `answer`, stdin is a terminal
    (a pseudo-terminal) on which `answer` is typed."""
    argv = [sys.executable, "-m", "delta_ops.cli", "row-tracking", "backfill", str(root),
            *flags]
    if answer is None:
        return subprocess.run(argv, stdin=stdin, capture_output=True, text=True, timeout=120)
    master, slave = pty.openpty()
    try:
        os.write(master, answer.encode())
        return subprocess.run(argv, stdin=slave, capture_output=True, text=True, timeout=120)
    finally:
        os.close(slave)
        os.close(master)


def _deltalake_appends(root: Path) -> str | None:
    """None when deltalake appends a row to the table, else its error."""
    try:
        write_deltalake(str(root), pa.table({"id": pa.array([9], pa.int64())}), mode="append")
    except Exception as exc:  # deltalake's CommitFailedError (and any other refusal)
        return f"{type(exc).__name__}: {exc}"
    return None


# ---- what the installed deltalake really refuses ---------------------------------------------


def _writer_feature_names() -> list[str]:
    return sorted(f.name for f in FEATURES if f.name != "catalogManaged")


def test_known_writers_record_what_the_installed_deltalake_writes(tmp_path):
    """For every writer feature: a deltalake table whose protocol lists it (and what it
    requires) gets an append from the installed deltalake exactly when `KNOWN_WRITERS`
    says delta-rs implements it."""
    from delta_ops.protocol.upgrade import feature_closure

    base = _deltalake_table(tmp_path / "base")
    wrong = []
    for name in _writer_feature_names():
        root = tmp_path / name
        shutil.copytree(base, root)
        names = feature_closure([name])
        readers = sorted(n for n in names if next(
            f for f in FEATURES if f.name == n).is_reader_feature)
        protocol: dict = {"minReaderVersion": 1, "minWriterVersion": 7,
                          "writerFeatures": sorted(names)}
        if readers:
            protocol.update(minReaderVersion=3, readerFeatures=readers)
        (root / "_delta_log" / f"{2:020d}.json").write_text(json.dumps({"protocol": protocol}))
        writes = _deltalake_appends(root) is None
        if writes != (names <= _delta_rs().writer_features):
            wrong.append((name, writes))
    assert wrong == [], f"KNOWN_WRITERS is out of date for deltalake: {wrong}"


def test_the_upgrade_names_the_writers_that_lose_access():
    from delta_ops.protocol.upgrade import plan_protocol_upgrade

    legacy = {"minReaderVersion": 1, "minWriterVersion": 2}
    upgrade = plan_protocol_upgrade(legacy, ["rowTracking"])
    assert upgrade.features_added == ("domainMetadata", "rowTracking")
    assert upgrade.writers_losing_access == (_delta_rs(),)
    assert "writer version 2 -> 7, with table features" in upgrade.describe()
    # A writer that cannot write the table already loses nothing.
    ict = {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["inCommitTimestamp"]}
    assert plan_protocol_upgrade(ict, ["rowTracking"]).writers_losing_access == ()
    # Supported already: nothing to add, no question.
    done = {"minReaderVersion": 1, "minWriterVersion": 7,
            "writerFeatures": ["domainMetadata", "rowTracking"]}
    assert not plan_protocol_upgrade(done, ["rowTracking"]).needed


# ---- the command line ------------------------------------------------------------------------


def test_an_unconfirmed_upgrade_is_refused_and_the_confirmed_one_locks_deltalake_out(tmp_path):
    root = _deltalake_table(tmp_path / "t")
    assert _deltalake_appends(root) is None  # deltalake writes it before
    before = _log(root)
    refused = _backfill(root)  # stdin is no terminal: no prompt, a refusal
    assert refused.returncode == 1, refused.stderr
    lines = refused.stderr.splitlines()
    assert len(lines) == 1, refused.stderr
    line = lines[0]
    assert line.startswith("delta-ops row-tracking: the backfill adds the writer features "
                           "domainMetadata, rowTracking to the table's protocol (writer "
                           "version 2 -> 7, with table features)"), line
    assert "delta-rs / the deltalake Python package" in line
    assert "run again with --confirm-protocol-upgrade" in line
    assert _log(root) == before  # nothing committed

    done = _backfill(root, "--confirm-protocol-upgrade", "--json")
    assert done.returncode == 0, done.stderr
    obj = json.loads(done.stdout)
    assert obj["protocol_upgraded"] and obj["enabled"]
    assert obj["protocol_upgrade"]["features_added"] == ["domainMetadata", "rowTracking"]
    error = _deltalake_appends(root)  # what the warning said: deltalake is locked out
    assert error is not None and "Unsupported table features" in error, error


def test_a_yes_at_the_prompt_goes_ahead_and_anything_else_refuses(tmp_path):
    root = _deltalake_table(tmp_path / "t")
    before = _log(root)
    no = _backfill(root, answer="n\n")
    assert no.returncode == 1
    assert "Upgrade the protocol and backfill? [y/N]" in no.stderr
    assert "delta-rs / the deltalake Python package" in no.stderr
    assert _log(root) == before
    yes = _backfill(root, "--quiet", answer="y\n")
    assert yes.returncode == 0, yes.stderr
    assert "enabled           yes" in yes.stdout
    assert _log(root) != before


def test_json_never_prompts(tmp_path):
    root = _deltalake_table(tmp_path / "t")
    before = _log(root)
    proc = _backfill(root, "--json", answer="y\n")  # a terminal, and a yes waiting on it
    assert proc.returncode == 1
    assert "[y/N]" not in proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["type"] == "ProtocolUpgradeNotConfirmedError"
    assert "--confirm-protocol-upgrade" in error["message"]
    assert _log(root) == before


def test_a_table_that_supports_the_features_needs_no_confirmation(tmp_path):
    root = _deltalake_table(tmp_path / "t")
    first = _backfill(root, "--no-enable", "--confirm-protocol-upgrade", "--json")
    assert first.returncode == 0, first.stderr
    assert not json.loads(first.stdout)["enabled"]
    then = _backfill(root, "--json")  # supported now: no question, no flag needed
    assert then.returncode == 0, then.stderr
    obj = json.loads(then.stdout)
    assert obj["enabled"] and not obj["protocol_upgrade"]["needed"]


@pytest.mark.parametrize("flags", [(), ("--json",)])
def test_a_table_the_backfill_refuses_asks_nothing(flags):
    """Unsupported features come first: no question about an upgrade that cannot run."""
    from delta_ops_tests.support.corpus import corpus_path

    root = corpus_path("golden__collations-table")
    proc = _backfill(root, *flags)
    assert proc.returncode == 1
    assert "collations" in proc.stderr and "--confirm-protocol-upgrade" not in proc.stderr


# ---- the Dagster job asks the same question --------------------------------------------------


def _job_run(tmp_path: Path, root: Path, config: dict):
    import yaml
    from dagster import DagsterInstance

    from delta_ops.defs import build_definitions
    from delta_ops.defs.jobs import TABLE_PARTITIONS

    reg = tmp_path / "tables.yaml"
    reg.write_text(yaml.safe_dump({"defaults": {"engine": "local"},
                                   "tables": [{"name": "t", "uri": str(root)}]}))
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(TABLE_PARTITIONS.name, ["t"])
    job = build_definitions(reg).resolve_job_def("row_tracking_backfill")
    return instance, job.execute_in_process(
        instance=instance, partition_key="t", raise_on_error=False,
        run_config={"ops": {"backfill_row_tracking": {"config": config}}},
    )


def test_the_dagster_job_names_the_same_features_and_writers(tmp_path):
    root = _deltalake_table(tmp_path / "t")
    before = _log(root)
    _, refused = _job_run(tmp_path, root, {})
    (failure,) = refused.get_step_failure_events()
    description = failure.step_failure_data.user_failure_data.description
    from delta_ops.maintenance.row_tracking import backfill_protocol_upgrade

    assert f"t: the backfill {backfill_protocol_upgrade(str(root)).describe()}" in description
    assert "confirm_protocol_upgrade: true" in description
    assert _log(root) == before
    instance, done = _job_run(tmp_path, root, {"confirm_protocol_upgrade": True})
    assert done.success
    assert _deltalake_appends(root) is not None


def test_the_dagster_job_reports_a_refused_table_before_any_question(tmp_path):
    from delta_ops_tests.support.corpus import copy_corpus_table

    root = copy_corpus_table("golden__collations-table", tmp_path / "t")
    _, refused = _job_run(tmp_path, root, {})
    (failure,) = refused.get_step_failure_events()
    data = failure.step_failure_data.user_failure_data
    assert data is not None, failure.step_failure_data.error
    assert "collations" in data.description
    assert "confirm_protocol_upgrade" not in data.description
    assert data.metadata["error"].value == "UnsupportedFeatureError"


# ---- the library and the maintenance step ask too ---------------------------------------------


@pytest.mark.parametrize("enable", [True, False])
def test_the_library_refuses_an_unconfirmed_upgrade(tmp_path, enable):
    # It went ahead without asking: `DeltaTable(p).backfill_row_tracking()` locked
    # deltalake out of the table, even with enable=False.
    from delta_ops import DeltaTable
    from delta_ops.errors import ProtocolUpgradeNotConfirmedError
    from delta_ops.maintenance.row_tracking import backfill_protocol_upgrade

    root = _deltalake_table(tmp_path / "t")
    before = _log(root)
    with pytest.raises(ProtocolUpgradeNotConfirmedError) as info:
        DeltaTable(str(root)).backfill_row_tracking(enable=enable)
    assert backfill_protocol_upgrade(str(root)).describe() in info.value.reason
    assert "confirm_protocol_upgrade=True" in info.value.reason
    assert info.value.table is not None and info.value.table.endswith("/t")
    assert _log(root) == before
    assert _deltalake_appends(root) is None  # deltalake still writes it
    done = DeltaTable(str(root)).backfill_row_tracking(
        enable=enable, confirm_protocol_upgrade=True)
    assert done.enabled == enable
    assert _deltalake_appends(root) is not None


def _step_run(tmp_path: Path, root: Path, row_tracking: dict, run_config: dict | None = None):
    import yaml
    from dagster import AssetKey, DagsterInstance

    from delta_ops.defs import build_definitions

    reg = tmp_path / "tables.yaml"
    reg.write_text(yaml.safe_dump({"defaults": {"engine": "local"}, "tables": [
        {"name": "t", "uri": str(root), "row_tracking": row_tracking}]}))
    job = build_definitions(reg).resolve_implicit_global_asset_job_def()
    return job.execute_in_process(
        instance=DagsterInstance.ephemeral(), raise_on_error=False,
        asset_selection=[AssetKey(["t", "delta_log"]), AssetKey(["t", "row_tracking"])],
        run_config=run_config or {})


def test_the_maintenance_step_backfills_only_with_the_upgrade_confirmed(tmp_path):
    root = _deltalake_table(tmp_path / "t")
    before = _log(root)
    refused = _step_run(tmp_path, root, {"backfill": True})
    assert not refused.success
    (failure,) = refused.get_step_failure_events()
    description = failure.step_failure_data.user_failure_data.description
    assert "row_tracking.confirm_protocol_upgrade: true" in description
    assert "rowTracking" in description
    assert _log(root) == before and _deltalake_appends(root) is None

    # The run config confirms it for one run; the policy for every run.
    by_run = _step_run(tmp_path, root, {"backfill": True}, {"ops": {"t__maintenance": {
        "config": {"row_tracking": {"confirm_protocol_upgrade": True}}}}})
    assert by_run.success
    assert _deltalake_appends(root) is not None
    other = _deltalake_table(tmp_path / "u")
    by_policy = _step_run(tmp_path, other, {"backfill": True, "confirm_protocol_upgrade": True})
    assert by_policy.success
