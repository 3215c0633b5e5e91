"""The Dagster code location with a fleet of discovered tables, in whole processes: loading
the definitions, one tick of the watch sensor, and a maintenance run of every table.

`python -m benchmarks.bench_dagster [--tables 1000] [--repeats 3] [--no-run] [--layout
partitioned]` writes small
generated Delta tables (`delta_ops_tests.support.fleet`: 12 commits each, no checkpoint, so every
table is due for a checkpoint and checksums) under `benchmarks/data/dagster_tables/lake`,
a `dg` project beside them whose `defs.yaml` discovers them, scans the prefix once (what
the discovery sensor does), then reports:

- `discover_s`: the scan of the prefix (`refresh_discovery`, in this process);
- `load_ready_s` / `load_process_s` / `load_cpu_s`: a fresh interpreter loading the
  project's definitions (`load_from_defs_folder`: the component reads the discovery cache)
  and `Definitions.validate_loadable`: seconds until they are ready (imports included), the
  whole process under `/usr/bin/time` (exit included) and its CPU seconds (user + system:
  steadier than wall time on a shared machine); medians of `--repeats`; `load_rss_mb`
  the largest peak RSS;
- `validate_cli_s` / `validate_cpu_s`: `dagster definitions validate` on the project, whole
  process (what `dg check defs` runs: the definitions plus the snapshots a code server
  sends the UI);
- `load_average`: the 1-minute load average at the end of those rounds;
- `tick_first_s` / `tick_cursored_s`: one evaluation of the `delta_tables_watch` sensor
  through Dagster (`build_sensor_context`) without, then with, the cursor, in a process
  that loaded the definitions (as a code server has); `cursor_bytes`, `requests` (one per
  table) and `observations` of the first tick;
- `run_s` / `run_process_s`: one run of every asset of every table (the implicit asset job)
  (`execute_in_process`, the default SQLite instance in a fresh DAGSTER_HOME, as `dagster
  dev` has), and its whole process; `run_success`, `materializations`, `engines` (how many
  materializations ran on which engine: the default policy sends these small tables to the
  local engine), `step_failures`. Skipped with `--no-run` (it takes minutes: most of it is
  the SQLite event log committing each of the run's ~50 events per table).

- with `--layout partitioned`: the same in the partitioned asset layout
  (`automation.asset_layout: partitioned`, `delta_ops.defs.fleet`); the tick and the run add
  every table's partition to their instance first, and the run covers the range of all
  of them;
- with `--fleet`: the fleet under real automation, as a user runs it: `dagster dev` on the
  project (a fresh DAGSTER_HOME: the default instance, SQLite, the default run coordinator),
  the `delta_tables_watch` sensor started over GraphQL, then the lake polled until every
  table is maintained (its `.crc` and checkpoint at the latest version: all are due) or
  `--fleet-timeout` seconds pass. Reports `fleet_first_tick_s` (the first tick, start to
  end, from the tick's own timestamps; `None` while it still runs), `fleet_ticks`,
  `fleet_runs` (runs the watch launched), `fleet_runs_by_first_tick`, `fleet_maintained`
  (tables done), `fleet_maintained_s` (sensor started -> every table maintained) and
  `fleet_run_created_s` (seconds between the creations of the watch's runs). With
  `BENCH_BASELINE` the same is measured with that checkout, on a freshly written lake,
  after this one (`--baseline-fleet-timeout` bounds it: the baseline's first tick ran for
  about 75 minutes at 1,000 tables).

Child processes write and use bytecode caches (`PYTHONDONTWRITEBYTECODE` is dropped), and
each checkout loads once before the timed rounds, as in an installed environment. With
`BENCH_BASELINE=DIR` (another checkout of delta_ops, e.g. `git archive` of an older commit)
every load and validate round also runs with that checkout, alternated with this one, and
the same keys are reported with a `baseline_` prefix: before and after a change under the
same load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_START = time.perf_counter()

COMMITS = 12
PACKAGE = "fleet_proj"
HERE = Path(__file__).resolve().parent
GNU_TIME = "/usr/bin/time"


def write_project(root: Path, lake: Path, layout: str = "per_table") -> Path:
    """A dg project at `root` whose one component discovers the tables under `lake` (the
    tests' project builder, `delta_ops_tests.support.dg_project`), in the asset `layout`."""
    from delta_ops_tests.support.dg_project import new_project, write_component

    new_project(root, PACKAGE)
    attributes: dict = {
        # The default policy: engine spark above 100,000 live files, so these small tables
        # run on the local engine (the run reports how many did).
        "discover": [{"prefix": str(lake), "max_depth": 2}],
        "discovery_cache": "discovered.json",
    }
    if layout != "per_table":
        attributes["defaults"] = {"automation": {"asset_layout": layout}}
    write_component(root, PACKAGE, attributes)
    return root


def _partitions(defs, instance) -> list[str] | None:
    """In the partitioned layout, every registered table's partition added to `instance`
    (what the `delta_tables_partitions` sensor does) and returned; else None."""
    registry = defs.resources["registry"].load()
    if not registry.partitioned:
        return None
    instance.add_dynamic_partitions("delta_tables", registry.names)
    return instance.get_dynamic_partitions("delta_tables")


def _child_env(project: Path, home: Path | None = None, code: Path = HERE.parent) -> dict[str, str]:
    """The environment of a child process: the project and the delta_ops checkout `code` on
    the path; bytecode caches written and used, as in an installed environment."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(project), str(code)])
    env["PYTHONWARNINGS"] = "ignore"
    env.pop("DELTA_OPS_REGISTRY", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if home is not None:
        env["DAGSTER_HOME"] = str(home)
    return env


def _timed_process(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[dict, float, float]:
    """(the JSON the process printed last, or {}, with `cpu_s`: its user + system CPU
    seconds; wall seconds; peak RSS MB) of one whole process run under GNU time."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as report:
        start = time.perf_counter()
        proc = subprocess.run([GNU_TIME, "-f", "%M %U %S", "-o", report.name, *argv],
                              cwd=cwd, env=env, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
        rss_kb, user_s, sys_s = report.read().split()[-3:]
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:5])} failed:\n{proc.stderr[-3000:]}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    out = json.loads(lines[-1]) if lines else {}
    out["cpu_s"] = float(user_s) + float(sys_s)
    return out, wall, int(rss_kb) / 1024


def _home(base: Path, code: Path | None = None) -> Path:
    """A fresh DAGSTER_HOME; with `code`, the instance settings that checkout's docs ask for
    (`delta_ops.defs.tables.INSTANCE_CONCURRENCY` when it has one: a checkout before it would
    have had its engine pools limited to 1 by it)."""
    home = Path(tempfile.mkdtemp(prefix="dagster_home_", dir=base))
    settings = ""
    if code is not None:
        tables = (code / "delta_ops" / "defs" / "tables.py").read_text()
        if "INSTANCE_CONCURRENCY" in tables:
            from delta_ops.defs.tables import INSTANCE_CONCURRENCY
            settings = INSTANCE_CONCURRENCY
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n" + settings)
    return home


# ---- what the child processes do -------------------------------------------------------------


def child_load() -> dict:
    from dagster import Definitions
    from fleet_proj.definitions import defs  # type: ignore[import-not-found]

    Definitions.validate_loadable(defs)
    return {"ready_s": time.perf_counter() - _START}


def child_tick() -> dict:
    from dagster import DagsterInstance, build_sensor_context
    from fleet_proj.definitions import defs  # type: ignore[import-not-found]

    sensor = defs.resolve_sensor_def("delta_tables_watch")
    instance = DagsterInstance.ephemeral()
    _partitions(defs, instance)

    def tick(cursor: str | None):
        context = build_sensor_context(instance=instance, cursor=cursor, definitions=defs,
                                       resources={"registry": defs.resources["registry"]})
        start = time.perf_counter()
        result = sensor(context)
        return result, time.perf_counter() - start

    first, first_s = tick(None)
    _, cursored_s = tick(first.cursor)
    return {
        "tick_first_s": first_s, "tick_cursored_s": cursored_s,
        "cursor_bytes": len(first.cursor.encode()), "requests": len(first.run_requests),
        "observations": len(first.asset_events),
    }


def child_run() -> dict:
    from dagster import DagsterInstance
    from fleet_proj.definitions import defs  # type: ignore[import-not-found]

    job = defs.resolve_implicit_global_asset_job_def()
    instance = DagsterInstance.get()
    partitions = _partitions(defs, instance)
    # The partitioned layout: one run over the range of every table's partition (what a
    # single-run backfill of all partitions launches).
    tags = {} if partitions is None else {"dagster/asset_partition_range_start": partitions[0],
                                          "dagster/asset_partition_range_end": partitions[-1]}
    start = time.perf_counter()
    result = job.execute_in_process(instance=instance, raise_on_error=False, tags=tags)
    materializations = result.get_asset_materialization_events()
    engines: dict[str, int] = {}
    for event in materializations:
        engine = event.event_specific_data.materialization.metadata.get("engine")
        if engine is not None:
            engines[engine.value] = engines.get(engine.value, 0) + 1
    return {
        "run_s": time.perf_counter() - start,
        "run_success": result.success,
        "materializations": len(materializations),
        "engines": engines,
        "step_failures": len(result.get_step_failure_events()),
    }


CHILDREN = {"load": child_load, "tick": child_tick, "run": child_run}


# ---- the fleet under real automation ----------------------------------------------------------


def _maintained(lake: Path, paths: list[str], commits: int) -> int:
    """Tables whose latest version has its `.crc` and a checkpoint (`_last_checkpoint` at
    it): what a fresh fleet table needs."""
    last = commits - 1
    done = 0
    for relative in paths:
        log = lake / relative / "_delta_log"
        if not (log / f"{last:020d}.crc").exists():
            continue
        try:
            hint = json.loads((log / "_last_checkpoint").read_text())
        except (OSError, ValueError):
            continue
        done += hint.get("version") == last
    return done


def fleet_automation(base: Path, lake: Path, project: Path, paths: list[str], code: Path,
                     timeout: float) -> dict:
    """`dagster dev` on the project with checkout `code`; the watch sensor started; the
    lake polled until every table is maintained or `timeout` seconds pass."""
    from delta_ops_tests.support.dagster_dev import Dagit, free_port, start_dagster_dev, stop_group

    (project / "workspace.yaml").write_text(
        "load_from:\n  - python_module:\n      module_name: "
        f"{PACKAGE}.definitions\n      location_name: delta_ops\n      working_directory: .\n")
    home = _home(base, code)
    env = _child_env(project, home, code)
    port = free_port()
    log_path = base / f"dagster_dev_{port}.log"
    with open(log_path, "wb") as log:
        proc = start_dagster_dev(project / "workspace.yaml", project, env, log, port)
        try:
            dagit = Dagit(f"http://127.0.0.1:{port}/graphql")
            dagit.wait_for_location(proc, timeout=300)
            start = time.monotonic()
            dagit.start_sensor("delta_tables_watch")
            done, maintained_s = 0, None
            while time.monotonic() - start < timeout:
                done = _maintained(lake, paths, COMMITS)
                if done == len(paths):
                    maintained_s = time.monotonic() - start
                    break
                time.sleep(5)
            ticks = dagit.sensor_ticks("delta_tables_watch")
            runs = dagit.runs({"dagster/sensor_name": "delta_tables_watch"})
            dagit.stop_sensor("delta_tables_watch")
        finally:
            stop_group(proc)
    first = ticks[-1] if ticks else {}
    first_tick = (first["endTimestamp"] - first["timestamp"]) if first.get(
        "endTimestamp") else None
    created = _run_creation_gaps(home, first.get("timestamp"))
    return {
        "fleet_first_tick_s": round(first_tick, 1) if first_tick is not None else None,
        "fleet_first_tick_status": first.get("status"),
        "fleet_ticks": len(ticks),
        "fleet_runs": len(runs),
        "fleet_runs_by_first_tick": len(first.get("runIds") or []),
        "fleet_maintained": done,
        "fleet_maintained_s": round(maintained_s, 1) if maintained_s is not None else None,
        "fleet_waited_s": round(time.monotonic() - start, 1),
        "fleet_run_created_s": created,
    }


def _run_creation_gaps(home: Path, tick_start: float | None) -> list[float]:
    """Seconds between the creations of the watch's runs, in order (the first from the
    first tick's start, so it includes the sensor's evaluation): what the daemon spent
    creating each run, read from the instance's run storage."""
    from dagster import DagsterInstance, RunsFilter
    from dagster._core.instance.ref import InstanceRef

    with DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as instance:
        records = instance.get_run_records(
            RunsFilter(tags={"dagster/sensor_name": "delta_tables_watch"}))
        stamps = sorted(r.create_timestamp.timestamp() for r in records)
    previous = tick_start if tick_start is not None else (stamps[0] if stamps else 0.0)
    gaps = []
    for stamp in stamps:
        gaps.append(round(stamp - previous, 1))
        previous = stamp
    return gaps


# ---- the benchmark ----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-run", action="store_true", help="skip the maintenance run")
    parser.add_argument("--fleet", action="store_true",
                        help="also measure the fleet under dagster dev and the watch sensor")
    parser.add_argument("--fleet-timeout", type=float, default=1200)
    parser.add_argument("--baseline-fleet-timeout", type=float, default=600)
    parser.add_argument("--fleet-baseline-only", action="store_true",
                        help="with --fleet and BENCH_BASELINE: measure only the baseline")
    parser.add_argument("--no-load", action="store_true",
                        help="skip the load, validate and tick rounds")
    parser.add_argument("--layout", choices=("per_table", "partitioned"), default="per_table",
                        help="the component's automation.asset_layout")
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    args = parser.parse_args(argv if argv is not None else [])
    if args.child:
        print(json.dumps(CHILDREN[args.child]()), flush=True)
        return {}

    from delta_ops.defs.sources import RegistrySource, refresh_discovery
    from delta_ops_tests.support.fleet import write_fleet

    base = HERE / "data" / "dagster_tables"
    shutil.rmtree(base, ignore_errors=True)
    lake, project = base / "lake", base / "project"
    start = time.perf_counter()
    paths = write_fleet(lake, args.tables, commits=COMMITS)
    write_s = time.perf_counter() - start
    write_project(project, lake, args.layout)
    source = RegistrySource(base_dir=str(project),
                            discover=[{"prefix": str(lake), "max_depth": 2}],
                            discovery_cache="discovered.json")
    start = time.perf_counter()
    found = refresh_discovery(source)
    discover_s = time.perf_counter() - start

    me = [sys.executable, "-m", "benchmarks.bench_dagster", "--child"]
    validate = [str(Path(sys.executable).parent / "dagster"), "definitions", "validate",
                "-m", f"{PACKAGE}.definitions"]
    checkouts = {"": HERE.parent}
    if os.environ.get("BENCH_BASELINE"):
        checkouts["baseline_"] = Path(os.environ["BENCH_BASELINE"]).resolve()
    samples: dict[str, dict[str, list[float]]] = {p: {} for p in checkouts}
    for code in checkouts.values():  # one load each, not counted: bytecode caches written
        _timed_process([*me, "load"], code, _child_env(project, code=code))
    for _ in range(0 if args.no_load else args.repeats):
        # Alternated: each round loads with every checkout, then validates with every one.
        for prefix, code in checkouts.items():
            out, wall, peak = _timed_process([*me, "load"], code, _child_env(project, code=code))
            for key, value in (("load_ready_s", out["ready_s"]), ("load_process_s", wall),
                               ("load_cpu_s", out["cpu_s"]), ("load_rss_mb", peak)):
                samples[prefix].setdefault(key, []).append(value)
        for prefix, code in checkouts.items():
            out, wall, _ = _timed_process(validate, project,
                                          _child_env(project, _home(base), code))
            samples[prefix].setdefault("validate_cli_s", []).append(wall)
            samples[prefix].setdefault("validate_cpu_s", []).append(out["cpu_s"])
    ticks: dict = {}
    for prefix, code in ([] if args.no_load else checkouts.items()):
        out, _, _ = _timed_process([*me, "tick"], code, _child_env(project, code=code))
        out.pop("cpu_s")
        ticks.update({f"{prefix}{k}": v for k, v in out.items()})
    result: dict = {
        "tables": args.tables,
        "layout": args.layout,
        "write_tables_s": round(write_s, 2),
        "discovered": found["found"],
        "discover_s": round(discover_s, 3),
        "load_average": round(os.getloadavg()[0], 1),
        **{f"{prefix}{key}": round(max(values)) if key.endswith("_mb") else
           round(statistics.median(values), 2)
           for prefix, by_key in samples.items() for key, values in by_key.items()},
        **{k: round(v, 3) if isinstance(v, float) else v for k, v in ticks.items()},
    }
    if not args.no_run:
        home_env = _child_env(project, _home(base))
        run, wall, peak = _timed_process([*me, "run"], HERE.parent, home_env)
        result.update({
            "run_s": round(run["run_s"], 1), "run_process_s": round(wall, 1),
            "run_rss_mb": round(peak), "run_success": run["run_success"],
            "materializations": run["materializations"], "engines": run["engines"],
            "step_failures": run["step_failures"],
        })
    if args.fleet:
        for prefix, code in checkouts.items():
            if args.fleet_baseline_only and not prefix:
                continue
            if prefix and not args.fleet_baseline_only:  # the run before maintained it
                shutil.rmtree(lake)
                write_fleet(lake, args.tables, commits=COMMITS)
            timeout = args.baseline_fleet_timeout if prefix else args.fleet_timeout
            fleet = fleet_automation(base, lake, project, paths, code, timeout)
            result.update({f"{prefix}{k}": v for k, v in fleet.items()})
            print(json.dumps({f"{prefix}{k}": v for k, v in fleet.items()}), flush=True)
    for key, value in result.items():
        print(f"{key:>24}: {value}")
    shutil.rmtree(base, ignore_errors=True)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
