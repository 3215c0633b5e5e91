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

`where` is a predicate on partition columns only (`delta_ops.layout.predicate`: its grammar,
`parse_where`, re-exported here), evaluated once per partition.

The plan reads the live files column by column (Arrow and numpy over every file) and makes
Python objects only for the files its bins take: a table of a million small files plans in
a few hundred MB beside its snapshot, not in gigabytes.

Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

from delta_ops.errors import InvalidPredicateError
from delta_ops.layout.predicate import PartitionPredicate, parse_where
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


# ---- the plan -----------------------------------------------------------------------------

class InputFile(NamedTuple):
    """One live file a bin rewrites, with what its remove must carry (a named tuple: a
    plan of a million small files makes a million of them, and a tuple is the cheapest
    immutable record to build).

    Attributes:
        path: The path as the log writes it.
        key: The file's storage key (relative to the table root, decoded).
        size: Bytes.
        num_records: Physical rows (stats `numRecords`), None when unknown.
        deleted_rows: Rows its deletion vector deletes (0 without a DV).
        deletion_vector: The DV descriptor as the log writes it, None without one.
        base_row_id, default_row_commit_version: Row tracking fields, None when absent.
        partition_values: Physical partition column -> serialized value (one mapping per
            partition, shared by its files: read only).
        row: The file's row in the planned snapshot's `files`, where the remove takes the
            add's `stats` and `tags` from (`layout.commit`); a plan of a million files
            does not hold a million statistics strings.
    """

    path: str
    key: str
    size: int
    num_records: int | None
    deleted_rows: int
    deletion_vector: Mapping[str, Any] | None
    base_row_id: int | None
    default_row_commit_version: int | None
    partition_values: Mapping[str, str | None]
    row: int

    @property
    def deleted_ratio(self) -> float:
        return _deleted_ratio(self.deleted_rows, self.num_records)

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


def _deleted_ratio(deleted_rows: int, num_records: int | None) -> float:
    """The share of a file's rows its deletion vector deletes (1.0 when its row count is
    unknown or zero)."""
    if not deleted_rows:
        return 0.0
    if not num_records:
        return 1.0
    return deleted_rows / num_records


def _num_records(stats: str | None) -> int | None:
    if not stats:
        return None
    try:
        value = orjson.loads(stats).get("numRecords")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _partition_values(files: Any, physical: Sequence[str]) -> tuple[list[dict], Any]:
    """The distinct partitions of the live files and each file's partition number:
    (`[{physical column: value}]`, an int64 numpy array with one entry per file). A value
    missing from a file's `partitionValues` reads as null, as a null value does. Arrow's
    `map_lookup` reads the map column without a Python object per file."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from delta_ops.protocol.arrays import constant_string

    n = files.num_rows
    if not n:
        return [], np.zeros(0, dtype=np.int64)
    if not physical:
        return [{}], np.zeros(n, dtype=np.int64)
    column = files.column("partitionValues")
    if pa.types.is_map(column.type):
        # The key as a scalar taken from an array: a Python string would become one
        # through `pa.scalar`, which imports pandas (protocol.arrays).
        values = [pc.map_lookup(column, constant_string(name, 1)[0], "first")
                  for name in physical]
    else:  # a table built by hand: (key, value) pairs per row
        rows = [dict(r or ()) for r in column.to_pylist()]
        values = [pa.array([r.get(name) for r in rows], pa.string()) for name in physical]
    codes, dictionaries = [], []
    for v in values:
        v = v.combine_chunks() if isinstance(v, pa.ChunkedArray) else v
        encoded = pc.dictionary_encode(v, null_encoding="encode")
        codes.append(encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64))
        dictionaries.append(encoded.dictionary.to_pylist())
    if len(codes) == 1:
        combos, inverse = np.arange(len(dictionaries[0]))[:, None], codes[0]
    else:
        combos, inverse = np.unique(np.stack(codes, axis=1), axis=0, return_inverse=True)
    partitions = [
        {name: dictionaries[i][c] for i, (name, c) in enumerate(zip(physical, combo, strict=True))}
        for combo in combos.tolist()
    ]
    return partitions, np.asarray(inverse, dtype=np.int64).reshape(n)


def _int_column(files: Any, name: str, default: int = 0) -> Any:
    """Column `name` as an int64 numpy array, nulls (and a missing column) as `default`."""
    import numpy as np
    import pyarrow as pa

    if name not in files.column_names or pa.types.is_null(files.column(name).type):
        return np.full(files.num_rows, default, dtype=np.int64)
    return files.column(name).fill_null(default).to_numpy().astype(np.int64)


def _deletion_vectors(files: Any) -> tuple[Any, Any]:
    """(has a DV, its cardinality) per file, as numpy arrays; a DV descriptor without a
    storage type counts as none."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = files.num_rows
    column = files.column("deletionVector") if "deletionVector" in files.column_names else None
    if column is None or not pa.types.is_struct(column.type):
        return np.zeros(n, dtype=bool), np.zeros(n, dtype=np.int64)
    names = {column.type.field(i).name for i in range(column.type.num_fields)}
    has = pc.is_valid(pc.struct_field(column, "storageType")).to_numpy(zero_copy_only=False)
    if "cardinality" not in names:
        return has, np.zeros(n, dtype=np.int64)
    cardinality = pc.struct_field(column, "cardinality").fill_null(0)
    return has, cardinality.to_numpy().astype(np.int64)


def _keys(files: Any, root: str) -> tuple[Any, dict[int, str]]:
    """Which files lie under `root` (a numpy bool array) and, for those whose storage key
    is not their path as written, the key by row. A path `READER_PATTERN` does not match
    (no escape, scheme, absolute start, empty or dot segment) is its own key: one Arrow
    pass finds the few others (`read_otherwise`), and `relative_key` reads those (and an
    empty path) one by one."""
    import numpy as np

    from delta_ops.protocol.file_actions import read_otherwise

    inside = np.ones(files.num_rows, dtype=bool)
    differs: dict[int, str] = {}
    if not files.num_rows:
        return inside, differs
    paths = files.column("path")
    odd = read_otherwise(paths)
    rows = np.flatnonzero(odd.to_numpy(zero_copy_only=False))
    for row, path in zip(rows.tolist(), paths.take(rows).to_pylist(), strict=True):
        key = relative_key(path, root)
        if key is None:
            inside[row] = False
        elif key != path:
            differs[row] = key
    return inside, differs


def _input_files(files: Any, rows: Any, keys: Mapping[int, str], sizes: Any,
                 has_dv: Any, cardinality: Any, num_records: Sequence[int | None],
                 partitions: Sequence[Mapping[str, str | None]]) -> list[InputFile]:
    """The `InputFile`s of `rows` (numpy row numbers into `files`), in that order, the
    i-th with `num_records[i]` rows in partition `partitions[i]`."""
    if not len(rows):
        return []
    taken = files.select([c for c in ("path", "deletionVector", "baseRowId",
                                      "defaultRowCommitVersion") if c in files.column_names]
                         ).take(rows)
    paths = taken.column("path").to_pylist()
    row_list = rows.tolist()
    dv_rows = [i for i, r in enumerate(row_list) if has_dv[r]]
    dvs = dict(zip(dv_rows, taken.column("deletionVector").take(dv_rows).to_pylist(),
                   strict=True)) if dv_rows else {}
    base = (taken.column("baseRowId").to_pylist() if "baseRowId" in taken.column_names
            else [None] * len(paths))
    commit = (taken.column("defaultRowCommitVersion").to_pylist()
              if "defaultRowCommitVersion" in taken.column_names else [None] * len(paths))
    out = []
    for i, r in enumerate(row_list):
        dv = dvs.get(i)
        if dv is not None:
            dv = {k: v for k, v in dv.items() if v is not None}
        path = paths[i]
        out.append(InputFile(  # positional, in the order of the fields
            path, keys.get(r, path), int(sizes[r]), num_records[i],
            int(cardinality[r] or 0) if dv else 0, dv, base[i], commit[i], partitions[i], r))
    return out


def _records_of(files: Any, rows: Any) -> list[int | None]:
    """`numRecords` from the stats of `rows` (numpy row numbers), in their order; the
    stats strings are read 65,536 at a time."""
    if not len(rows) or "stats" not in files.column_names:
        return [None] * len(rows)
    column = files.column("stats")
    out: list[int | None] = []
    for start in range(0, len(rows), 65_536):
        out += map(_num_records, column.take(rows[start:start + 65_536]).to_pylist())
    return out


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
    import numpy as np

    min_size = target_size if min_file_size is None else min_file_size
    cap = max(target_size, max_bin_bytes or BIN_TARGETS * target_size)
    physical_to_logical = {p: lg for lg, p in partition_columns.items()}
    # Column by column, with numpy arrays over every live file; Python objects only for the
    # files a bin takes (a million small files cost hundreds of MB, not gigabytes).
    partitions, partition_of = _partition_values(files, list(partition_columns.values()))
    sizes = _int_column(files, "size")
    has_dv, cardinality = _deletion_vectors(files)
    inside, keys = _keys(files, root)
    outside = int((~inside).sum())
    order = np.argsort(partition_of, kind="stable")
    bounds = np.searchsorted(partition_of[order], np.arange(len(partitions) + 1))
    selected: list[tuple[dict, Any]] = []
    considered = 0
    considered_bytes = 0
    for p, values in enumerate(partitions):
        rows = order[bounds[p]:bounds[p + 1]]
        rows = rows[inside[rows]]
        if not len(rows):
            continue
        logical = {physical_to_logical.get(k, k): v for k, v in values.items()}
        if where is not None and not where.matches(logical):
            continue
        considered += len(rows)
        considered_bytes += int(sizes[rows].sum())
        selected.append((values, rows))
    # Which files each partition rewrites (numpy), then their InputFiles from one `take` of
    # every chosen row (a take per partition would copy the whole chunked column each time).
    with_dv = has_dv & (cardinality > 0)
    dv_rows = np.flatnonzero(with_dv & inside) if operation != "purge" else np.zeros(0, int)
    ratio_records = dict(zip(dv_rows.tolist(), _records_of(files, dv_rows), strict=True))
    picked: list[tuple[dict, Any]] = []
    # Partitions in the order of their sorted (column, value) pairs' repr, as before.
    for values, rows in sorted(selected, key=lambda s: repr(tuple(sorted(s[0].items())))):
        if operation == "purge":
            chosen = rows[has_dv[rows]]
        else:
            must = np.array([r for r in rows[with_dv[rows]].tolist() if _deleted_ratio(
                int(cardinality[r]), ratio_records[r]) > max_deleted_rows_ratio],
                dtype=np.int64)
            small = rows[(sizes[rows] < min_size) & ~np.isin(rows, must)]
            if not len(must) and len(small) < max(min_files, 2):
                continue
            chosen = np.concatenate([must, small])
        if len(chosen):
            picked.append((values, chosen))
    every = (np.concatenate([c for _, c in picked]) if picked
             else np.zeros(0, dtype=np.int64))
    inputs = _input_files(files, every, keys, sizes, has_dv, cardinality,
                          _records_of(files, every),
                          [values for values, c in picked for _ in range(len(c))])
    bins: list[Bin] = []
    start = 0
    for values, chosen in picked:
        files_ = inputs[start:start + len(chosen)]
        start += len(chosen)
        files_.sort(key=lambda f: (f.size, f.path))
        current: list[InputFile] = []
        current_bytes = 0
        groups: list[list[InputFile]] = []
        for f in files_:
            if current and current_bytes + f.size > cap:
                groups.append(current)
                current, current_bytes = [], 0
            current.append(f)
            current_bytes += f.size
        if current:
            groups.append(current)
        for g in groups:
            bins.append(Bin(len(bins), dict(values), _directory(g[0].key), tuple(g)))
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
