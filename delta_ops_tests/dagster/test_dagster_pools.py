"""A run waits while another maintains its table: each table's maintenance step is in its own
Dagster pool (`delta_ops.defs.tables.table_pool`), and the instance's
`concurrency: pools: default_limit: 1` (`INSTANCE_CONCURRENCY`) gives every such pool one
slot. Real runs of the implicit asset job on a real SQLite instance, each in its own process;
the steps' own start and end events tell whether they overlapped.

The serialized case starts the second run once the first run's step holds the slot. Dagster's
SQLite storage claims a slot with a read and then an unguarded update (`SELECT ... FOR
UPDATE SKIP LOCKED`, which SQLite ignores, then `UPDATE ... WHERE id = ?`), so two steps
that ask in the same few milliseconds can both get the one slot (seen in 6 of 20 tries with
two processes, and once in CI). Then both do the same work, which the protocol keeps safe:
the overlap cases below check the table with `deltalake` afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml
from dagster import DagsterInstance
from dagster._core.instance.ref import InstanceRef
from deltalake import DeltaTable

from delta_ops.defs import build_definitions
from delta_ops.defs.keys import CHECKPOINT, asset_key
from delta_ops.defs.tables import INSTANCE_CONCURRENCY, table_pool
from delta_ops_tests.support.corpus import REPO_ROOT
from delta_ops_tests.support.fleet import write_table

#: Commits per table: enough that a step (a `.crc` per version, then a checkpoint) lasts
#: well beyond the few tenths of a second between two runs' starts.
COMMITS = 400


def _home(tmp_path: Path, pools: bool) -> Path:
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(
        "telemetry:\n  enabled: false\n" + (INSTANCE_CONCURRENCY if pools else ""))
    # The storage created once, before two processes open it at the same moment.
    DagsterInstance.from_ref(InstanceRef.from_dir(str(home))).dispose()
    return home


def _defs(tmp_path: Path, names: list[str]):
    for i, name in enumerate(names):
        write_table(tmp_path / "lake" / name, i, COMMITS)
    path = tmp_path / "tables.yaml"
    path.write_text(yaml.safe_dump({
        "defaults": {"engine": "local"},
        "tables": [{"name": n, "uri": str(tmp_path / "lake" / n)} for n in names],
    }))
    return build_definitions(path)  # the workers build the same from tables.yaml


#: One run worker: loads the registry's definitions, says it is ready, waits for the go,
#: runs the implicit asset job for one table's checksums and checkpoint on DAGSTER_HOME's
#: instance, then prints the table step's (start, end) from the run's events and whether it
#: succeeded.
WORKER = """
import json, sys, time
from pathlib import Path
from dagster import DagsterEventType, DagsterInstance
from delta_ops.defs import build_definitions
from delta_ops.defs.keys import CHECKPOINT, VERSION_CHECKSUM, asset_key
registry, name, ready, go = sys.argv[1:]
job = build_definitions(Path(registry)).resolve_implicit_global_asset_job_def()
with DagsterInstance.get() as instance:
    Path(ready).touch()
    while not Path(go).exists():
        time.sleep(0.01)
    result = job.execute_in_process(instance=instance, raise_on_error=False, asset_selection=[
        asset_key(name, CHECKPOINT), asset_key(name, VERSION_CHECKSUM)])
    events = [e for e in instance.all_logs(result.run_id) if e.dagster_event is not None
              and e.dagster_event.step_key == name + "__maintenance"]
    start = min(e.timestamp for e in events
                if e.dagster_event_type == DagsterEventType.STEP_START)
    end = max(e.timestamp for e in events if e.dagster_event_type in (
        DagsterEventType.STEP_SUCCESS, DagsterEventType.STEP_FAILURE))
    print(json.dumps([start, end, result.success]))
"""


def _run_at_once(tmp_path: Path, home: Path, tables: list[str], *,
                 second_waits_for_slot: bool = False) -> list[tuple[float, float, bool]]:
    """Runs of the implicit asset job, one per entry of `tables` (its checksums and
    checkpoint), each in its own process (as run workers are) on the instance at `home`,
    loaded first and then started together; each run's table step as (start, end,
    succeeded). With `second_waits_for_slot` the runs after the first start once the first
    run's step holds its table's pool slot (seen on the instance), not at once."""
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONWARNINGS": "ignore",
           "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    procs, ready, go = [], [], []
    for i, name in enumerate(tables):
        ready.append(tmp_path / f"ready{i}")
        go.append(tmp_path / ("go" if i == 0 or not second_waits_for_slot else "go_later"))
        procs.append(subprocess.Popen(
            [sys.executable, "-c", WORKER, str(tmp_path / "tables.yaml"), name,
             str(ready[-1]), str(go[-1])],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        _wait(lambda: all(r.exists() for r in ready), procs, "the run processes to load")
        go[0].touch()
        if second_waits_for_slot:
            with DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as instance:
                pool = table_pool(tables[0])

                # The instance gives the pool one slot (else the wait below would prove
                # nothing when the first run ends before a poll sees its slot).
                limit = instance.event_log_storage.get_concurrency_info(pool).limit
                assert limit == 1, (pool, limit)

                def claimed() -> bool:
                    # The slot held now, or the first run already over (a short step may take
                    # and free the slot between two polls; its exit code is checked below).
                    return bool(
                        instance.event_log_storage.get_concurrency_info(pool).claimed_slots
                        or procs[0].poll() is not None)

                _wait(claimed, procs, f"the first run's step to claim pool {pool}'s slot")
            go[-1].touch()
        out = []
        for proc in procs:
            stdout, stderr = proc.communicate(timeout=600)
            assert proc.returncode == 0, stderr[-3000:]
            out.append(tuple(json.loads(stdout.strip().splitlines()[-1])))
        return out
    finally:  # a failed wait leaves no worker waiting for its go
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _wait(condition, procs: list[subprocess.Popen], what: str) -> None:
    """Poll `condition` every 5 ms until it holds; fail, naming `what`, after 300 s or as soon
    as one of `procs` has ended (with the end of its stderr)."""
    deadline = time.monotonic() + 300
    while not condition():
        ended = [p.stderr.read()[-2000:] for p in procs if p.poll() is not None]
        assert not ended and time.monotonic() < deadline, (f"waiting for {what}", ended)
        time.sleep(0.005)


def _overlap(a: tuple[float, float, bool], b: tuple[float, float, bool]) -> float:
    return min(a[1], b[1]) - max(a[0], b[0])


def test_a_table_step_is_in_its_table_pool():
    assert table_pool("sales") == "delta_ops_table/sales"
    assert "default_limit: 1" in INSTANCE_CONCURRENCY


def test_two_runs_of_one_table_are_serialized_by_its_pool(tmp_path):
    defs = _defs(tmp_path, ["sales"])
    node = defs.resolve_assets_def(asset_key("sales", CHECKPOINT)).node_def
    assert node.pool == "delta_ops_table/sales"
    first, second = _run_at_once(tmp_path, _home(tmp_path, pools=True), ["sales", "sales"],
                                 second_waits_for_slot=True)
    # The second step waited for the first's slot: it started after the first ended, and both
    # succeeded (the second found the .crc files and checkpoint written and had nothing to do).
    assert second[0] >= first[1], (first, second)
    assert first[2] and second[2]
    _assert_maintained(tmp_path / "lake" / "sales")


def test_two_tables_are_maintained_in_parallel(tmp_path):
    _defs(tmp_path, ["sales", "orders"])
    sales, orders = _run_at_once(tmp_path, _home(tmp_path, pools=True), ["sales", "orders"])
    assert _overlap(sales, orders) > 0, (sales, orders)
    assert sales[2] and orders[2]


def test_without_the_instance_setting_nothing_keeps_two_runs_apart(tmp_path):
    """What docs/dagster.md warns of: a pool without a limit is no limit, and two runs of one
    table overlap (the watch's in-flight check is then the only defence, and covers only its
    own runs). Both do the same work, and the table comes out whole."""
    _defs(tmp_path, ["sales"])
    first, second = _run_at_once(tmp_path, _home(tmp_path, pools=False), ["sales", "sales"])
    assert _overlap(first, second) > 0, (first, second)
    assert first[2] and second[2]
    _assert_maintained(tmp_path / "lake" / "sales")


def _assert_maintained(table: Path) -> None:
    """`table` (a fleet table of `COMMITS` commits) read by `deltalake` from its new
    checkpoint (every add file listed), and the latest version's `.crc` counting every add
    file and byte (a fresh table's checksum is computed at its latest version only)."""
    log = table / "_delta_log"
    last = COMMITS - 1
    assert json.loads((log / "_last_checkpoint").read_text())["version"] == last
    assert (log / f"{last:020d}.checkpoint.parquet").exists()
    assert [p.name for p in log.glob("*.crc")] == [f"{last:020d}.crc"]
    crc = json.loads((log / f"{last:020d}.crc").read_text())
    sizes = [100 + v for v in range(COMMITS)]  # `support.fleet.write_table`'s add sizes
    assert (crc["numFiles"], crc["tableSizeBytes"]) == (COMMITS, sum(sizes))
    dt = DeltaTable(str(table))
    assert dt.version() == last
    assert len(dt.file_uris()) == COMMITS
