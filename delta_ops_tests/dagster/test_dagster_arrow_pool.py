"""The Arrow memory pool of a Dagster process (`delta_ops.engine.arrow_memory`).

Building the definitions chooses jemalloc before pyarrow loads, so a run's OPTIMIZE hands
freed row groups back, as the CLI's does. A pool the user named is kept. In a process that
imported pyarrow first, the rewrite still runs with jemalloc as pyarrow's default pool,
and the default comes back afterwards.

The first two tests run a real Dagster run in a fresh interpreter: the pytest process has
imported pyarrow long before any test builds definitions (the root conftest's helpers use
it), so only the fallback can be seen in this process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow as pa
import yaml

from delta_ops import optimize
from delta_ops.engine.local import LocalEngine
from delta_ops.log import load_snapshot
from delta_ops.maintenance.checksum import write_checksum
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import REPO_ROOT
from delta_ops_tests.support.layout_tables import LayoutSpec, build_layout_table, deltalake_rows

#: Six small files in three commits: OPTIMIZE is due and writes one.
SPEC = LayoutSpec(appends=(((5, 0), (5, 0)), ((5, 0), (5, 0)), ((5, 0), (5, 0))))

#: A Dagster run of one table's optimize asset, in a fresh interpreter; prints what it saw.
_RUN = """
import json, os, sys
from dagster import AssetKey, DagsterInstance
from delta_ops.defs import build_definitions
loaded_first = "pyarrow" in sys.modules
defs = build_definitions(sys.argv[1])
chosen = os.environ.get("ARROW_DEFAULT_MEMORY_POOL")
result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
    instance=DagsterInstance.ephemeral(), raise_on_error=False,
    asset_selection=[AssetKey(["t", "optimize"])])
import pyarrow as pa
done = {e.event_specific_data.materialization.asset_key.path[1]:
        e.event_specific_data.materialization.metadata
        for e in result.get_asset_materialization_events()}
print(json.dumps({"loaded_first": loaded_first, "env": chosen,
                  "pool": pa.default_memory_pool().backend_name, "success": result.success,
                  "files_after": done["optimize"]["files_after"].value}))
"""


def _table(tmp_path) -> Storage:
    root = tmp_path / "t"
    root.mkdir()
    storage = Storage.of(str(root))
    build_layout_table(storage, SPEC)
    write_checksum(storage, version=load_snapshot(storage).version)  # OPTIMIZE reads it
    return storage


def _dagster_run(tmp_path, storage: Storage, **env: str) -> dict:
    registry = tmp_path / "tables.yaml"
    registry.write_text(yaml.safe_dump({
        "defaults": {"engine": "local", "optimize": {"cron": None}},
        "tables": [{"name": "t", "uri": storage.root}]}))
    child_env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    child_env.update(env, PYTHONPATH=str(REPO_ROOT), PYTHONWARNINGS="ignore")
    out = subprocess.run([sys.executable, "-c", _RUN, str(registry)], env=child_env,
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_dagster_run_rewrites_with_jemalloc_chosen_when_the_definitions_load(tmp_path):
    storage = _table(tmp_path)
    rows = sorted(deltalake_rows(storage))
    seen = _dagster_run(tmp_path, storage)
    assert seen["success"] and seen["files_after"] == 1
    assert sorted(deltalake_rows(storage)) == rows
    assert not seen["loaded_first"]
    if "jemalloc" in pa.supported_memory_backends():
        assert (seen["env"], seen["pool"]) == ("jemalloc", "jemalloc")
    else:  # a pyarrow built without it: nothing is set, Arrow's default is used
        assert seen["env"] is None and seen["pool"] == pa.default_memory_pool().backend_name


def test_a_pool_the_user_named_for_the_dagster_process_is_kept(tmp_path):
    storage = _table(tmp_path)
    seen = _dagster_run(tmp_path, storage, ARROW_DEFAULT_MEMORY_POOL="system")
    assert seen["success"] and seen["files_after"] == 1
    assert (seen["env"], seen["pool"]) == ("system", "system")


def test_a_rewrite_in_a_process_that_loaded_pyarrow_first_uses_a_returning_pool(
        tmp_path, monkeypatch):
    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
    storage = _table(tmp_path)
    before = pa.default_memory_pool().backend_name
    seen: list[str] = []

    class Recording(LocalEngine):
        def map_tasks(self, *args, **kwargs):
            seen.append(pa.default_memory_pool().backend_name)
            return super().map_tasks(*args, **kwargs)

    engine = Recording()
    try:
        result = optimize(storage.root, dry_run=False, engine=engine)
    finally:
        engine.close()
    assert result.files_after == 1 and seen
    assert set(seen) <= {"jemalloc", "system"}
    assert pa.default_memory_pool().backend_name == before
