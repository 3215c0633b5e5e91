"""What fsck finds and what it returns: one `Problem` per thing wrong, each with its
severity, and the frozen `FsckResult` (with the `RepairResult` when a repair was asked).

Severities: `error` when data or the log is missing or corrupt (a reader of the table fails
or reads wrong: a live data file or deletion vector that is missing or does not decode, a
gap in the commits, a broken checkpoint or `_last_checkpoint`, a `.crc` that disagrees);
`warning` for leftovers (writers' temporary files, incomplete checkpoints, orphan sidecars,
unreferenced data files VACUUM would delete) and history that no longer reads. The Dagster
check maps `error` to a failed check and `warning` to a warning. Protocol sections: none
(the checks name theirs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ERROR = "error"
WARNING = "warning"

#: Problems `--repair` fixes by removing the live data file they concern.
REPAIRABLE = frozenset({"missing_file", "missing_dv", "corrupt_dv"})


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a table.

    Attributes:
        code: what kind (`missing_file`, `dangling_link`, `size_mismatch`, `missing_dv`,
            `corrupt_dv`, `dv_mismatch`, `unreadable_parquet`, `row_count_mismatch`,
            `checksum_mismatch`, `stale_checksum`, `row_ids`, `missing_external_file`,
            `unchecked_external`,
            the log's codes of `delta_ops.log.check_log`,
            `unreferenced_file`).
        severity: `error` or `warning`.
        file: the file at fault, relative to the table root (or as the log names it when
            outside the root).
        reason: what is wrong with it, one line.
        version: the table version it concerns, when there is one.
        data_file: for a deletion-vector problem, the live data file the DV belongs to.
    """

    code: str
    severity: str
    file: str
    reason: str
    version: int | None = None
    data_file: str | None = None

    def line(self) -> str:
        """The problem as one line of text."""
        of = f" (deletion vector of {self.data_file})" if self.data_file else ""
        return f"{self.severity.upper():7} {self.code:20} {self.file}{of}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code, "severity": self.severity, "file": self.file,
            "reason": self.reason, "version": self.version, "data_file": self.data_file,
        }


@dataclass(frozen=True)
class RepairEntry:
    """One live data file a repair removes (or would remove), and why.

    Attributes:
        path: the data file as the log names it (the `remove` carries this path).
        key: the same file as a path relative to the table root (how problems name it).
        data_file_missing: the data file is not there.
        deletion_vector: its DV file (relative to the root), when it has one on disk.
        deletion_vector_missing: that DV file is not there.
        deletion_vector_corrupt: that DV does not decode (checksum, size or bitmap).
        rows: rows lost with it (`numRecords` less the DV's cardinality), None when its
            statistics lack `numRecords`.
    """

    path: str
    key: str
    data_file_missing: bool
    deletion_vector: str | None
    deletion_vector_missing: bool
    deletion_vector_corrupt: bool
    rows: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path, "key": self.key, "data_file_missing": self.data_file_missing,
            "deletion_vector": self.deletion_vector,
            "deletion_vector_missing": self.deletion_vector_missing,
            "deletion_vector_corrupt": self.deletion_vector_corrupt, "rows": self.rows,
        }


@dataclass(frozen=True)
class RepairResult:
    """What `--repair` did (or, without `confirm`, would do).

    Attributes:
        dry_run: nothing was committed (no `confirm`).
        entries: the live files removed (or to remove), sorted by path.
        rows_lost: rows lost with them, counting only files whose statistics have
            `numRecords`.
        rows_lost_known: every removed file's statistics had `numRecords`.
        version: the version the `FSCK` commit wrote (None: dry run, or nothing to do).
        kept: files a second, direct look found after all (path -> what was seen); never
            removed.
        metrics: the commit's `operationMetrics` (also for a dry run).
    """

    dry_run: bool
    entries: tuple[RepairEntry, ...]
    rows_lost: int
    rows_lost_known: bool
    version: int | None
    kept: tuple[tuple[str, str], ...] = ()
    metrics: dict[str, int] = field(default_factory=dict)

    @property
    def num_files(self) -> int:
        return len(self.entries)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run, "num_files": self.num_files,
            "rows_lost": self.rows_lost, "rows_lost_known": self.rows_lost_known,
            "version": self.version, "metrics": dict(self.metrics),
            "entries": [e.to_dict() for e in self.entries],
            "kept": [{"path": p, "reason": r} for p, r in self.kept],
        }


@dataclass(frozen=True)
class FsckResult:
    """What `delta_ops.fsck` found.

    Attributes:
        table: the table root.
        version: the latest version (None when the log does not read far enough to say).
        problems: every problem found, errors first, then by file.
        num_files: live data files checked.
        num_deletion_vectors: deletion vectors checked (inline ones included).
        num_outside_table: live files (or DV files) outside the table root (data files
            among them checked for existence, up to `external.EXTERNAL_CHECKED`).
        verified_data: Parquet footers were read (`verify_data`).
        notes: what was not checked, and why.
        repair: the repair, when asked.
    """

    table: str
    version: int | None
    problems: tuple[Problem, ...]
    num_files: int
    num_deletion_vectors: int
    num_outside_table: int
    verified_data: bool
    notes: tuple[str, ...] = ()
    repair: RepairResult | None = None

    @property
    def errors(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.severity == ERROR)

    @property
    def warnings(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.severity == WARNING)

    @property
    def ok(self) -> bool:
        """No errors (warnings allowed)."""
        return not self.errors

    @property
    def unrepaired_errors(self) -> tuple[Problem, ...]:
        """Errors a committed repair did not fix (all errors when nothing was committed)."""
        if self.repair is None or self.repair.dry_run or self.repair.version is None:
            return self.errors
        removed = {e.key for e in self.repair.entries}
        return tuple(p for p in self.errors
                     if not (p.code in REPAIRABLE and _data_path(p) in removed))

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table, "version": self.version, "ok": self.ok,
            "num_errors": len(self.errors), "num_warnings": len(self.warnings),
            "num_files": self.num_files, "num_deletion_vectors": self.num_deletion_vectors,
            "num_outside_table": self.num_outside_table,
            "verified_data": self.verified_data, "notes": list(self.notes),
            "problems": [p.to_dict() for p in self.problems],
            "repair": None if self.repair is None else self.repair.to_dict(),
        }


def _data_path(problem: Problem) -> str:
    return problem.data_file if problem.data_file is not None else problem.file


def sort_problems(problems: list[Problem]) -> tuple[Problem, ...]:
    """Errors first, then warnings; by file within each."""
    return tuple(sorted(problems, key=lambda p: (p.severity != ERROR, p.file, p.code)))


__all__ = [
    "ERROR",
    "REPAIRABLE",
    "WARNING",
    "FsckResult",
    "Problem",
    "RepairEntry",
    "RepairResult",
    "sort_problems",
]
