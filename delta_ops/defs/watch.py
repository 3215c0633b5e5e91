"""The `delta_tables_watch` sensor: health, observations and maintenance runs for every
registered table.

`delta_tables_watch` (stopped by default: turn it on in the UI's Automation tab) looks at
each table cheaply, with no snapshot replay and no Spark (`delta_ops.log.segment.log_state`:
`_last_checkpoint`, a listing from the checkpoint it names, protocol and properties read
from new commits only; `delta_ops.log.segment.health`: the `_last_checkpoint` problem, missing
checkpoint parts, each new commit's JSON). A log it cannot read fails the table's
`log_readable` check at once (an `AssetCheckEvaluation` the sensor reports, naming the
file); `checkpoint_fresh` is reported when its result changes. When a table's version or
newest `.crc` moved it records an observation of the table's `delta_log` (data version =
table version; files, bytes and schema from the `.crc` of the latest version), so the UI
shows the log's history without a run. What `delta_ops.maintenance.due` finds due (a
checkpoint, a version checksum, log compaction: the decisions of `delta-ops due`) becomes a
bounded number of runs of several tables each, one step per table (`watch_tick`: the
`automation` policy's `tables_per_run`, `runs_per_tick`, `max_runs_in_flight`, `own_run`);
a table in a run still queued or running, or requested at its version already, is not
requested. A component the table's protocol forbids is logged, never requested; an invalid
registry entry is logged and skipped. The cursor (persisted by Dagster across restarts,
packed by `delta_ops.defs.watch_cursor`) keeps per table the version last seen, the
protocol and the table properties the due rules read, the version a run was requested at,
the newest `.crc` and the last check results, so a quiet table costs one small read and one
short listing per tick. Each tick also reports the fleet overview
(`delta_ops.defs.overview`) when it changed.

Protocol sections: see `delta_ops.log.segment.log_state`, `delta_ops.log.segment.health` and
`delta_ops.maintenance.due`.
"""


import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dagster import (
    AssetCheckEvaluation,
    AssetObservation,
    AssetSelection,
    DagsterInstance,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from delta_ops.defs.checks import (
    checkpoint_fresh_evaluation,
    checkpoint_fresh_outcome,
    log_readable_evaluation,
    log_readable_outcome,
)
from delta_ops.defs.engines import needs_size
from delta_ops.defs.fleet import (
    IN_PROGRESS,
    MAINTAINING_JOBS,
    PARTITION_NAME_TAG,
    TABLE_PARTITION_JOBS,
    TABLES_TAG,
    fleet_event,
    fleet_health,
    fleet_request,
    fleet_runs,
    run_groups,
    run_tables,
)
from delta_ops.defs.jobs import TABLE_PARTITIONS
from delta_ops.defs.keys import COMPONENTS, asset_key
from delta_ops.defs.observations import DATA_VERSION_TAG, log_observation, read_crc
from delta_ops.defs.overview import fleet_overview
from delta_ops.defs.registry import RegisteredTable, Registry
from delta_ops.defs.resources import RegistryResource
from delta_ops.defs.watch_cursor import (
    MAX_ERROR,
    due_settings,
    dump_cursor,
    load_cursor_and_extra,
)
from delta_ops.engine.threads import io_map
from delta_ops.errors import DeltaOpsError, NotATableError
from delta_ops.log import (
    LogProblem,
    LogState,
    TableSettings,
    inspect_log,
    log_problem,
    read_settings,
)
from delta_ops.maintenance.due import due

if TYPE_CHECKING:
    from delta_ops.protocol.crc import VersionChecksum

WATCH_SENSOR = "delta_tables_watch"
#: The tag Dagster puts on the runs a sensor requests.
SENSOR_NAME_TAG = "dagster/sensor_name"




@dataclass(frozen=True)
class InFlight:
    """What is being maintained now: tables in a queued or running run, and how many of
    those runs the watch sensor requested (`runs_in_flight`)."""

    tables: frozenset[str] = frozenset()
    watch_runs: int = 0


def runs_in_flight(instance: DagsterInstance, names: list[str],
                   partitions: Sequence[str] | None = None) -> InFlight:
    """Tables of the runs still queued or running (a run without an asset selection covers
    every table), and how many of them the watch requested. `partitions`: the table
    partitions, in the partitioned layout (a run's tables are then its partitions')."""
    tables: set[str] = set()
    watch_runs = 0
    for run in instance.get_runs(filters=RunsFilter(statuses=list(IN_PROGRESS)), limit=1000):
        if run.job_name in TABLE_PARTITION_JOBS:
            partition = run.tags.get(PARTITION_NAME_TAG)
            tables.update(names if partition is None else [partition])
            continue
        if run.job_name not in MAINTAINING_JOBS:
            continue
        if run.tags.get(SENSOR_NAME_TAG) == WATCH_SENSOR:
            watch_runs += 1
        if partitions is not None:
            tables.update(run_tables(run, partitions))
        elif run.asset_selection is None:
            tables.update(names)
        else:
            tables.update(k.path[0] for k in run.asset_selection if len(k.path) == 2)
    return InFlight(frozenset(tables), watch_runs)


@dataclass
class WatchTick:
    """One tick of the watch sensor: the run requests (several tables per run, bounded by
    the automation policy), an observation of each `delta_log` whose version or newest
    `.crc` moved, the `log_readable` and `checkpoint_fresh` evaluations that changed, the
    fleet overview rows and the new cursor."""

    requests: list[RunRequest] = field(default_factory=list)
    observations: list[AssetObservation] = field(default_factory=list)
    checks: list[AssetCheckEvaluation] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    #: The cursor's per-table entries and the sensor's own values (`cursor` packs them).
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    #: Tables with due work this tick did not request (the caps), to a later tick.
    waiting: int = 0
    #: Tables due but in a run still queued or running.
    in_flight: int = 0
    #: Observations and check results left for a later tick (`EVENTS_PER_TICK`).
    deferred_events: int = 0

    @property
    def cursor(self) -> str:
        """The new cursor (packed on each call)."""
        return dump_cursor(self.entries, self.extra)

    @property
    def asset_events(self) -> list[AssetObservation | AssetCheckEvaluation]:
        return [*self.observations, *self.checks]


#: Seconds between two ticks of the watch (a quiet tick of 1,000 local tables takes about
#: a second; runs finishing free room for new ones at the next tick).
WATCH_INTERVAL_S = 30
#: Most observations and check results one tick reports: the daemon stores each as an
#: event (a transaction of the instance's event log), so a first tick of 1,000 tables would
#: otherwise spend minutes storing 3,000 of them before it submits its runs. Failures come
#: first; what is left out is reported by the next ticks.
EVENTS_PER_TICK = 100
#: Most "due" lines one tick logs (one per table; the overview lists them all).
MAX_DUE_LINES = 20
#: URI schemes of object stores (`delta_ops.defs.registry.SUPPORTED_SCHEMES`).
_REMOTE_SCHEMES = ("s3://", "s3a://", "s3n://")


@dataclass(frozen=True)
class _Look:
    """What a tick read of one table: a state and settings (and a log problem), or the
    error; the newest `.crc` at the latest version when it was read."""

    state: LogState | None = None
    settings: TableSettings | None = None
    error: DeltaOpsError | None = None
    problem: LogProblem | None = None
    crc: "VersionChecksum | None" = None


def _look(table: RegisteredTable, entry: dict[str, Any]) -> _Look:
    try:
        storage = table.storage()
        state = inspect_log(storage)
        seen = entry.get("version") if entry.get("status") == "ok" else None
        seen = seen if isinstance(seen, int) and seen <= state.version else None
        blobs: dict[str, bytes] = {}
        problem = log_problem(storage, state, seen, blobs)
        if problem is not None:
            return _Look(state=state, problem=problem)
        settings = read_settings(storage, state, TableSettings.from_json(entry.get("settings")),
                                 blobs)
        crc = None
        shown = entry.get("reported") or [None, None]
        if state.newest_checksum is not None and state.newest_checksum != shown[1]:
            crc = read_crc(storage, state.newest_checksum)  # for the observation
    except DeltaOpsError as exc:
        return _Look(error=exc)
    return _Look(state, settings, crc=crc)


def _own_run(table: RegisteredTable, look: _Look) -> bool:
    """Whether the table is maintained in a run of its own: its policy says so, or (null)
    its size, as the newest `.crc` or `_last_checkpoint` tell it, sends it to Spark."""
    wanted = table.policy.automation.own_run
    if wanted is not None:
        return wanted
    policy = table.policy
    if policy.engine != "spark":
        return False
    if not needs_size(policy):
        return True
    state = look.state
    assert state is not None
    files: int | None = None
    nbytes: int | None = None
    hint = state.segment.last_checkpoint
    crc = look.crc
    if crc is None and state.newest_checksum is not None:
        try:
            crc = read_crc(table.storage(), state.newest_checksum)
        except DeltaOpsError:
            crc = None
    if crc is not None:
        files, nbytes = crc.num_files, crc.table_size_bytes
    elif hint is not None and hint.num_of_add_files is not None:
        files = hint.num_of_add_files
    return (policy.spark_above_files is not None and files is not None
            and files > policy.spark_above_files) or (
        policy.spark_above_bytes is not None and nbytes is not None
        and nbytes > policy.spark_above_bytes)


@dataclass(frozen=True)
class _Due:
    """A table with work due and not yet requested at its version."""

    name: str
    version: int
    components: tuple[str, ...]
    own_run: bool


def watch_tick(
    registry: Registry,
    cursor: str | None,
    log: Callable[[str], None],
    in_flight: InFlight | None = None,
    loaded: frozenset[str] | None = None,
    partitions: Sequence[str] | None = None,
) -> WatchTick:
    """One tick of the watch sensor. Never raises for one table's problem: a missing table,
    an invalid registry entry or a broken log is logged, reported by its `log_readable`
    check and skipped. With tables on an object store, the logs are read side by side on
    the process's I/O pool (`engine.threads`: each table costs a few round trips that threads
    overlap); local tables are read one after the other (threads only add contention there:
    0.36 s vs 0.44 s for a quiet tick of 1,000 local tables). Decisions, log lines and
    requests follow the registry's order.

    Due work becomes runs of up to `tables_per_run` tables (the defaults' automation
    policy), a table with `own_run` (or, when null, big enough for Spark) in a run of its
    own; at most `runs_per_tick` runs, and none while `max_runs_in_flight` runs of the watch
    are queued or running. A table in a run still queued or running is not requested, nor
    one requested at its version before; the others wait for the next tick.

    `loaded`: the tables the code location has assets for (None: all). A table discovery
    added since is watched and shown in the overview as waiting for a reload, never
    requested (a run cannot select assets the location does not have yet); a loaded table
    the registry no longer has is shown as removed.

    `partitions`: the table partitions, in the partitioned layout (`delta_ops.defs.fleet`):
    a table is loaded once it has a partition, events are those of its partition, and a run
    covers a range of partitions naming its tables."""
    in_flight = in_flight or InFlight()
    if partitions is not None:
        loaded = frozenset(partitions)
    previous, extra = load_cursor_and_extra(cursor)
    tick = WatchTick(extra=extra)
    entries = tick.entries
    valid = [t for t in registry.tables if not t.problems]
    remote = any(t.uri.startswith(_REMOTE_SCHEMES) for t in valid)

    def look(t: RegisteredTable) -> _Look:
        return _look(t, previous.get(t.name) or {})

    if remote and len(valid) > 1:
        looks = dict(zip((t.name for t in valid), io_map(look, valid), strict=True))
    else:
        looks = {t.name: look(t) for t in valid}
    due_tables: list[_Due] = []
    lines = 0
    # (priority, order, event, what to record once it is reported): failures first, then
    # observations, then passing checks; at most `EVENTS_PER_TICK` a tick.
    events: list[tuple[int, int, Any, Callable[[], None]]] = []
    for table in registry.tables:
        entry = dict(previous.get(table.name) or {})
        row: dict[str, Any] = {"table": table.name}
        tick.rows.append(row)
        if table.problems:
            if entry.get("status") != "invalid":
                log(f"{table.name}: invalid registry entry: {'; '.join(table.problems)}")
            entries[table.name] = {"status": "invalid"}
            row.update(status="invalid", problem="; ".join(table.problems))
            continue
        look = looks[table.name]
        if look.error is not None or look.problem is not None:
            missing = isinstance(look.error, NotATableError)
            status = "missing" if missing else "error"
            outcome = log_readable_outcome(table.name, table.uri, error=look.error,
                                           problem=look.problem)
            message = outcome["description"]
            version = look.state.version if look.state is not None else None
            new = {"status": status, "error": entry.get("error")}
            if version is not None and isinstance(entry.get("settings"), dict):
                new.update(version=version, settings=entry.get("settings"))
            if entry.get("status") != status or entry.get("error") != message[:MAX_ERROR]:
                log(message)

                def reported(new: dict = new, message: str = message) -> None:
                    new["error"] = message

                events.append((0, len(events), log_readable_evaluation(table.name, outcome),
                               reported))
            entries[table.name] = new
            row.update(status=status, problem=message, unreadable=message,
                       version=version if version is not None else None)
            continue
        state, settings = look.state, look.settings
        assert state is not None and settings is not None
        changed = entry.get("version") != state.version or entry.get("status") != "ok"
        # What was last reported of the table: [observed version, observed newest .crc,
        # version log_readable passed at, checkpoint_fresh result (1/0)]; an event the
        # tick's budget leaves out is reported by a later tick.
        shown = list(entry.get("reported") or [None, None, None, None])
        fresh = checkpoint_fresh_outcome(state, settings, table.policy.checkpoint.interval)
        readable = log_readable_outcome(table.name, table.uri, state=state, settings=settings)
        if not readable["passed"]:
            row["unreadable"] = readable["description"]
        if not fresh["passed"]:
            row["stale"] = fresh["description"]
        if shown[0] != state.version or shown[1] != state.newest_checksum:
            events.append((2, len(events), log_observation(
                table.name, table.uri, state, settings,
                look.crc if look.crc is not None and state.newest_checksum == state.version
                else None), _mark(shown, (0, state.version), (1, state.newest_checksum))))
        if shown[2] != state.version:
            events.append((3 if readable["passed"] else 0, len(events),
                           log_readable_evaluation(table.name, readable),
                           _mark(shown, (2, state.version))))
        if shown[3] != int(fresh["passed"]):
            events.append((4 if fresh["passed"] or shown[3] is None else 1, len(events),
                           checkpoint_fresh_evaluation(table.name, fresh),
                           _mark(shown, (3, int(fresh["passed"])))))
        report = due(state, settings, table.policy.due_policy)
        for need in report.blocked if changed else ():
            log(f"{table.name}: {need.component} needed ({need.reason}) but the table uses "
                f"features delta_ops cannot maintain: {', '.join(need.blocked_by)}")
        runnable = [need.component for need in report.runnable]
        requested = entry.get("requested")
        row.update(
            status="ok", version=state.version, log_depth=state.commits_since_checkpoint,
            due=", ".join(runnable), blocked=", ".join(n.component for n in report.blocked),
        )
        if loaded is not None and table.name not in loaded:
            row["status"] = "not loaded"
            row["problem"] = (
                "new since the code location loaded: reload it (Deployment → Reload) to add "
                "its assets" if partitions is None else
                "no partition yet: the delta_tables_partitions sensor adds it at its next tick")
        elif runnable and table.name in in_flight.tables:
            tick.in_flight += 1
            row["status"] = "in flight"
        elif runnable and requested != state.version:
            if changed and lines < MAX_DUE_LINES:
                lines += 1
                log(f"{table.name}: due at version {state.version}: " + "; ".join(
                    f"{need.component} ({need.reason})" for need in report.runnable))
            due_tables.append(_Due(table.name, state.version, tuple(runnable),
                                   _own_run(table, look)))
        entries[table.name] = {
            "status": "ok",
            "version": state.version,
            "settings": due_settings(settings).to_json(),
            "requested": requested if requested == state.version else None,
            "reported": shown,
        }
    if partitions is not None:
        # Dagster (1.13) stores a partition's check result reported without a run only once:
        # the sensor reports the fleet's checks instead (`fleet.fleet_health`, from the rows).
        for check in [e for e in events if isinstance(e[2], AssetCheckEvaluation)]:
            check[3]()
        events = [e for e in events if not isinstance(e[2], AssetCheckEvaluation)]
    chosen = sorted(events, key=lambda e: e[:2])[:EVENTS_PER_TICK]
    for _priority, _order, event, reported in sorted(chosen, key=lambda e: e[1]):
        if partitions is not None:
            event = fleet_event(event, event.asset_key.path[0])
        (tick.observations if isinstance(event, AssetObservation) else tick.checks).append(
            event)
        reported()
    tick.deferred_events = len(events) - len(chosen)
    if tick.deferred_events:
        log(f"{tick.deferred_events} observations and check results wait for a later tick "
            f"(at most {EVENTS_PER_TICK} a tick)")
    for name in sorted((loaded or frozenset()) - set(registry.names)):
        tick.rows.append({"table": name, "status": "removed", "problem": (
            "no longer registered or discovered: reload the code location (Deployment → "
            "Reload) to drop its assets" if partitions is None else
            "no longer registered or discovered: the delta_tables_partitions sensor drops "
            "its partition at its next tick")})
    if lines >= MAX_DUE_LINES:
        log(f"{len(due_tables)} tables with work due in all (the first {MAX_DUE_LINES} named "
            "above; the fleet overview, delta_ops_fleet/overview, lists every one)")
    policy = registry.defaults.automation
    budget = max(0, min(policy.runs_per_tick, policy.max_runs_in_flight - in_flight.watch_runs))
    if partitions is None:
        groups = [(watch_request(g), [d.name for d in g])
                  for g in run_groups(due_tables, policy.tables_per_run)[:budget]]
    else:
        groups = [(fleet_request(r), list(r.tables))
                  for r in fleet_runs(due_tables, partitions, policy.tables_per_run)[:budget]]
    versions = {d.name: d.version for d in due_tables}
    rows = {r["table"]: r for r in tick.rows}
    for request, names in groups:
        tick.requests.append(request)
        for name in names:
            entries[name]["requested"] = versions[name]
            rows[name]["status"] = "requested"
    tick.waiting = len(due_tables) - sum(len(names) for _r, names in groups)
    if tick.waiting:
        log(f"{tick.waiting} tables with work due wait for a later tick: {len(tick.requests)} "
            f"runs requested (runs_per_tick {policy.runs_per_tick}, tables_per_run "
            f"{policy.tables_per_run}), {in_flight.watch_runs} of the watch's runs in flight "
            f"(max_runs_in_flight {policy.max_runs_in_flight})")
    return tick


def _mark(shown: list[Any], *updates: tuple[int, Any]) -> Callable[[], None]:
    def reported() -> None:
        for index, value in updates:
            shown[index] = value

    return reported


def watch_request(group: list[_Due]) -> RunRequest:
    """The run of a group of tables: each table's due components (each table one step), no
    checks; the run key names the tables, versions and components, so the same work is
    never requested twice."""
    work = [f"{d.name}:{d.version}:{'+'.join(d.components)}" for d in group]
    components = [c for c in COMPONENTS if any(c in d.components for d in group)]
    tags = {
        TABLES_TAG: str(len(group)),
        "delta_ops/components": ",".join(components),
    }
    if len(group) == 1:
        (only,) = group
        tags.update({"delta_ops/table": only.name, "delta_ops/version": str(only.version)})
        run_key = work[0]
    else:
        tags["delta_ops/first_table"] = group[0].name
        run_key = "watch:" + hashlib.sha1("\n".join(work).encode()).hexdigest()[:20]
    return RunRequest(
        run_key=run_key,
        asset_selection=[asset_key(d.name, c) for d in group for c in d.components],
        # The due work only: the watch reports log_readable and checkpoint_fresh itself, and
        # checking a .crc just written (fsck, then checksum_matches) tripled a fleet step's time.
        asset_check_keys=[],
        tags=tags,
    )


def evaluate_watch(
    registry: Registry, cursor: str | None, log: Callable[[str], None]
) -> tuple[list[RunRequest], str]:
    """(run requests, new cursor) of one tick (`watch_tick`)."""
    tick = watch_tick(registry, cursor, log)
    return tick.requests, tick.cursor


def watch_sensor(loaded: list[str] | None = None):
    """The watch sensor; `loaded`: the tables the definitions have assets for. It targets
    the assets, so its runs are runs of the implicit asset job over the due components (no
    job of its own: a job over every asset would be a second job graph of the fleet)."""
    loaded_names = frozenset(loaded) if loaded is not None else None

    @sensor(
        name=WATCH_SENSOR,
        asset_selection=AssetSelection.all(),
        minimum_interval_seconds=WATCH_INTERVAL_S,
        default_status=DefaultSensorStatus.STOPPED,
        description="Watches every registered table's log (no replay, no Spark): records "
        "what it sees as an observation of the table's delta_log, evaluates its log_readable "
        "and checkpoint_fresh checks, keeps the fleet overview current, and runs maintenance "
        "for what is due (a checkpoint, version checksums, log compaction): several tables "
        "per run, a bounded number of runs per tick.",
    )
    def delta_tables_watch(
        context: SensorEvaluationContext, registry: RegistryResource
    ) -> SensorResult:
        registry_now = registry.load()
        partitions = context.instance.get_dynamic_partitions(TABLE_PARTITIONS.name) if (
            registry_now.partitioned) else None
        in_flight = runs_in_flight(context.instance, registry_now.names, partitions)
        tick = watch_tick(registry_now, context.cursor, context.log.info, in_flight,
                          loaded_names, partitions)
        events: list[Any] = tick.asset_events
        overview = fleet_overview(context.instance, tick.rows, partitioned=partitions is not None)
        if overview.digest != tick.extra.get("overview"):
            events.append(overview.observation)
            tick.extra["overview"] = overview.digest
        if partitions is not None:
            reported = tick.extra.setdefault("health", {})
            for name, (digest, evaluation) in fleet_health(tick.rows).items():
                if reported.get(name) != digest:
                    events.append(evaluation)
                    reported[name] = digest
        cursor = tick.cursor
        summary = overview.summary + (
            f"; {tick.waiting} due tables wait for a later tick" if tick.waiting else "")
        if not tick.requests:
            return SensorResult(skip_reason=SkipReason(summary), cursor=cursor,
                                asset_events=events)
        context.log.info(f"{len(tick.requests)} runs requested: {summary}")
        return SensorResult(run_requests=tick.requests, cursor=cursor, asset_events=events)

    return delta_tables_watch


__all__ = [
    "DATA_VERSION_TAG",
    "EVENTS_PER_TICK",
    "WATCH_SENSOR",
    "InFlight",
    "WatchTick",
    "evaluate_watch",
    "log_observation",
    "runs_in_flight",
    "watch_request",
    "watch_sensor",
    "watch_tick",
]
