"""The Dagster registry: the shipped one, policy overrides, one clear error per mistake (all
reported at once), cron expressions Dagster accepts, secrets from the environment only, and
the `spark` section that configures the Spark resource."""

from __future__ import annotations

import sys

import pytest
from dagster import (
    ScheduleDefinition,
)

from delta_ops.defs import build_definitions
from delta_ops.defs.registry import (
    REGISTRY_ENV,
    EnvRef,
    MissingSecretError,
    RegistryError,
    cron_problem,
    default_registry_path,
    load_registry,
    parse_registry,
)
from delta_ops.defs.resources import SparkResource
from delta_ops_tests.support.corpus import REPO_ROOT
from delta_ops_tests.support.dagster_runs import (
    write_registry,
)
from delta_ops_tests.support.spark_fixtures import LOCAL_IP

# ---- registry --------------------------------------------------------------------------------


def test_shipped_registry_registers_the_demo_tables():
    registry = load_registry(REPO_ROOT / "tables.yaml")
    assert registry.names == ["events", "customers", "orders_dv"]
    assert {t.policy.engine for t in registry.tables} == {"spark"}
    by = registry.by_name
    assert by["events"].uri == str(REPO_ROOT / "demo_tables" / "events")
    assert by["events"].policy.cleanup.ensure_checkpoint is True
    assert by["customers"].policy.compaction.interval == 5
    assert by["customers"].policy.row_tracking.backfill is True
    assert by["orders_dv"].policy.vacuum.dry_run is True
    # Per-section overrides keep the other defaults of the section.
    assert by["orders_dv"].policy.vacuum.cron == "0 3 * * 0"


def test_policy_overrides_merge_field_by_field(tmp_path):
    registry = parse_registry(
        {
            "defaults": {"engine": "local", "vacuum": {"retention": "10 days", "cron": None}},
            "tables": [
                {"name": "a", "uri": "data/a", "vacuum": {"dry_run": True}, "engine": "spark"},
                {"name": "b", "uri": "s3://bucket/b", "group": "shared"},
            ],
        },
        base_dir=tmp_path,
    )
    a, b = registry.tables
    assert a.policy.engine == "spark" and b.policy.engine == "local"
    assert a.policy.vacuum.retention == "10 days" and a.policy.vacuum.dry_run is True
    assert a.policy.vacuum.retention_hours == 240
    assert a.policy.vacuum.cron is None
    assert b.policy.vacuum.dry_run is False
    assert a.uri == str(tmp_path / "data" / "a") and b.uri == "s3://bucket/b"
    assert a.group == "a" and b.group == "shared"
    assert a.policy.checkpoint.interval is None  # None: the table's delta.checkpointInterval


BAD_REGISTRIES = [
    ({"tables": [{"name": "a", "uri": "x", "checkpont": {}}]},
     r"tables\[0\]\.checkpont: unknown key 'checkpont'"),
    ({"defaults": {"vacuum": {"retension": "7 days"}}},
     r"defaults\.vacuum\.retension: unknown key"),
    ({"tables": [{"name": "a", "uri": "x"}, {"name": "a", "uri": "y"}]},
     r"tables\[1\]\.name: table name 'a' is already registered by tables\[0\]"),
    ({"tables": [{"name": "a", "uri": "gs://bucket/t"}]},
     r"tables\[0\]\.uri: 'gs://bucket/t' has an unsupported scheme 'gs'"),
    ({"tables": [{"name": "a", "uri": "s3:///nobucket"}]},
     r"tables\[0\]\.uri: .* not an S3 URI of the form s3://bucket/prefix"),
    ({"tables": [{"name": "a", "uri": "x", "vacuum": {"cron": "61 * * * *"}}]},
     r"tables\[0\]\.vacuum\.cron: '61 \* \* \* \*': '61' is out of range in the minute field"),
    ({"defaults": {"cleanup": {"cron": "0 0 30 2 *"}}},
     r"defaults\.cleanup\.cron: .* never fires: February has no day 30"),
    ({"defaults": {"cleanup": {"cron": "every day"}}},
     r"defaults\.cleanup\.cron: 'every day' is not a cron expression: expected 5 fields"),
    ({"tables": [{"name": "a", "uri": "x", "storage_options": {"secret": "hunter2"}}]},
     r"storage option 'secret' holds a secret: give it as an environment variable reference"),
    ({"defaults": {"vacuum": {"retention": "soon"}}},
     r"defaults\.vacuum\.retention: 'soon' is not a retention"),
    ({"defaults": {"engine": "flink"}}, r"defaults\.engine: .*'spark' or 'local' \(got 'flink'\)"),
    ({"tables": [{"name": "a", "uri": "x", "compaction": {"interval": 1}}]},
     r"compaction covers at least 2 commits"),
    ({"tables": [{"name": "9lives", "uri": "x"}]},
     r"tables\[0\]\.name: '9lives' is not a valid name"),
    ({"tables": [{"name": "a", "uri": "x", "storage_options": {"key": {"vault": "k"}}}]},
     r"tables\[0\]\.storage_options\.key: a storage option is text, a number, a boolean or "),
    ({"tables": [{"name": "a"}]}, r"tables\[0\]\.uri: required key is missing"),
    # The fleet caps were accepted on a table and silently ignored there.
    ({"tables": [{"name": "a", "uri": "x", "automation": {"runs_per_tick": 1}}]},
     r"tables\[0\]\.automation: runs_per_tick bound the whole fleet and are read from "
     r"defaults\.automation only"),
    (["a", "b"], r"must be a mapping with 'defaults' and 'tables'"),
]


@pytest.mark.parametrize(("data", "message"), BAD_REGISTRIES)
def test_each_registry_mistake_gives_one_clear_error(data, message):
    with pytest.raises(RegistryError, match=message) as info:
        parse_registry(data, path="reg.yaml")
    assert len(info.value.problems) == 1, info.value.problems
    assert "hunter2" not in str(info.value)


def test_every_problem_is_reported_at_once():
    with pytest.raises(RegistryError) as info:
        parse_registry({
            "defaults": {"engine": "flink", "bogus": 1},
            "tables": [
                {"name": "a", "uri": "ftp://x/y", "vacuum": {"cron": "* * *"}},
                {"name": "a", "uri": "x"},
            ],
        })
    assert len(info.value.problems) == 5
    assert str(info.value).count("\n") == 5  # a heading and one line per problem


def test_yaml_syntax_and_missing_file_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("tables:\n  - name: a\n   uri: x\n")
    with pytest.raises(RegistryError, match=r"line 3, column 4: not valid YAML"):
        load_registry(bad)
    with pytest.raises(RegistryError, match=r"no registry file at .*nope\.yaml; create one or "
                       f"point {REGISTRY_ENV} at it"):
        load_registry(tmp_path / "nope.yaml")


def test_default_registry_path(tmp_path, monkeypatch):
    monkeypatch.setenv(REGISTRY_ENV, str(tmp_path / "mine.yaml"))
    assert default_registry_path() == tmp_path / "mine.yaml"
    monkeypatch.delenv(REGISTRY_ENV)
    monkeypatch.chdir(tmp_path)
    assert default_registry_path() == REPO_ROOT / "tables.yaml"  # beside workspace.yaml
    (tmp_path / "tables.yaml").write_text("tables: []\n")
    assert default_registry_path() == tmp_path / "tables.yaml"


@pytest.mark.parametrize(
    "cron", ["0 3 * * 0", "*/15 * * * *", "0 0 * * mon-fri", "5,35 1-5/2 1 jan,jul *", "0 0 29 2 *"]
)
def test_accepted_crons_are_accepted_by_dagster(cron):
    assert cron_problem(cron) is None
    ScheduleDefinition(name="s", cron_schedule=cron, job_name="j")


def test_secrets_come_from_the_environment_and_are_never_shown(tmp_path, monkeypatch):
    registry = parse_registry({"tables": [{
        "name": "t", "uri": str(tmp_path),
        "storage_options": {"token": {"env": "DELTA_OPS_TEST_TOKEN"}, "region": "eu"},
    }]})
    table = registry.tables[0]
    assert table.storage_options["token"] == EnvRef(env="DELTA_OPS_TEST_TOKEN")
    assert table.redacted_storage_options() == {"token": "$DELTA_OPS_TEST_TOKEN", "region": "eu"}
    monkeypatch.delenv("DELTA_OPS_TEST_TOKEN", raising=False)
    with pytest.raises(MissingSecretError, match="environment variable DELTA_OPS_TEST_TOKEN"):
        table.resolved_storage_options()
    monkeypatch.setenv("DELTA_OPS_TEST_TOKEN", "s3cr3t-value")
    assert table.resolved_storage_options() == {"token": "s3cr3t-value", "region": "eu"}


def test_spark_section_configures_the_spark_resource(tmp_path, monkeypatch):
    reg = write_registry(tmp_path, {
        "spark": {"master": "spark://spark-master:7077",
                  "conf": {"spark.executor.memory": "4g",
                           "spark.hadoop.fs.s3a.secret.key": {"env": "DELTA_OPS_TEST_S3_SECRET"}}},
        "tables": [{"name": "t", "uri": "t"}],
    })
    spark = build_definitions(reg).resources["spark"]
    assert spark.master == "spark://spark-master:7077" and spark.remote is None
    assert spark.conf == {"spark.executor.memory": "4g"}
    assert spark.conf_from_env == {"spark.hadoop.fs.s3a.secret.key": "DELTA_OPS_TEST_S3_SECRET"}
    monkeypatch.delenv("DELTA_OPS_TEST_S3_SECRET", raising=False)
    with pytest.raises(MissingSecretError, match="DELTA_OPS_TEST_S3_SECRET, which is not set"):
        spark.session_config()
    monkeypatch.setenv("DELTA_OPS_TEST_S3_SECRET", "s3cr3t")
    config = spark.session_config()
    assert config.conf["spark.hadoop.fs.s3a.secret.key"] == "s3cr3t"
    assert "s3cr3t" not in config.describe() and "s3cr3t" not in spark.describe()
    with pytest.raises(RegistryError, match=r"spark: .*a Spark master .* or a Spark Connect "
                       "remote .*, not both"):
        parse_registry({"spark": {"master": "local[2]", "remote": "sc://h:15002"}})
    with pytest.raises(RegistryError, match=r"spark\.conf: Spark conf "
                       "'spark.hadoop.fs.s3a.secret.key' holds a secret"):
        parse_registry({"spark": {"conf": {"spark.hadoop.fs.s3a.secret.key": "x"}}})
    assert build_definitions(
        write_registry(tmp_path, {"tables": []})).resources["spark"].master is None


def test_spark_resource_builds_its_engines_through_make_engine_without_a_session():
    from delta_ops.engine.local import LocalEngine
    from delta_ops.engine.session import make_engine
    from delta_ops.engine.spark import SparkEngine

    spark = SparkResource(master="local[2]", app_name="delta-ops-test", python=sys.executable,
                          local_ip=LOCAL_IP, conf={"spark.ui.enabled": "false"})
    engine = spark.engine("spark")
    # The whole session config reaches the engine (what make_engine builds from it), and
    # building it started nothing: the session starts on first use inside a run.
    expected = make_engine("spark", spark_config=spark.session_config())
    assert isinstance(engine, SparkEngine) and engine.config == expected.config
    assert engine.config.app_name == "delta-ops-test" and engine.config.local_ip == LOCAL_IP
    assert not engine.started
    assert spark.engine("spark") is engine  # one per name and run
    assert isinstance(spark.engine("local"), LocalEngine)
    with pytest.raises(ValueError, match="unknown engine 'gpu'"):
        spark.engine("gpu")
    with pytest.raises(ValueError, match="not both"):
        make_engine("spark", spark_master="local[2]", spark_config=spark.session_config())
    with pytest.raises(ValueError, match="spark_config only apply to the spark engine"):
        make_engine("local", spark_config=spark.session_config())
