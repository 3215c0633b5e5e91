"""`make demo`: build the demo tables, then maintain them through Dagster.

1. Creates the tables `tables.yaml` registers, under `demo_tables/` (rebuilt on every run):

   - `events`: partitioned by day. Local Spark writes six weeks of click events as real
     Parquet files; our commit API (`delta_ops.commit`) commits them one day per commit, with
     a weekly DELETE of a two-week-old day, each commit dated on its day. 40-odd commits and
     no checkpoint: it needs one, its oldest commits are past the 30-day log retention, and
     its deleted files are past the 7-day VACUUM retention.
   - `customers`: unpartitioned, rewritten in place (each UPDATE removes a file and adds its
     rewrite); compaction every 5 commits and the row-tracking backfill in its policy.
   - `orders_dv`: a table with deletion vectors, copied from the Delta test corpus that a
     checkout holds as test data (`delta_ops_tests/data/corpus/`, or `$DELTA_OPS_CORPUS`).
     The demo is a checkout's entry point (`make demo`): it reads that folder by path and
     never imports the tests' package.

2. Runs every asset (the implicit asset job) in this process through Dagster
   (DAGSTER_HOME defaults to `.dagster_home/`, so
   `DAGSTER_HOME=$PWD/.dagster_home dagster dev -w workspace.yaml` shows these runs; its
   dagster.yaml gets one slot per table pool, so two runs wait for each other on a table),
   and prints a summary per table and component from the run's events.

Protocol sections: "Add File and Remove File", "Creation of New Log Entries" (the commits);
the maintenance operations through the Dagster assets.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
import warnings
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from delta_ops.protocol.filenames import LOG_DIR

REPO_ROOT = Path(__file__).resolve().parents[1]
#: Environment variable naming another corpus directory (as for the tests).
CORPUS_ENV = "DELTA_OPS_CORPUS"
DAY_MS = 86_400_000
#: Corpus table copied as the deletion-vector demo table.
DV_SOURCE = "delta/golden__dv-partitioned-with-checkpoint"


# ---- building the tables ------------------------------------------------------------------


def corpus_root() -> Path:
    """`$DELTA_OPS_CORPUS` when set, else the checkout's test corpus
    `delta_ops_tests/data/corpus`."""
    env = os.environ.get(CORPUS_ENV)
    return Path(env) if env else REPO_ROOT / "delta_ops_tests" / "data" / "corpus"


def _file_stats(path: Path) -> dict[str, Any]:
    """numRecords, minValues, maxValues and nullCount from the Parquet footer."""
    meta = pq.read_metadata(path)
    stats: dict[str, Any] = {"numRecords": meta.num_rows, "minValues": {}, "maxValues": {},
                             "nullCount": {}}
    for i in range(meta.num_columns):
        name = meta.schema.column(i).name
        mins, maxs, nulls = [], [], 0
        for rg in range(meta.num_row_groups):
            col = meta.row_group(rg).column(i).statistics
            if col is None or not col.has_min_max:
                mins = maxs = None  # type: ignore[assignment]
                break
            mins.append(col.min)
            maxs.append(col.max)
            nulls += col.null_count or 0
        if mins:
            lo, hi = min(mins), max(maxs)
            if isinstance(lo, (int, float, str)):
                stats["minValues"][name] = lo
                stats["maxValues"][name] = hi
        stats["nullCount"][name] = nulls
    return stats


def _add(root: Path, path: Path, partition_values: dict[str, str], mtime_ms: int) -> dict:
    os.utime(path, (mtime_ms / 1000, mtime_ms / 1000))
    return {
        "path": path.relative_to(root).as_posix(),
        "partitionValues": partition_values,
        "size": path.stat().st_size,
        "modificationTime": mtime_ms,
        "dataChange": True,
        "stats": orjson.dumps(_file_stats(path)).decode(),
    }


def _remove(add: dict, deletion_ms: int) -> dict:
    return {
        "path": add["path"],
        "deletionTimestamp": deletion_ms,
        "dataChange": True,
        "extendedFileMetadata": True,
        "partitionValues": add["partitionValues"],
        "size": add["size"],
    }


def _date_commit_file(root: Path, version: int, when_ms: int) -> None:
    """Date commit `version` at `when_ms` (its timestamp: in-commit timestamps are off)."""
    commit = root / LOG_DIR / f"{version:020d}.json"
    os.utime(commit, (when_ms / 1000, when_ms / 1000))


def _spark_write(df: Any, out: Path, partition_by: list[str] | None = None) -> list[Path]:
    """Write `df` as Parquet under `out` with Spark; the data files written."""
    writer = df.write.mode("overwrite")
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.parquet(str(out))
    for side in out.rglob("*"):
        if side.name == "_SUCCESS" or (side.name.startswith(".") and side.name.endswith(".crc")):
            side.unlink()
    return sorted(p for p in out.rglob("*.parquet"))


def build_events(spark: Any, root: Path, now_ms: int, days: int = 36) -> int:
    """Six weeks of daily appends and weekly deletes; returns the latest version."""
    from delta_ops.commit import Transaction, append_files, create_table

    start = date.fromtimestamp(now_ms / 1000) - timedelta(days=days)
    # SQL expressions keep pyspark imports inside delta_ops.engine.spark.
    df = (
        spark.range(days * 400)
        .selectExpr(
            "id AS event_id",
            "(id * 7919) % 1000 AS user_id",
            "element_at(array('view', 'click', 'buy'), CAST(id % 3 + 1 AS INT)) AS kind",
            "round((id % 97) * 1.25, 2) AS amount",
            f"date_add(DATE'{start.isoformat()}', CAST(id % {days} AS INT)) AS event_date",
        )
        .repartition(2)  # round robin: each task writes one file per day
    )
    files = _spark_write(df, root, ["event_date"])
    by_day: dict[str, list[Path]] = defaultdict(list)
    for f in files:
        by_day[f.parent.name.split("=", 1)[1]].append(f)
    schema = pa.schema([
        ("event_id", pa.int64()), ("user_id", pa.int64()), ("kind", pa.string()),
        ("amount", pa.float64()), ("event_date", pa.date32()),
    ])
    live: dict[str, list[dict]] = {}
    version = -1
    for d in range(days):
        day = (start + timedelta(days=d)).isoformat()
        when = now_ms - (days - d) * DAY_MS + 9 * 3_600_000
        clock = lambda when=when: when  # noqa: E731
        adds = [_add(root, f, {"event_date": day}, when) for f in by_day[day]]
        live[day] = adds
        if version < 0:
            version = create_table(
                str(root), schema, ["event_date"], name="events", adds=adds, clock=clock,
                description="Click events, one partition per day",
            ).version
        else:
            version = append_files(str(root), adds, clock=clock).version
        _date_commit_file(root, version, when)
        if d % 7 == 6 and d >= 14:
            # Weekly retention DELETE of the day two weeks back.
            gone = (start + timedelta(days=d - 14)).isoformat()
            txn = Transaction(str(root), operation="DELETE", clock=clock,
                              operation_parameters={"predicate": f"event_date = '{gone}'"})
            txn.remove_files(_remove(a, when + 60_000) for a in live.pop(gone))
            version = txn.commit().version
            _date_commit_file(root, version, when + 60_000)
    return version


def build_customers(spark: Any, root: Path, now_ms: int, commits: int = 13) -> int:
    """An unpartitioned table rewritten in place; returns the latest version."""
    from delta_ops.commit import Transaction, append_files, create_table

    staging = root / "data"
    df = (
        spark.range(4000)
        .selectExpr(
            "id AS customer_id",
            "concat('customer-', CAST(id AS STRING)) AS name",
            "element_at(array('DE', 'FR', 'NL', 'SE', 'US'), CAST(id % 5 + 1 AS INT)) AS country",
            "round((id % 113) * 3.5, 2) AS lifetime_value",
        )
        .repartition(4 + 2 * commits)  # one file per task
    )
    files = iter(_spark_write(df, staging))
    schema = pa.schema([
        ("customer_id", pa.int64()), ("name", pa.string()), ("country", pa.string()),
        ("lifetime_value", pa.float64()),
    ])
    base = now_ms - 2 * DAY_MS
    clock = lambda: base  # noqa: E731
    live = [_add(root, next(files), {}, base) for _ in range(4)]
    version = create_table(str(root), schema, name="customers", adds=live, clock=clock).version
    for i in range(1, commits):
        when = base + i * 3_600_000
        clock = lambda when=when: when  # noqa: E731
        new = _add(root, next(files), {}, when)
        if i % 2:
            version = append_files(str(root), [new], clock=clock).version
        else:
            old = live.pop(0)
            txn = Transaction(str(root), operation="UPDATE", clock=clock,
                              operation_parameters={"predicate": "country = 'DE'"})
            txn.remove_files([_remove(old, when)]).add_files([new])
            version = txn.commit().version
        live.append(new)
        _date_commit_file(root, version, when)
    return version


def build_demo_tables(directory: Path, *, now_ms: int | None = None) -> dict[str, str]:
    """(Re)create the demo tables under `directory`; returns {name: what was built}."""
    from delta_ops.engine.session import SparkSessionConfig
    from delta_ops.engine.spark import SparkEngine

    now = int(time.time() * 1000) if now_ms is None else now_ms
    source = corpus_root() / DV_SOURCE
    if not (source / LOG_DIR).is_dir():
        raise FileNotFoundError(
            f"demo table orders_dv: no corpus table at {source}: run the demo from a checkout "
            f"(its delta_ops_tests/data/corpus) or set {CORPUS_ENV}"
        )
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    built: dict[str, str] = {}
    engine = SparkEngine(SparkSessionConfig(
        master="local[2]", app_name="delta-ops-demo",
        conf={"spark.sql.shuffle.partitions": "4", "spark.sql.adaptive.enabled": "false"},
    ))
    spark = engine.session
    v = build_events(spark, directory / "events", now)
    built["events"] = f"{v + 1} commits written with Spark + delta_ops.commit"
    v = build_customers(spark, directory / "customers", now)
    built["customers"] = f"{v + 1} commits written with Spark + delta_ops.commit"
    target = directory / "orders_dv"
    shutil.copytree(source, target)
    # Date its data files a month back, so the dry-run VACUUM finds the orphans.
    month_ago = (now - 30 * DAY_MS) / 1000
    for path in target.rglob("*"):
        if path.is_file() and LOG_DIR not in path.parts:
            os.utime(path, (month_ago, month_ago))
    built["orders_dv"] = f"copied from the corpus ({DV_SOURCE})"
    return built


# ---- running maintenance through Dagster ---------------------------------------------------


@dataclass
class ComponentOutcome:
    status: str  # "ok", "skipped", "failed", "not run"
    metadata: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def _plain_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in metadata.items():
        out[key] = getattr(value, "value", value)
    return out


def collect_outcomes(result: Any) -> tuple[dict[str, dict[str, ComponentOutcome]],
                                            dict[str, dict[str, str]]]:
    """Per table and component: the outcome; per table: check name -> "passed", "warned"
    (failed with severity WARN: leftovers, say) or "FAILED" (severity ERROR)."""
    from dagster import AssetCheckSeverity

    outcomes: dict[str, dict[str, ComponentOutcome]] = defaultdict(dict)
    checks: dict[str, dict[str, str]] = defaultdict(dict)
    for event in result.all_events:
        kind = event.event_type_value
        data = event.event_specific_data
        if kind in ("ASSET_MATERIALIZATION", "ASSET_OBSERVATION"):
            mat = getattr(data, "materialization", None) or data.asset_observation
            table, component = mat.asset_key.path
            md = _plain_metadata(dict(mat.metadata))
            outcomes[table][component] = ComponentOutcome(
                "skipped" if md.get("skipped") else "ok", md
            )
        elif kind == "STEP_FAILURE" and event.step_key and "__" in event.step_key:
            table, component = event.step_key.split("__", 1)
            outcomes[table][component] = ComponentOutcome(
                "failed", {}, data.error.message.strip().splitlines()[-1] if data.error else None
            )
        elif kind == "ASSET_CHECK_EVALUATION":
            checks[data.asset_key.path[0]][data.check_name] = (
                "passed" if data.passed
                else "warned" if data.severity == AssetCheckSeverity.WARN else "FAILED"
            )
    return outcomes, checks


def _bytes(n: Any) -> str:
    n = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n}"


def headline(component: str, outcome: ComponentOutcome) -> str:
    """One line per component, from the metadata Dagster recorded."""
    m = outcome.metadata
    if outcome.status == "failed":
        return f"FAILED: {outcome.error}"
    if outcome.status == "not run":
        if component in ("optimize", "stats"):
            return ("not in this run: opt-in (its cron automation, a run selecting only it, "
                    f"or the policy's {component}.in_materialize_all)")
        return "not run (an upstream step failed, or the run left it out: see its log)"
    if m.get("skipped"):
        return f"skipped: {m.get('reason')}"
    if component == "delta_log":
        return (f"version {m['version']}, {m['num_files']} files, {_bytes(m['size_bytes'])}, "
                f"{m['commits_since_checkpoint']} commits since the last checkpoint")
    if component == "checkpoint":
        verb = "already there" if m.get("already_existed") else "written"
        return (f"{m['kind']} checkpoint at version {m['version']} {verb}: "
                f"{m['num_actions']} actions, {_bytes(m['size_in_bytes'])}")
    if component == "version_checksum":
        return (f"{m['num_written']} .crc written (up to version {m['version']}, "
                f"{m.get('num_files')} files, {_bytes(m.get('table_size_bytes'))})")
    if component == "log_compaction":
        return (f"{m['num_written']} compaction files written (every {m['interval']} commits), "
                f"{m['num_already_existed']} already there")
    if component == "metadata_cleanup":
        text = f"{m['num_files']} expired log files deleted"
        if m.get("checkpoint_written") is not None:
            text += f" after checkpointing the cutoff version {m['checkpoint_written']}"
        return text + (f" ({m['reason']})" if m.get("reason") else "")
    if component == "vacuum":
        verb = "would delete" if m.get("dry_run") else "deleted"
        return (f"{verb} {m['num_files']} unreferenced files ({_bytes(m['size_bytes'])}), "
                f"retention {m['retention_hours']:g} h")
    if component == "row_tracking":
        if m.get("backfilled"):
            return (f"{m['files_backfilled']} files backfilled in {m['batches']} batches, "
                    f"row tracking enabled: {m['enabled']}")
        return f"{m['files_missing_row_ids']} files lack row IDs (backfill off in the policy)"
    if component == "optimize":
        verb = "would rewrite" if m.get("dry_run") else "rewrote"
        return (f"{verb} {m['files_removed']} files in {m['bins']} bins: {m['files_before']} "
                f"-> {m['files_after']} files, {m['rows_rewritten']} rows, "
                f"{m['deletion_vectors_removed']} deletion vectors purged")
    if component == "stats":
        return (f"statistics computed for {m['files_updated']} of {m['files_total']} files"
                + (" (dry run)" if m.get("dry_run") else ""))
    return ", ".join(f"{k}={v}" for k, v in m.items())


def print_summary(result: Any, registry: Any, built: dict[str, str], out: Any = sys.stdout) -> None:
    from delta_ops.defs.assets import COMPONENTS

    outcomes, checks = collect_outcomes(result)
    for table in registry.tables:
        print(f"\n{table.name}  ({built.get(table.name, table.uri)})", file=out)
        for component in COMPONENTS:
            outcome = outcomes[table.name].get(component, ComponentOutcome("not run"))
            print(f"  {component:<17} {headline(component, outcome)}", file=out)
        if checks[table.name]:
            listed = ", ".join(
                f"{name} {word}" for name, word in sorted(
                    checks[table.name].items())
            )
            print(f"  {'checks':<17} {listed}", file=out)


def run_maintenance(registry_path: Path) -> tuple[Any, Any]:
    """Run every asset (the implicit asset job) in this process on a persistent instance
    (DAGSTER_HOME)."""
    from dagster import DagsterInstance

    from delta_ops.defs import build_definitions
    from delta_ops.defs.jobs import TABLE_PARTITIONS
    from delta_ops.defs.registry import load_registry
    from delta_ops.defs.tables import INSTANCE_CONCURRENCY

    registry = load_registry(registry_path)
    defs = build_definitions(registry)
    home = Path(os.environ.setdefault("DAGSTER_HOME", str(REPO_ROOT / ".dagster_home")))
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        # Defaults (SQLite storage under DAGSTER_HOME); the demo sends no usage statistics.
        config.write_text("telemetry:\n  enabled: false\n")
    if "concurrency:" not in config.read_text():
        # One slot per table pool: a run waits while another maintains its table (`dagster dev`
        # on this DAGSTER_HOME included).
        with config.open("a") as fh:
            fh.write(INSTANCE_CONCURRENCY)
    with DagsterInstance.get() as instance:
        known = set(instance.get_dynamic_partitions(TABLE_PARTITIONS.name))
        missing = [n for n in registry.names if n not in known]
        if missing:
            instance.add_dynamic_partitions(TABLE_PARTITIONS.name, missing)
        result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
            instance=instance, raise_on_error=False, run_config=demo_run_config(registry.names),
            tags={"delta_ops/launched_by": "make demo"},
        )
    return result, registry


def demo_run_config(tables: Iterable[str]) -> dict[str, Any]:
    """The demo's run of every asset: warnings only on the console, and every
    table maintained in full (`confirm_deletes`: VACUUM and metadata cleanup run in this
    run too; a run of the whole job leaves them out otherwise)."""
    return {
        "loggers": {"console": {"config": {"log_level": "WARNING"}}},
        "ops": {f"{n}__maintenance": {"config": {"confirm_deletes": True}} for n in tables},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m delta_ops.demo", description=__doc__.split(
        "\n")[0])
    parser.add_argument("--registry", type=Path, default=REPO_ROOT / "tables.yaml",
                        help="registry to maintain (default: the repository's tables.yaml)")
    parser.add_argument("--tables-dir", type=Path, default=REPO_ROOT / "demo_tables",
                        help="where the demo tables are built (default: demo_tables/)")
    parser.add_argument("--skip-build", action="store_true",
                        help="maintain the tables as they are, without rebuilding them")
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    warnings.filterwarnings("ignore", message=".*is currently in beta.*")
    started = time.monotonic()
    built: dict[str, str] = {}
    if not args.skip_build:
        print(f"building demo tables in {args.tables_dir} with local Spark ...", flush=True)
        try:
            built = build_demo_tables(args.tables_dir)
        except FileNotFoundError as exc:
            print(f"delta_ops demo: {exc}", file=sys.stderr)
            return 1
        for name, what in built.items():
            print(f"  {name}: {what}")
    print("running every asset through Dagster (the implicit asset job) ...", flush=True)
    result, registry = run_maintenance(args.registry)
    print_summary(result, registry, built)
    print(f"\nrun {result.run_id}: {'succeeded' if result.success else 'had failures'} "
          f"({time.monotonic() - started:.0f} s). Open it in the UI:\n"
          f"  DAGSTER_HOME={os.environ['DAGSTER_HOME']} .venv/bin/dagster dev -w workspace.yaml")
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
