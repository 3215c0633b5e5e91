"""The Dagster layer: per-table assets and checks (or, in the partitioned layout, nine assets
partitioned by table: `fleet`), sensors, automation and jobs built from the table registry.
`delta_ops.definitions` is the code location entry point.

Modules: `registry` (the YAML file, validated; no dagster) with `policy` (its maintenance
policies) and `secrets` (environment references, redaction); `component` (the typed
`DeltaMaintenanceComponent`, its field models in `component_models`); `resources` (registry
and Spark); `keys` (asset keys and lineage), `translator` (each asset's spec, and the
`DeltaOpsTranslator` users subclass), `assets` (what each component does, + `metadata`:
Results as Dagster metadata, `failures`: errors as `dagster.Failure`), `checks`, `tables`
(one step per table holding its assets and checks, each table's in its own pool), `fleet`
(the partitioned layout: one step over the partitions of a run, its run ranges and cron
schedules) with `fleet_health` (the fleet's checks), `engines` (engine per table),
`sensors` (with `watch`: the watch sensor, `watch_cursor`, and `observations`: what it
records of a log), `schedules` (the cron automation), `jobs`, `fsck_job` (the
`fsck_repair` job), `layout_assets` (optimize, stats), `table_health` (the layout and
history `delta_log` shows), `overview` (the fleet overview the watch sensor reports). What a
table needs now is decided in `delta_ops.maintenance.due` from the cheap log reads of
`delta_ops.log.segment.log_state`, as the CLI's `delta-ops due` does. Loading the definitions reads
only the registry file: no table is opened, neither pyarrow nor pyspark imported, no JVM
started. It does choose Arrow's memory pool for the process before pyarrow loads (jemalloc,
unless `ARROW_DEFAULT_MEMORY_POOL` names one: `delta_ops.engine.arrow_memory`), so the
runs' rewrites and streamed reads hand freed memory back.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

try:  # the Dagster layer's own dependencies: the `dagster` extra
    import dagster  # noqa: F401
    import pydantic  # noqa: F401
    import yaml  # noqa: F401
except ImportError as exc:
    raise ImportError(
        f"delta_ops.defs (the Dagster layer) needs {exc.name}: pip install 'delta_ops[dagster]'"
    ) from exc
from dagster import in_process_executor

from delta_ops.defs.fleet import fleet_assets, fleet_schedules
from delta_ops.defs.fleet_health import fleet_health_checks
from delta_ops.defs.fsck_job import fsck_repair_job
from delta_ops.defs.jobs import row_tracking_backfill_job
from delta_ops.defs.overview import overview_spec
from delta_ops.defs.registry import Registry, default_registry_path, load_registry
from delta_ops.defs.resources import (
    RegistryResource,
    SparkResource,
    register_component_source,
)
from delta_ops.defs.schedules import automation_sensor
from delta_ops.defs.sensors import discovery_sensor, partitions_sensor, watch_sensor
from delta_ops.defs.sources import RegistrySource, assemble_registry
from delta_ops.defs.tables import table_assets
from delta_ops.defs.translator import DeltaOpsTranslator
from delta_ops.engine.arrow_memory import prefer_returning_pool_at_start

#: Tables above which loading the per-table layout logs the advice to partition (Dagster's own
#: load time for nine assets and three checks a table grows by about 4 ms a table on a 2-core
#: machine: docs/dagster.md, "At scale").
PER_TABLE_ADVICE = 250


def definitions_kwargs(
    registry: Registry | str | os.PathLike[str] | None = None,
    *,
    spark: SparkResource | None = None,
    source: RegistrySource | None = None,
    translator: DeltaOpsTranslator | None = None,
) -> dict[str, Any]:
    """Keyword arguments for `dagster.Definitions`: everything the registry defines.

    Args:
        registry: a loaded Registry, or the path of a registry file (default:
            `$DELTA_OPS_REGISTRY`, else `tables.yaml` beside `workspace.yaml`).
        spark: the Spark resource (default: the registry's `spark` section, else embedded
            local Spark; the session starts lazily inside a run).
        source: instead of `registry`, the table sources of a `DeltaMaintenanceComponent`
            (registry file, listed tables, discovery); an invalid entry then fails only its
            own table's assets, and a discovery sensor refreshes the discovery cache.
        translator: describes each table's assets (default: `DeltaOpsTranslator`); not
            used by the partitioned layout (`automation.asset_layout: partitioned` in the
            registry's defaults: `delta_ops.defs.fleet`), whose nine assets are the fleet's.

    Raises:
        RegistryError: the registry file is missing or invalid.
    """
    # The code server and every run worker build the definitions before any step imports
    # pyarrow, and the run workers a code server starts inherit its environment.
    prefer_returning_pool_at_start()
    if source is not None:
        registry = assemble_registry(source)
        registry_resource = RegistryResource(component=register_component_source(source))
    else:
        if not isinstance(registry, Registry):
            registry = load_registry(
                registry if registry is not None else default_registry_path()
            )
        registry_resource = RegistryResource(path=str(Path(registry.path).resolve()))
    partitioned = registry.partitioned
    sensors = [
        watch_sensor(None if partitioned else registry.names),
        partitions_sensor(registry, row_tracking_backfill_job),
    ]
    if not partitioned:
        sensors.append(automation_sensor())
    if source is not None and source.discover:
        sensors.append(discovery_sensor(source, partitioned))
    if partitioned:
        # Nine assets and three checks in all, whatever the fleet's size (`defs.fleet`).
        assets = [overview_spec(), fleet_assets()]
    else:
        if len(registry.tables) > PER_TABLE_ADVICE:
            logging.getLogger("delta_ops").warning(
                "%d tables in the per_table asset layout: nine assets and three checks each, "
                "which Dagster loads and validates in time growing with the fleet; for a "
                "fleet this size set automation.asset_layout: partitioned in the defaults "
                "(docs/dagster.md, 'Two layouts')", len(registry.tables))
        translator = translator or DeltaOpsTranslator()
        assets = [overview_spec(),
                  *(a for t in registry.tables for a in table_assets(t, translator))]
    return {
        "assets": assets,
        # The partitioned layout's fleet checks (`defs.fleet_health`).
        "asset_checks": [fleet_health_checks()] if partitioned else [],
        "schedules": fleet_schedules(registry) if partitioned else [],
        # No job over every table's assets: a run over all tables (or a selection of them)
        # is a run of the implicit asset job (`delta_ops.defs.jobs`).
        "jobs": [row_tracking_backfill_job, fsck_repair_job],
        "sensors": sensors,
        # Runs of the implicit asset job (the UI's, the watch's, the automation's) share
        # one process and one Spark session.
        "executor": in_process_executor,
        "resources": {
            "registry": registry_resource,
            "spark": spark or SparkResource.from_settings(registry.spark),
        },
    }


def build_definitions(
    registry: Registry | str | os.PathLike[str] | None = None,
    *,
    spark: SparkResource | None = None,
):
    """`dagster.Definitions` for a registry (tests and embedding)."""
    from dagster import Definitions

    return Definitions(**definitions_kwargs(registry, spark=spark))


__all__ = ["DeltaOpsTranslator", "build_definitions", "definitions_kwargs"]
