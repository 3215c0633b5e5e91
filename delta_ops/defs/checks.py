"""Asset checks per registered table.

- `log_readable` on `[t, delta_log]`: the table exists, its log reads (`_last_checkpoint`,
  checkpoint parts, each commit's JSON: `delta_ops.log.segment.health`) and every maintenance
  operation may run on its protocol (spec "Protocol Evolution", "Table Features"; the
  `ensure_supported` gate). The watch sensor evaluates it from its own cheap look at each
  log (`log_readable_evaluation`), so a broken table fails it without any run.
- `fsck` on `[t, delta_log]`: the table is whole (`delta_ops.maintenance.fsck`, the CLI's
  `delta-ops fsck`, on the table's engine): the log, checkpoints and sidecars, the newest
  `.crc` against the state it records (spec "Version Checksum File"), every live data file
  and deletion vector, and leftovers. Missing or corrupt data, a broken log or a `.crc`
  that does not match fail it as an error; leftovers only (unreferenced files past the
  retention, `.tmp` litter) as a warning. The `fsck_repair` job repairs what it names.
- `checkpoint_fresh` on `[t, checkpoint]`: commits since the last checkpoint are within the
  checkpoint interval (spec "Checkpoints", `delta.checkpointInterval`), found cheaply as the
  sensor does (`delta_ops.log.segment.log_state`, `delta_ops.maintenance.due`).

A table that does not exist yet fails `log_readable` (an error), and its other checks with a
warning naming it; a table
a run cannot resolve (invalid registry entry, missing secret) fails them naming why. A check
always returns a result. The checks are part of the table's steps
(`delta_ops.defs.tables`): `run_check` gives one check's result.
"""


import functools
import json
from collections.abc import Callable
from typing import Any

from dagster import (
    AssetCheckEvaluation,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    Failure,
    MetadataValue,
)

from delta_ops.defs.assets import (
    CHECKPOINT,
    DELTA_LOG,
    TableRun,
    asset_key,
    table_run,
)
from delta_ops.defs.metadata import markdown_list
from delta_ops.defs.registry import RegisteredTable
from delta_ops.defs.resources import RegistryResource, SparkResource
from delta_ops.errors import DeltaOpsError, NotATableError
from delta_ops.log import (
    LogProblem,
    LogState,
    TableSettings,
    inspect_log,
    log_problem,
    read_settings,
)
from delta_ops.maintenance.due import checkpoint_interval
from delta_ops.protocol import features

#: Operations `log_readable` checks the protocol for (everything delta_ops does to a table).
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
            f"{run.name} does not exist yet at {run.table.uri} (see log_readable)" if missing
            else str(exc)
        ),
        metadata={"reason": exc.reason, "error": type(exc).__name__},
    )


LOG_READABLE = "log_readable"


def blocked_operations(protocol: dict, name: str, version: int) -> dict[str, list[str]]:
    """Maintenance operation -> the table features that forbid it (only those forbidden)."""
    key = json.dumps(protocol, sort_keys=True, default=str)
    return {op: list(fs) for op, fs in _blocked(key).items()}


@functools.lru_cache(maxsize=256)
def _blocked(protocol_json: str) -> dict[str, tuple[str, ...]]:
    # A fleet has a handful of distinct protocols: each is checked once per process.
    protocol = json.loads(protocol_json)
    blocked: dict[str, tuple[str, ...]] = {}
    for op in MAINTENANCE_OPERATIONS:
        try:
            features.ensure_supported(protocol, op)
        except DeltaOpsError as exc:
            blocked[op] = tuple(getattr(exc, "features", None) or [exc.reason])
    return blocked


def log_readable_outcome(
    name: str,
    uri: str,
    *,
    error: DeltaOpsError | None = None,
    problem: LogProblem | None = None,
    state: LogState | None = None,
    settings: TableSettings | None = None,
) -> dict[str, Any]:
    """The `log_readable` result (AssetCheckResult keywords) of one look at a table: the
    error the look raised, else the log problem it found, else the protocol check."""
    if isinstance(error, NotATableError):
        return {
            "passed": False, "severity": AssetCheckSeverity.ERROR,
            "description": f"{name} does not exist: no Delta log at {uri}",
            "metadata": {"reason": error.reason, "error": type(error).__name__, "uri": uri},
        }
    if error is not None or problem is not None:
        file = problem.file if problem is not None else (error.file if error else None)
        reason = str(problem) if problem is not None else str(error)
        return {
            "passed": False, "severity": AssetCheckSeverity.ERROR,
            "description": f"{name}: cannot read the log: {reason}",
            "metadata": {
                "file": file or MetadataValue.null(),
                "reason": problem.reason if problem is not None else error.reason,
                "version": metadata_or_null(problem.version if problem is not None
                                            else error.version),
            },
        }
    assert state is not None and settings is not None
    protocol, config = settings.protocol, settings.table_configuration
    blocked = blocked_operations(protocol, name, state.version)
    names = sorted({f for fs in blocked.values() for f in fs})
    return {
        "passed": not blocked,
        "severity": AssetCheckSeverity.ERROR,
        "description": (
            f"the log of version {state.version} reads and delta_ops can run every "
            "maintenance operation on it" if not blocked
            else f"unsupported table features block {', '.join(sorted(blocked))}: "
            f"{', '.join(names)}"
        ),
        "metadata": {
            "version": state.version,
            "min_reader_version": protocol.get("minReaderVersion"),
            "min_writer_version": protocol.get("minWriterVersion"),
            "reader_features": MetadataValue.json(sorted(config.reader_features)),
            "writer_features": MetadataValue.json(sorted(config.writer_features)),
            "blocked_operations": MetadataValue.json(blocked),
        },
    }


def metadata_or_null(value: Any) -> Any:
    return MetadataValue.null() if value is None else value


def log_readable_evaluation(name: str, outcome: dict[str, Any]) -> AssetCheckEvaluation:
    """`log_readable` as the watch sensor reports it (no run)."""
    return AssetCheckEvaluation(
        asset_key=asset_key(name, DELTA_LOG), check_name=LOG_READABLE,
        metadata={**outcome["metadata"], "evaluated_by": "delta_tables_watch"},
        **{k: v for k, v in outcome.items() if k != "metadata"},
    )


def log_readable_result(run: TableRun) -> AssetCheckResult:
    """The table exists, its log reads (`delta_ops.log.segment.health`) and its protocol allows
    every maintenance operation."""
    try:
        state = inspect_log(run.storage)
        problem = log_problem(run.storage, state)
        settings = None if problem is not None else read_settings(run.storage, state)
    except DeltaOpsError as exc:
        return AssetCheckResult(**log_readable_outcome(run.name, run.table.uri, error=exc))
    return AssetCheckResult(**log_readable_outcome(
        run.name, run.table.uri, problem=problem, state=state, settings=settings))


#: Problems a failing `fsck` result lists in its metadata (the count is always complete).
FSCK_LISTED = 20


def fsck_result(run: TableRun) -> AssetCheckResult:
    """`delta_ops.maintenance.fsck.fsck` on the table's engine: errors fail the check as an
    error, warnings alone as a warning; the description names the first problems."""
    from delta_ops.maintenance.fsck import fsck  # here: it reads Arrow

    try:
        result = fsck(run.storage, engine=run.engine())
    except DeltaOpsError as exc:
        return _unavailable(run, exc)
    errors, warnings = result.errors, result.warnings
    lines = [p.line() for p in result.problems]
    if not lines:
        description = (f"version {result.version} is whole: {result.num_files} data files and "
                       f"{result.num_deletion_vectors} deletion vectors checked, no leftovers")
    else:
        description = (f"{len(errors)} error(s), {len(warnings)} warning(s) at version "
                       f"{result.version}: {'; '.join(lines[:3])}"
                       f"{' ...' if len(lines) > 3 else ''}")
    return AssetCheckResult(
        passed=not lines,
        severity=AssetCheckSeverity.ERROR if errors else AssetCheckSeverity.WARN,
        description=description,
        metadata={
            "version": metadata_or_null(result.version),
            "num_files": result.num_files,
            "num_deletion_vectors": result.num_deletion_vectors,
            "num_errors": len(errors),
            "num_warnings": len(warnings),
            "num_outside_table": result.num_outside_table,
            "problems": markdown_list(lines[:FSCK_LISTED]),
            "problem_codes": MetadataValue.json(sorted({p.code for p in result.problems})),
            "notes": MetadataValue.json(list(result.notes)),
            **run.engine_metadata(),
        },
    )


def checkpoint_fresh_result(run: TableRun) -> AssetCheckResult:
    try:
        state = inspect_log(run.storage)
        settings = read_settings(run.storage, state)
    except DeltaOpsError as exc:
        return _unavailable(run, exc)
    return AssetCheckResult(**checkpoint_fresh_outcome(state, settings,
                                                       run.policy.checkpoint.interval))


def checkpoint_fresh_evaluation(name: str, outcome: dict[str, Any]) -> AssetCheckEvaluation:
    """`checkpoint_fresh` as the watch sensor reports it (no run)."""
    return AssetCheckEvaluation(
        asset_key=asset_key(name, CHECKPOINT), check_name="checkpoint_fresh",
        metadata={**outcome["metadata"], "evaluated_by": "delta_tables_watch"},
        **{k: v for k, v in outcome.items() if k != "metadata"},
    )


def checkpoint_fresh_outcome(
    state: LogState, settings: TableSettings, policy_interval: int | None
) -> dict[str, Any]:
    """The `checkpoint_fresh` result (AssetCheckResult keywords) of a cheap look."""
    interval = checkpoint_interval(policy_interval, settings)
    since = state.commits_since_checkpoint
    fresh = since <= interval
    return dict(
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
    body: Callable[[TableRun], AssetCheckResult], run: TableRun | None = None,
) -> AssetCheckResult:
    """A check's result, always: a table the run cannot even resolve (invalid registry entry,
    missing secret) gives a failed result naming why, not an errored check. `run`: the
    step's, when it has one (the check then shares its table, storage, clock and engine)."""
    if run is not None:
        return body(run.begin(name))
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


#: Check name -> (the component whose asset it checks, its description, its body).
CHECKS: dict[str, tuple[str, str, Callable[[TableRun], AssetCheckResult]]] = {
    LOG_READABLE: (
        DELTA_LOG, "The table exists, its log reads (_last_checkpoint, checkpoint parts, "
        "each commit's JSON) and every maintenance operation may run on its protocol.",
        log_readable_result,
    ),
    "fsck": (
        DELTA_LOG, "The table is whole (delta-ops fsck on the table's engine): the log, "
        "checkpoints, the newest .crc, every live data file and deletion vector; errors fail "
        "it as an error, leftovers only as a warning.",
        fsck_result,
    ),
    "checkpoint_fresh": (
        CHECKPOINT, "Commits since the last checkpoint are within the checkpoint interval.",
        checkpoint_fresh_result,
    ),
}


def check_specs(table: RegisteredTable, component: str) -> list[AssetCheckSpec]:
    """The specs of the checks on the asset `[table, component]`."""
    return [
        AssetCheckSpec(name, asset=asset_key(table.name, on), description=description)
        for name, (on, description, _body) in CHECKS.items() if on == component
    ]


def run_check(
    name: str, table: str, registry: RegistryResource, spark: SparkResource,
    run: TableRun | None = None,
) -> AssetCheckResult:
    """The result of the check `name` of `table` (always a result, see `check_result`);
    `run`: the step's."""
    component, _description, body = CHECKS[name]
    result = check_result(table, component, registry, spark, body, run)
    return AssetCheckResult(
        passed=result.passed, asset_key=asset_key(table, component), check_name=name,
        severity=result.severity, description=result.description, metadata=result.metadata,
    )


__all__ = [
    "CHECKS",
    "LOG_READABLE",
    "MAINTENANCE_OPERATIONS",
    "blocked_operations",
    "log_readable_evaluation",
    "log_readable_outcome",
    "log_readable_result",
    "check_specs",
    "checkpoint_fresh_result",
    "fsck_result",
    "run_check",
]
