"""PURGE: rewrite every file that has a deletion vector without its deleted rows (Spark's
`REORG TABLE table [WHERE partition predicate] APPLY (PURGE)`).

Spec sections: "Deletion Vectors" (rows in a file's DV are not part of the table; after
the purge no live file has a DV), "Row Tracking", "Change Data Feed", "Commit Provenance
Information" (`REORG` with `predicate` and `applyPurge`; see `delta_ops.layout.commit`).

The files with DVs of a partition are rewritten together into files of about the target
size (`delta.targetFileSize`, else 256 MiB), streamed row group by row group; rows are
copied unchanged and keep their stable row IDs and row commit versions. Files without a
DV are not touched. The commits are `dataChange=false` removes and adds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from delta_ops.layout.run import DEFAULT_BINS_PER_COMMIT, LayoutResult, run_layout

if TYPE_CHECKING:
    from delta_ops.engine.base import Engine
    from delta_ops.storage import TableLike

__all__ = ["PurgeResult", "purge"]


@dataclass(frozen=True)
class PurgeResult(LayoutResult):
    """The outcome of `purge` (fields: `LayoutResult`)."""


def purge(
    table: TableLike,
    *,
    where: str | None = None,
    target_size: int | str | None = None,
    dry_run: bool = True,
    engine: Engine | None = None,
    bins_per_commit: int = DEFAULT_BINS_PER_COMMIT,
    row_group_bytes: int | None = None,
    clock: Callable[[], int] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> PurgeResult:
    """Rewrite every file with a deletion vector (a dry run unless `dry_run=False`).

    Args:
        table: A `DeltaTable`, `Storage` or URI.
        where: Partition predicate (partition columns only; grammar in `layout.predicate`).
        target_size: Target file size of the rewritten files (default: the table's
            `delta.targetFileSize`, else 256 MiB).
        dry_run: Only plan (the default).
        engine: Where bins are rewritten (default: local threads, one per core).
        bins_per_commit: Bins per commit.
        row_group_bytes: Arrow bytes buffered per output row group (default 64 MiB; a
            row group holds at most 1Mi rows either way).
        clock: Milliseconds since the epoch.
        storage_options: For a URI `table`.

    Raises:
        UnsupportedFeatureError: A feature this writer cannot honour (named); nothing is
            written.
        InvalidPredicateError: `where` names a non-partition column or does not parse.
    """
    result = run_layout(
        table, "purge", where=where, target_size=target_size, dry_run=dry_run, engine=engine,
        bins_per_commit=bins_per_commit, row_group_bytes=row_group_bytes, clock=clock,
        storage_options=storage_options,
    )
    return PurgeResult(**result.__dict__)
