"""Maintenance policies of the table registry: the `defaults` section and each table's
overrides, section by section (checkpoint, checksum, compaction, vacuum, cleanup,
row_tracking) and the engine that runs heavy work. Validated with pydantic; no dagster.

`Policy.due_policy` is what `delta_ops.maintenance.due` decides with (the same decisions the
CLI's `delta-ops due` makes).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from delta_ops.maintenance.due import DuePolicy
from delta_ops.protocol.properties import parse_interval

# ---- cron -----------------------------------------------------------------------------------

_MONTHS = {m: i for i, m in enumerate(
    ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], 1)}
_DAYS = {d: i for i, d in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])}
_CRON_FIELDS = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)


def cron_problem(expr: str) -> str | None:
    """Why `expr` is not a five-field cron expression Dagster schedules accept, or None."""
    parts = expr.split()
    if len(parts) != 5:
        return f"{expr!r} is not a cron expression: expected 5 fields, got {len(parts)}"
    values: list[set[int]] = []
    for text, (name, lo, hi, names) in zip(parts, _CRON_FIELDS, strict=True):
        found: set[int] = set()
        for item in text.split(","):
            rng, slash, step_text = item.partition("/")
            if slash and (not step_text.isdigit() or int(step_text) == 0):
                return f"{expr!r}: bad step {step_text!r} in the {name} field"

            def value(token: str, name: str = name, lo: int = lo, hi: int = hi,
                      names: dict = names) -> int | None:
                v = names.get(token.lower()) if not token.isdigit() else int(token)
                return v if v is not None and lo <= v <= hi else None

            if rng == "*":
                first, last = lo, hi
            else:
                a, dash, b = rng.partition("-")
                first = value(a)
                last = value(b) if dash else first
                if first is None or last is None:
                    return f"{expr!r}: {item!r} is out of range in the {name} field ({lo}-{hi})"
                if dash and last < first:
                    return f"{expr!r}: range {rng!r} runs backwards in the {name} field"
                if slash and not dash:
                    last = hi
            found.update(range(first, last + 1, int(step_text) if slash else 1))
        values.append(found)
    if values[3] == {2} and values[2] <= {30, 31}:
        return f"{expr!r} never fires: February has no day {sorted(values[2])[0]}"
    return None


# ---- policy models ---------------------------------------------------------------------------


class StrictModel(BaseModel):
    """A frozen model that refuses unknown keys (every registry section)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _retention(value: str | None) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError("give the retention as text with a unit, e.g. '7 days' or '168 hours'")
    try:
        delta = parse_interval(value)
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a retention such as '7 days' ({exc})") from None
    if delta.total_seconds() < 0:
        raise ValueError(f"retention {value!r} is negative")
    return value


class CheckpointPolicy(StrictModel):
    """interval: commits between checkpoints (None: the table's delta.checkpointInterval)."""

    interval: int | None = Field(default=None, ge=1)


class ChecksumSettings(StrictModel):
    """enabled: write a version checksum (`N.crc`) for new versions."""

    enabled: bool = True


class CompactionPolicy(StrictModel):
    """interval: commits per compaction file (None: delta.logCompactionInterval, else off;
    0: off)."""

    interval: int | None = Field(default=None, ge=0)

    @field_validator("interval")
    @classmethod
    def _at_least_two(cls, v: int | None) -> int | None:
        if v == 1:
            raise ValueError("a compaction covers at least 2 commits; use 0 to switch it off")
        return v


def _check_cron(v: str | None) -> str | None:
    if v is not None:
        problem = cron_problem(v)
        if problem:
            raise ValueError(problem)
    return v


class _ScheduledPolicy(StrictModel):
    """A policy run on a cron schedule with an optional retention override. It deletes
    files: a run the UI launches over many assets (*Materialize all*) leaves it out unless
    `in_materialize_all` is set (the cron automation, and a run that confirms it in its
    config, always run it)."""

    cron: str | None = None
    retention: str | None = None
    in_materialize_all: bool = Field(
        default=False,
        description="Run it in any run that selects it, such as the UI's Materialize all "
        "(otherwise only the cron automation and a run whose config sets "
        "confirm_deletes: true run it; other runs record it as skipped).",
    )

    @field_validator("cron")
    @classmethod
    def _cron(cls, v: str | None) -> str | None:
        return _check_cron(v)

    @field_validator("retention", mode="before")
    @classmethod
    def _ret(cls, v: Any) -> str | None:
        return _retention(v)


class VacuumPolicy(_ScheduledPolicy):
    """cron: when the schedule runs (None: no schedule); retention: instead of the table's
    delta.deletedFileRetentionDuration (shorter is refused unless force_retention); dry_run:
    only report; allow_catalog_managed: vacuum a catalog-managed table."""

    cron: str | None = "0 3 * * 0"
    dry_run: bool = False
    lite: bool = False
    force_retention: bool = Field(
        default=False,
        description="Allow a retention shorter than the table's "
        "delta.deletedFileRetentionDuration. Files a reader of an older version, a running "
        "query or a streaming job still needs can then be deleted: time travel to those "
        "versions and such readers fail. Only when nothing else uses the table.",
    )
    allow_catalog_managed: bool = Field(
        default=False,
        description="Vacuum a catalog-managed table (catalogManaged feature). The catalog owns "
        "such a table: set this only with the catalog's permission.",
    )
    record_history: bool = Field(
        default=False,
        description="Record each VACUUM in the table's history as delta-spark does (VACUUM "
        "START and VACUUM END commits with numFilesToDelete, sizeOfDataToDelete, "
        "numDeletedFiles, numVacuumedDirectories). Refused on catalog-managed tables.",
    )

    keep_versions: list[int] = Field(
        default_factory=list,
        description="Versions whose files VACUUM keeps, so they still read in full (time "
        "travel to them keeps working), whatever the retention.",
    )

    @property
    def retention_hours(self) -> float | None:
        if self.retention is None:
            return None
        return parse_interval(self.retention).total_seconds() / 3600


class CleanupPolicy(_ScheduledPolicy):
    """cron: when the schedule runs (None: no schedule); retention: instead of the table's
    delta.logRetentionDuration (shorter is refused unless force_retention);
    ensure_checkpoint: write a checkpoint at the cutoff first; allow_catalog_managed: clean
    up the log of a catalog-managed table."""

    cron: str | None = "0 4 * * *"
    ensure_checkpoint: bool = False
    force_retention: bool = Field(
        default=False,
        description="Allow a log retention shorter than the table's "
        "delta.logRetentionDuration. The log of older versions is deleted sooner: time "
        "travel to them, and readers or streams still behind, fail.",
    )
    allow_catalog_managed: bool = Field(
        default=False,
        description="Clean up the log of a catalog-managed table (catalogManaged feature). "
        "The catalog owns its log: set this only with the catalog's permission.",
    )

    @property
    def retention_delta(self) -> dt.timedelta | None:
        return None if self.retention is None else parse_interval(self.retention)


class RowTrackingPolicy(StrictModel):
    """backfill: a table's maintenance step backfills row IDs (otherwise it only reports what is
    missing; the `row_tracking_backfill` job always backfills); batch_size: files per
    commit; enable: set delta.enableRowTracking=true at the end; confirm_protocol_upgrade:
    the step may add the rowTracking and domainMetadata writer features to the protocol
    (after which writers without them, such as deltalake, cannot write the table)."""

    backfill: bool = False
    batch_size: int = Field(default=20_000, ge=1)
    enable: bool = True
    confirm_protocol_upgrade: bool = Field(
        default=False,
        description="Let the maintenance step's backfill add the rowTracking and "
        "domainMetadata writer features the table's protocol lacks (writers without them, "
        "such as deltalake, then cannot write the table); without it the step refuses such "
        "a table, committing nothing.",
    )


class OptimizePolicy(StrictModel):
    """OPTIMIZE (bin-packing of small files, and the rewrite of files whose deletion vectors
    delete more than `max_deleted_rows_ratio` of their rows): run by its cron automation, a
    run selecting only it, or any run with `in_materialize_all`, and only when due
    (`delta_ops.maintenance.due.optimize_need`: the newest .crc shows enough small files or
    files with deletion vectors)."""

    cron: str | None = Field(
        default="0 2 * * *",
        description="When the automation looks at it (UTC; it runs only when due); null: no "
        "automation.",
    )
    in_materialize_all: bool = Field(
        default=False,
        description="Run it in any run that selects it, such as the UI's Materialize all "
        "(otherwise only its cron automation and a run selecting only it run it).",
    )
    dry_run: bool = Field(default=False, description="Only plan the bins; write nothing.")
    target_size: int | None = Field(
        default=None, ge=1,
        description="Target size of the files written, in bytes (default: the table's "
        "delta.targetFileSize, else 256 MiB).",
    )
    min_files: int = Field(default=2, ge=1, description="Fewest files a bin rewrites.")
    max_deleted_rows_ratio: float = Field(
        default=0.05, ge=0.0, le=1.0,
        description="Files whose deletion vector deletes more than this share of their rows "
        "are rewritten without it (the purge).",
    )
    small_file_bytes: int = Field(
        default=32 * 1024 * 1024, ge=1,
        description="A file under this size counts as small when deciding whether it is due.",
    )
    small_file_share: float = Field(
        default=0.2, ge=0.0, le=1.0,
        description="Due when at least this share of the live files is small.",
    )
    deletion_vector_share: float = Field(
        default=0.1, ge=0.0, le=1.0,
        description="Due when at least this share of the live files carries a deletion "
        "vector.",
    )

    @field_validator("cron")
    @classmethod
    def _cron(cls, v: str | None) -> str | None:
        return _check_cron(v)


class StatsPolicy(StrictModel):
    """COMPUTE STATS: statistics computed from the data for the live files that lack them
    (or all, with recompute_all), committed as dataChange=false re-adds; run by its cron
    automation, a run selecting only it, or any run with `in_materialize_all`, and only
    when a file lacks statistics."""

    cron: str | None = Field(
        default="0 1 * * 0",
        description="When the automation looks at it (UTC); null: no automation.",
    )
    in_materialize_all: bool = Field(
        default=False,
        description="Run it in any run that selects it, such as the UI's Materialize all "
        "(otherwise only its cron automation and a run selecting only it run it).",
    )
    dry_run: bool = Field(default=False, description="Only plan; write nothing.")
    recompute_all: bool = Field(
        default=False, description="Recompute the statistics of every live file."
    )
    batch_size: int = Field(default=1000, ge=1, description="Most files re-added per commit.")

    @field_validator("cron")
    @classmethod
    def _cron(cls, v: str | None) -> str | None:
        return _check_cron(v)


#: The automation fields that bound the whole fleet (read from the defaults only).
FLEET_CAPS = frozenset({"asset_layout", "tables_per_run", "runs_per_tick", "max_runs_in_flight"})


#: How the Dagster assets of the fleet are laid out (`AutomationPolicy.asset_layout`).
AssetLayout = Literal["per_table", "partitioned"]


class AutomationPolicy(StrictModel):
    """How the `delta_tables_watch` sensor turns what is due into runs.

    `asset_layout`, `tables_per_run`, `runs_per_tick` and `max_runs_in_flight` shape or
    bound the whole fleet and are read from the `defaults` only; `own_run` is per table."""

    asset_layout: AssetLayout = Field(
        default="per_table",
        description="per_table: nine assets and three checks per table, keyed [table, "
        "component], for the lineage of each table; partitioned: nine assets and three checks "
        "in all, keyed [delta_tables, component], one partition per table (the layout for "
        "fleets of hundreds of tables and more: it loads in constant time, and discovered "
        "tables appear without a reload).",
    )

    tables_per_run: int = Field(
        default=250, ge=1,
        description="Most tables one watch run maintains (each table is its own step).",
    )
    runs_per_tick: int = Field(
        default=4, ge=1, description="Most runs one tick of the watch sensor requests.",
    )
    max_runs_in_flight: int = Field(
        default=4, ge=1,
        description="No new run while this many of the watch's runs are queued or running.",
    )
    own_run: bool | None = Field(
        default=None,
        description="The table gets a run of its own; null: when its size sends it to the "
        "Spark engine (read from the newest .crc or _last_checkpoint).",
    )


#: Where a table's heavy work runs (the registry's `engine` key).
EngineName = Literal["spark", "local"]

#: The engine thresholds (top-level policy fields).
_THRESHOLDS = ("spark_above_files", "spark_above_bytes")

_SECTIONS: dict[str, type[StrictModel]] = {
    "checkpoint": CheckpointPolicy,
    "checksum": ChecksumSettings,
    "compaction": CompactionPolicy,
    "vacuum": VacuumPolicy,
    "cleanup": CleanupPolicy,
    "row_tracking": RowTrackingPolicy,
    "automation": AutomationPolicy,
    "optimize": OptimizePolicy,
    "stats": StatsPolicy,
}


#: Live files above which a table whose engine is spark runs on Spark (below: local).
DEFAULT_SPARK_ABOVE_FILES = 100_000


class Policy(StrictModel):
    """A complete maintenance policy (the registry's `defaults`, or a table's effective one).

    `engine: spark` runs a table's heavy work on Spark once the table has more live files
    than `spark_above_files` or more bytes than `spark_above_bytes` (null: that threshold is
    not used; both null: always Spark); smaller tables run on the local engine, in the run's
    process, without starting a JVM. `engine: local` never uses Spark."""

    engine: EngineName = "spark"
    spark_above_files: int | None = Field(
        default=DEFAULT_SPARK_ABOVE_FILES, ge=0,
        description="With engine spark: use Spark only for tables with more live files than "
        "this (smaller ones run on the local engine); null: no file threshold.",
    )
    spark_above_bytes: int | None = Field(
        default=None, ge=0,
        description="With engine spark: use Spark for tables with more bytes of live files "
        "than this, whatever their file count; null: no byte threshold.",
    )
    checkpoint: CheckpointPolicy = CheckpointPolicy()
    checksum: ChecksumSettings = ChecksumSettings()
    compaction: CompactionPolicy = CompactionPolicy()
    vacuum: VacuumPolicy = VacuumPolicy()
    cleanup: CleanupPolicy = CleanupPolicy()
    row_tracking: RowTrackingPolicy = RowTrackingPolicy()
    automation: AutomationPolicy = AutomationPolicy()
    optimize: OptimizePolicy = OptimizePolicy()
    stats: StatsPolicy = StatsPolicy()

    def merged(self, override: PolicyOverride) -> Policy:
        """This policy with the fields `override` sets (section by section, field by field)."""
        update: dict[str, Any] = {}
        if "engine" in override.model_fields_set and override.engine is not None:
            update["engine"] = override.engine
        for name in _THRESHOLDS:
            if name in override.model_fields_set:
                update[name] = getattr(override, name)  # null switches the threshold off
        for name in _SECTIONS:
            section = getattr(override, name)
            if section is not None and name in override.model_fields_set:
                base = getattr(self, name)
                update[name] = base.model_copy(
                    update={f: getattr(section, f) for f in section.model_fields_set}
                )
        return self.model_copy(update=update)

    @property
    def due_policy(self) -> DuePolicy:
        """What `delta_ops.maintenance.due` decides with (checkpoint, checksum, compaction)."""
        return DuePolicy(
            checkpoint_interval=self.checkpoint.interval,
            checksums=self.checksum.enabled,
            compaction_interval=self.compaction.interval,
        )


class PolicyOverride(StrictModel):
    engine: EngineName | None = None
    spark_above_files: int | None = Field(default=None, ge=0)
    spark_above_bytes: int | None = Field(default=None, ge=0)
    checkpoint: CheckpointPolicy | None = None
    checksum: ChecksumSettings | None = None
    compaction: CompactionPolicy | None = None
    vacuum: VacuumPolicy | None = None
    cleanup: CleanupPolicy | None = None
    row_tracking: RowTrackingPolicy | None = None
    automation: AutomationPolicy | None = None
    optimize: OptimizePolicy | None = None
    stats: StatsPolicy | None = None



__all__ = [
    "DEFAULT_SPARK_ABOVE_FILES",
    "AutomationPolicy",
    "ChecksumSettings",
    "CheckpointPolicy",
    "CleanupPolicy",
    "CompactionPolicy",
    "EngineName",
    "FLEET_CAPS",
    "OptimizePolicy",
    "Policy",
    "PolicyOverride",
    "RowTrackingPolicy",
    "StatsPolicy",
    "StrictModel",
    "VacuumPolicy",
    "cron_problem",
]
