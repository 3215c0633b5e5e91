"""How each asset of a registered table is described: its `AssetSpec`, and the extension
point to change it.

`component_spec` gives the spec `delta_ops` builds for `[table, component]`: key and lineage
(`delta_ops.defs.keys`), the table's group, description, owners and tags, the spec metadata
(`spec_metadata`: on `delta_log`, the table's `dagster/uri`, `dagster/table_name`, `uri`,
redacted storage options and engine rule; on the components that may run on Spark, the
engine rule), kinds
(`spark` where Spark may run the component) and, for VACUUM and metadata cleanup, the
`AutomationCondition` on the policy's cron.

`DeltaOpsTranslator` is what users subclass, as dagster-sling's `DagsterSlingTranslator`:
override `get_asset_spec(table, component)` (call `super()` and `replace_attributes` /
`merge_attributes` on its result) and hand an instance to the component (override
`DeltaMaintenanceComponent.translator`) or to `definitions_kwargs(translator=...)`. The key
and the lineage are the product's (the steps find their components by key), so a translated
spec must keep its key and dependencies; anything else (group, description, metadata, tags,
owners, kinds, automation) is the translator's to change.
"""

from __future__ import annotations

import functools
from typing import Any

from dagster import AssetSpec, AutomationCondition, MetadataValue

from delta_ops.defs.engines import ENGINE_COMPONENTS, describe_engine
from delta_ops.defs.keys import (
    CHECKPOINT,
    DELTA_LOG,
    LOG_COMPACTION,
    METADATA_CLEANUP,
    OPTIMIZE,
    ROW_TRACKING,
    STATS,
    UPSTREAM,
    VACUUM,
    VERSION_CHECKSUM,
    asset_key,
)
from delta_ops.defs.registry import RegisteredTable

#: Components whose policy section holds a cron (their AutomationCondition).
CRON_SECTIONS = {VACUUM: "vacuum", METADATA_CLEANUP: "cleanup", OPTIMIZE: "optimize",
                 STATS: "stats"}

DESCRIPTIONS = {
    DELTA_LOG: "The table's transaction log, observed: version, live files, bytes, protocol, "
    "schema and a file-size histogram. Its data version is the table version.",
    CHECKPOINT: "A checkpoint of the latest version once the checkpoint interval is reached "
    "(classic, or V2 when the table's delta.checkpointPolicy asks for it) and "
    "`_last_checkpoint`.",
    VERSION_CHECKSUM: "Version checksums (`N.crc`) up to the latest version, derived "
    "incrementally from the previous one.",
    LOG_COMPACTION: "Log compaction files (`x.y.compacted.json`) per the compaction policy "
    "(off unless the registry or the table sets an interval).",
    METADATA_CLEANUP: "Expired log files deleted (commits, checkpoints, checksums, "
    "compactions, sidecars) per the log retention.",
    VACUUM: "Unreferenced data files older than the retention deleted (VACUUM, with the "
    "protocol check).",
    ROW_TRACKING: "Row-tracking state: files lacking row IDs; the backfill assigns them and "
    "enables delta.enableRowTracking.",
    OPTIMIZE: "OPTIMIZE when due (small files or deletion vectors past the policy's shares, "
    "read from the newest .crc): small files bin-packed and files whose deletion vectors "
    "delete more than the ratio rewritten without them (dataChange=false).",
    STATS: "Statistics computed from the data for the live files that lack them, committed "
    "as dataChange=false re-adds.",
}


def spec_metadata(table: RegisteredTable, component: str = DELTA_LOG) -> dict[str, Any]:
    """The definition metadata of `[table, component]`. The table's own keys (`dagster/uri`,
    `dagster/table_name`, `uri`, the redacted storage options, the engine rule) are on its
    `delta_log`, the asset that is the table; a component that may run on Spark has the
    engine rule; the other components have none. (At 1,000 tables the table's keys on every
    component were 8 MB of the 36 MB a code server sends the UI, and Dagster reads each
    spec's `dagster/` keys in every asset graph it builds.)"""
    if component == DELTA_LOG:
        return {
            "dagster/uri": MetadataValue.path(table.uri),
            "dagster/table_name": table.name,
            "uri": table.uri,
            "storage_options": MetadataValue.json(table.redacted_storage_options()),
            "engine": describe_engine(table.policy),
        }
    if component in ENGINE_COMPONENTS:
        return {"engine": describe_engine(table.policy)}
    return {}


def cron_condition(table: RegisteredTable, component: str) -> AutomationCondition | None:
    """Once per tick of the policy's cron (UTC), unless a run of it is in progress."""
    section = CRON_SECTIONS.get(component)
    cron = getattr(table.policy, section).cron if section else None
    return _cron_condition(component, cron) if cron is not None else None


@functools.cache
def _cron_condition(component: str, cron: str) -> AutomationCondition:
    # One (immutable) condition per component and cron, shared by the tables that have it.
    return (
        AutomationCondition.cron_tick_passed(cron, "UTC") & ~AutomationCondition.in_progress()
    ).with_label(f"{component} on {cron} (UTC)")


def component_spec(
    table: RegisteredTable, component: str, metadata: dict[str, Any] | None = None
) -> AssetSpec:
    """The spec of `[table, component]`; `metadata`: its `spec_metadata`, when the caller
    has it already (a copy is taken)."""
    engine = table.policy.engine
    return AssetSpec(
        asset_key(table.name, component),
        deps=[asset_key(table.name, UPSTREAM[component])] if component in UPSTREAM else [],
        group_name=table.group,
        description=(table.description or DESCRIPTIONS[component])
        if component == DELTA_LOG else DESCRIPTIONS[component],
        metadata=dict(metadata) if metadata is not None else spec_metadata(table, component),
        kinds={"delta", "spark"}
        if engine == "spark" and component in ENGINE_COMPONENTS else {"delta"},
        tags={**table.tags, "delta_ops/component": component},
        owners=list(table.owners),
        automation_condition=cron_condition(table, component),
        skippable=component != DELTA_LOG,
    )


class DeltaOpsTranslator:
    """Turns a registered table and one of its components (`delta_ops.defs.keys.COMPONENTS`)
    into the component's `AssetSpec`. The default is `component_spec`; subclass it to change
    the specs of every table (see the module docstring)."""

    def get_asset_spec(self, table: RegisteredTable, component: str) -> AssetSpec:
        """The spec of `[table.name, component]`."""
        return component_spec(table, component)


def translated_spec(
    translator: DeltaOpsTranslator, table: RegisteredTable, component: str
) -> AssetSpec:
    """`translator`'s spec of `[table, component]`, checked to keep its key and lineage.

    Raises:
        ValueError: the translator changed the key or the dependencies.
    """
    spec = translator.get_asset_spec(table, component)
    key = asset_key(table.name, component)
    deps = {asset_key(table.name, UPSTREAM[component])} if component in UPSTREAM else set()
    if spec.key != key or {d.asset_key for d in spec.deps} != deps:
        raise ValueError(
            f"{type(translator).__name__}.get_asset_spec changed the key or the dependencies "
            f"of {key.to_user_string()}: delta_ops finds a table's components by key, so keep "
            "both (change the group, description, metadata, tags, owners, kinds or "
            "automation condition instead)"
        )
    return spec


__all__ = [
    "CRON_SECTIONS",
    "DESCRIPTIONS",
    "DeltaOpsTranslator",
    "component_spec",
    "cron_condition",
    "spec_metadata",
    "translated_spec",
]
