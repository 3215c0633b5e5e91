"""What a table needs now: a checkpoint, a version checksum, log compaction. Pure decisions
over what the log says (`delta_ops.log.segment.log_state`) and a policy; one answer for the CLI
(`delta-ops due`), the Dagster assets and the Dagster sensor alike.

Spec sections: "Checkpoints" (`delta.checkpointInterval`), "Version Checksum File", "Log
Compaction Files" (`delta.logCompactionInterval`), "Protocol Evolution" / "Table Features"
(a component the protocol forbids is reported as blocked, never as something to run).

- checkpoint: due when the commits since the last checkpoint reach the interval (the
  policy's, else the table's `delta.checkpointInterval`, else 10);
- version checksum: due when checksums are on and the latest version has no `.crc`;
- log compaction: due when the compaction policy (the policy's interval, else the table's
  `delta.logCompactionInterval`, else off) plans a window that has no file yet;
- optimize (`optimize_need`, for the Dagster `optimize` asset): due when the newest `.crc`
  (spec "Version Checksum File": `fileSizeHistogram`, `numDeletionVectors`) shows enough
  small files or files with deletion vectors, read without a replay.

    >>> from delta_ops.maintenance.due import what_is_due
    >>> report = what_is_due("s3://bucket/table")
    >>> [need.component for need in report.runnable]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from delta_ops.errors import CorruptLogError, InvalidTablePropertyError, UnsupportedFeatureError
from delta_ops.log import (
    DEFAULT_CHECKPOINT_INTERVAL,
    LogState,
    TableSettings,
    inspect_log,
    read_settings,
)
from delta_ops.protocol.filenames import LogFileKind
from delta_ops.storage import Storage, TableLike

CHECKPOINT = "checkpoint"
VERSION_CHECKSUM = "version_checksum"
LOG_COMPACTION = "log_compaction"
#: Every component `due` decides about, in report order.
COMPONENTS = (CHECKPOINT, VERSION_CHECKSUM, LOG_COMPACTION)
#: The operation each component performs (the `ensure_supported` gate).
OPERATIONS = {CHECKPOINT: "checkpoint", VERSION_CHECKSUM: "checksum", LOG_COMPACTION: "compaction"}


@dataclass(frozen=True)
class DuePolicy:
    """What the caller asks for (None: follow the table's properties).

    Attributes:
        checkpoint_interval: commits between checkpoints (None: `delta.checkpointInterval`).
        checksums: whether every version should have a `.crc`.
        compaction_interval: commits per compaction file (None: `delta.logCompactionInterval`,
            else off; 0: off).
    """

    checkpoint_interval: int | None = None
    checksums: bool = True
    compaction_interval: int | None = None


@dataclass(frozen=True)
class Need:
    """One component's verdict.

    Attributes:
        component: checkpoint, version_checksum or log_compaction.
        due: whether the policy asks for it now.
        version: the version it would run at (the last window's end for compaction).
        reason: why it is due, or why not.
        blocked_by: features (or a protocol problem) that keep delta_ops from running it;
            empty when it may run.
    """

    component: str
    due: bool
    version: int
    reason: str
    blocked_by: tuple[str, ...] = ()

    @property
    def runnable(self) -> bool:
        """Due, and the table's protocol lets delta_ops run it."""
        return self.due and not self.blocked_by

    def to_dict(self) -> dict[str, Any]:
        return {"due": self.due, "version": self.version, "reason": self.reason,
                "blocked_by": list(self.blocked_by)}


@dataclass(frozen=True)
class DueReport:
    """What one table needs now (`due`).

    Attributes:
        table: the table root URI.
        version: the latest version.
        checkpoint_version: the newest complete checkpoint (None: none).
        commits_since_checkpoint: commits a reader replays on top of it.
        checkpoint_interval: the interval in force.
        compaction_interval: the compaction interval in force (None: off).
        needs: one verdict per component, in `COMPONENTS` order.
    """

    table: str
    version: int
    checkpoint_version: int | None
    commits_since_checkpoint: int
    checkpoint_interval: int
    compaction_interval: int | None
    needs: tuple[Need, ...]

    def need(self, component: str) -> Need:
        return next(n for n in self.needs if n.component == component)

    @property
    def runnable(self) -> list[Need]:
        """What is due and may run."""
        return [n for n in self.needs if n.runnable]

    @property
    def blocked(self) -> list[Need]:
        """What is due but the table's protocol forbids."""
        return [n for n in self.needs if n.due and n.blocked_by]

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "version": self.version,
            "checkpoint_version": self.checkpoint_version,
            "commits_since_checkpoint": self.commits_since_checkpoint,
            "checkpoint_interval": self.checkpoint_interval,
            "compaction_interval": self.compaction_interval,
            "due": [n.component for n in self.runnable],
            "components": {n.component: n.to_dict() for n in self.needs},
        }


# ---- the decisions ---------------------------------------------------------------------------


def checkpoint_interval(policy_interval: int | None, settings: TableSettings | None) -> int:
    """The policy's interval, else the table's delta.checkpointInterval (10)."""
    if policy_interval is not None:
        return policy_interval
    return settings.checkpoint_interval if settings is not None else DEFAULT_CHECKPOINT_INTERVAL


def compaction_interval(settings: TableSettings, override: int | None) -> int | None:
    """The policy's compaction interval, else delta.logCompactionInterval; None: off (also
    when the property is not a non-negative integer)."""
    # Imported here: the compaction module reads Arrow, which the Dagster definitions (that
    # import this module for its names) do not need to load.
    from delta_ops.maintenance.compaction import compaction_interval as _compaction_interval

    try:
        return _compaction_interval(settings.configuration, override=override)
    except ValueError:
        return None


def unsupported(settings: TableSettings, component: str) -> tuple[str, ...]:
    """Features that keep `component` from running on the table (empty: it may run)."""
    try:
        settings.table_configuration.ensure_supported(OPERATIONS[component])
    except UnsupportedFeatureError as exc:
        return tuple(exc.features)
    except CorruptLogError as exc:
        return (exc.reason,)
    return ()


def checkpoint_kind(state: LogState) -> str | None:
    """The kind of the checkpoint the latest version's segment starts from (the
    `CheckpointKind` values: classic, v2-classic, v2-uuid, multi-part), None without one.
    A classic-named checkpoint is V2 when `_last_checkpoint` says so for its version."""
    ckpt = state.segment.checkpoint
    if ckpt is None:
        return None
    if ckpt.kind == LogFileKind.CHECKPOINT_UUID:
        return "v2-uuid"
    if ckpt.kind == LogFileKind.CHECKPOINT_MULTIPART:
        return "multi-part"
    hint = state.segment.last_checkpoint
    if hint is not None and hint.version == ckpt.version and hint.v2_checkpoint is not None:
        return "v2-classic"
    return "classic"


def wanted_checkpoint_kind(settings: TableSettings) -> str:
    """The kind the checkpoint writer picks by default (`checkpoint.plan.default_kind`):
    v2-uuid when `delta.checkpointPolicy` = v2 and the protocol supports v2Checkpoint."""
    supported = settings.table_configuration.is_feature_supported("v2Checkpoint")
    if supported and settings.checkpoint_v2:
        return "v2-uuid"
    return "classic"


def checkpoint_current(state: LogState, settings: TableSettings) -> bool:
    """The latest version already has a checkpoint of the kind the writer would write, and
    `_last_checkpoint` names it: writing one would find it there and change nothing."""
    hint = state.segment.last_checkpoint
    return (
        state.checkpoint_version == state.version
        and hint is not None
        and hint.version == state.version
        and checkpoint_kind(state) == wanted_checkpoint_kind(settings)
    )


def checkpoint_need(state: LogState, settings: TableSettings, policy: DuePolicy) -> Need:
    """Whether a checkpoint is due: commits since the last checkpoint reached the interval."""
    interval = checkpoint_interval(policy.checkpoint_interval, settings)
    since = state.commits_since_checkpoint
    if state.checkpoint_version == state.version:
        due, reason = False, f"version {state.version} already has a checkpoint"
    elif since >= interval:
        due, reason = True, f"{since} commits since the last checkpoint (interval {interval})"
    else:
        due, reason = False, (
            f"{since} commits since the last checkpoint, fewer than the interval {interval}"
        )
    if policy.checkpoint_interval is None:
        try:
            settings.table_configuration.properties.checkpoint_interval  # noqa: B018
        except InvalidTablePropertyError as exc:  # said, not hidden behind the default
            reason += f"; {exc.reason}, so the default {interval} is used"
    return Need(CHECKPOINT, due, state.version, reason, unsupported(settings, CHECKPOINT))


def checksum_need(state: LogState, settings: TableSettings, policy: DuePolicy) -> Need:
    """Whether a version checksum is due: checksums are on and the latest has no `.crc`."""
    v = state.version
    if not policy.checksums:
        due, reason = False, "checksums are off in the policy"
    elif v in state.checksum_versions:
        due, reason = False, f"version {v} has a .crc"
    else:
        due, reason = True, f"version {v} has no .crc"
    return Need(VERSION_CHECKSUM, due, v, reason, unsupported(settings, VERSION_CHECKSUM))


def compaction_need(state: LogState, settings: TableSettings, policy: DuePolicy) -> Need:
    """Whether log compaction is due: the policy plans a window that has no file yet."""
    interval = compaction_interval(settings, policy.compaction_interval)
    blocked = unsupported(settings, LOG_COMPACTION)
    if interval is None:
        return Need(LOG_COMPACTION, False, state.version,
                    "log compaction is off (no interval given, and the table sets no "
                    "delta.logCompactionInterval)", blocked)
    from delta_ops.maintenance.compaction import compaction_plan

    plan = compaction_plan(list(state.listing), interval)
    if not plan:
        return Need(LOG_COMPACTION, False, state.version,
                    f"no window of {interval} commits is left to compact", blocked)
    return Need(LOG_COMPACTION, True, plan[-1][1],
                f"{len(plan)} compaction window(s) of {interval} commits to write", blocked)


def due(state: LogState, settings: TableSettings, policy: DuePolicy | None = None) -> DueReport:
    """What the table needs now (pure): one verdict per component."""
    policy = policy or DuePolicy()
    return DueReport(
        table=state.table,
        version=state.version,
        checkpoint_version=state.checkpoint_version,
        commits_since_checkpoint=state.commits_since_checkpoint,
        checkpoint_interval=checkpoint_interval(policy.checkpoint_interval, settings),
        compaction_interval=compaction_interval(settings, policy.compaction_interval),
        needs=(
            checkpoint_need(state, settings, policy),
            checksum_need(state, settings, policy),
            compaction_need(state, settings, policy),
        ),
    )


def what_is_due(table_or_storage: TableLike, policy: DuePolicy | None = None) -> DueReport:
    """Read the log cheaply (`inspect_log`, `read_settings`) and decide (`due`).

    Args:
        table_or_storage: a `DeltaTable`, a `Storage` rooted at the table, or a table URI.
        policy: what to ask for (default: follow the table's properties, checksums on).

    Raises:
        NotATableError, CorruptLogError: see `delta_ops.log.segment.log_state.inspect_log`.
    """
    storage = Storage.of(table_or_storage)
    state = inspect_log(storage)
    return due(state, read_settings(storage, state), policy)


__all__ = [
    "CHECKPOINT",
    "COMPONENTS",
    "LOG_COMPACTION",
    "OPERATIONS",
    "OPTIMIZE",
    "VERSION_CHECKSUM",
    "DuePolicy",
    "DueReport",
    "LayoutThresholds",
    "Need",
    "checkpoint_current",
    "checkpoint_interval",
    "checkpoint_kind",
    "checkpoint_need",
    "checksum_need",
    "compaction_interval",
    "compaction_need",
    "due",
    "optimize_need",
    "small_files",
    "wanted_checkpoint_kind",
    "what_is_due",
]


# ---- the data layout: OPTIMIZE, from the newest `.crc` (no replay) ---------------------------

OPTIMIZE = "optimize"


@dataclass(frozen=True)
class LayoutThresholds:
    """When a table's data layout needs OPTIMIZE (with its purge of deletion vectors).

    Attributes:
        small_file_bytes: a file under this size is small.
        small_file_share: due when at least this share of the live files is small (and there
            are at least `min_small_files` of them).
        min_small_files: fewer small files than this are never worth a rewrite.
        deletion_vector_share: due when at least this share of the live files carries a
            deletion vector (OPTIMIZE rewrites the files whose deleted rows pass its ratio).
    """

    small_file_bytes: int = 32 * 1024 * 1024
    small_file_share: float = 0.2
    min_small_files: int = 2
    deletion_vector_share: float = 0.1


def small_files(histogram: Any, small_file_bytes: int) -> int:
    """Files a `.crc` file-size histogram (`FileSizeHistogram`) proves smaller than
    `small_file_bytes`: the files of every bin whose upper boundary is at most that size
    (a bin straddling the threshold is not counted)."""
    bounds = list(histogram.sorted_bin_boundaries)
    counts = list(histogram.file_counts)
    total = 0
    for i, count in enumerate(counts):
        upper = bounds[i + 1] if i + 1 < len(bounds) else None
        if upper is not None and upper <= small_file_bytes:
            total += count
    return total


def optimize_need(crc: Any, version: int, thresholds: LayoutThresholds) -> Need:
    """Whether OPTIMIZE is due, from the version checksum `crc` of `version`
    (`delta_ops.protocol.crc.VersionChecksum`: `numFiles`, the file-size histogram and
    `numDeletionVectors`), read without a replay; `crc` None: not due (no checksum says)."""
    if crc is None:
        return Need(OPTIMIZE, False, version, f"version {version} has no .crc to read the "
                    "file sizes from (the version_checksum component writes it)")
    files = crc.num_files
    if not files:
        return Need(OPTIMIZE, False, version, "the table has no live files")
    reasons: list[str] = []
    if crc.file_size_histogram is not None:
        small = small_files(crc.file_size_histogram, thresholds.small_file_bytes)
        if small >= thresholds.min_small_files and small / files >= thresholds.small_file_share:
            reasons.append(f"{small} of {files} files are under {thresholds.small_file_bytes} "
                           f"bytes (share {small / files:.2f} >= "
                           f"{thresholds.small_file_share})")
    dvs = crc.num_deletion_vectors or 0
    if dvs and dvs / files >= thresholds.deletion_vector_share:
        reasons.append(f"{dvs} of {files} files carry a deletion vector (share "
                       f"{dvs / files:.2f} >= {thresholds.deletion_vector_share})")
    if reasons:
        return Need(OPTIMIZE, True, version, "; ".join(reasons))
    return Need(OPTIMIZE, False, version, f"{files} files: small files and deletion vectors "
                "under the thresholds")
