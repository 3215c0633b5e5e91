"""COMPUTE STATS: give live files the statistics the table asks for, computed from their data.

Spec sections: "Per-file Statistics", "Add File and Remove File" (a file re-added with
`dataChange=false` only rearranges; its other fields are kept), "Deletion Vectors",
"Row Tracking" (re-adds keep `baseRowId` and `defaultRowCommitVersion`), "Commit
Provenance Information".

Like Delta Spark's `ANALYZE TABLE t COMPUTE DELTA STATISTICS` (`StatisticsCollection.recompute`,
commitInfo `operation` `COMPUTE STATS`, `operationParameters` `{"predicate": "[\"true\"]"}`,
no `operationMetrics`, `isolationLevel` `SnapshotIsolation` as Spark writes for commits that
change no data):

1. Plan (`plan_stats`, pure over the snapshot): the live files without statistics (no
   `stats`, or no `numRecords`), and those whose statistics cover fewer columns than the
   table now asks for (a stats column missing from `nullCount`: written before
   `delta.dataSkippingNumIndexedCols` / `delta.dataSkippingStatsColumns` grew, or before a
   column was added). `recompute_all` takes every live file. Nothing else is read.
2. Compute (`layout.file_stats`): each file's data is read row group by row group; with a
   deletion vector the column statistics are those of the valid rows (tight bounds, as
   Spark's COMPUTE STATS commits) and `numRecords` stays the physical count.
3. Commit, `batch_size` files per commit: each file re-added as it is live (path, size,
   partition values, deletion vector, row-tracking fields, tags kept) with the new `stats`
   and `dataChange=false`, through `commit.Transaction` on a refreshed snapshot. A file a
   concurrent commit removed, or whose deletion vector changed, is dropped from the batch
   (the transaction's conflict check refuses the commit if that happens after the
   refresh; the batch is then planned again): a removed file is never resurrected and a
   changed file keeps its new deletion vector. A re-run takes the files left over.

Not done, deliberately: variant min/max (the spec's Z85 path bounds of shredded variants)
are not computed; with `recompute_all`, a file whose statistics carry variant bounds keeps
its statistics rather than lose them (counted in `files_kept`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.commit import Transaction
from delta_ops.commit.refresh import refresh_snapshot
from delta_ops.commit.transaction import Clock
from delta_ops.errors import CommitConflictError
from delta_ops.layout.file_stats import file_stats
from delta_ops.layout.statistics import StatsCollector
from delta_ops.log import Snapshot, load_snapshot
from delta_ops.protocol.arrays import string_array
from delta_ops.protocol.path_identity import dv_unique_id
from delta_ops.protocol.schema import PrimitiveType
from delta_ops.protocol.table_configuration import TableConfiguration
from delta_ops.storage import Storage, TableLike

__all__ = [
    "COMPUTE_STATS",
    "DEFAULT_STATS_BATCH_SIZE",
    "StatsPlan",
    "StatsProgress",
    "StatsResult",
    "compute_stats",
    "plan_stats",
]

#: commitInfo `operation`, as Delta Spark's `DeltaOperations.ComputeStats` names it.
COMPUTE_STATS = "COMPUTE STATS"
#: Files re-added per commit.
DEFAULT_STATS_BATCH_SIZE = 1000
#: Consecutive conflicting commits (each batch re-planned) before giving up.
DEFAULT_MAX_CONFLICTS = 20
# Spark's `OperationWithPredicates` writes the predicates' SQL as a JSON array; ANALYZE
# without a partition filter recomputes with the predicate `true`.
_PARAMETERS = {"predicate": orjson.dumps(["true"]).decode()}


@dataclass(frozen=True)
class StatsPlan:
    """Which live files get statistics, from the snapshot alone.

    Attributes:
        version: the snapshot version planned on.
        files_total: live files.
        missing: paths of files without statistics (or without `numRecords`).
        stale: paths of files whose statistics lack a column the table now asks for.
        others: paths of the other files taken (`recompute_all`).
        kept: paths of files left alone although asked for: their statistics carry bounds
            delta_ops does not compute (variant bounds).
    """

    version: int
    files_total: int
    missing: tuple[str, ...]
    stale: tuple[str, ...]
    others: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()

    @property
    def paths(self) -> tuple[str, ...]:
        """Every path to recompute, in the state's order (missing, stale, others)."""
        return self.missing + self.stale + self.others


@dataclass(frozen=True)
class StatsProgress:
    """Reported after each commit: the version written, files updated and skipped so far,
    and files planned."""

    version: int
    files_updated: int
    files_skipped: int
    files_planned: int


@dataclass(frozen=True)
class StatsResult:
    """What `compute_stats` did (or, on a dry run, would do).

    Attributes:
        table: the table root.
        read_version: the version planned on.
        dry_run: nothing was read or written beyond the log.
        files_total: live files at `read_version`.
        files_missing_stats: files without statistics.
        files_stale_stats: files whose statistics lack columns the table asks for.
        files_planned: files planned (missing + stale, or every file with `recompute_all`,
            minus `files_kept`).
        files_kept: files left alone: their statistics carry bounds delta_ops does not
            compute (variant bounds).
        files_updated: files re-added with new statistics.
        files_skipped: planned files a concurrent commit removed or changed (left to them).
        versions: the versions committed, one per batch.
        conflicts: commits planned again after a conflicting concurrent commit.
        paths: the planned paths (the first 1,000).
    """

    table: str
    read_version: int
    dry_run: bool
    files_total: int
    files_missing_stats: int
    files_stale_stats: int
    files_planned: int
    files_kept: int
    files_updated: int
    files_skipped: int
    versions: tuple[int, ...]
    conflicts: int
    paths: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["versions"] = list(self.versions)
        out["paths"] = list(self.paths)
        return out


# ---- planning ---------------------------------------------------------------------------------


def _leaf_paths(tree: Any, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    if not isinstance(tree, dict):
        return {prefix}
    out: set[tuple[str, ...]] = set()
    for k, v in tree.items():
        out |= _leaf_paths(v, (*prefix, k))
    return out


def _variant_paths(config: TableConfiguration) -> set[tuple[str, ...]]:
    types = StatsCollector(config).column_types
    return {path for path, t in types.items() if t == PrimitiveType("variant")}


def _has_any(tree: Any, paths: set[tuple[str, ...]]) -> bool:
    return any(p in paths for p in _leaf_paths(tree)) if isinstance(tree, dict) else False


def plan_stats(snapshot: Snapshot, *, recompute_all: bool = False) -> StatsPlan:
    """The files to give statistics (see the module docstring); pure over the snapshot."""
    files = snapshot.files
    config = snapshot.table_configuration
    wanted = set(StatsCollector(config).columns)
    variants = _variant_paths(config)
    missing: list[str] = []
    stale: list[str] = []
    others: list[str] = []
    kept: list[str] = []
    for path, text in _paths_and_stats(files):
        stats = orjson.loads(text) if text else None
        if not isinstance(stats, dict) or not isinstance(stats.get("numRecords"), int):
            missing.append(path)
            continue
        recorded = _leaf_paths(stats.get("nullCount") or {}) if wanted else set()
        if not wanted <= recorded:
            stale.append(path)
        elif recompute_all:
            bounds = stats.get("minValues"), stats.get("maxValues")
            if variants and any(_has_any(b, variants) for b in bounds):
                kept.append(path)
            else:
                others.append(path)
    return StatsPlan(
        snapshot.version, files.num_rows, tuple(missing), tuple(stale), tuple(others),
        tuple(kept)
    )


def _paths_and_stats(files: pa.Table, rows: int = 65_536) -> Iterator[tuple[str, str | None]]:
    """(path, stats) of every live file, in `files`' order, `rows` at a time: a million
    files' statistics strings are never all in Python at once."""
    both = files.select(["path", "stats"])
    for start in range(0, both.num_rows, rows):
        part = both.slice(start, rows)
        yield from zip(part.column(0).to_pylist(), part.column(1).to_pylist(), strict=True)


# ---- applying ---------------------------------------------------------------------------------


def _reads(files: pa.Table, paths: Sequence[str]) -> list[dict[str, Any]]:
    """The live add actions of `paths` (as dicts, the state's fields), in `files`' order."""
    from delta_ops.maintenance.row_tracking.plan import recommits

    rows = files.filter(pc.is_in(files.column("path"), value_set=string_array(list(paths))))
    return recommits(rows)


def _batches(items: Sequence[str], size: int) -> list[Sequence[str]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def compute_stats(
    table: TableLike,
    *,
    dry_run: bool = True,
    recompute_all: bool = False,
    batch_size: int = DEFAULT_STATS_BATCH_SIZE,
    max_conflicts: int = DEFAULT_MAX_CONFLICTS,
    storage_options: Mapping[str, Any] | None = None,
    clock: Clock | None = None,
    progress: Callable[[StatsProgress], None] | None = None,
) -> StatsResult:
    """Compute the statistics live files lack, and commit them as `dataChange=false` re-adds.

    Args:
        table: a `Storage`, `DeltaTable` or URI.
        dry_run: only plan (the default in the library; the CLI commits unless `--dry-run`).
        recompute_all: recompute every live file, not only those lacking statistics.
        batch_size: most files re-added per commit.
        max_conflicts: consecutive conflicting commits before giving up.
        storage_options: for a URI `table`.
        clock: milliseconds since the epoch (commit timestamps).
        progress: called after every commit with a `StatsProgress`.

    Returns:
        A `StatsResult`.

    Raises:
        UnsupportedFeatureError: the table has features delta_ops cannot commit to; nothing
            is written.
        StatsReadError: a data file or deletion vector cannot be read (names the file);
            the batches committed before it stay committed.
        CommitConflictError: still conflicting after `max_conflicts` attempts.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    storage = Storage.of(table, storage_options)
    snap = load_snapshot(storage)
    snap.table_configuration.ensure_supported("commit")
    plan = plan_stats(snap, recompute_all=recompute_all)
    versions: list[int] = []
    updated = skipped = conflicts = 0
    if not dry_run:
        common: dict[str, Any] = {} if clock is None else {"clock": clock}
        for batch in _batches(plan.paths, batch_size):
            snap, done, gone, tries = _commit_batch(snap, batch, common, max_conflicts)
            conflicts += tries
            skipped += gone
            if done is not None:
                versions.append(done)
                updated += len(batch) - gone
                if progress is not None:
                    progress(StatsProgress(done, updated, skipped, len(plan.paths)))
    return StatsResult(
        table=storage.root,
        read_version=plan.version,
        dry_run=dry_run,
        files_total=plan.files_total,
        files_missing_stats=len(plan.missing),
        files_stale_stats=len(plan.stale),
        files_planned=len(plan.paths),
        files_kept=len(plan.kept),
        files_updated=updated,
        files_skipped=skipped,
        versions=tuple(versions),
        conflicts=conflicts,
        paths=plan.paths[:1000],
    )


def _commit_batch(
    snap: Snapshot,
    batch: Sequence[str],
    common: dict[str, Any],
    max_conflicts: int,
) -> tuple[Snapshot, int | None, int, int]:
    """Compute and commit one batch; (snapshot after, version or None, files dropped
    because a concurrent commit removed or changed them, conflicts)."""
    computed: dict[tuple[str, str | None], str] = {}
    conflicts = 0
    while True:
        snap = refresh_snapshot(snap)
        adds = _reads(snap.files, batch)
        config = snap.table_configuration
        for add in adds:
            key = (add["path"], dv_unique_id(add.get("deletionVector")))
            if key not in computed:
                computed[key] = file_stats(snap.storage, config, add)
            add["stats"] = computed[key]
        gone = len(batch) - len(adds)
        if not adds:
            return snap, None, gone, conflicts
        txn = Transaction(
            snap.storage,
            snapshot=snap,
            operation=COMPUTE_STATS,
            operation_parameters=_PARAMETERS,
            isolation_level="SnapshotIsolation",
            **common,
        )
        txn.add_files(adds)
        try:
            result = txn.commit()
        except CommitConflictError as exc:
            conflicts += 1
            if conflicts > max_conflicts:
                raise CommitConflictError(
                    f"COMPUTE STATS gave up after {conflicts} conflicting commits; last: "
                    f"{exc.reason}",
                    table=snap.table,
                    version=exc.version,
                ) from exc
            continue
        return snap, result.version, gone, conflicts
