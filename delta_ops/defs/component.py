"""`DeltaMaintenanceComponent`: the delta_ops code location as a Dagster Component, configured
in a `defs.yaml`.

```yaml
type: delta_ops.defs.component.DeltaMaintenanceComponent
attributes:
  registry_file: "{{ env('DELTA_OPS_REGISTRY', 'tables.yaml') }}"  # optional
  defaults: {engine: local, vacuum: {cron: "0 3 * * 0"}}   # over the registry file's defaults
  tables:                                                  # listed (same keys as the file)
    - {name: events, uri: s3://lake/events, checkpoint: {interval: 50}}
  discover:                                                # found under a prefix
    - prefix: s3://lake/warehouse
      include: ["sales/*"]
      exclude: ["*_tmp"]
      policies:
        - {match: "sales/big_*", engine: spark, vacuum: {retention: 14 days}}
  discovery_cache: .delta_ops/discovered_tables.json
  discovery_interval_seconds: 600                          # how often the sensor rescans
  asset_post_processors:                                   # Dagster's spec post-processors
    - {target: "*", attributes: {tags: {team: data}}}
```

Each table gets the assets, checks, schedules, sensors and jobs of `delta_ops.defs`
(`definitions_kwargs`): nine assets and three checks per table, or with `defaults:
{automation: {asset_layout: partitioned}}` nine assets and three checks in all, partitioned
by table (`delta_ops.defs.fleet`: for fleets of hundreds of tables and more). The fields
are typed (`delta_ops.defs.component_models`): `dg check defs` validates them and `dg list
component-tree`/`dg utils inspect-component` document them with the keys, types and
descriptions of the registry's models (`delta_ops.defs.policy`, `registry`, `sources`), whose
checks of the values then apply as in a registry file. Relative paths are resolved against
the project root. An unknown key or a value of the wrong type fails the load, as does an
invalid `defaults`, `spark` or `discover`; a table entry whose values are invalid (cron,
retention, name, URI, a name given twice) does not stop the component from loading: that
table's assets fail, naming the problem. Discovered tables
come from the discovery cache, which the `delta_tables_discovery` sensor refreshes: loading
the definitions never lists a prefix.

Extension points, as dagster-sling's component has them: `asset_post_processors` (above),
and a translator: subclass `delta_ops.defs.translator.DeltaOpsTranslator` (its
`get_asset_spec(table, component)`) and this component (its `translator` property returns
an instance of yours), then name your component's type in `defs.yaml`.

`dg scaffold defs delta_ops.defs.component.DeltaMaintenanceComponent <folder>` writes a
`defs.yaml` listing one table (`--json-params '{"name": ..., "uri": ...}'`).
"""

from __future__ import annotations

from collections.abc import Sequence

from dagster import (
    Component,
    ComponentLoadContext,
    Definitions,
    Model,
    Resolvable,
    Scaffolder,
    ScaffoldRequest,
    scaffold_with,
)
from dagster.components.component_scaffolding import scaffold_component
from dagster.components.resolved.core_models import AssetPostProcessor, post_process_defs
from pydantic import BaseModel, Field, ValidationError

from delta_ops.defs import definitions_kwargs
from delta_ops.defs.component_models import (
    DiscoverySpecModel,
    PolicyOverrideModel,
    SparkSettingsModel,
    TableEntryModel,
    given,
)
from delta_ops.defs.registry import entry_problems
from delta_ops.defs.sources import (
    DEFAULT_CACHE,
    DEFAULT_DISCOVERY_INTERVAL_S,
    RegistrySource,
)
from delta_ops.defs.translator import DeltaOpsTranslator
from delta_ops.errors import RegistryError


class ScaffoldParams(BaseModel):
    """`dg scaffold defs ... --json-params`: the first table to list."""

    name: str = "my_table"
    uri: str = "tables/my_table"


class DeltaMaintenanceScaffolder(Scaffolder[ScaffoldParams]):
    @classmethod
    def get_scaffold_params(cls) -> type[ScaffoldParams]:
        return ScaffoldParams

    def scaffold(self, request: ScaffoldRequest[ScaffoldParams]) -> None:
        params = request.params or ScaffoldParams()
        scaffold_component(
            request,
            {
                "defaults": {"engine": "local"},
                "tables": [{"name": params.name, "uri": params.uri}],
            },
        )


@scaffold_with(DeltaMaintenanceScaffolder)
class DeltaMaintenanceComponent(Component, Model, Resolvable):
    """Maintains Delta tables (checkpoints, version checksums, log compaction, metadata
    cleanup, VACUUM, row tracking): tables from a registry file, listed here, or discovered
    under a prefix."""

    registry_file: str | None = Field(
        default=None,
        description="A delta_ops registry YAML file (relative to the project root); its "
        "defaults, spark section and tables are used first.",
    )
    defaults: PolicyOverrideModel | None = Field(  # type: ignore[valid-type]
        default=None,
        description="Policy overrides over the registry file's defaults (engine, checkpoint, "
        "checksum, compaction, vacuum, cleanup, row_tracking, automation).",
    )
    spark: SparkSettingsModel | None = Field(  # type: ignore[valid-type]
        default=None,
        description="Where the spark engine runs: master or remote (sc://), conf, app_name "
        "(instead of the registry file's section).",
    )
    tables: list[TableEntryModel] = Field(  # type: ignore[valid-type]
        default_factory=list,
        description="Tables listed here: name, uri, group, description, storage_options, "
        "owners, tags and policy sections, as in the registry file. Keys and types are "
        "checked when the component loads; each entry's values are validated on its own "
        "(an invalid one fails only that table's assets).",
    )
    discover: list[DiscoverySpecModel] = Field(  # type: ignore[valid-type]
        default_factory=list,
        description="Prefixes scanned for Delta tables (by the delta_tables_discovery sensor): "
        "prefix, include, exclude, max_depth, name_prefix, group, storage_options, owners, "
        "tags, policies (match + policy sections, group, owners, tags).",
    )
    discovery_cache: str = Field(
        default=DEFAULT_CACHE,
        description="The discovery cache file (relative to the project root).",
    )
    discovery_interval_seconds: int = Field(
        default=DEFAULT_DISCOVERY_INTERVAL_S,
        ge=1,
        description="Seconds between two scans of the discovery prefixes by the "
        "delta_tables_discovery sensor.",
    )
    asset_post_processors: Sequence[AssetPostProcessor] | None = Field(
        default=None,
        description="Changes to the specs of the assets built (target: an asset selection, "
        "'*' by default; operation: merge or replace; attributes: group_name, tags, "
        "metadata, owners, kinds, automation_condition...), applied in order. Keep keys and "
        "dependencies: the steps find a table's components by key.",
    )

    def source(self, context: ComponentLoadContext) -> RegistrySource:
        """The table sources, relative paths resolved against the project root.

        Raises:
            RegistryError: an attribute is invalid (one line each).
        """
        try:
            return RegistrySource(
                base_dir=str(context.project_root),
                origin=str(context.path / "defs.yaml"),
                registry_file=self.registry_file or None,
                defaults=given(self.defaults),
                spark=given(self.spark),
                tables=[given(t) for t in self.tables],
                discover=[given(d) for d in self.discover],
                discovery_cache=self.discovery_cache,
                discovery_interval_seconds=self.discovery_interval_seconds,
            )
        except ValidationError as exc:
            raise RegistryError(
                entry_problems(exc, "attributes"), file=str(context.path / "defs.yaml")
            ) from None

    @property
    def translator(self) -> DeltaOpsTranslator:
        """Describes each table's assets: subclass `DeltaOpsTranslator` and the component,
        and return your translator here."""
        return DeltaOpsTranslator()

    def build_defs(self, context: ComponentLoadContext) -> Definitions:
        defs = Definitions(**definitions_kwargs(
            source=self.source(context), translator=self.translator))
        return post_process_defs(defs, list(self.asset_post_processors or []))


__all__ = ["DeltaMaintenanceComponent", "DeltaMaintenanceScaffolder", "ScaffoldParams"]
