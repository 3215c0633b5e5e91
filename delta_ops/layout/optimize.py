"""OPTIMIZE: bin-packing compaction of a table's small files (Spark's `OPTIMIZE table
[WHERE partition predicate]`, without ZORDER).

Spec sections: "Add File and Remove File", "Deletion Vectors", "Row Tracking", "Change
Data Feed", "Commit Provenance Information" (see `delta_ops.layout.plan`, `.rewrite` and
`.commit` for the rules each step follows).

Per partition, files smaller than the minimum size (default: the target) are rewritten
into files of about the target size (the table's `delta.targetFileSize`, else 256 MiB:
`plan.DEFAULT_TARGET_FILE_SIZE` says why); a file whose deletion vector deletes more than
`max_deleted_rows_ratio` (0.05) of its rows is rewritten even when large. Deleted rows are
dropped, every other row is copied unchanged and keeps its stable row ID and row commit
version. The commits are `OPTIMIZE` commits of `dataChange=false` removes and adds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from delta_ops.layout.plan import DEFAULT_MAX_DELETED_ROWS_RATIO, DEFAULT_MIN_FILES
from delta_ops.layout.run import DEFAULT_BINS_PER_COMMIT, LayoutResult, run_layout

if TYPE_CHECKING:
    from delta_ops.engine.base import Engine
    from delta_ops.storage import TableLike

__all__ = ["OptimizeResult", "optimize"]


@dataclass(frozen=True)
class OptimizeResult(LayoutResult):
    """The outcome of `optimize` (fields: `LayoutResult`)."""


def optimize(
    table: TableLike,
    *,
    where: str | None = None,
    target_size: int | str | None = None,
    min_file_size: int | str | None = None,
    min_files: int = DEFAULT_MIN_FILES,
    max_deleted_rows_ratio: float = DEFAULT_MAX_DELETED_ROWS_RATIO,
    dry_run: bool = True,
    engine: Engine | None = None,
    bins_per_commit: int = DEFAULT_BINS_PER_COMMIT,
    row_group_bytes: int | None = None,
    clock: Callable[[], int] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> OptimizeResult:
    """Compact small files (a dry run, which only plans, unless `dry_run=False`).

    Args:
        table: A `DeltaTable`, `Storage` or URI.
        where: Partition predicate (partition columns only; grammar in `layout.predicate`).
        target_size: Target file size in bytes or like "128mb" (default: the table's
            `delta.targetFileSize`, else 256 MiB).
        min_file_size: Files below it are compacted (default: the target).
        min_files: Fewest small files a partition needs to be compacted (default 2).
        max_deleted_rows_ratio: Rewrite a file whose DV deletes more than this share of
            its rows even when it is large (default 0.05, Spark's).
        dry_run: Only plan (the default).
        engine: Where bins are rewritten (default: local threads, one per core).
        bins_per_commit: Bins per commit (a kill loses at most one batch's work).
        row_group_bytes: Arrow bytes buffered per output row group (default 64 MiB; a
            row group holds at most 1Mi rows either way).
        clock: Milliseconds since the epoch (commit and remove timestamps).
        storage_options: For a URI `table`.

    Raises:
        UnsupportedFeatureError: A feature this writer cannot honour (named); nothing is
            written.
        InvalidPredicateError: `where` names a non-partition column or does not parse.
    """
    result = run_layout(
        table, "optimize", where=where, target_size=target_size, min_file_size=min_file_size,
        min_files=min_files, max_deleted_rows_ratio=max_deleted_rows_ratio, dry_run=dry_run,
        engine=engine, bins_per_commit=bins_per_commit, row_group_bytes=row_group_bytes,
        clock=clock, storage_options=storage_options,
    )
    return OptimizeResult(**result.__dict__)
