"""The Arrow memory pool of a Spark session's Python workers
(`delta_ops.engine.arrow_memory.executor_pool`): jemalloc, passed as
`spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL`, unless the session's `conf` names another.
The pytest process has no `ARROW_DEFAULT_MEMORY_POOL`, so what the workers see comes from
the session's settings, not from an environment they inherited."""

from __future__ import annotations

import pyarrow as pa
import pytest

from delta_ops.engine.arrow_memory import POOL_ENV
from delta_ops.engine.spark import SparkEngine
from delta_ops.storage import Storage
from delta_ops_tests.support.spark_fixtures import spark_test_config

pytestmark = pytest.mark.spark


def _pools_of_the_workers(engine: SparkEngine, tmp_path) -> set[tuple[str, str | None]]:
    def seen(storage, item):  # pickled by value: the workers cannot import this module
        import os

        import pyarrow

        return pyarrow.default_memory_pool().backend_name, os.environ.get(POOL_ENV)

    storage = Storage.for_uri(str(tmp_path))
    return set(engine.map_tasks(storage, seen, list(range(4))))


def test_python_workers_start_with_jemalloc(tmp_path, monkeypatch):
    monkeypatch.delenv(POOL_ENV, raising=False)
    engine = SparkEngine(spark_test_config("local[2]"))
    try:
        pools = _pools_of_the_workers(engine, tmp_path)
    finally:
        engine.close()
    if "jemalloc" in pa.supported_memory_backends():
        assert pools == {("jemalloc", "jemalloc")}
    else:  # a pyarrow built without it: the workers keep Arrow's default
        assert {env for _, env in pools} == {None}


def test_a_pool_named_in_the_sessions_conf_wins(tmp_path, monkeypatch):
    monkeypatch.delenv(POOL_ENV, raising=False)
    config = spark_test_config("local-cluster[1,1,1024]",
                               conf={f"spark.executorEnv.{POOL_ENV}": "system"})
    engine = SparkEngine(config)
    try:
        pools = _pools_of_the_workers(engine, tmp_path)
    finally:
        engine.close()
    assert pools == {("system", "system")}
