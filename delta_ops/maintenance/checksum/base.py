"""Version checksums: the policy (what optional content a `.crc` carries), the results the
operations return, and the helpers computing, writing and verifying share (reading `N.crc`,
which the log does: `delta_ops.log.read_checksum`; the action dictionaries a checksum lists).

Spec section: "Version Checksum File" (its fields: `setTransactions`, `domainMetadata`,
`allFiles`, in-commit timestamps). The object model lives in `delta_ops.protocol.crc`.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from delta_ops.engine.base import Engine
from delta_ops.errors import (
    ChecksumMismatchError,
)
from delta_ops.maintenance.options import (  # re-exported
    DEFAULT_ALL_FILES_THRESHOLD as DEFAULT_ALL_FILES_THRESHOLD,
)
from delta_ops.protocol.actions import ADD_TYPE
from delta_ops.protocol.crc import (
    FILE_SIZE_BIN_BOUNDARIES,
    LEGACY_HISTOGRAM_FIELD,
    VersionChecksum,
)
from delta_ops.protocol.filenames import LOG_DIR, checksum_name, commit_name
from delta_ops.protocol.table_configuration import TableConfiguration

Method = Literal["auto", "full", "incremental"]


# Operations whose add actions re-add files that are already live (Spark's
# operationNamesWhereAddFilesIgnoredForIncrementalCrc) or whose removes are not of live data
# files (DV tombstones), and manual updates: the incremental path falls back for them.
_READD_OPERATIONS = frozenset(
    {
        "COMPUTE STATS",
        "ROW TRACKING BACKFILL",
        "ROW TRACKING UNBACKFILL",
        "DROP FEATURE",
        "MANUAL UPDATE",
        "DELTA DELETION VECTOR TOMBSTONES",
        "ADD DELETION VECTOR TOMBSTONES",
    }
)
_ADD_FIELDS = tuple(f.name for f in ADD_TYPE)


@dataclass(frozen=True)
class ChecksumPolicy:
    """What optional content a computed checksum carries.

    Attributes:
        all_files_threshold: list `allFiles` when the table has at most this many files
            (None: never).
        max_set_transactions: omit `setTransactions` above this many (None: no limit). It
            is always omitted when `delta.setTransactionRetentionDuration` is set, since
            which transactions are live then depends on the clock.
        max_domain_metadata: omit `domainMetadata` above this many (None: no limit).
        histogram_field: the name the file size histogram is written under: `histogramOpt`
            (what Spark writes by default) or `fileSizeHistogram` (the spec's name).
        boundaries: file size histogram bin boundaries (Spark's by default).
    """

    all_files_threshold: int | None = DEFAULT_ALL_FILES_THRESHOLD
    max_set_transactions: int | None = None
    max_domain_metadata: int | None = None
    histogram_field: str = LEGACY_HISTOGRAM_FIELD
    boundaries: tuple[int, ...] = FILE_SIZE_BIN_BOUNDARIES

    def include_all_files(self, num_files: int) -> bool:
        return self.all_files_threshold is not None and num_files <= self.all_files_threshold


#: The default policy (a frozen value, shared by every operation's default).
DEFAULT_POLICY = ChecksumPolicy()


@dataclass(frozen=True)
class ComputedChecksum:
    """A checksum and how it was obtained ("incremental" or "full", and why not incremental)."""

    version: int
    checksum: VersionChecksum
    method: str
    fallback_reason: str | None = None


@dataclass(frozen=True)
class ChecksumWriteResult:
    """Outcome of writing one `N.crc` (an existing file is a normal outcome, not an error).

    `cross_check` says what the bytes were checked against before they got their name (see
    `_cross_check`); None when nothing was written by this call.
    """

    table: str
    version: int
    file: str
    written: bool
    already_existed: bool
    method: str | None = None
    fallback_reason: str | None = None
    cross_check: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "version": self.version,
            "file": self.file,
            "written": self.written,
            "already_existed": self.already_existed,
            "method": self.method,
            "fallback_reason": self.fallback_reason,
            "cross_check": self.cross_check,
        }


@dataclass(frozen=True)
class ChecksumBackfillResult:
    """Outcome of writing the missing checksums of a range of versions."""

    table: str
    start: int
    end: int
    written: tuple[int, ...]
    already_existed: tuple[int, ...]
    full_computations: int
    incremental_computations: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "start": self.start,
            "end": self.end,
            "written": list(self.written),
            "already_existed": list(self.already_existed),
            "full_computations": self.full_computations,
            "incremental_computations": self.incremental_computations,
        }


@dataclass(frozen=True)
class ChecksumMismatch:
    """A field of `version`'s checksum that does not match the recomputed state."""

    version: int
    field: str
    recorded: Any
    computed: Any

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "field": self.field,
            "recorded": self.recorded,
            "computed": self.computed,
        }


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of verifying one or more `.crc` files.

    Attributes:
        ok: no mismatch in any verified version.
        versions: the versions whose `.crc` was checked.
        mismatches: every mismatching field, all versions together.
        removed_versions: versions of `.crc` files below where the log now starts (log
            cleanup removed their commits; another writer's left the `.crc`): not
            verifiable, not a mismatch (`verify_checksum(all_versions=True)` only).
    """

    table: str
    ok: bool
    versions: tuple[int, ...]
    mismatches: tuple[ChecksumMismatch, ...]
    removed_versions: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "ok": self.ok,
            "versions": list(self.versions),
            "mismatches": [m.to_dict() for m in self.mismatches],
            "removed_versions": list(self.removed_versions),
        }

    def raise_for_mismatch(self) -> None:
        """Raise ChecksumMismatchError naming the first mismatching version and fields."""
        if self.ok:
            return
        first = self.mismatches[0].version
        fields = sorted({m.field for m in self.mismatches if m.version == first})
        raise ChecksumMismatchError(
            f"the version checksum does not match the table state in {', '.join(fields)}",
            table=self.table,
            version=first,
            file=f"{LOG_DIR}/{checksum_name(first)}",
        )


# ---- helpers ------------------------------------------------------------------------------


def _engine(engine: Engine | None) -> Engine:
    if engine is not None:
        return engine
    from delta_ops.engine.local import LocalEngine

    return LocalEngine()


def checksum_path(version: int) -> str:
    """Table-relative path of version `version`'s checksum file."""
    return f"{LOG_DIR}/{checksum_name(version)}"


def _commit_path(version: int) -> str:
    return f"{LOG_DIR}/{commit_name(version)}"


def _first_commit_info(actions: Sequence[Mapping[str, Any]]) -> dict | None:
    for a in actions:
        ci = a.get("commitInfo")
        if isinstance(ci, dict):
            return ci
    return None


def _ict(config: TableConfiguration, version: int, commit_info: Mapping | None) -> int | None:
    """inCommitTimestampOpt: the commit's inCommitTimestamp iff ICT is enabled at `version`."""
    if not config.ict.applies_to(version):
        return None
    if commit_info is None:
        return None
    value = commit_info.get("inCommitTimestamp")
    return int(value) if value is not None else None


def action_dict(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A metaData or protocol action as JSON writes it: None fields dropped, and maps read
    from a Parquet checkpoint (lists of key/value pairs) turned back into objects."""
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if value is None:
            continue
        if key == "configuration" and isinstance(value, list):
            value = dict(value)
        elif key == "format" and isinstance(value, Mapping):
            value = {k: v for k, v in value.items() if v is not None}
            if isinstance(value.get("options"), list):
                value["options"] = dict(value["options"])
            value.setdefault("options", {})
        out[key] = value
    return out


def _txn_retention_configured(metadata: Mapping[str, Any]) -> bool:
    cfg = metadata.get("configuration") or {}
    return cfg.get("delta.setTransactionRetentionDuration") is not None


def _clean_add(add: Mapping[str, Any]) -> dict:
    """An add as listed in `allFiles`: known fields only, None dropped, dataChange false."""
    out: dict[str, Any] = {}
    for name in _ADD_FIELDS:
        value = add.get(name)
        if name == "dataChange":
            value = False
        if value is None:
            continue
        if name in ("partitionValues", "tags") and isinstance(value, list):
            value = dict(value)  # Arrow map -> list of pairs
        elif name == "deletionVector" and isinstance(value, dict):
            if value.get("storageType") is None:
                continue
            value = {k: v for k, v in value.items() if v is not None}
        out[name] = value
    return out


def _cardinality(action: Mapping[str, Any]) -> tuple[int, int]:
    """(1, cardinality) for a file action with a deletion vector, else (0, 0)."""
    dv = action.get("deletionVector")
    if not dv or dv.get("storageType") is None:
        return 0, 0
    return 1, int(dv.get("cardinality") or 0)


def _sorted_txns(txns: Mapping[str, Mapping[str, Any]]) -> tuple[dict, ...]:
    return tuple(dict(txns[k]) for k in sorted(txns))


def _txn_dict(t: Mapping[str, Any]) -> dict:
    out = {"appId": t["appId"], "version": int(t["version"])}
    if t.get("lastUpdated") is not None:
        out["lastUpdated"] = int(t["lastUpdated"])
    return out


def _domain_dict(d: Mapping[str, Any]) -> dict:
    return {
        "domain": d["domain"],
        "configuration": d.get("configuration") or "",
        "removed": False,
    }


def _limited(items: tuple[dict, ...], limit: int | None) -> tuple[dict, ...] | None:
    return None if limit is not None and len(items) > limit else items
