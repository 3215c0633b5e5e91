"""The fleet overview: one row per table, so what needs attention is one look.

The `delta_tables_watch` sensor builds it at every tick from what it read of each log (status,
version, commits since the checkpoint, what is due or blocked, why a log does not read) and
from the instance: when each component last materialized, the bytes the last VACUUM
reclaimed, which checks failed at their latest evaluation, and the newest OPTIMIZE, VACUUM
and FSCK commits of each table's history as its latest `delta_log` materialization read
them (`delta_ops.defs.table_health.last_operations`). It reports it as an
observation of the asset `delta_ops_fleet/overview` (an external asset: nothing
materializes it) whenever it differs from the last one: metadata `tables` (a table, one row
per table, those needing attention first), `report` (markdown: what needs attention) and
the counts, which the UI plots over time.

Protocol sections: none (a report over the other assets).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dagster import (
    AssetCheckKey,
    AssetKey,
    AssetObservation,
    AssetRecordsFilter,
    AssetSpec,
    DagsterEventType,
    DagsterInstance,
    MetadataValue,
    TableColumn,
    TableRecord,
    TableSchema,
)

from delta_ops.defs.keys import (
    CHECKPOINT,
    DELTA_LOG,
    LOG_COMPACTION,
    METADATA_CLEANUP,
    OPTIMIZE,
    STATS,
    VACUUM,
    VERSION_CHECKSUM,
    asset_key,
    fleet_key,
)
from delta_ops.defs.table_health import HISTORY_OPERATIONS

OVERVIEW_KEY = AssetKey(["delta_ops_fleet", "overview"])
OVERVIEW_GROUP = "delta_ops_fleet"
#: Components whose last materialization the overview shows (column `last_<component>`).
SHOWN = (CHECKPOINT, VERSION_CHECKSUM, LOG_COMPACTION, METADATA_CLEANUP, VACUUM, OPTIMIZE,
         STATS)
#: Checks whose latest result the overview shows (failing ones, by name).
CHECKED = (
    (DELTA_LOG, "log_readable"), (DELTA_LOG, "fsck"), (CHECKPOINT, "checkpoint_fresh"),
)
#: Most tables named in the report's attention list.
MAX_NAMED = 50
#: Statuses that need someone to look.
ATTENTION = ("error", "missing", "invalid")

COLUMNS = (
    ("table", "string", "The registry name"),
    ("status", "string", "ok, requested, in flight, error, missing or invalid"),
    ("attention", "string", "What needs a look: the log problem, failing checks, blocked work"),
    ("version", "int", "Latest table version"),
    ("log_depth", "int", "Commits since the last checkpoint"),
    ("due", "string", "Components due now"),
    ("blocked", "string", "Components due but blocked by table features"),
    ("failing_checks", "string", "Checks whose latest result failed"),
    *((f"last_{c}", "string", f"When {c} last materialized (UTC)") for c in SHOWN),
    *((key, "string", f"The newest {ops[0].split()[0]} commit in the table's history "
       "(version, UTC time), from its delta_log materialization")
      for key, ops in HISTORY_OPERATIONS.items()),
    ("bytes_reclaimed", "int", "Bytes the last VACUUM deleted"),
)


def overview_spec() -> AssetSpec:
    """The overview's asset: observed by the watch sensor, never materialized."""
    return AssetSpec(
        OVERVIEW_KEY,
        group_name=OVERVIEW_GROUP,
        description="The fleet at a glance, one row per table: status, what is due, blocked "
        "or failing, when each component last ran, bytes reclaimed and log depth. Reported "
        "by the delta_tables_watch sensor (start it under Automation) when it changes.",
        kinds={"delta"},
    )


@dataclass(frozen=True)
class Overview:
    """The overview of one tick: its observation, a digest of its rows (unchanged digest:
    nothing to report) and a one-line summary."""

    observation: AssetObservation
    digest: str
    summary: str


def _when(entry: Any) -> str:
    if entry is None:
        return ""
    return dt.datetime.fromtimestamp(entry.timestamp, dt.timezone.utc).strftime(
        "%Y-%m-%d %H:%M")


def _reclaimed(entry: Any) -> int | None:
    """`size_bytes` of a VACUUM materialization that deleted (not a dry run, not skipped)."""
    if entry is None or entry.asset_materialization is None:
        return None
    meta = entry.asset_materialization.metadata
    if meta.get("skipped") is not None or (meta.get("dry_run") is not None
                                            and meta["dry_run"].value):
        return None
    size = meta.get("size_bytes")
    return int(size.value) if size is not None else None


def _history(entry: Any) -> dict[str, str]:
    """`last_optimize_commit`, `last_vacuum_commit`, `last_fsck_commit` of the table's
    latest `delta_log` materialization (read from its history then), empty when none."""
    meta = entry.asset_materialization.metadata if (
        entry is not None and entry.asset_materialization is not None) else {}
    return {key: str(meta[key].value) if key in meta else "" for key in HISTORY_OPERATIONS}


def _latest_by_table(
    instance: DagsterInstance, names: Sequence[str], partitioned: bool
) -> dict[tuple[str, str], Any]:
    """(table, component) -> the latest materialization's event log entry: of `[t, c]`, or
    in the partitioned layout of the partition `t` of `[delta_tables, c]` (records read
    once: `_ENTRIES` keeps them by instance and storage id)."""
    components = (*SHOWN, DELTA_LOG)
    if not partitioned:
        latest = instance.get_latest_materialization_events(
            [asset_key(n, c) for n in names for c in components])
        return {(n, c): latest.get(asset_key(n, c)) for n in names for c in components}
    wanted = set(names)
    found: dict[tuple[str, str], Any] = {}
    current: set[int] = set()
    entries = _ENTRIES.setdefault(instance, {})
    for component in components:
        key = fleet_key(component)
        ids = {p: i for p, i in instance.event_log_storage.get_latest_storage_id_by_partition(
            key, DagsterEventType.ASSET_MATERIALIZATION).items() if p in wanted}
        missing = [i for i in ids.values() if i not in entries]
        for start in range(0, len(missing), 500):
            chunk = missing[start:start + 500]
            result = instance.fetch_materializations(
                AssetRecordsFilter(asset_key=key, storage_ids=chunk), limit=len(chunk))
            for record in result.records:
                entries[record.storage_id] = record.event_log_entry
        for partition, storage_id in ids.items():
            found[(partition, component)] = entries.get(storage_id)
        current.update(ids.values())
    if len(entries) > _MAX_ENTRIES:  # superseded materializations go
        for storage_id in [i for i in entries if i not in current]:
            del entries[storage_id]
    return found


#: Per instance, its materialization entries by storage id (they never change), for the
#: partitioned layout's overview, which would otherwise read every table's latest records
#: at every tick (an instance's storage ids are its own: the cache goes with it).
_ENTRIES: weakref.WeakKeyDictionary[DagsterInstance, dict[int, Any]] = (
    weakref.WeakKeyDictionary())
_MAX_ENTRIES = 100_000


def _failing_checks(
    instance: DagsterInstance, names: Sequence[str], partitioned: bool
) -> dict[str, list[str]]:
    """Table -> the names of its checks whose latest result failed."""
    failing: dict[str, list[str]] = {}
    if partitioned:
        wanted = set(names)
        infos = instance.event_log_storage.get_asset_check_partition_info(
            [AssetCheckKey(fleet_key(on), check) for on, check in CHECKED])
        for info in infos:
            if info.partition_key in wanted and info.latest_execution_status.value == "FAILED":
                failing.setdefault(info.partition_key, []).append(info.check_key.name)
        return failing
    check_keys = [AssetCheckKey(asset_key(n, on), check) for n in names for on, check in CHECKED]
    records = instance.event_log_storage.get_latest_asset_check_execution_by_key(check_keys)
    for key, record in records.items():
        if record is not None and record.status.value == "FAILED":
            failing.setdefault(key.asset_key.path[0], []).append(key.name)
    return failing


def fleet_overview(
    instance: DagsterInstance, rows: Sequence[dict[str, Any]], *, partitioned: bool = False
) -> Overview:
    """The overview of the watch's `rows` (one per table, from `watch_tick`), completed from
    the instance's latest materializations and check results (of the tables' partitions in
    the partitioned layout)."""
    names = [r["table"] for r in rows]
    latest = _latest_by_table(instance, names, partitioned)
    failing = _failing_checks(instance, names, partitioned)
    full: list[dict[str, Any]] = []
    for row in rows:
        name = row["table"]
        failed = sorted(failing.get(name, []))
        attention = [row["problem"]] if row.get("problem") else []
        if row.get("blocked"):
            attention.append(f"blocked: {row['blocked']}")
        attention += [f"{c} failed" for c in failed if c != "log_readable" or not row.get(
            "problem")]
        out = {
            "table": name,
            "status": row.get("status", ""),
            "attention": "; ".join(attention),
            "version": row.get("version"),
            "log_depth": row.get("log_depth"),
            "due": row.get("due", ""),
            "blocked": row.get("blocked", ""),
            "failing_checks": ", ".join(failed),
            **{f"last_{c}": _when(latest.get((name, c))) for c in SHOWN},
            "bytes_reclaimed": _reclaimed(latest.get((name, VACUUM))),
            **_history(latest.get((name, DELTA_LOG))),
        }
        full.append(out)
    full.sort(key=lambda r: (not r["attention"], r["table"]))
    counts = {
        "num_tables": len(full),
        "num_attention": sum(1 for r in full if r["attention"]),
        "num_failing": sum(1 for r in full if r["status"] in ATTENTION or r["failing_checks"]),
        "num_due": sum(1 for r in full if r["due"]),
        "num_in_flight": sum(1 for r in full if r["status"] in ("requested", "in flight")),
        "num_blocked": sum(1 for r in full if r["blocked"]),
        "max_log_depth": max((r["log_depth"] or 0 for r in full), default=0),
        "bytes_reclaimed": sum(r["bytes_reclaimed"] or 0 for r in full),
    }
    digest = hashlib.sha1(json.dumps(full, sort_keys=True, default=str).encode()).hexdigest()
    summary = (
        f"{counts['num_tables']} tables: {counts['num_attention']} need attention, "
        f"{counts['num_due']} with work due ({counts['num_in_flight']} requested or in "
        f"flight), {counts['num_blocked']} blocked"
    )
    schema = TableSchema(columns=[TableColumn(n, t, description=d) for n, t, d in COLUMNS])
    table = MetadataValue.table(
        records=[TableRecord(r) for r in full],
        schema=schema,
    )
    observation = AssetObservation(
        asset_key=OVERVIEW_KEY,
        metadata={"tables": table, "report": MetadataValue.md(report(full, summary)),
                  "summary": summary, **counts},
    )
    return Overview(observation, digest, summary)


def report(rows: Sequence[dict[str, Any]], summary: str) -> str:
    """Markdown: the summary, then each table needing attention with why."""
    lines = [f"**{summary}**", ""]
    needing = [r for r in rows if r["attention"]]
    if not needing:
        lines.append("Nothing needs attention.")
    else:
        lines += ["| table | status | attention |", "| --- | --- | --- |"]
        for r in needing[:MAX_NAMED]:
            why = r["attention"].replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {r['table']} | {r['status']} | {why} |")
        if len(needing) > MAX_NAMED:
            lines.append(f"| ... and {len(needing) - MAX_NAMED} more | | |")
    return "\n".join(lines)


__all__ = ["OVERVIEW_KEY", "Overview", "fleet_overview", "overview_spec", "report"]
