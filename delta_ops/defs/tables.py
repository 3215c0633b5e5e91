"""The Dagster definitions of one registered table: one step, nine assets, three checks.

Each table `t` gets one subsettable multi-asset, the step `t__maintenance`, holding:

- `[t, delta_log]`: the log as an asset whose materialization only reads it (version,
  files, bytes, protocol, schema, row count; data version = table version), with the checks
  `log_readable` and `fsck`; the watch sensor records observations of it between
  runs;
- the eight maintenance components (`[t, checkpoint]`, `version_checksum`, `log_compaction`,
  `metadata_cleanup`, `vacuum`, `row_tracking`, and the data layout's `optimize` and
  `stats`: `delta_ops.defs.layout_assets`) and the check `checkpoint_fresh`.

A run runs the selected assets in the step: the log first, then the components in
`RUN_ORDER` (checksums first, then the order above), so a table's checkpoint and checksums
come from one process and one engine. OPTIMIZE and statistics (`HEAVY`: they read every data
file) are opt-in like the destructive components below, without `confirm_deletes`. A
component with nothing to do (not due, off, report only) records a materialization marked
`skipped: true` with its reason. VACUUM and metadata cleanup (`DESTRUCTIVE`) run only from
their cron automation, in a run selecting nothing else (but the log), with the run config's
`confirm_deletes`, or when the policy sets `in_materialize_all`; otherwise the step logs why
and leaves them (their outputs are optional). A component that fails is logged and the
others still run (metadata cleanup is not run after a checkpoint that failed); the step then
fails naming every failed component (one failure keeps its own
table/component/version/reason metadata). A table that does not exist yet fails the step
once, as its `delta_log` ("does not exist yet"), and its components do nothing (selected
without the log, they log it and do nothing). A table the run cannot resolve (invalid
registry entry, missing secret) fails the step once, naming the problem.

One step per table (instead of one per asset and check, or one for the log and one for the
rest) keeps loading 1,000 tables fast: a table is one op and one `AssetsDefinition`, and one
table's failure stays its own. The template op's outputs carry no metadata (`_bare_spec`),
so that each table's copy of them is small; the table's specs carry it.
VACUUM and metadata cleanup carry an `AutomationCondition` on their policy's cron (UTC),
evaluated by the `delta_tables_automation` sensor (`delta_ops.defs.schedules`). The
maintenance step's `pool` is its table's (`table_pool`: `delta_ops_table/<t>`): with the
instance's `concurrency: pools: default_limit: 1` (`INSTANCE_CONCURRENCY`), two runs do
not maintain one table at once (a manual run, *Materialize all*, the cron automation and the
watch alike: the later step waits for the slot), while different tables run in parallel.
Without that setting a pool has no limit and nothing but the watch's own in-flight check
keeps runs apart. The pool saves duplicate work and is not a lock: on a SQLite instance two
steps that claim the slot in the same instant can both get it (docs/dagster.md, "One table,
one run at a time"), and the protocol, not the pool, keeps the table whole then. Owners
and tags of the registry entry go on every asset.
"""


import functools

from dagster import (
    AssetExecutionContext,
    AssetsDefinition,
    AssetSpec,
    Failure,
    In,
    MaterializeResult,
    MetadataValue,
    OpDefinition,
    Out,
    multi_asset,
)

from delta_ops.defs.assets import (
    MaintenanceConfig,
    TableRun,
    observe_log,
    run_component,
    table_run,
)
from delta_ops.defs.checks import CHECKS, check_specs, run_check
from delta_ops.defs.keys import (
    CHECKPOINT,
    COMPONENTS,
    DELTA_LOG,
    LOG_COMPACTION,
    METADATA_CLEANUP,
    OPTIMIZE,
    ROW_TRACKING,
    STATS,
    VACUUM,
    VERSION_CHECKSUM,
    asset_key,
)
from delta_ops.defs.layout_assets import run_optimize, run_stats
from delta_ops.defs.policy import Policy
from delta_ops.defs.registry import RegisteredTable
from delta_ops.defs.resources import RegistryResource, SparkResource
from delta_ops.defs.translator import (
    CRON_SECTIONS,
    DESCRIPTIONS,
    DeltaOpsTranslator,
    component_spec,
    cron_condition,
    translated_spec,
)

#: The prefix of every table's pool (`table_pool`).
TABLE_POOL_PREFIX = "delta_ops_table/"
#: What an instance's dagster.yaml needs so that one table's steps never overlap across runs:
#: every pool without a limit of its own (each table's) gets a limit of 1. `make demo`, the
#: end-to-end tests and the benchmarks' `dagster dev` write it; docs/dagster.md explains it.
INSTANCE_CONCURRENCY = "concurrency:\n  pools:\n    default_limit: 1\n"

#: The order a maintenance step runs them in: version checksums before the checkpoint, so
#: that the new `.crc` files are derived from the previous one (a checkpoint written first
#: would start the log listing after it, and the checksum would be computed afresh at the
#: latest version, skipping the versions in between); metadata cleanup after the checkpoint;
#: OPTIMIZE and statistics last (their commits get their checkpoint and `.crc` from the next
#: run: a step reads the log once, at its start).
RUN_ORDER = (VERSION_CHECKSUM, CHECKPOINT, LOG_COMPACTION, METADATA_CLEANUP, VACUUM,
             ROW_TRACKING, OPTIMIZE, STATS)
def _table_of(context) -> str:
    """The table a step belongs to: its op is named `<table>__maintenance`."""
    return context.op_def.name.rsplit("__", 1)[0]


def _is_missing(failure: Failure) -> bool:
    error = failure.metadata.get("error")
    return error is not None and error.value == "NotATableError"


def _table_body(
    context: AssetExecutionContext,
    config: MaintenanceConfig,
    registry: RegistryResource,
    spark: SparkResource,
):
    yield from maintain_table(
        context, config, registry, spark, _table_of(context),
        {k.path[1] for k in context.selected_asset_keys},
        {k.name for k in context.selected_asset_check_keys},
    )


def maintain_table(
    context: AssetExecutionContext,
    config: MaintenanceConfig,
    registry: RegistryResource,
    spark: SparkResource,
    name: str,
    selected: set[str],
    checks: set[str],
    record_refusals: bool = False,
):
    """The work of one table's step: the `selected` components in `RUN_ORDER` (the log
    first), then the `checks`; results keyed `[name, component]`. Raises the table's one
    Failure at the end, after yielding what succeeded. `record_refusals`: an opt-in
    component this run leaves out is recorded as skipped, with why (the partitioned layout:
    there a failed run marks what it planned and did not record as failed, across tables)."""
    failed: dict[str, Failure] = {}
    run: TableRun | None = None
    try:
        # One run for the step, shared by its components and checks: the table, its
        # storage, the clock, the cheap log reads and the table's size are read once. A
        # table the run cannot resolve (invalid entry, missing secret) fails the step once,
        # naming why, instead of once per component.
        run = table_run(name, "maintenance", registry, spark)
    except Failure as exc:
        unresolved: Failure | None = exc
        selected = set()
    else:
        unresolved = None
    if DELTA_LOG in selected:
        try:
            yield observe_log(run)
        except Failure as exc:
            failed[DELTA_LOG] = exc
            if _is_missing(exc):
                # One clear "does not exist yet" (the log's), not one per component.
                selected = set()
    for component in RUN_ORDER:
        if component not in selected:
            continue
        if component == METADATA_CLEANUP and CHECKPOINT in failed:
            context.log.warning(f"{name}: metadata cleanup not run: the checkpoint failed")
            continue
        if component in OPT_IN:
            refused = destructive_refusal(context, config, component, run.table)
            if refused is not None:
                # Not materialized (its output is optional): the asset keeps showing when
                # it last really ran. A destructive one left out is a warning; a heavy
                # one (optimize, stats) left out of a broad run is the policy working.
                log = context.log.warning if component in DESTRUCTIVE else context.log.info
                log(f"{name} {component}: {refused}")
                if record_refusals:
                    yield MaterializeResult(asset_key=asset_key(name, component),
                                            metadata={"skipped": True, "reason": refused})
                continue
        try:
            if component in HEAVY:  # the data layout (`delta_ops.defs.layout_assets`)
                run.begin(component)
                out = run_optimize(run) if component == OPTIMIZE else run_stats(run)
            else:
                out = run_component(run, component, config, context.log.info)
        except Failure as exc:
            if _is_missing(exc):
                # The log's step reports it when selected; the components have nothing to do.
                context.log.warning(f"{exc.description}: nothing to maintain")
                break
            context.log.error(exc.description or f"{name} {component} failed")
            failed[component] = exc
            continue
        reason = (out.metadata or {}).get("reason")
        if (out.metadata or {}).get("skipped") is not None and reason is not None:
            context.log.info(f"{name} {component}: {getattr(reason, 'value', reason)}")
        yield out
    for check in CHECKS:
        if check in checks:
            yield run_check(check, name, registry, spark, run=run)
    if unresolved is not None:
        raise unresolved
    if failed:
        raise combined_failure(name, failed)


#: Components that delete files: left out of a run that selects other components too
#: (Materialize all) unless the policy or the run's config says otherwise.
DESTRUCTIVE = frozenset({VACUUM, METADATA_CLEANUP})
#: Components that rewrite or read every data file (the data layout): left out of a run that
#: selects other components too in the same way, without `confirm_deletes`.
HEAVY = frozenset({OPTIMIZE, STATS})
#: Components a run over many components leaves out unless told (`destructive_refusal`).
OPT_IN = DESTRUCTIVE | HEAVY
#: The tag Dagster puts on the runs its automation conditions request (the cron).
AUTOMATION_TAG = "dagster/from_automation_condition"


def destructive_refusal(
    context: AssetExecutionContext, config: MaintenanceConfig, component: str,
    table: RegisteredTable,
) -> str | None:
    """Why this run does not run the opt-in `component` (`OPT_IN`), or None when it does:
    from the cron automation, a run selecting only opt-in components (a deliberate pick; the
    log may be selected with them), `confirm_deletes` in the run config (for the destructive
    ones), or the policy's `in_materialize_all`."""
    if getattr(table.policy, CRON_SECTIONS[component]).in_materialize_all:
        return None
    if context.run.tags.get(AUTOMATION_TAG) == "true" or (
            config.confirm_deletes and component in DESTRUCTIVE):
        return None
    picked = context.run.asset_selection
    if picked is not None and picked and all(
        len(k.path) == 2 and k.path[1] in OPT_IN | {DELTA_LOG} for k in picked
    ):
        return None
    if component in DESTRUCTIVE:
        return (
            "not run: this run selects other components too (e.g. Materialize all), and "
            f"{component} deletes files; it runs from its cron automation, in a run "
            "selecting only it, with run config confirm_deletes: true, or with the policy's "
            f"{CRON_SECTIONS[component]}.in_materialize_all: true"
        )
    return (
        "not run: this run selects other components too (e.g. Materialize all), and "
        f"{component} reads every data file it may rewrite; it runs from its cron "
        "automation, in a run selecting only it, or with the policy's "
        f"{CRON_SECTIONS[component]}.in_materialize_all: true"
    )


_TEMPLATE = RegisteredTable(name="table", uri="", group="t", policy=Policy(),
                            storage_options={})


def table_pool(name: str) -> str:
    """The Dagster pool of table `name`'s maintenance step: one pool per table, so that a
    limit of 1 (the instance's `default_limit`) serializes that table's steps across runs."""
    return TABLE_POOL_PREFIX + name


def _bare_spec(table: RegisteredTable, component: str) -> AssetSpec:
    spec = component_spec(table, component)
    return AssetSpec(spec.key, deps=spec.deps, skippable=spec.skippable)


@functools.cache
def _template(pool: str | None) -> AssetsDefinition:
    """The step's op, built once (the decorator inspects the function, which is what costs
    at 1,000 tables); each table's step is this op renamed, with the table's specs."""
    return multi_asset(
        # Bare specs (key, lineage, skippable): the op's outputs carry no metadata, which
        # each table's op would copy; the table's AssetsDefinition gets the full specs.
        specs=[_bare_spec(_TEMPLATE, c) for c in COMPONENTS],
        check_specs=[s for c in COMPONENTS for s in check_specs(_TEMPLATE, c)],
        name=f"{_TEMPLATE.name}__maintenance", can_subset=True, pool=pool,
    )(_table_body)


def _from_template(
    template: AssetsDefinition, table: RegisteredTable, step: str, components: tuple[str, ...],
    translator: DeltaOpsTranslator, description: str | None = None,
) -> AssetsDefinition:
    specs = {c: translated_spec(translator, table, c) for c in components}
    checks = {s.name: s for c in components for s in check_specs(table, c)}
    return _assets_definition(template, table, step, specs, checks, description)


def _assets_definition(template, table, step, specs, checks, description) -> AssetsDefinition:
    return AssetsDefinition(
        keys_by_input_name={},
        keys_by_output_name={
            out: specs[key.path[1]].key for out, key in template.keys_by_output_name.items()
        },
        node_def=renamed_op(template.op, f"{table.name}__{step}", description,
                            table_pool(table.name) if template.op.pool else None),
        can_subset=True,
        specs=list(specs.values()),
        check_specs_by_output_name={
            out: checks[spec.name] for out, spec in template.check_specs_by_output_name.items()
        },
    )


def renamed_op(
    op: OpDefinition, name: str, description: str | None, pool: str | None = None
) -> OpDefinition:
    """`op` under another name (and in `pool`, when given), built by Dagster's public
    constructors: `op.with_replaced_properties(name=..., description=...)`, or an
    `OpDefinition` with the template's compute function, inputs, outputs and config when the
    pool changes too. The compute function is the template's, and its inputs and outputs
    are converted once per template (`_template_io`), not once per table. `name` is a valid
    Dagster name: table names are checked by the registry."""
    ins, outs = _template_io(op)
    if pool is None or pool == op.pool:
        return op.with_replaced_properties(name=name, ins=ins, outs=outs,
                                           description=description)
    return OpDefinition(
        name=name, compute_fn=op.compute_fn, ins=ins, outs=outs,
        config_schema=op.config_schema, description=description or op.description,
        tags=op.tags, required_resource_keys=op.required_resource_keys,
        retry_policy=op.retry_policy, pool=pool,  # the templates have no code version
    )


@functools.lru_cache(maxsize=8)
def _template_io(op: OpDefinition) -> tuple[dict[str, In], dict[str, Out]]:
    """The `ins` and `outs` that rebuild `op`'s inputs and outputs (shared, read only)."""
    return ({d.name: In.from_definition(d) for d in op.input_defs},
            {d.name: Out.from_definition(d) for d in op.output_defs})


def table_asset(
    table: RegisteredTable, translator: DeltaOpsTranslator | None = None
) -> AssetsDefinition:
    """`t__maintenance`: every component of `t` (the log and the six maintenance
    components) and their checks, in the table's own pool (`table_pool`)."""
    return _from_template(
        _template(table_pool(_TEMPLATE.name)), table, "maintenance",
        COMPONENTS, translator or DeltaOpsTranslator(),
        description=f"Maintenance of {table.name}: the selected components, in order, in one "
        "step.",
    )


def combined_failure(table: str, failed: dict[str, Failure]) -> Failure:
    """One Failure for the step: the component's own when one failed, else one naming each,
    with every failure's metadata under `failures`."""
    if len(failed) == 1:
        (only,) = failed.values()
        return only
    details = {
        c: {"description": f.description, **{k: v.value for k, v in f.metadata.items()}}
        for c, f in failed.items()
    }
    return Failure(
        description=f"{table}: {len(failed)} components failed: "
        + "; ".join(f"{c}: {(f.description or '').removeprefix(f'{table} {c}: ')}"
                    for c, f in failed.items()),
        metadata={
            "table": table,
            "failed_components": MetadataValue.json(list(failed)),
            "failures": MetadataValue.json(details),
        },
        allow_retries=False,
    )


def table_assets(
    table: RegisteredTable, translator: DeltaOpsTranslator | None = None
) -> list[AssetsDefinition]:
    """Every asset and check of one registered table (one step); `translator` describes
    the assets (default: `DeltaOpsTranslator`)."""
    return [table_asset(table, translator)]


__all__ = [
    "CHECKS",
    "CRON_SECTIONS",
    "DESCRIPTIONS",
    "HEAVY",
    "INSTANCE_CONCURRENCY",
    "OPT_IN",
    "RUN_ORDER",
    "TABLE_POOL_PREFIX",
    "combined_failure",
    "component_spec",
    "maintain_table",
    "cron_condition",
    "table_assets",
    "table_pool",
]
