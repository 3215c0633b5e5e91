"""The fleet's own checks in the partitioned layout: `logs_readable` on
`delta_tables/delta_log` and `checkpoints_fresh` on `delta_tables/checkpoint`.

The watch sensor reports them without a run whenever what they say changes
(`delta_ops.defs.fleet.fleet_health`, from the rows of its tick). Run from the UI, they do
the same cheap look at every table (`delta_ops.defs.watch.watch_tick`: no replay, no Spark)
and report the same result. A table's own checks (`log_readable`, `fsck`,
`checkpoint_fresh`) stay partitioned and run in its partition's runs.
"""

from collections.abc import Iterator

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckKey,
    AssetCheckResult,
    AssetChecksDefinition,
    multi_asset_check,
)

from delta_ops.defs.fleet import fleet_health, fleet_health_specs
from delta_ops.defs.jobs import TABLE_PARTITIONS
from delta_ops.defs.resources import RegistryResource
from delta_ops.defs.watch import watch_tick

#: The op of the fleet's checks.
FLEET_HEALTH_STEP = "delta_tables__health"


def _health(context: AssetCheckExecutionContext, registry: RegistryResource
            ) -> Iterator[AssetCheckResult]:
    partitions = context.instance.get_dynamic_partitions(TABLE_PARTITIONS.name)
    tick = watch_tick(registry.load(), None, lambda _line: None, partitions=partitions)
    selected = context.selected_asset_check_keys
    for name, (_digest, evaluation) in fleet_health(tick.rows).items():
        if AssetCheckKey(evaluation.asset_key, name) not in selected:
            continue
        yield AssetCheckResult(
            asset_key=evaluation.asset_key, check_name=name, passed=evaluation.passed,
            severity=evaluation.severity, description=evaluation.description,
            metadata=evaluation.metadata,
        )


def fleet_health_checks() -> AssetChecksDefinition:
    """The fleet's checks, runnable from the UI (the watch reports them between runs)."""
    return multi_asset_check(
        specs=fleet_health_specs(), can_subset=True, name=FLEET_HEALTH_STEP,
        description="A cheap look at every table's log (the watch sensor's): is every log "
        "readable, is every checkpoint within its interval.",
    )(_health)


__all__ = ["FLEET_HEALTH_STEP", "fleet_health_checks"]
