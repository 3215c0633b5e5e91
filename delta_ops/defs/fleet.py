"""The partitioned asset layout: nine assets and three checks for the whole fleet, one
partition per table.

With `automation.asset_layout: partitioned` in the registry's defaults, the code location
defines `[delta_tables, <component>]` for each component (`delta_ops.defs.keys`) in one
subsettable multi-asset, the step `delta_tables__maintenance`, partitioned by the dynamic
partitions `delta_tables` (`jobs.TABLE_PARTITIONS`, one per registered table, kept equal to
the registry by the `delta_tables_partitions` sensor), with the checks `log_readable`,
`fsck` and `checkpoint_fresh` partitioned the same way. Loading it costs the same at ten
tables and at ten thousand (Dagster's own load floor grows with the assets and checks a
location defines: docs/dagster.md), and a table discovery adds is maintained as soon as its
partition exists, without a reload of the code location.

A run covers one table (a partition) or a range of them (Dagster's partition range, as the
launchpad's single-run backfills and the watch make them); each table in it goes through the
same work as a per-table step (`tables.maintain_table`: the log, the components in
`RUN_ORDER`, the checks, each refusal and failure its own), and what it yields is recorded for
the table's partition (`fleet_event`). A run config naming `tables` limits the work to them:
the other partitions of the range record their selected components as skipped, unread, so
that a range run leaves no partition planned and not materialized. Tables that failed fail
the step at the end, once, naming each (`fleet_failure`); the others keep their
materializations, so a failed partition is exactly a table that failed.

The watch sensor (`delta_ops.defs.watch`) requests ranges of at most `tables_per_run`
partitions naming their due tables (`fleet_requests`), and a table with `own_run` alone. The
crons of VACUUM, metadata cleanup, OPTIMIZE and statistics become schedules, one per
component and cron (`fleet_schedules`), each requesting its tables the same way; they are
stopped by default, as the per-table layout's automation sensor is. There are no per-table
pools (one op cannot hold a pool per partition): a run leaves a table to a run created before
it and not finished that covers it (`claimed_elsewhere`), and the watch does not request a
table in a queued or running run. Like the pools, this saves duplicate work and is not a
lock; the protocol keeps the table whole (every commit is put-if-absent).

Protocol sections: those of the operations, through `tables.maintain_table`.
"""


import functools
import hashlib
import json
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from dagster import (
    AssetCheckEvaluation,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetMaterialization,
    AssetObservation,
    AssetsDefinition,
    AssetSpec,
    BackfillPolicy,
    DagsterRunStatus,
    DefaultScheduleStatus,
    Failure,
    MaterializeResult,
    MetadataValue,
    PreviewWarning,
    RunRequest,
    RunsFilter,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    multi_asset,
    schedule,
)
from pydantic import Field

from delta_ops.defs.assets import MaintenanceConfig
from delta_ops.defs.checks import CHECKS
from delta_ops.defs.engines import ENGINE_COMPONENTS
from delta_ops.defs.jobs import MAINTENANCE_JOB, TABLE_PARTITIONS
from delta_ops.defs.keys import (
    CHECKPOINT,
    COMPONENTS,
    DELTA_LOG,
    FLEET_PREFIX,
    UPSTREAM,
    fleet_key,
)
from delta_ops.defs.observations import DATA_VERSION_TAG
from delta_ops.defs.registry import Registry
from delta_ops.defs.resources import RegistryResource, SparkResource
from delta_ops.defs.tables import maintain_table
from delta_ops.defs.translator import CRON_SECTIONS, DESCRIPTIONS

#: The one step of the layout.
FLEET_STEP = f"{FLEET_PREFIX}__maintenance"
#: Tags of the runs this layout requests.
TABLES_TAG = "delta_ops/tables"
#: The tags of a run over a range of partitions.
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"


#: Run statuses of a run still maintaining its tables.
IN_PROGRESS = (
    DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING,
)
#: Jobs whose runs maintain the tables of their asset selection: the implicit asset job (the
#: UI's asset runs, the watch's and the automation's runs), and the `maintenance` job of
#: older deployments, whose runs may still be queued.
MAINTAINING_JOBS = ("__ASSET_JOB", MAINTENANCE_JOB)
#: Jobs partitioned by table (`jobs.TABLE_PARTITIONS`): a run maintains its partition's table.
TABLE_PARTITION_JOBS = ("row_tracking_backfill", "fsck_repair")
#: The run tag Dagster puts the partition key in.
PARTITION_NAME_TAG = "dagster/partition"


class FleetConfig(MaintenanceConfig):
    """Run config of `delta_tables__maintenance`: the per-table step's, and the tables."""

    tables: list[str] = Field(
        default_factory=list,
        description="Maintain only these tables of the run's partitions (empty: every one); "
        "the others record their selected components as skipped.",
    )


def fleet_event(event: Any, name: str) -> Any:
    """A per-table result or event (keyed `[name, component]`) as the same event of the
    partition `name` of `[delta_tables, component]`."""
    key = fleet_key(event.asset_key.path[-1])
    if isinstance(event, MaterializeResult):
        tags = dict(event.tags or {})
        if event.data_version is not None:
            tags[DATA_VERSION_TAG] = event.data_version.value
        return AssetMaterialization(asset_key=key, metadata=event.metadata, partition=name,
                                    tags=tags or None)
    if isinstance(event, (AssetCheckResult, AssetCheckEvaluation)):
        return AssetCheckEvaluation(
            asset_key=key, check_name=event.check_name, passed=event.passed,
            metadata=event.metadata, severity=event.severity, description=event.description,
            partition=name,
        )
    if isinstance(event, (AssetObservation, AssetMaterialization)):
        return type(event)(asset_key=key, metadata=event.metadata, partition=name,
                           tags=event.tags or None)
    raise TypeError(f"not an asset event: {type(event).__name__}")


def fleet_spec(component: str) -> AssetSpec:
    """The spec of `[delta_tables, component]`."""
    return AssetSpec(
        fleet_key(component),
        deps=[fleet_key(UPSTREAM[component])] if component in UPSTREAM else [],
        group_name=FLEET_PREFIX,
        description=DESCRIPTIONS[component] + " One partition per registered table.",
        kinds={"delta", "spark"} if component in ENGINE_COMPONENTS else {"delta"},
        tags={"delta_ops/component": component},
        partitions_def=TABLE_PARTITIONS,
        skippable=True,
    )


def fleet_check_specs() -> list[AssetCheckSpec]:
    """The three checks, partitioned by table (Dagster marks partitioned checks as a
    preview; its warning is not repeated at every load)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PreviewWarning)
        return [
            AssetCheckSpec(name, asset=fleet_key(on), description=description,
                           partitions_def=TABLE_PARTITIONS)
            for name, (on, description, _body) in CHECKS.items()
        ]


def fleet_failure(failed: dict[str, Failure]) -> Failure:
    """One Failure for the tables that failed in a run: the table's own when one failed."""
    if len(failed) == 1:
        (only,) = failed.values()
        return only
    return Failure(
        description=f"{len(failed)} tables failed: " + "; ".join(
            f.description or name for name, f in failed.items()),
        metadata={
            "failed_tables": MetadataValue.json(list(failed)),
            "failures": MetadataValue.json({
                name: {"description": f.description,
                       **{k: v.value for k, v in f.metadata.items()}}
                for name, f in failed.items()}),
        },
        allow_retries=False,
    )


def _fleet_body(
    context: AssetExecutionContext,
    config: FleetConfig,
    registry: RegistryResource,
    spark: SparkResource,
):
    selected = {k.path[1] for k in context.selected_asset_keys}
    checks = {k.name for k in context.selected_asset_check_keys}
    only = set(config.tables) or None
    failed: dict[str, Failure] = {}
    names = context.partition_keys
    if len(names) > 1:
        context.log.info(f"{len(names)} tables, {names[0]} to {names[-1]}"
                         + (f", {len(only)} of them maintained" if only else ""))
    claimed = claimed_elsewhere(context, names)
    for name in names:
        if only is not None and name not in only:
            yield from _skipped(selected, name, "not one of this run's tables (run config)")
            continue
        if name in claimed:
            # What a table's pool does in the per-table layout: one run at a time on it.
            reason = f"left to run {claimed[name]}, created before this one and not finished"
            context.log.info(f"{name}: {reason}")
            yield from _skipped(selected, name, reason)
            continue
        try:
            for event in maintain_table(context, config, registry, spark, name, selected,
                                        checks, record_refusals=True):
                yield fleet_event(event, name)
        except Failure as exc:
            failed[name] = exc
        except Exception as exc:  # noqa: BLE001 - one table's fault stays its own
            # A bug or an error no operation turned into a Failure: the other tables of
            # the range still run, as they would in their own steps of the per-table layout.
            context.log.exception(f"{name}: unexpected error")
            failed[name] = Failure(
                description=f"{name}: {type(exc).__name__}: {exc}",
                metadata={"table": name, "error": type(exc).__name__},
                allow_retries=False,
            )
    if failed:
        raise fleet_failure(failed)


def _skipped(selected: set[str], name: str, reason: str) -> Iterator[AssetMaterialization]:
    for component in COMPONENTS:
        if component in selected:
            yield AssetMaterialization(asset_key=fleet_key(component), partition=name,
                                       metadata={"skipped": True, "reason": reason})


def claimed_elsewhere(context: AssetExecutionContext, names: Sequence[str]) -> dict[str, str]:
    """Tables of `names` that a run created before this one, and still queued or running,
    maintains too (its partition, its range or its config's tables): table -> that run's
    id. Not a lock (two runs created in the same instant both go ahead, and the protocol
    keeps the table whole), but it keeps a manual run, a backfill and the watch's runs from
    doing one table's work twice, as the per-table layout's pools do."""
    instance = context.instance
    own = instance.get_run_record_by_id(context.run.run_id)
    if own is None:
        return {}
    wanted = set(names)
    partitions: list[str] | None = None
    claimed: dict[str, str] = {}
    for record in instance.get_run_records(
            filters=RunsFilter(statuses=list(IN_PROGRESS)), limit=1000):
        run = record.dagster_run
        if run.run_id == own.dagster_run.run_id or record.create_timestamp >= own.create_timestamp:
            continue
        if run.job_name in TABLE_PARTITION_JOBS:
            tables = [run.tags[PARTITION_NAME_TAG]] if PARTITION_NAME_TAG in run.tags else []
        elif run.job_name in MAINTAINING_JOBS and (
                PARTITION_NAME_TAG in run.tags or RANGE_START_TAG in run.tags) and (
                run.asset_selection is None
                or any(k.path[0] == FLEET_PREFIX for k in run.asset_selection)):
            if partitions is None:
                partitions = instance.get_dynamic_partitions(TABLE_PARTITIONS.name)
            tables = run_tables(run, partitions)
        else:
            continue
        for table in tables:
            if table in wanted:
                claimed.setdefault(table, run.run_id)
    return claimed


@functools.cache
def fleet_assets() -> AssetsDefinition:
    """`delta_tables__maintenance`: every component, partitioned by table, subsettable;
    a backfill of many tables runs as one run over their range."""
    return multi_asset(
        specs=[fleet_spec(c) for c in COMPONENTS],
        check_specs=fleet_check_specs(),
        name=FLEET_STEP,
        can_subset=True,
        partitions_def=TABLE_PARTITIONS,
        backfill_policy=BackfillPolicy.single_run(),
        description="Maintenance of the partitions' tables: for each, the selected "
        "components in order, then the selected checks.",
    )(_fleet_body)


# ---- the fleet's health, from the watch -----------------------------------------------------

#: Checks on the whole fleet, which the watch reports without a run (a partition's own check
#: result can be reported without a run only once: Dagster 1.13 stores such results under a
#: unique (check, run, partition) key with an empty run id). Name -> (the component whose
#: asset it checks, the row key of a table failing it, severity, description).
FLEET_HEALTH = {
    "logs_readable": (
        DELTA_LOG, "unreadable", AssetCheckSeverity.ERROR,
        "Every table exists, its log reads (_last_checkpoint, checkpoint parts, each "
        "commit's JSON) and its protocol lets maintenance run; the failure names each table "
        "and file. Reported by the delta_tables_watch sensor when it changes; a table's own "
        "log_readable check runs on its partition."),
    "checkpoints_fresh": (
        CHECKPOINT, "stale", AssetCheckSeverity.WARN,
        "Every table's commits since its last checkpoint are within its checkpoint interval; "
        "the warning names the tables. Reported by the delta_tables_watch sensor when it "
        "changes."),
}
#: Tables a fleet check's description names (its metadata lists every one).
HEALTH_NAMED = 10


def fleet_health_specs() -> list[AssetCheckSpec]:
    """The fleet's checks (not partitioned: one result for the fleet)."""
    return [AssetCheckSpec(name, asset=fleet_key(on), description=description)
            for name, (on, _row_key, _severity, description) in FLEET_HEALTH.items()]


def fleet_health(rows: Sequence[dict[str, Any]]) -> dict[str, tuple[str, AssetCheckEvaluation]]:
    """Each fleet check's result for the watch's `rows` (one per table), with a digest of
    what it says (the sensor reports it when the digest changes)."""
    out: dict[str, tuple[str, AssetCheckEvaluation]] = {}
    for name, (on, row_key, severity, _description) in FLEET_HEALTH.items():
        failing = {r["table"]: r[row_key] for r in rows if r.get(row_key)}
        if failing:
            named = list(failing.items())[:HEALTH_NAMED]
            description = f"{len(failing)} of {len(rows)} tables: " + "; ".join(
                text if text.startswith(table) else f"{table}: {text}" for table, text in named)
            if len(failing) > HEALTH_NAMED:
                description += f"; and {len(failing) - HEALTH_NAMED} more"
        else:
            description = f"all {len(rows)} tables"
        evaluation = AssetCheckEvaluation(
            asset_key=fleet_key(on), check_name=name, passed=not failing, severity=severity,
            description=description,
            metadata={"num_tables": len(rows), "num_failing": len(failing),
                      "failing": MetadataValue.json(failing)},
        )
        digest = hashlib.sha1(json.dumps(failing, sort_keys=True).encode()).hexdigest()[:16]
        out[name] = (digest, evaluation)
    return out


# ---- runs of several tables ------------------------------------------------------------------


@dataclass(frozen=True)
class FleetRun:
    """Tables one run maintains: a range of partitions, the due ones named."""

    tables: tuple[str, ...]
    first: str
    last: str
    components: tuple[str, ...]
    key: str


def run_groups(
    items: Sequence[Any], per_run: int, position: Callable[[Any], int] | None = None,
) -> list[list[Any]]:
    """Due tables (items with `own_run`) grouped into runs, in the order of their first
    table: a table with `own_run` alone; the others `per_run` at a time or, given their
    `position` among the partitions, in spans of at most `per_run` partitions."""
    groups: list[list[Any]] = []
    batch: list[Any] | None = None
    for item in items:
        if item.own_run:
            groups.append([item])
            continue
        if batch is None or (len(batch) >= per_run if position is None
                             else position(item) - position(batch[0]) >= per_run):
            batch = []
            groups.append(batch)
        batch.append(item)
    return groups


def fleet_runs(
    due: Iterable[Any], partitions: Sequence[str], per_run: int,
) -> list[FleetRun]:
    """Runs for `due` (items with `name`, `components`, `own_run` and `version`, in any
    order): a table with `own_run` alone, the others in ranges of at most `per_run`
    partitions, in the partitions' order. A table without a partition is left out."""
    index = {name: i for i, name in enumerate(partitions)}
    items = sorted((d for d in due if d.name in index), key=lambda d: index[d.name])
    groups = run_groups(items, per_run, lambda d: index[d.name])
    groups.sort(key=lambda g: index[g[0].name])
    runs = []
    for group in groups:
        work = "\n".join(f"{d.name}:{d.version}:{'+'.join(d.components)}" for d in group)
        runs.append(FleetRun(
            tables=tuple(d.name for d in group), first=group[0].name, last=group[-1].name,
            components=tuple(c for c in COMPONENTS if any(c in d.components for d in group)),
            key=hashlib.sha1(work.encode()).hexdigest()[:20],
        ))
    return runs


def fleet_request(run: FleetRun, prefix: str = "watch", tags: dict[str, str] | None = None
                  ) -> RunRequest:
    """The run request of `run`: its components over its range, the config naming its
    tables, no checks."""
    selection = [fleet_key(c) for c in run.components]
    all_tags = {TABLES_TAG: str(len(run.tables)), "delta_ops/components": ",".join(
        run.components), "delta_ops/first_table": run.first, **(tags or {})}
    if run.first == run.last:
        return RunRequest(run_key=f"{prefix}:{run.key}", asset_selection=selection,
                          asset_check_keys=[], partition_key=run.first, tags=all_tags)
    return RunRequest(
        run_key=f"{prefix}:{run.key}", asset_selection=selection, asset_check_keys=[],
        run_config={"ops": {FLEET_STEP: {"config": {"tables": list(run.tables)}}}},
        # A partition range is given by these tags (Dagster's single-run backfills set them).
        tags={**all_tags, RANGE_START_TAG: run.first, RANGE_END_TAG: run.last},
    )


def run_tables(run: Any, partitions: Sequence[str]) -> list[str]:
    """The tables a run of the layout maintains: its config's `tables`, else its partition
    or its range (resolved against `partitions`)."""
    config = (((run.run_config or {}).get("ops") or {}).get(FLEET_STEP) or {}).get("config")
    if isinstance(config, dict) and config.get("tables"):
        return [str(t) for t in config["tables"]]
    tags = run.tags
    if PARTITION_NAME_TAG in tags:
        return [tags[PARTITION_NAME_TAG]]
    first = tags.get(RANGE_START_TAG)
    last = tags.get(RANGE_END_TAG)
    if first in partitions and last in partitions:
        return list(partitions[partitions.index(first):partitions.index(last) + 1])
    return list(partitions)


# ---- crons -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _CronDue:
    name: str
    components: tuple[str, ...]
    own_run: bool
    version: str


def fleet_schedules(registry: Registry) -> list[ScheduleDefinition]:
    """One schedule per component with a cron and per cron the registry's policies give it
    (UTC, stopped by default): at each tick, runs of that component over the tables whose
    policy has that cron, in ranges as the watch makes them."""
    crons: dict[tuple[str, str], None] = {}
    for table in registry.tables:
        if table.problems:
            continue
        for component, section in CRON_SECTIONS.items():
            cron = getattr(table.policy, section).cron
            if cron is not None:
                crons[(component, cron)] = None
    return [_schedule(component, cron) for component, cron in crons]


def _schedule(component: str, cron: str) -> ScheduleDefinition:
    digest = hashlib.sha1(cron.encode()).hexdigest()[:8]
    section = CRON_SECTIONS[component]

    @schedule(
        name=f"delta_tables_{component}_{digest}",
        cron_schedule=cron,
        execution_timezone="UTC",
        target=[fleet_key(component)],
        default_status=DefaultScheduleStatus.STOPPED,
        description=f"{component} of the tables whose policy's {section}.cron is {cron!r} "
        "(UTC): runs over ranges of their partitions.",
    )
    def requests(context: ScheduleEvaluationContext, registry: RegistryResource
                 ) -> Iterator[RunRequest]:
        loaded = registry.load()
        partitions = context.instance.get_dynamic_partitions(TABLE_PARTITIONS.name)
        stamp = context.scheduled_execution_time.isoformat() if (
            context.scheduled_execution_time is not None) else "now"
        due = [_CronDue(t.name, (component,), bool(t.policy.automation.own_run), stamp)
               for t in loaded.tables
               if not t.problems and getattr(t.policy, section).cron == cron]
        per_run = loaded.defaults.automation.tables_per_run
        for run in fleet_runs(due, partitions, per_run):
            yield fleet_request(run, prefix=f"{component}:{stamp}",
                                tags={"delta_ops/cron": cron})

    return requests


__all__ = [
    "FLEET_PREFIX",
    "FLEET_STEP",
    "IN_PROGRESS",
    "MAINTAINING_JOBS",
    "PARTITION_NAME_TAG",
    "TABLE_PARTITION_JOBS",
    "TABLES_TAG",
    "FleetConfig",
    "FleetRun",
    "claimed_elsewhere",
    "fleet_assets",
    "fleet_event",
    "fleet_failure",
    "fleet_health",
    "fleet_health_specs",
    "fleet_key",
    "fleet_request",
    "fleet_runs",
    "fleet_schedules",
    "fleet_spec",
    "run_groups",
    "run_tables",
]
