"""What the per-table assets do: observe the log, and run one maintenance component.

Each registered table `t` has the keys `[t, <component>]` (`delta_ops.defs.keys`: the
observed `delta_log`, then checkpoint -> metadata_cleanup, version_checksum, log_compaction,
vacuum and row_tracking); `delta_ops.defs.tables` builds the Dagster definitions that call
the functions here.

The functions are thin: resolve the table from the registry resource, call the operation in
`delta_ops.maintenance`, and turn its frozen Result into metadata with `result_metadata`
(`delta_ops.defs.metadata`: numbers stay numbers, so the UI plots them over time). A
component with nothing to do (not due, off, report only) returns a materialization marked
`skipped: true` with the reason, so its asset shows when it was last looked after. A
`DeltaOpsError` becomes a `dagster.Failure` carrying table, version, file and reason
(`delta_ops.defs.failures`). Whether a checkpoint is due is decided
by `delta_ops.maintenance.due`, as for the sensor and `delta-ops due`.

Protocol sections: those of each operation (see `delta_ops.maintenance.*`).
"""


import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from dagster import (
    Config,
    DataVersion,
    Failure,
    MaterializeResult,
    MetadataValue,
)
from pydantic import Field

from delta_ops.defs.engines import EngineChoice, choose_engine, needs_size
from delta_ops.defs.failures import as_failure, refusals
from delta_ops.defs.keys import (
    CHECKPOINT,
    COMPONENTS,
    DELTA_LOG,
    LOG_COMPACTION,
    METADATA_CLEANUP,
    ROW_TRACKING,
    UPSTREAM,
    VACUUM,
    VERSION_CHECKSUM,
    asset_key,
)
from delta_ops.defs.metadata import (
    column_schema,
    histogram_markdown,
    markdown_list,
    metadata_value,
    result_metadata,
    size_histogram,
)
from delta_ops.defs.policy import Policy
from delta_ops.defs.registry import RegisteredTable
from delta_ops.defs.resources import RegistryResource, SparkResource
from delta_ops.errors import ProtocolUpgradeNotConfirmedError
from delta_ops.log import LogState, TableSettings, inspect_log, read_settings
from delta_ops.maintenance.due import (
    checkpoint_interval,
    checkpoint_need,
    compaction_interval,
)
from delta_ops.protocol.crc import InvalidChecksumError
from delta_ops.storage import Storage

if TYPE_CHECKING:
    from delta_ops.engine.base import Engine

# The operations (`delta_ops.maintenance.*`, the snapshot) are imported in the functions that
# run them: they read Arrow, and loading the Dagster definitions, which name these functions,
# should not import pyarrow (a second and more at 1,000 tables, with everything else).

# ---- the runtime view of one table --------------------------------------------------------


@dataclass
class TableRun:
    """What the asset bodies of one step need, shared by the step's components and checks:
    the table (fresh from the registry when the step starts), its storage, the clock read
    once at the start, the cheap log state and table settings (read once, on first use:
    `inspect`), and the engine its policy names (its size read once; started lazily)."""

    table: RegisteredTable
    component: str
    spark: SparkResource
    now_ms: int
    #: The engine this run uses for the table, once `engine()` was asked for it.
    engine_choice: EngineChoice | None = None
    #: Whether the current component (`begin`) asked for the engine.
    engine_used: bool = False
    #: The cheap log state and table settings, once read (`log_state`, `settings`).
    _state: LogState | None = field(default=None, repr=False)
    _settings: TableSettings | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.table.name

    def begin(self, component: str) -> "TableRun":
        """Start `component` on this run (what it reads and the engine stay shared)."""
        self.component = component
        self.engine_used = False
        return self

    @property
    def policy(self) -> Policy:
        return self.table.policy

    @cached_property
    def storage(self) -> Storage:
        return self.table.storage()

    def log_state(self) -> LogState:
        """The cheap log state (one `_last_checkpoint` read, one listing), read once per
        run: what the step found when it started (a component's writes do not change it)."""
        if self._state is None:
            self._state = inspect_log(self.storage)
        return self._state

    def settings(self) -> TableSettings:
        """The protocol and table properties at `log_state().version`, read once per run."""
        if self._settings is None:
            self._settings = read_settings(self.storage, self.log_state())
        return self._settings

    def engine(self) -> "Engine":
        """The engine for this table: its policy's, by its size when the policy sets a
        threshold (`delta_ops.defs.engines`; one per run; Spark starts on first use).

        Raises:
            EngineError: Spark does not start (`dagster.Failure` through `refusals`).
            DeltaOpsError: the cheap reads of the table's size failed.
        """
        if self.engine_choice is None:
            from delta_ops.log import table_size

            size = table_size(self.storage, self.log_state()) if needs_size(
                self.policy) else None
            self.engine_choice = choose_engine(self.policy, size)
        self.engine_used = True
        return self.spark.engine(self.engine_choice.name)

    def engine_metadata(self) -> dict[str, str]:
        """`engine` and `engine_reason` of a component that may use the engine (`none` when
        it had nothing to compute), the same keys whether or not it did."""
        choice = self.engine_choice
        if choice is None or not self.engine_used:
            return {"engine": "none", "engine_reason": "nothing was computed on an engine"}
        return {"engine": choice.name, "engine_reason": choice.reason}

    def inspect(self, operation: str | None = None) -> tuple[LogState, TableSettings]:
        """The cheap log state and table settings of the run (`log_state`, `settings`:
        one `_last_checkpoint` read, one listing, the protocol/metaData light replay, once
        per run); with `operation`, refuse it (UnsupportedFeatureError) when the table's
        protocol forbids it."""
        state, settings = self.log_state(), self.settings()
        if operation is not None:
            settings.table_configuration.ensure_supported(operation)
        return state, settings


def table_run(
    name: str, component: str, registry: RegistryResource, spark: SparkResource
) -> TableRun:
    """The table `name` as the registry describes it now, for one step (its components and
    checks share it); the clock is read here, once."""
    with refusals(name, component):
        table = registry.table(name)
        table.resolved_storage_options()  # a missing secret fails now, naming the variable
    return TableRun(table, component, spark, int(time.time() * 1000))


def table_shape(snap: Any) -> dict[str, Any]:
    """`dagster/column_schema` from the Delta schema and `dagster/row_count` when every live
    file's stats give `numRecords` (`delta_ops.maintenance.row_count`)."""
    from delta_ops.maintenance.row_count import live_row_count

    out: dict[str, Any] = {}
    if snap.metadata.schema_string:
        out["dagster/column_schema"] = column_schema(json.loads(snap.metadata.schema_string))
    rows = live_row_count(snap)
    if rows is not None:
        out["dagster/row_count"] = rows
    return out


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.monotonic()
    out = fn()
    return out, time.monotonic() - start


def noop(
    run: TableRun, component: str, version: int | None, reason: str,
    data_version: str | None = None, **extra: Any,
) -> MaterializeResult:
    """What a component that had nothing to do reports: a materialization of its asset
    marked `skipped: true`, with the reason (so the asset shows when it was last looked
    after, not "Never materialized"); `data_version`: what its data is still at (a
    checkpoint's version), so nothing downstream looks changed."""
    return MaterializeResult(
        asset_key=asset_key(run.name, component),
        metadata=result_metadata(
            None, skipped=True, reason=reason,
            version=version if version is not None else MetadataValue.null(), **extra,
        ),
        data_version=DataVersion(data_version) if data_version is not None else None,
    )


def _cutoff(result: Any, now_ms: int | None = None) -> dict[str, Any]:
    """`cutoff_timestamp` as timestamp metadata: the Result's (ms since the epoch; metadata
    cleanup's `cutOffTimestamp`), else `now_ms` less the Result's `retention_hours` (what
    VACUUM deleted files older than); null when neither applies (cleanup disabled)."""
    ms = getattr(result, "cutoff_timestamp", None)
    hours = getattr(result, "retention_hours", None)
    if ms is None and now_ms is not None and hours is not None:
        ms = now_ms - hours * 3_600_000
    return {"cutoff_timestamp": MetadataValue.timestamp(ms / 1000) if ms is not None
            else MetadataValue.null()}


# ---- operations (one function per component, called by the asset bodies) -----------------


def observe_log(run: TableRun) -> MaterializeResult:
    """The table's current state: version, files, bytes, protocol, file-size histogram (a
    materialization of `[t, delta_log]` that only reads: its data version is the table
    version)."""
    from delta_ops.defs.table_health import last_operations, layout_health
    from delta_ops.log import load_snapshot

    with refusals(run.name, DELTA_LOG):
        snap, duration = _timed(lambda: load_snapshot(run.storage))
        unsupported = snap.unsupported_features("vacuum")
        metadata = {
            "dagster/uri": MetadataValue.path(snap.table),
            "dagster/table_name": run.name,
            **table_shape(snap),
            "uri": snap.table,
            "version": snap.version,
            "num_files": snap.num_files,
            "size_bytes": snap.size_bytes,
            "num_tombstones": snap.tombstones.num_rows,
            "checkpoint_version": metadata_value(snap.checkpoint_version),
            "commits_since_checkpoint": snap.version - (
                snap.checkpoint_version if snap.checkpoint_version is not None else -1
            ),
            "protocol": MetadataValue.json(
                {k: v for k, v in snap.protocol.items() if v is not None}
            ),
            "min_reader_version": snap.protocol.get("minReaderVersion"),
            "min_writer_version": snap.protocol.get("minWriterVersion"),
            "features": markdown_list(sorted(snap.reader_features | snap.writer_features)),
            "unsupported_features": MetadataValue.json(unsupported),
            "partition_columns": MetadataValue.json(list(snap.partition_columns)),
            "last_commit_timestamp": MetadataValue.timestamp(snap.timestamp / 1000),
            "file_size_histogram": size_histogram(snap.files.column("size")),
            **layout_health(snap, run.policy.optimize.small_file_bytes),
            **last_operations(run.storage),
            "storage_options": MetadataValue.json(run.table.redacted_storage_options()),
            "duration_s": MetadataValue.float(round(duration, 3)),
        }
    return MaterializeResult(
        asset_key=asset_key(run.name, DELTA_LOG),
        data_version=DataVersion(str(snap.version)),
        metadata=metadata,
    )


class CheckpointConfig(Config):
    """Run config of a checkpoint asset."""

    force: bool = Field(
        default=False,
        description="Checkpoint the latest version even when fewer commits than the "
        "checkpoint interval were made since the last checkpoint.",
    )


def run_checkpoint(run: TableRun, config: CheckpointConfig | None = None) -> MaterializeResult:
    """Checkpoint the latest version when it is due (`delta_ops.maintenance.due`) or forced.

    The log is read once, cheaply, to decide and to gate; only a checkpoint that is written
    reads the table in full (`write_checkpoint`). A latest version that already has the
    checkpoint the writer would write, named by `_last_checkpoint`, is reported as it is.
    """
    from delta_ops.maintenance.checkpoint.current import checkpoint_latest

    force = config.force if config is not None else False
    with refusals(run.name, CHECKPOINT):
        start_time = time.monotonic()
        state, settings = run.inspect("checkpoint")
        need = checkpoint_need(state, settings, run.policy.due_policy)
        report = {
            "commits_since_checkpoint": state.commits_since_checkpoint,
            "interval": checkpoint_interval(run.policy.checkpoint.interval, settings),
        }
        if not need.due and not force:
            return noop(run, CHECKPOINT, state.version, (
                f"not due: {need.reason} (config checkpoint: {{force: true}} checkpoints "
                "anyway)"), data_version=None if state.checkpoint_version is None
                else str(state.checkpoint_version),
                checkpoint_version=state.checkpoint_version, **report)
        result = checkpoint_latest(run.storage, state, settings, now_ms=run.now_ms,
                                   engine=run.engine)
        duration = time.monotonic() - start_time
    return MaterializeResult(
        asset_key=asset_key(run.name, CHECKPOINT),
        metadata=result_metadata(
            result, duration_s=duration, checkpoint_version=result.version, **report,
            **run.engine_metadata()),
        data_version=DataVersion(str(result.version)),
    )


def run_checksum(run: TableRun) -> MaterializeResult:
    """Write the missing `.crc` files from the newest existing one (or the latest version)
    up to the latest version, each derived incrementally from the previous one."""
    from delta_ops.maintenance.checksum import read_checksum
    from delta_ops.maintenance.checksum.missing import write_missing_checksums

    if not run.policy.checksum.enabled:
        return noop(run, VERSION_CHECKSUM, None, "checksums are off in this table's policy")
    with refusals(run.name, VERSION_CHECKSUM):
        start_time = time.monotonic()
        state, _settings = run.inspect("checksum")
        result = write_missing_checksums(run.storage, state, engine=run.engine())
        extra: dict[str, Any] = {"version": state.version, "num_written": len(result.written)}
        try:
            crc = read_checksum(run.storage, state.version)
        except InvalidChecksumError as exc:
            raise as_failure(exc, table=run.name, component=VERSION_CHECKSUM) from exc
        if crc is not None:
            extra["table_size_bytes"] = crc.table_size_bytes
            extra["num_files"] = crc.num_files
            if crc.num_deletion_vectors is not None:
                extra["num_deletion_vectors"] = crc.num_deletion_vectors
                extra["num_deleted_records"] = crc.num_deleted_records
            if crc.file_size_histogram is not None:
                h = crc.file_size_histogram
                extra["file_size_histogram"] = histogram_markdown(
                    h.sorted_bin_boundaries, h.file_counts, h.total_bytes
                )
        duration = time.monotonic() - start_time
    return MaterializeResult(
        asset_key=asset_key(run.name, VERSION_CHECKSUM),
        metadata=result_metadata(result, duration_s=duration, **extra,
                                 **run.engine_metadata()),
        data_version=DataVersion(str(state.version)),
    )


def run_compaction(run: TableRun) -> MaterializeResult:
    from delta_ops.maintenance.compaction import compact_by_policy

    with refusals(run.name, LOG_COMPACTION):
        start_time = time.monotonic()
        state, settings = run.inspect("compaction")
        interval = compaction_interval(settings, run.policy.compaction.interval)
        if interval is None:
            return noop(
                run, LOG_COMPACTION, state.version,
                "log compaction is off for this table (set compaction.interval in the "
                "registry, or delta.logCompactionInterval on the table)",
            )
        results = compact_by_policy(run.storage, interval=interval)
        duration = time.monotonic() - start_time
    key = asset_key(run.name, LOG_COMPACTION)
    return MaterializeResult(asset_key=key, metadata=result_metadata(
        None, duration_s=duration,
        version=state.version,
        interval=interval,
        num_written=sum(1 for r in results if not r.already_existed),
        num_already_existed=sum(1 for r in results if r.already_existed),
        num_actions=sum(r.num_actions for r in results),
        files=[r.file for r in results],
        ranges=[[r.start, r.end] for r in results],
    ))


def run_cleanup(run: TableRun) -> MaterializeResult:
    from delta_ops.maintenance.cleanup import cleanup_metadata

    policy = run.policy.cleanup
    with refusals(run.name, METADATA_CLEANUP):
        result, duration = _timed(lambda: cleanup_metadata(
            run.storage,
            retention=policy.retention_delta,
            force_retention=policy.force_retention,
            allow_catalog_managed=policy.allow_catalog_managed,
            ensure_checkpoint=policy.ensure_checkpoint,
            dry_run=False,
            now_ms=run.now_ms,
        ))
    return MaterializeResult(
        asset_key=asset_key(run.name, METADATA_CLEANUP),
        metadata=result_metadata(result, duration_s=duration, **_cutoff(result)),
    )


#: A VACUUM run logs its progress (listing, probes, deletes) at most this often per phase.
VACUUM_PROGRESS_EVERY_S = 15.0


def run_vacuum(run: TableRun, log: Callable[[str], None] | None = None) -> MaterializeResult:
    from delta_ops.engine.progress import LogProgress
    from delta_ops.maintenance.vacuum import vacuum

    policy = run.policy.vacuum
    progress = None if log is None else LogProgress(
        lambda line: log(f"{run.name}: {line}"), every_s=VACUUM_PROGRESS_EVERY_S
    )
    with refusals(run.name, VACUUM):
        result, duration = _timed(lambda: vacuum(
            run.storage,
            retention_hours=policy.retention_hours,
            force_retention=policy.force_retention,
            allow_catalog_managed=policy.allow_catalog_managed,
            lite=policy.lite,
            dry_run=policy.dry_run,
            now_ms=run.now_ms,
            engine=run.engine(),
            record_history=policy.record_history,
            progress=progress,
            keep_versions=tuple(policy.keep_versions),
        ))
    return MaterializeResult(asset_key=asset_key(run.name, VACUUM), metadata=result_metadata(
        result, duration_s=duration, bytes_reclaimed=0 if result.dry_run else result.size_bytes,
        **_cutoff(result, run.now_ms), **run.engine_metadata(),
    ))


class RowTrackingConfig(Config):
    """Run config of the row-tracking backfill (None: the table's registry policy)."""

    backfill: bool | None = Field(
        default=None,
        description="Backfill row IDs (the row_tracking_backfill job always does); when "
        "false, only report what is missing. Default: the registry's row_tracking.backfill.",
    )
    batch_size: int | None = Field(
        default=None, description="Most files per backfill commit (default: policy)."
    )
    enable: bool | None = Field(
        default=None,
        description="Set delta.enableRowTracking=true at the end (default: policy).",
    )
    confirm_protocol_upgrade: bool | None = Field(default=None, description=(
        "Let the backfill add the rowTracking and domainMetadata writer features the "
        "protocol lacks (writers without them, such as deltalake, then cannot write the "
        "table). Default: the registry's row_tracking.confirm_protocol_upgrade."))


def _given(value: Any, default: Any) -> Any:
    return default if value is None else value  # a run config's value, else the policy's


def run_row_tracking(
    run: TableRun, config: RowTrackingConfig, log: Callable[[str], None]
) -> dict[str, Any]:
    """Backfill row tracking (or, when the policy says no, report what is missing);
    returns materialization metadata. `log` receives one line per committed step."""
    from delta_ops.log import load_snapshot
    from delta_ops.maintenance.row_tracking import backfill_row_tracking, plan_backfill

    policy = run.policy.row_tracking
    do_backfill = _given(config.backfill, policy.backfill)
    batch_size = _given(config.batch_size, policy.batch_size)
    enable = _given(config.enable, policy.enable)
    if batch_size < 1:  # the run config's value (the policy's is checked when loaded)
        raise Failure(
            description=f"{run.name}: row_tracking batch_size must be at least 1, got "
            f"{batch_size} (run config); nothing was done",
            metadata={"table": run.name, "reason": "invalid run config: batch_size"},
            allow_retries=False,
        )
    with refusals(run.name, ROW_TRACKING):
        if not do_backfill:
            snap, duration = _timed(lambda: load_snapshot(run.storage))
            plan = plan_backfill(snap, batch_size=batch_size)
            unsupported = snap.unsupported_features("row_tracking_backfill")
            return result_metadata(
                None, duration_s=duration,
                backfilled=False,
                unsupported_features=MetadataValue.json(unsupported),
                version=plan.version,
                enabled=plan.already_enabled,
                files_missing_row_ids=plan.files_missing,
                reason="the row-tracking backfill is off in this table's policy "
                "(row_tracking.backfill); launch the row_tracking_backfill job for it",
            )

        def progress(p: Any) -> None:
            log(
                f"{run.name}: row tracking {p.step} committed version {p.version}: "
                f"{p.files_done}/{p.files_total} files backfilled in {p.batches} batch(es)"
            )

        confirmed = _given(config.confirm_protocol_upgrade, policy.confirm_protocol_upgrade)
        try:
            result, duration = _timed(lambda: backfill_row_tracking(
                run.storage, batch_size=batch_size, enable=enable, engine=run.engine(),
                progress=progress, confirm_protocol_upgrade=confirmed))
        except ProtocolUpgradeNotConfirmedError as exc:
            raise Failure(description=f"{run.name}: {exc.reason.split('. Nothing')[0]}. "
                          "Nothing was committed; set row_tracking.confirm_protocol_upgrade: "
                          "true in the table's policy (or the run config) to go ahead",
                          metadata={"table": run.name, "reason": "protocol upgrade not "
                                    "confirmed"}, allow_retries=False) from None
        # The keys the report-only observation has, read again after the backfill.
        after = load_snapshot(run.storage)
        left = plan_backfill(after, batch_size=batch_size)
    return result_metadata(
        result, duration_s=duration, backfilled=True, batch_size=batch_size,
        version=after.version, files_missing_row_ids=left.files_missing,
        unsupported_features=MetadataValue.json(after.unsupported_features(
            "row_tracking_backfill")),
        **run.engine_metadata())


# ---- what the asset bodies call per component -----------------------------------------------


class MaintenanceConfig(Config):
    """Run config of a table's maintenance step (`<table>__maintenance`)."""

    confirm_deletes: bool = Field(
        default=False,
        description="Run VACUUM and metadata cleanup even in a run that also selects other "
        "components (such as Materialize all); without it they run only from their cron "
        "automation, in a run selecting nothing else, or when the table's policy sets "
        "in_materialize_all.",
    )
    checkpoint: CheckpointConfig = Field(
        default_factory=CheckpointConfig, description="The checkpoint component."
    )
    row_tracking: RowTrackingConfig = Field(
        default_factory=RowTrackingConfig, description="The row_tracking component."
    )


def run_component(
    run: TableRun, component: str, config: MaintenanceConfig, log: Callable[[str], None]
) -> MaterializeResult:
    """One maintenance component of a table: a materialization, marked `skipped: true` with
    a `reason` when it had nothing to do (not due, off, report only).

    Raises:
        dagster.Failure: the operation was refused or failed.
    """
    run.begin(component)
    if component == CHECKPOINT:
        return run_checkpoint(run, config.checkpoint)
    if component == ROW_TRACKING:
        metadata = run_row_tracking(run, config.row_tracking, log)
        if metadata.get("backfilled") is False:
            return MaterializeResult(
                asset_key=asset_key(run.name, ROW_TRACKING),
                metadata={**metadata, "skipped": True},
            )
        return MaterializeResult(asset_key=asset_key(run.name, ROW_TRACKING), metadata=metadata)
    if component == VACUUM:
        return run_vacuum(run, log)
    return _BODIES[component](run)


_BODIES: dict[str, Callable[[TableRun], MaterializeResult]] = {
    VERSION_CHECKSUM: run_checksum,
    LOG_COMPACTION: run_compaction,
    METADATA_CLEANUP: run_cleanup,
    VACUUM: run_vacuum,
}


__all__ = [
    "COMPONENTS",
    "UPSTREAM",
    "CheckpointConfig",
    "MaintenanceConfig",
    "RowTrackingConfig",
    "TableRun",
    "as_failure",
    "asset_key",
    "histogram_markdown",
    "noop",
    "observe_log",
    "refusals",
    "result_metadata",
    "run_component",
    "run_row_tracking",
    "size_histogram",
    "table_run",
]
