"""The layout plan: which live files OPTIMIZE or PURGE rewrites, grouped into bins (pure).

Spec sections: "Add File and Remove File" (paths, partition values, sizes), "Deletion
Vectors" (a file's `cardinality` is the number of rows its DV deletes), "Partition Value
Serialization" (the `--where` predicate compares the serialized values), "Row Tracking"
(the row-tracking fields a remove must carry).

From the snapshot's live files, per partition:

* OPTIMIZE (bin-packing, Spark's `OPTIMIZE` without ZORDER): the candidates are the files
  smaller than `min_file_size` (default: the target, as Spark's `optimize.minFileSize` and
  `optimize.maxFileSize` are both 1 GiB by default) plus every file whose deletion vector
  deletes more than `max_deleted_rows_ratio` of its rows (Spark's
  `optimize.maxDeletedRowsRatio`, 0.05), which is rewritten even when large. A partition
  with fewer than `min_files` candidates (default 2) is left alone unless one of them must
  be purged; a partition whose only candidate is a single small file without a DV is left
  alone too (rewriting it would change nothing).
* PURGE (`REORG TABLE ... APPLY (PURGE)`): the candidates are every file with a deletion
  vector.

The candidates of a partition, ordered by size then path, are cut into bins. A bin is the
unit of work (one engine task: `rewrite.rewrite_bin`) and of failure (a concurrent change
to one of its files fails that bin only). Its output is written as files of about the
target size each (the writer rolls over to a new file when the one it writes reaches the
target), so a partition whose candidates fit one bin ends with at most
ceil(bytes / target) + 1 files. Packing whole input files into bins of at most the target,
as Spark does, cannot promise that: three files of 0.6 x target stay three files, and many
small files merged shrink (one footer, better encoding), leaving bins far below the target.
A bin holds at most `max_bin_bytes` of input (default 8 x target, at least the target), so
a very large partition is still several tasks and each adds at most one part-size file.

The default target is 256 MiB (`DEFAULT_TARGET_FILE_SIZE`), used when the table sets no
`delta.targetFileSize`. Spark's OPTIMIZE writes up to 1 GiB (`optimize.maxFileSize`);
delta-rs's `optimize.compact()` targets "`delta.targetFileSize` or 100MB" (its docstring).
256 MiB is what Spark itself recorded as `OPTIMIZE_TARGET_SIZE` (268435456) in the tags of
this repository's corpus table `spark__table-with-dv-small`. Between the two engines, it
keeps PURGE's rewrite of a whole file for a few deleted rows affordable while still cutting
small-file counts by orders of magnitude; the rewrite streams, so memory does not grow with
the target.

`where` is a predicate on partition columns only: `col = 'v'`, `col != 'v'` (or `<>`),
`col IN ('a', 'b')`, `col IS NULL`, `col IS NOT NULL`, joined by `AND`. Literals are
compared with the serialized partition values of the log (`'2024-01-01'`, `1`). Anything
else is refused by `InvalidPredicateError` before the plan is made.

Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from delta_ops.errors import InvalidPredicateError
from delta_ops.protocol.path_identity import relative_key

__all__ = [
    "DEFAULT_MAX_DELETED_ROWS_RATIO",
    "DEFAULT_MIN_FILES",
    "DEFAULT_TARGET_FILE_SIZE",
    "BIN_TARGETS",
    "Bin",
    "InputFile",
    "InvalidPredicateError",
    "LayoutPlan",
    "PartitionPredicate",
    "parse_size",
    "parse_where",
    "plan_layout",
    "target_file_size",
]

DEFAULT_TARGET_FILE_SIZE = 256 * 1024 * 1024
DEFAULT_MAX_DELETED_ROWS_RATIO = 0.05
DEFAULT_MIN_FILES = 2
#: A bin holds at most this many targets of input bytes (see the module docstring).
BIN_TARGETS = 8
TARGET_FILE_SIZE_PROPERTY = "delta.targetFileSize"

_UNITS = {"": 1, "b": 1}
for _i, _p in enumerate("kmgt", start=1):
    _UNITS.update({_p: 1024**_i, f"{_p}b": 1024**_i, f"{_p}ib": 1024**_i})


def parse_size(text: str | int, *, what: str = "size") -> int:
    """Bytes from `268435456`, `256mb`, `1g`, `100 MiB` (binary units).

    Raises:
        ValueError: not a positive size.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", str(text))
        unit = (m.group(2).lower() if m else None)
        if m is None or unit not in _UNITS:
            raise ValueError(f"{what} must be a number of bytes like 268435456 or 256mb, "
                             f"got {text!r}")
        value = int(m.group(1)) * _UNITS[unit]
    if value < 1:
        raise ValueError(f"{what} must be at least 1 byte, got {text!r}")
    return value


def target_file_size(configuration: Mapping[str, str], *, table: str | None = None,
                     version: int | None = None) -> int:
    """The table's `delta.targetFileSize`, else `DEFAULT_TARGET_FILE_SIZE`.

    Raises:
        InvalidPredicateError: never; a malformed property raises `ValueError` naming it.
    """
    value = configuration.get(TARGET_FILE_SIZE_PROPERTY)
    if value is None:
        return DEFAULT_TARGET_FILE_SIZE
    try:
        return parse_size(value, what=TARGET_FILE_SIZE_PROPERTY)
    except ValueError as exc:
        raise ValueError(f"{exc} (table {table}, version {version})") from None


# ---- the partition predicate -----------------------------------------------------------

@dataclass(frozen=True)
class PartitionPredicate:
    """A conjunction of (column, op, values) clauses on partition columns (logical names).

    `op` is one of "in", "not in", "is null", "is not null"; `values` are strings.
    """

    text: str
    clauses: tuple[tuple[str, str, tuple[str, ...]], ...]

    def matches(self, values: Mapping[str, str | None]) -> bool:
        """Whether a file with these partition values (logical name -> serialized value)
        satisfies every clause."""
        for column, op, literals in self.clauses:
            v = values.get(column)
            if op == "is null":
                ok = v is None
            elif op == "is not null":
                ok = v is not None
            elif op == "in":
                ok = v is not None and v in literals
            else:
                ok = v is not None and v not in literals
            if not ok:
                return False
        return True


_LITERAL = r"'(?:[^']|'')*'|-?\d+(?:\.\d+)?|true|false"
_CLAUSE = re.compile(
    r"^\s*(?P<col>`[^`]+`|[A-Za-z_][\w.]*)\s*(?:"
    r"(?P<cmp>=|==|!=|<>)\s*(?P<lit>" + _LITERAL + r")"
    r"|(?P<not>not\s+)?in\s*\((?P<list>.*)\)"
    r"|is\s+(?P<isnot>not\s+)?null)\s*$",
    re.IGNORECASE | re.DOTALL,
)


def _literal(text: str) -> str:
    text = text.strip()
    if text.startswith("'"):
        return text[1:-1].replace("''", "'")
    return text.lower() if text.lower() in ("true", "false") else text


def parse_where(where: str, partition_columns: Sequence[str], *,
                table: str | None = None) -> PartitionPredicate:
    """Parse a partition predicate (grammar in the module docstring).

    Raises:
        InvalidPredicateError: a clause that does not parse, or names a column that is not
            a partition column (the message lists the partition columns).
    """
    known = {c.lower(): c for c in partition_columns}
    if not known:
        raise InvalidPredicateError(
            f"--where {where!r}: the table is not partitioned, so there is no partition "
            "column to filter on", table=table)
    clauses = []
    for part in re.split(r"\s+and\s+", where.strip(), flags=re.IGNORECASE):
        m = _CLAUSE.match(part)
        if m is None:
            raise InvalidPredicateError(
                f"--where clause {part.strip()!r} is not one of: col = 'v', col != 'v', "
                "col IN ('a', 'b'), col IS [NOT] NULL (joined by AND)", table=table)
        col = m.group("col").strip("`")
        if col.lower() not in known:
            raise InvalidPredicateError(
                f"--where names column {col!r}, which is not a partition column; OPTIMIZE "
                f"and PURGE filter on partition columns only: {sorted(known.values())}",
                table=table)
        col = known[col.lower()]
        if m.group("cmp"):
            op = "in" if m.group("cmp") in ("=", "==") else "not in"
            values: tuple[str, ...] = (_literal(m.group("lit")),)
        elif m.group("list") is not None:
            items = re.findall(_LITERAL, m.group("list"), flags=re.IGNORECASE)
            rest = re.sub(_LITERAL, "", m.group("list"), flags=re.IGNORECASE)
            if not items or rest.replace(",", "").strip():
                raise InvalidPredicateError(
                    f"--where clause {part.strip()!r}: IN takes a list of literals",
                    table=table)
            op = "not in" if m.group("not") else "in"
            values = tuple(_literal(i) for i in items)
        else:
            op = "is not null" if m.group("isnot") else "is null"
            values = ()
        clauses.append((col, op, values))
    return PartitionPredicate(where.strip(), tuple(clauses))


# ---- the plan -----------------------------------------------------------------------------

@dataclass(frozen=True)
class InputFile:
    """One live file a bin rewrites, with what its remove must carry.

    Attributes:
        path: The path as the log writes it.
        key: The file's storage key (relative to the table root, decoded).
        size: Bytes.
        num_records: Physical rows (stats `numRecords`), None when unknown.
        deleted_rows: Rows its deletion vector deletes (0 without a DV).
        deletion_vector: The DV descriptor as the log writes it, None without one.
        base_row_id, default_row_commit_version: Row tracking fields, None when absent.
        stats, tags: As the add wrote them (carried into the remove, as Spark does).
        partition_values: Physical partition column -> serialized value.
    """

    path: str
    key: str
    size: int
    num_records: int | None
    deleted_rows: int
    deletion_vector: Mapping[str, Any] | None
    base_row_id: int | None
    default_row_commit_version: int | None
    stats: str | None
    tags: Mapping[str, str] | None
    partition_values: Mapping[str, str | None]

    @property
    def deleted_ratio(self) -> float:
        if not self.deleted_rows:
            return 0.0
        if not self.num_records:
            return 1.0
        return self.deleted_rows / self.num_records

    def file_key(self) -> tuple[str, str | None]:
        """(path, DV unique id): what must still be live, unchanged, for the bin to commit."""
        dv = self.deletion_vector
        if not dv:
            return self.key, None
        offset = dv.get("offset")
        uid = f"{dv['storageType']}{dv['pathOrInlineDv']}"
        return self.key, uid if offset is None else f"{uid}@{offset}"


@dataclass(frozen=True)
class Bin:
    """Input files of one partition rewritten together by one task.

    Attributes:
        index: Position in the plan.
        partition_values: Physical partition column -> serialized value (the new adds').
        directory: Storage directory of the new files ("" for the root).
        files: The inputs.
    """

    index: int
    partition_values: Mapping[str, str | None]
    directory: str
    files: tuple[InputFile, ...]

    @property
    def input_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def deletion_vectors(self) -> int:
        return sum(1 for f in self.files if f.deletion_vector)


@dataclass(frozen=True)
class LayoutPlan:
    """What one OPTIMIZE or PURGE run rewrites.

    Attributes:
        operation: "optimize" or "purge".
        version: The snapshot version planned on.
        target_size: Target output file size in bytes.
        bins: The bins, in order.
        files_considered: Live files the predicate selected.
        bytes_considered: Their bytes.
        skipped_outside_root: Live files not under the table root (never rewritten).
        where: The predicate text, None without one.
        settings: The sizes and thresholds the plan applied.
        logical_names: Physical -> logical partition column names (for reports).
    """

    operation: str
    version: int
    target_size: int
    bins: tuple[Bin, ...]
    files_considered: int
    bytes_considered: int
    skipped_outside_root: int = 0
    where: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    logical_names: Mapping[str, str] = field(default_factory=dict)

    @property
    def num_files(self) -> int:
        return sum(len(b.files) for b in self.bins)

    @property
    def num_bytes(self) -> int:
        return sum(b.input_bytes for b in self.bins)

    def to_dict(self) -> dict[str, Any]:
        return {
            "operation": self.operation,
            "version": self.version,
            "target_size": self.target_size,
            "where": self.where,
            "bins": len(self.bins),
            "files": self.num_files,
            "bytes": self.num_bytes,
            "files_considered": self.files_considered,
            "bytes_considered": self.bytes_considered,
            "skipped_outside_root": self.skipped_outside_root,
            "settings": dict(self.settings),
            "bin_details": [
                {
                    "partition": {self.logical_names.get(k, k): v
                                  for k, v in b.partition_values.items()},
                    "files": len(b.files),
                    "bytes": b.input_bytes,
                    "deletion_vectors": b.deletion_vectors,
                }
                for b in self.bins
            ],
        }


def _num_records(stats: str | None) -> int | None:
    if not stats:
        return None
    try:
        value = orjson.loads(stats).get("numRecords")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def input_files(files: Any, root: str) -> tuple[list[InputFile], int]:
    """The snapshot's live files (an Arrow table of add actions) as `InputFile`s, and how
    many lie outside the table root (left out)."""
    out: list[InputFile] = []
    outside = 0
    for row in files.to_pylist():
        key = relative_key(row["path"], root)
        if key is None:
            outside += 1
            continue
        dv = row.get("deletionVector")
        if dv is not None and dv.get("storageType") is None:
            dv = None
        if dv is not None:
            dv = {k: v for k, v in dv.items() if v is not None}
        tags = row.get("tags")
        out.append(
            InputFile(
                path=row["path"],
                key=key,
                size=int(row.get("size") or 0),
                num_records=_num_records(row.get("stats")),
                deleted_rows=int(dv.get("cardinality") or 0) if dv else 0,
                deletion_vector=dv,
                base_row_id=row.get("baseRowId"),
                default_row_commit_version=row.get("defaultRowCommitVersion"),
                stats=row.get("stats"),
                tags=dict(tags) if tags else None,
                partition_values=dict(row.get("partitionValues") or []),
            )
        )
    return out, outside


def _directory(key: str) -> str:
    return key.rpartition("/")[0]


def plan_layout(
    files: Any,
    *,
    root: str,
    version: int,
    operation: str,
    partition_columns: Mapping[str, str],
    target_size: int,
    min_file_size: int | None = None,
    min_files: int = DEFAULT_MIN_FILES,
    max_deleted_rows_ratio: float = DEFAULT_MAX_DELETED_ROWS_RATIO,
    max_bin_bytes: int | None = None,
    where: PartitionPredicate | None = None,
) -> LayoutPlan:
    """Plan an OPTIMIZE ("optimize") or PURGE ("purge") run (rules in the module docstring).

    Args:
        files: The snapshot's live files (`Snapshot.files`).
        root: The table root (paths outside it are left out and counted).
        version: The snapshot version.
        operation: "optimize" or "purge".
        partition_columns: Logical -> physical partition column names.
        target_size: Target output file size (bytes).
        min_file_size: OPTIMIZE: files below it are candidates (default the target).
        min_files: OPTIMIZE: fewest candidates a partition needs to be compacted.
        max_deleted_rows_ratio: OPTIMIZE: a file whose DV deletes more than this share of
            its rows is rewritten whatever its size.
        max_bin_bytes: Most input bytes per bin (default `BIN_TARGETS` x target).
        where: Only partitions this predicate selects.
    """
    if operation not in ("optimize", "purge"):
        raise ValueError(f"operation must be 'optimize' or 'purge', got {operation!r}")
    if target_size < 1:
        raise ValueError(f"target size must be at least 1 byte, got {target_size}")
    if min_files < 1:
        raise ValueError(f"min_files must be at least 1, got {min_files}")
    if not 0.0 <= max_deleted_rows_ratio <= 1.0:
        raise ValueError(
            f"max_deleted_rows_ratio must be between 0 and 1, got {max_deleted_rows_ratio}")
    min_size = target_size if min_file_size is None else min_file_size
    cap = max(target_size, max_bin_bytes or BIN_TARGETS * target_size)
    physical_to_logical = {p: lg for lg, p in partition_columns.items()}
    candidates, outside = input_files(files, root)
    by_partition: dict[tuple, list[InputFile]] = {}
    considered = 0
    considered_bytes = 0
    for f in candidates:
        logical = {physical_to_logical.get(k, k): v for k, v in f.partition_values.items()}
        if where is not None and not where.matches(logical):
            continue
        considered += 1
        considered_bytes += f.size
        key = tuple(sorted(f.partition_values.items(), key=lambda kv: kv[0]))
        by_partition.setdefault(key, []).append(f)
    bins: list[Bin] = []
    for part_key in sorted(by_partition, key=repr):
        group = by_partition[part_key]
        if operation == "purge":
            chosen = [f for f in group if f.deletion_vector]
        else:
            must = [f for f in group
                    if f.deletion_vector and f.deleted_ratio > max_deleted_rows_ratio]
            purged = {id(f) for f in must}
            small = [f for f in group if f.size < min_size and id(f) not in purged]
            chosen = must + small
            if not must and (len(small) < max(min_files, 2)):
                continue
        if not chosen:
            continue
        chosen.sort(key=lambda f: (f.size, f.path))
        current: list[InputFile] = []
        current_bytes = 0
        groups: list[list[InputFile]] = []
        for f in chosen:
            if current and current_bytes + f.size > cap:
                groups.append(current)
                current, current_bytes = [], 0
            current.append(f)
            current_bytes += f.size
        if current:
            groups.append(current)
        for g in groups:
            bins.append(Bin(len(bins), dict(part_key), _directory(g[0].key), tuple(g)))
    return LayoutPlan(
        operation=operation,
        version=version,
        target_size=target_size,
        bins=tuple(bins),
        files_considered=considered,
        bytes_considered=considered_bytes,
        skipped_outside_root=outside,
        where=None if where is None else where.text,
        logical_names=physical_to_logical,
        settings={
            "min_file_size": min_size,
            "min_files": min_files,
            "max_deleted_rows_ratio": max_deleted_rows_ratio,
            "max_bin_bytes": cap,
        },
    )


def expected_max_files(total_bytes: int, target: int) -> int:
    """ceil(total_bytes / target) + 1: the most files a partition that fit one bin ends with."""
    return math.ceil(total_bytes / target) + 1
