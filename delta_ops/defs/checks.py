"""Asset checks per registered table.

- `protocol_supported` on `[t, delta_log]`: every maintenance operation may run on the
  table's protocol (spec "Protocol Evolution", "Table Features"; the `ensure_supported` gate).
- `checksum_matches` on `[t, version_checksum]`: the newest `.crc` agrees with the state
  recomputed from the log (spec "Version Checksum File").
- `checkpoint_fresh` on `[t, checkpoint]`: commits since the last checkpoint are within the
  checkpoint interval (spec "Checkpoints", `delta.checkpointInterval`), found cheaply as the
  sensor does (`delta_ops.log.state`, `delta_ops.maintenance.due`).

A table that does not exist yet fails its checks with a warning rather than an error; a table
a run cannot resolve (invalid registry entry, missing secret) fails them naming why. A check
always returns a result.
"""


from collections.abc import Callable

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    Failure,
    MetadataValue,
    asset_check,
)

from delta_ops.defs.assets import (
    CHECKPOINT,
    DELTA_LOG,
    VERSION_CHECKSUM,
    TableRun,
    asset_key,
    table_run,
)
from delta_ops.defs.registry import RegisteredTable
from delta_ops.defs.resources import RegistryResource, SparkResource
from delta_ops.errors import DeltaOpsError, NotATableError
from delta_ops.log.state import inspect_log, read_settings
from delta_ops.maintenance.checksum import checksum_versions, verify_checksum
from delta_ops.maintenance.due import checkpoint_interval
from delta_ops.protocol import features

#: Operations `protocol_supported` checks (everything delta_ops does to a table).
MAINTENANCE_OPERATIONS = (
    "checkpoint", "cleanup", "vacuum", "checksum", "compaction", "row_tracking_backfill",
)


def _unavailable(run: TableRun, exc: DeltaOpsError) -> AssetCheckResult:
    """A check that could not look at the table (missing table: warning; broken: error)."""
    missing = isinstance(exc, NotATableError)
    return AssetCheckResult(
        passed=False,
        severity=AssetCheckSeverity.WARN if missing else AssetCheckSeverity.ERROR,
        description=(
            f"{run.name} does not exist yet at {run.table.uri}" if missing else str(exc)
        ),
        metadata={"reason": exc.reason, "error": type(exc).__name__},
    )


def protocol_supported_result(run: TableRun) -> AssetCheckResult:
    try:
        state = inspect_log(run.storage)
        settings = read_settings(run.storage, state)
    except DeltaOpsError as exc:
        return _unavailable(run, exc)
    protocol = settings.protocol
    blocked: dict[str, list[str]] = {}
    for op in MAINTENANCE_OPERATIONS:
        try:
            features.ensure_supported(protocol, op, table=run.name, version=state.version)
        except DeltaOpsError as exc:
            blocked[op] = list(getattr(exc, "features", None) or [exc.reason])
    names = sorted({f for fs in blocked.values() for f in fs})
    return AssetCheckResult(
        passed=not blocked,
        severity=AssetCheckSeverity.ERROR,
        description=(
            "delta_ops can run every maintenance operation on this table" if not blocked
            else f"unsupported table features block {', '.join(sorted(blocked))}: "
            f"{', '.join(names)}"
        ),
        metadata={
            "version": state.version,
            "min_reader_version": protocol.get("minReaderVersion"),
            "min_writer_version": protocol.get("minWriterVersion"),
            "reader_features": MetadataValue.json(sorted(features.reader_features(protocol))),
            "writer_features": MetadataValue.json(sorted(features.writer_features(protocol))),
            "blocked_operations": MetadataValue.json(blocked),
        },
    )


def checksum_matches_result(run: TableRun) -> AssetCheckResult:
    try:
        state = inspect_log(run.storage)
        newest = state.newest_checksum
        if newest is None:
            # Not among the files listed from the checkpoint on: look at the whole log.
            newest = max(checksum_versions(run.storage), default=None)
        if newest is None:
            off = not run.policy.checksum.enabled
            return AssetCheckResult(
                passed=off,
                severity=AssetCheckSeverity.WARN,
                description=(
                    "checksums are off for this table; nothing to verify" if off
                    else "the table has no version checksum (.crc) yet"
                ),
                metadata={"version": state.version},
            )
        result = verify_checksum(run.storage, version=newest, engine=run.engine())
    except DeltaOpsError as exc:
        return _unavailable(run, exc)
    fields = sorted({m.field for m in result.mismatches})
    return AssetCheckResult(
        passed=result.ok,
        severity=AssetCheckSeverity.ERROR,
        description=(
            f"{newest}.crc matches the table state" if result.ok
            else f"{newest}.crc does not match the table state in {', '.join(fields)}"
        ),
        metadata={
            "checksum_version": newest,
            "latest_version": state.version,
            "mismatched_fields": MetadataValue.json(fields),
            "mismatches": MetadataValue.json([m.to_dict() for m in result.mismatches][:20]),
        },
    )


def checkpoint_fresh_result(run: TableRun) -> AssetCheckResult:
    try:
        state = inspect_log(run.storage)
        settings = read_settings(run.storage, state)
    except DeltaOpsError as exc:
        return _unavailable(run, exc)
    interval = checkpoint_interval(run.policy.checkpoint.interval, settings)
    since = state.commits_since_checkpoint
    fresh = since <= interval
    return AssetCheckResult(
        passed=fresh,
        severity=AssetCheckSeverity.WARN,
        description=(
            f"{since} commits since the last checkpoint, within the interval of {interval}"
            if fresh else
            f"{since} commits since the last checkpoint, more than the interval of {interval}"
        ),
        metadata={
            "version": state.version,
            "checkpoint_version": (
                state.checkpoint_version if state.checkpoint_version is not None
                else MetadataValue.null()
            ),
            "commits_since_checkpoint": since,
            "interval": interval,
        },
    )


def check_result(
    name: str, component: str, registry: RegistryResource, spark: SparkResource,
    body: Callable[[TableRun], AssetCheckResult],
) -> AssetCheckResult:
    """A check's result, always: a table the run cannot even resolve (invalid registry entry,
    missing secret) gives a failed result naming why, not an errored check."""
    try:
        run = table_run(name, component, registry, spark)
    except Failure as exc:
        return AssetCheckResult(
            passed=False,
            severity=AssetCheckSeverity.ERROR,
            description=exc.description,
            metadata={"reason": exc.description or "", "error": "Failure"},
        )
    return body(run)


def table_checks(table: RegisteredTable) -> list[AssetChecksDefinition]:
    """The three checks of one registered table."""
    name = table.name

    @asset_check(
        asset=asset_key(name, DELTA_LOG),
        name="protocol_supported",
        description="Every maintenance operation may run on the table's protocol.",
    )
    def protocol_supported(
        context: AssetCheckExecutionContext, registry: RegistryResource, spark: SparkResource
    ) -> AssetCheckResult:
        return check_result(name, DELTA_LOG, registry, spark, protocol_supported_result)

    @asset_check(
        asset=asset_key(name, VERSION_CHECKSUM),
        name="checksum_matches",
        description="The newest version checksum (.crc) matches the recomputed table state.",
    )
    def checksum_matches(
        context: AssetCheckExecutionContext, registry: RegistryResource, spark: SparkResource
    ) -> AssetCheckResult:
        return check_result(name, VERSION_CHECKSUM, registry, spark, checksum_matches_result)

    @asset_check(
        asset=asset_key(name, CHECKPOINT),
        name="checkpoint_fresh",
        description="Commits since the last checkpoint are within the checkpoint interval.",
    )
    def checkpoint_fresh(
        context: AssetCheckExecutionContext, registry: RegistryResource, spark: SparkResource
    ) -> AssetCheckResult:
        return check_result(name, CHECKPOINT, registry, spark, checkpoint_fresh_result)

    return [protocol_supported, checksum_matches, checkpoint_fresh]


__all__ = [
    "MAINTENANCE_OPERATIONS",
    "checkpoint_fresh_result",
    "checksum_matches_result",
    "protocol_supported_result",
    "table_checks",
]
