"""Jobs: `row_tracking_backfill` (partitioned by table, for the UI's backfill launcher).

There is no asset job over every table's assets: a run over all tables, or over a selection
(a table's group in the asset graph, the watch sensor's and the automation's
`asset_selection`), is a run of Dagster's implicit asset job, whose steps run in one process
(the definitions' `in_process_executor`) so that a run shares one Spark session between its
tables instead of starting a JVM per step; a failing step fails only its own table. (A
second job over the same 9,000 assets at 1,000 tables cost a second job graph at every load
and a second 4 MB job snapshot in every `dagster definitions validate`.)

`row_tracking_backfill` is partitioned by table name over the dynamic partitions
`delta_tables`, which the `delta_tables_partitions` sensor keeps equal to the registry. Its
run config (`batch_size`, `enable`) overrides the table's policy; progress is logged after
every commit and the result is recorded as a materialization of `[table, row_tracking]`.
A backfill that would add the rowTracking and domainMetadata writer features to a table's
protocol needs `confirm_protocol_upgrade: true`: after the upgrade, writers without those
features (delta-rs / the `deltalake` package, checked on 1.6.6) can no longer write the
table. The run names them in its log, or refuses before anything is committed. What the
upgrade adds and who loses access is `delta_ops.maintenance.row_tracking.
backfill_protocol_upgrade`, the same answer `delta-ops row-tracking backfill` asks about.

Protocol sections: "Row Tracking" (the backfill); the others through the assets.
"""



from dagster import (
    AssetMaterialization,
    Config,
    DynamicPartitionsDefinition,
    Failure,
    OpExecutionContext,
    in_process_executor,
    job,
    op,
)
from pydantic import Field

from delta_ops.defs.assets import (
    ROW_TRACKING,
    RowTrackingConfig,
    run_row_tracking,
    table_run,
)
from delta_ops.defs.failures import refusals, registered_partition
from delta_ops.defs.keys import table_key
from delta_ops.defs.resources import RegistryResource, SparkResource
from delta_ops.protocol.upgrade import plan_protocol_upgrade

#: Writers that lose write access when a table of the oldest writer version (2) gets row
#: tracking, as `delta_ops.protocol.upgrade.KNOWN_WRITERS` records them: named in
#: the job's and the config's descriptions.
_LOSING = "; ".join(
    w.describe() for w in plan_protocol_upgrade(
        {"minReaderVersion": 1, "minWriterVersion": 2}, ["rowTracking"]
    ).writers_losing_access
)

#: The name of the asset job over every table's assets that versions before issue 25's load
#: work defined. There is no such job now: a run over all tables is the implicit asset job
#: (the UI's *Materialize all*, `Definitions.resolve_implicit_global_asset_job_def()`); the
#: name is kept so that the watch still counts a queued run of an older deployment.
MAINTENANCE_JOB = "maintenance"
ROW_TRACKING_JOB = "row_tracking_backfill"
#: Dynamic partitions: one per registered table (kept in sync by a sensor).
TABLE_PARTITIONS = DynamicPartitionsDefinition(name="delta_tables")


class RowTrackingBackfillConfig(Config):
    """Run config of `row_tracking_backfill` (None: the table's registry policy)."""

    batch_size: int | None = Field(
        default=None, description="Most files per backfill commit (default: policy)."
    )
    enable: bool | None = Field(
        default=None,
        description="Set delta.enableRowTracking=true at the end (default: policy).",
    )
    confirm_protocol_upgrade: bool = Field(
        default=False,
        description="Required when the table's protocol lacks rowTracking/domainMetadata: "
        "the backfill adds them, after which " + _LOSING + " can no longer write the table.",
    )


@op(
    name="backfill_row_tracking",
    description="Backfill row IDs of the partition's table and enable row tracking.",
)
def backfill_row_tracking_op(
    context: OpExecutionContext,
    config: RowTrackingBackfillConfig,
    registry: RegistryResource,
    spark: SparkResource,
) -> None:
    loaded = registry.load()
    name = registered_partition(context.partition_key, loaded.names)
    run = table_run(name, ROW_TRACKING, registry, spark)
    from delta_ops.maintenance.row_tracking import backfill_protocol_upgrade

    with refusals(name, ROW_TRACKING):  # a table the backfill refuses: that Failure first
        upgrade = backfill_protocol_upgrade(run.storage)
    if upgrade.needed:
        missing = upgrade.features_added
        warning = f"{name}: the backfill {upgrade.describe()}"
        if not config.confirm_protocol_upgrade:
            raise Failure(
                description=f"{warning}. Nothing was committed; launch again with "
                "confirm_protocol_upgrade: true in the op's config to go ahead.",
                metadata={"table": name, "reason": "protocol upgrade not confirmed",
                          "features_added": ", ".join(missing)},
                allow_retries=False,
            )
        context.log.warning(warning + " (confirmed by confirm_protocol_upgrade)")
    context.log.info(
        f"{name}: row-tracking backfill of {run.table.uri} on the {run.policy.engine} engine"
    )
    metadata = run_row_tracking(
        run, RowTrackingConfig(backfill=True, batch_size=config.batch_size, enable=config.enable,
                               confirm_protocol_upgrade=config.confirm_protocol_upgrade),
        context.log.info,
    )
    context.log.info(
        f"{name}: done: {metadata.get('files_backfilled')} files backfilled, "
        f"row tracking enabled: {metadata.get('enabled')}"
    )
    key, partition = table_key(name, ROW_TRACKING, loaded.partitioned)
    context.log_event(AssetMaterialization(asset_key=key, metadata=metadata, partition=partition))


@job(
    name=ROW_TRACKING_JOB,
    partitions_def=TABLE_PARTITIONS,
    executor_def=in_process_executor,
    description="Row-tracking backfill, one partition per registered table: launch a "
    "backfill from the job's Partitions tab to select tables. On a table whose protocol lacks "
    "rowTracking/domainMetadata it upgrades the protocol, after which " + _LOSING + " can no "
    "longer write the table: set confirm_protocol_upgrade: true in the op's config to go ahead.",
    tags={"delta_ops/job": ROW_TRACKING_JOB},
)
def row_tracking_backfill_job() -> None:
    backfill_row_tracking_op()


__all__ = [
    "MAINTENANCE_JOB",
    "ROW_TRACKING_JOB",
    "TABLE_PARTITIONS",
    "RowTrackingBackfillConfig",
    "row_tracking_backfill_job",
]
