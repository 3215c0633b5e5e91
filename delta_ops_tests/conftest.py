"""Fixtures every wing shares: copying corpus tables before anything writes, the S3 server
(one per session) and the Spark engines and processes (one per module). Each wing's folder has
its own `conftest.py` for what only it uses; helpers that are not fixtures live in
`delta_ops_tests/support/`."""

from __future__ import annotations

from pathlib import Path

import pytest

from delta_ops_tests.support.corpus import (
    CORPUS,
    REPO_ROOT,
    all_corpus_tables,
    copy_corpus_table,
    corpus_path,
)
from delta_ops_tests.support.s3_server import s3_server  # noqa: F401  (a fixture)
from delta_ops_tests.support.spark_fixtures import (  # noqa: F401  (fixtures)
    connect_server,
    spark_engine,
    spark_engine_each,
    standalone_cluster,
)

__all__ = ["CORPUS", "REPO_ROOT", "all_corpus_tables", "copy_corpus_table", "corpus_path"]


@pytest.fixture
def table_copy(tmp_path):
    """Factory: `table_copy("golden__checkpoint")` -> a writable copy of that table."""

    def make(name: str) -> Path:
        return copy_corpus_table(name, tmp_path / name.replace("/", "__"))

    return make


#: Test modules marked `slow` as a whole: each takes a minute or more on a busy 2-core machine
#: (sweeps of every corpus table or of many generated tables, property searches, processes
#: started, killed or timed, Dagster definitions built again and again, the wheel installed).
#: `make test-quick` (`-m "not spark and not s3 and not e2e and not slow"`) leaves them out;
#: `make test` runs them.
SLOW_MODULES = frozenset({
    "test_backfill_stream",
    "test_dagster_component",
    "test_dagster_defs",
    "test_dagster_engines",
    "test_dagster_fleet",
    "test_dagster_log_reads",
    "test_dagster_metadata",
    "test_dagster_registry",
    "test_dagster_sensors",
    "test_deltalake_crosscheck",
    "test_kill",
    "test_last_checkpoint_race",
    "test_packaging",
    "test_rebuild",
    "test_replay_property",
    "test_small_snapshot",
    "test_snapshot_corpus",
    "test_startup",
    "test_stream",
    "test_vacuum_partitioned",
    "test_vacuum_paths_property",
})


#: The modules that take longest (a minute or more of one worker each, measured with
#: `--durations` on 2 cores), longest first. They are collected first, so that the workers
#: (`--dist loadfile`: a module stays on one worker) start on them and the run does not end
#: with one worker alone on a long module the other finished waiting for.
LONGEST_FIRST = (
    "test_kill", "test_layout_kills", "test_packaging", "test_dagster_e2e",
    "test_dagster_e2e_partitioned", "test_vacuum_paths_property", "test_engine_equivalence",
    "test_storage_at_limit", "test_cli", "test_vacuum_partitioned", "test_dagster_fleet",
    "test_spark_cluster",
)
_ORDER = {name: i for i, name in enumerate(LONGEST_FIRST)}


def pytest_collection_modifyitems(config, items):
    """Mark every test of a module in SLOW_MODULES `slow`; collect the longest modules first
    (`LONGEST_FIRST`; the order within a module, and of the others, is kept)."""
    for item in items:
        if item.module is not None and item.module.__name__.rsplit(".", 1)[-1] in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: _ORDER.get(
        item.module.__name__.rsplit(".", 1)[-1] if item.module is not None else "",
        len(LONGEST_FIRST)))
