"""The `fsck_repair` job: repair what the `fsck` check found, launched from the UI.

Partitioned by table name over the dynamic partitions `delta_tables` (as
`row_tracking_backfill`): launch it from the job's Partitions tab for the tables to repair.
It runs `delta_ops.maintenance.fsck.fsck(repair=True)` on the table's engine, the CLI's
`delta-ops fsck --repair`. Without `confirm: true` in the run config it is a dry run: it
logs the live files it would remove (data files that are missing, or whose deletion vector
is missing or corrupt) and the rows lost with them, and commits nothing. With it, the
repair commits an `FSCK` version removing exactly those files, each proven lost again by a
direct look first. The result is recorded as an observation of the table's `delta_log`
(files removed, rows lost, the version committed); errors the repair cannot fix (a broken
log, a `.crc` mismatch) fail the run, naming them.

Spec sections: "Add File and Remove File", "Deletion Vectors" (through the repair).
"""


from dagster import (
    AssetObservation,
    Config,
    Failure,
    MetadataValue,
    OpExecutionContext,
    in_process_executor,
    job,
    op,
)
from pydantic import Field

from delta_ops.defs.assets import DELTA_LOG, table_run
from delta_ops.defs.failures import refusals, registered_partition
from delta_ops.defs.jobs import TABLE_PARTITIONS
from delta_ops.defs.keys import table_key
from delta_ops.defs.metadata import markdown_list
from delta_ops.defs.resources import RegistryResource, SparkResource

FSCK_REPAIR_JOB = "fsck_repair"


class FsckRepairConfig(Config):
    """Run config of `fsck_repair`."""

    confirm: bool = Field(
        default=False,
        description="Commit the repair: remove from the table the live files proven lost "
        "(their rows are gone for every reader). Without it the run only lists them.",
    )
    verify_data: bool = Field(
        default=False,
        description="Also read every live file's Parquet footer (row counts against the "
        "statistics); slower.",
    )


@op(
    name="repair_table",
    description="fsck --repair of the partition's table (a dry run without confirm).",
)
def repair_table_op(
    context: OpExecutionContext,
    config: FsckRepairConfig,
    registry: RegistryResource,
    spark: SparkResource,
) -> None:
    from delta_ops.maintenance.fsck import fsck

    loaded = registry.load()
    name = registered_partition(context.partition_key, loaded.names)
    run = table_run(name, DELTA_LOG, registry, spark)
    with refusals(name, "fsck"):
        result = fsck(run.storage, repair=True, confirm=config.confirm,
                      verify_data=config.verify_data, engine=run.engine())
    repair = result.repair
    assert repair is not None  # asked for
    for problem in result.problems:
        context.log.info(f"{name}: {problem.line()}")
    removed = [e.path for e in repair.entries]
    rows = f"{repair.rows_lost}{'' if repair.rows_lost_known else '+'} rows"
    if repair.dry_run:
        context.log.warning(
            f"{name}: dry run: the repair would remove {len(removed)} live file(s) and "
            f"{rows}; launch again with confirm: true in the op's config to commit it")
    else:
        context.log.info(f"{name}: committed version {repair.version}: removed "
                         f"{len(removed)} live file(s), {rows} lost")
    key, partition = table_key(name, DELTA_LOG, loaded.partitioned)
    context.log_event(AssetObservation(
        asset_key=key, partition=partition,
        metadata={
            "fsck_repair": "dry run" if repair.dry_run else "committed",
            "repair_version": MetadataValue.int(repair.version) if repair.version is not None
            else MetadataValue.null(),
            "files_removed": 0 if repair.dry_run else len(removed),
            "files_to_remove": len(removed),
            "rows_lost": repair.rows_lost,
            "rows_lost_known": repair.rows_lost_known,
            "removed": markdown_list(removed),
            "num_errors": len(result.errors),
            "num_warnings": len(result.warnings),
        },
    ))
    left = result.unrepaired_errors if not repair.dry_run else ()
    if left:
        raise Failure(
            description=f"{name}: {len(left)} error(s) the repair cannot fix: "
            + "; ".join(p.line() for p in left[:5]),
            metadata={"table": name, "errors": MetadataValue.json([p.to_dict() for p in left])},
            allow_retries=False,
        )


@job(
    name=FSCK_REPAIR_JOB,
    partitions_def=TABLE_PARTITIONS,
    executor_def=in_process_executor,
    description="fsck --repair, one partition per registered table: launch it from the job's "
    "Partitions tab. A dry run unless the op's config sets confirm: true; then it removes "
    "the live files proven lost (their rows are gone for every reader).",
    tags={"delta_ops/job": FSCK_REPAIR_JOB},
)
def fsck_repair_job() -> None:
    repair_table_op()


__all__ = ["FSCK_REPAIR_JOB", "FsckRepairConfig", "fsck_repair_job", "repair_table_op"]
