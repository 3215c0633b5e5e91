"""What the data-layout assets of a table do: `optimize` and `stats`, and the layout health
the `delta_log` materialization shows.

- `run_optimize`: OPTIMIZE when due. Whether it is due is `delta_ops.maintenance.due.
  optimize_need` over the newest `.crc` (its file-size histogram and deletion-vector count,
  spec "Version Checksum File"), read without a replay; when due, `delta_ops.layout.optimize`
  bin-packs the small files and rewrites the files whose deletion vectors delete more than
  the policy's ratio (the purge), on the table's engine. Its metadata: files and bytes
  before and after, bins, rows rewritten, rows and deletion vectors dropped, seconds.
- `run_stats`: `delta_ops.layout.stats.compute_stats` for the live files that lack
  statistics (spec "Per-file Statistics"); nothing to do when every file has them.

What `delta_log` shows of the layout and of the table's history is
`delta_ops.defs.table_health`.

A component with nothing to do records a materialization marked `skipped: true` with the
reason, as the other components do (`delta_ops.defs.assets.noop`).
"""

from __future__ import annotations

import time

from dagster import MaterializeResult, MetadataValue

from delta_ops.defs.assets import TableRun, noop
from delta_ops.defs.failures import refusals
from delta_ops.defs.keys import OPTIMIZE, STATS, asset_key
from delta_ops.defs.metadata import result_metadata
from delta_ops.maintenance.due import LayoutThresholds, optimize_need

#: The LayoutResult fields an optimize materialization carries (the numbers a user plots).
OPTIMIZE_KEYS = (
    "read_version", "files_before", "bytes_before", "files_after", "bytes_after",
    "files_removed", "bytes_removed", "files_added", "bytes_added", "bins", "bins_committed",
    "rows_rewritten", "rows_deleted", "deletion_vectors_removed", "target_size", "dry_run",
)


def layout_thresholds(run: TableRun) -> LayoutThresholds:
    policy = run.policy.optimize
    return LayoutThresholds(
        small_file_bytes=policy.small_file_bytes, small_file_share=policy.small_file_share,
        deletion_vector_share=policy.deletion_vector_share,
    )


def run_optimize(run: TableRun) -> MaterializeResult:
    """OPTIMIZE the table when the newest `.crc` says it is due (see the module docstring)."""
    from delta_ops.layout.optimize import optimize
    from delta_ops.maintenance.checksum import read_checksum

    policy = run.policy.optimize
    with refusals(run.name, OPTIMIZE):
        start = time.monotonic()
        state = run.log_state()  # OPTIMIZE gates the table's features itself
        # Read now, not from the listing of the step's start: the version_checksum
        # component, earlier in the same step, may just have written it.
        crc = read_checksum(run.storage, state.version)
        need = optimize_need(crc, state.version, layout_thresholds(run))
        if not need.due:
            return noop(run, OPTIMIZE, state.version, f"not due: {need.reason}")
        result = optimize(
            run.storage, target_size=policy.target_size, min_files=policy.min_files,
            max_deleted_rows_ratio=policy.max_deleted_rows_ratio, dry_run=policy.dry_run,
            engine=run.engine(),
        )
        duration = time.monotonic() - start
    failed = {str(k): v for k, v in result.failed.items()}
    return MaterializeResult(
        asset_key=asset_key(run.name, OPTIMIZE),
        metadata=result_metadata(
            None, duration_s=duration, uri=result.table, due=need.reason,
            **{k: getattr(result, k) for k in OPTIMIZE_KEYS},
            versions=list(result.versions), seconds=round(result.seconds, 3),
            failed_bins=MetadataValue.json(failed), **run.engine_metadata(),
        ),
    )


def run_stats(run: TableRun) -> MaterializeResult:
    """Compute the statistics the live files lack (all of them with `recompute_all`)."""
    from delta_ops.layout.stats import compute_stats

    policy = run.policy.stats
    with refusals(run.name, STATS):
        start = time.monotonic()
        state = run.log_state()  # COMPUTE STATS gates the table's features itself
        if not policy.recompute_all:
            plan = compute_stats(run.storage, dry_run=True)
            if not plan.files_planned:
                return noop(run, STATS, plan.read_version,
                            f"all {plan.files_total} live files have statistics",
                            files_total=plan.files_total)
        result = compute_stats(
            run.storage, dry_run=policy.dry_run, recompute_all=policy.recompute_all,
            batch_size=policy.batch_size,
        )
        duration = time.monotonic() - start
    return MaterializeResult(
        asset_key=asset_key(run.name, STATS),
        metadata=result_metadata(result, duration_s=duration, version=state.version),
    )


__all__ = ["OPTIMIZE_KEYS", "layout_thresholds", "run_optimize", "run_stats"]
