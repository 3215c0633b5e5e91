"""One layout run, shared by OPTIMIZE and PURGE: gate, plan, rewrite bins on the engine,
commit in batches, and the Result.

Spec sections: those of `delta_ops.layout.plan`, `.rewrite` and `.commit`, which this
module strings together; "Table Features" (the gate runs before anything is written),
"Column Mapping" (the new files' schema: physical names and field ids), "Row Tracking"
(the materialized column names, from the table configuration).

Batches: the bins are rewritten and committed `bins_per_commit` at a time, so a kill loses
at most the batch being written (its files stay unreferenced, for VACUUM) and a re-run
plans from the table as the committed batches left it, so it continues where it stopped.
A bin that cannot commit (a concurrent change to one of its inputs) is reported in the
Result's `failed` and its new files are left unreferenced; the other bins commit.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from delta_ops.errors import CorruptLogError
from delta_ops.layout.commit import commit_batch, ensure_layout_supported
from delta_ops.layout.plan import (
    DEFAULT_MAX_DELETED_ROWS_RATIO,
    DEFAULT_MIN_FILES,
    LayoutPlan,
    parse_size,
    parse_where,
    plan_layout,
    target_file_size,
)
from delta_ops.log import Snapshot, load_snapshot
from delta_ops.storage import Storage

if TYPE_CHECKING:
    from delta_ops.engine.base import Engine

__all__ = ["DEFAULT_BINS_PER_COMMIT", "LayoutResult", "run_layout"]

#: Bins rewritten and committed together.
DEFAULT_BINS_PER_COMMIT = 16
ROW_ID_COLUMN = "delta.rowTracking.materializedRowIdColumnName"
ROW_COMMIT_VERSION_COLUMN = "delta.rowTracking.materializedRowCommitVersionColumnName"


@dataclass(frozen=True)
class LayoutResult:
    """The outcome of an OPTIMIZE or PURGE run (also of its dry run).

    Attributes:
        table: The table root.
        operation: "optimize" or "purge".
        dry_run: Nothing was written.
        read_version: The version planned on.
        versions: Versions committed, in order.
        target_size: Target output file size (bytes).
        plan: The plan (`LayoutPlan.to_dict()`: bins, files, bytes, settings).
        bins: Bins planned.
        bins_committed: Bins whose rewrite was committed.
        failed: Bin index -> why it did not commit.
        files_before, bytes_before: Live files and bytes of the table before.
        files_after, bytes_after: After (before, minus removed, plus added; concurrent
            appends not counted).
        files_removed, bytes_removed, files_added, bytes_added: What the commits did.
        rows_rewritten: Rows copied into new files.
        rows_deleted: Rows dropped because a deletion vector deleted them.
        deletion_vectors_removed: Files with a DV replaced by files without.
        seconds: Wall time.
    """

    table: str
    operation: str
    dry_run: bool
    read_version: int
    versions: tuple[int, ...]
    target_size: int
    plan: Mapping[str, Any]
    bins: int
    bins_committed: int
    failed: Mapping[int, str]
    files_before: int
    bytes_before: int
    files_after: int
    bytes_after: int
    files_removed: int
    bytes_removed: int
    files_added: int
    bytes_added: int
    rows_rewritten: int
    rows_deleted: int
    deletion_vectors_removed: int
    seconds: float = field(compare=False)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["versions"] = list(self.versions)
        out["failed"] = {str(k): v for k, v in self.failed.items()}
        out["plan"] = dict(self.plan)
        return out


def _file_schema(snap: Snapshot, row_id: str | None, row_version: str | None) -> Any:
    import pyarrow as pa

    from delta_ops.protocol.schema import to_arrow

    config = snap.table_configuration
    mode = config.column_mapping_mode
    schema = snap.schema
    parts = set(snap.partition_columns)
    full = to_arrow(schema, physical=True, mode=mode)
    logical = [f.name for f in schema.fields]
    fields = [f.with_nullable(True)
              for name, f in zip(logical, full, strict=True) if name not in parts]
    for extra in (row_id, row_version):
        if extra is not None:
            fields.append(pa.field(extra, pa.int64(), nullable=True))
    return pa.schema(fields)


def _partition_columns(snap: Snapshot) -> dict[str, str]:
    mode = snap.table_configuration.column_mapping_mode
    out = {}
    names = {f.name for f in snap.schema.fields} if snap.schema is not None else set()
    for name in snap.partition_columns:
        if name not in names:
            raise CorruptLogError(
                f"partition column {name!r} is not in the table's schema"
                + ("" if snap.schema is not None else " (metaData has no schemaString)"),
                table=snap.table, version=snap.version)
        f = snap.schema.field(name)
        out[name] = f.physical_name if mode != "none" else name
    return out


def run_layout(
    table: Any,
    operation: str,
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
    scratch_dir: str | None = None,
) -> LayoutResult:
    """Plan and (unless `dry_run`) run OPTIMIZE or PURGE; see `optimize` and `purge`."""
    from delta_ops.layout.rewrite import (
        DEFAULT_ROW_GROUP_BYTES,
        RewriteSettings,
        RewriteTask,
        codec_of,
        delete_outputs,
        rewrite_bin,
    )

    started = time.monotonic()
    if bins_per_commit < 1:
        raise ValueError(f"bins_per_commit must be at least 1, got {bins_per_commit}")
    storage = Storage.of(table, storage_options)
    snap = load_snapshot(storage)
    config = snap.table_configuration
    verb = "purge deletion vectors" if operation == "purge" else "optimize"
    ensure_layout_supported(config, verb)
    target = (target_file_size(config.configuration, table=storage.root, version=snap.version)
              if target_size is None else parse_size(target_size, what="target size"))
    min_size = None if min_file_size is None else parse_size(min_file_size,
                                                              what="minimum file size")
    parts = _partition_columns(snap)
    predicate = None if where is None else parse_where(where, list(parts), table=storage.root)
    plan: LayoutPlan = plan_layout(
        snap.files, root=storage.root, version=snap.version, operation=operation,
        partition_columns=parts, target_size=target, min_file_size=min_size,
        min_files=min_files, max_deleted_rows_ratio=max_deleted_rows_ratio, where=predicate,
    )
    files_before = snap.files.num_rows
    bytes_before = int(snap.size_bytes)
    versions: list[int] = []
    failed: dict[int, str] = {}
    committed = 0
    removed_files = removed_bytes = added_files = added_bytes = 0
    rows_rewritten = rows_deleted = dvs_removed = 0
    if not dry_run and plan.bins:
        if snap.schema is None:
            raise CorruptLogError(
                f"the table's metaData has no schemaString, so its data files cannot be "
                f"rewritten ({plan.num_files} planned); nothing was written",
                table=storage.root, version=snap.version)
        cfg = config.configuration
        preserve = config.is_feature_supported("rowTracking") and not (
            cfg.get("delta.rowTrackingSuspended", "false").lower() == "true")
        row_id = cfg.get(ROW_ID_COLUMN) if preserve else None
        row_version = cfg.get(ROW_COMMIT_VERSION_COLUMN) if preserve else None
        settings = RewriteSettings(
            table=storage.root,
            protocol=dict(snap.protocol),
            metadata=dict(snap.metadata.raw),
            file_schema=_file_schema(snap, row_id, row_version),
            column_mapping_mode=config.column_mapping_mode,
            row_id_column=row_id,
            row_commit_version_column=row_version,
            compression=codec_of(storage, plan.bins[0].files[0].key),
            target_size=target,
            row_group_bytes=min(row_group_bytes or DEFAULT_ROW_GROUP_BYTES, target),
            scratch_dir=scratch_dir,
        )
        from delta_ops.engine.arrow_memory import returning_pool

        owned = engine is None
        if engine is None:
            from delta_ops.engine.local import LocalEngine

            engine = LocalEngine(max_workers=os.cpu_count() or 1)
        try:
            # Arrow's jemalloc pool, unless the process started with one chosen (the CLI
            # and the Dagster wing choose before pyarrow loads: `engine.arrow_memory`).
            with returning_pool():
                for start in range(0, len(plan.bins), bins_per_commit):
                    batch = plan.bins[start:start + bins_per_commit]
                    token = uuid.uuid4().hex  # names the batch's new files (output_key)
                    tasks = [RewriteTask(b, settings, token) for b in batch]
                    # A local engine rewrites at most one bin per core at a time, however many
                    # threads it has: the work is CPU-bound (decode, filter, encode) and each bin
                    # holds a row group's buffers, so more threads add memory, not speed. A bin
                    # starts as soon as a core is free (no waves: a large bin beside small ones
                    # leaves no core idle), and after a failure no further bin starts.
                    try:
                        outputs = engine.map_tasks(storage, rewrite_bin, tasks,
                                                   parallel=max(1, os.cpu_count() or 1))
                    except BaseException as failure:
                        # What the batch's other bins wrote is named by no commit.
                        with contextlib.suppress(Exception):  # the failure is the one told
                            delete_outputs(storage, tasks, failure)
                        raise
                    outcome = commit_batch(
                        storage, snap, batch, outputs, operation=operation,
                        predicate=plan.where, clock=clock, engine=engine)
                    failed.update(outcome.failed)
                    if outcome.version is None:
                        continue
                    versions.append(outcome.version)
                    done = set(outcome.committed)
                    committed += len(done)
                    for b, out in zip(batch, outputs, strict=True):
                        if b.index not in done:
                            continue
                        removed_files += len(b.files)
                        removed_bytes += b.input_bytes
                        dvs_removed += b.deletion_vectors
                        added_files += len(out.adds)
                        added_bytes += out.bytes_written
                        rows_rewritten += out.rows_written
                        rows_deleted += out.rows_read - out.rows_written
        finally:
            if owned:
                engine.close()
    return LayoutResult(
        table=storage.root,
        operation=operation,
        dry_run=dry_run,
        read_version=snap.version,
        versions=tuple(versions),
        target_size=target,
        plan=plan.to_dict(),
        bins=len(plan.bins),
        bins_committed=committed,
        failed=failed,
        files_before=files_before,
        bytes_before=bytes_before,
        files_after=files_before - removed_files + added_files,
        bytes_after=bytes_before - removed_bytes + added_bytes,
        files_removed=removed_files,
        bytes_removed=removed_bytes,
        files_added=added_files,
        bytes_added=added_bytes,
        rows_rewritten=rows_rewritten,
        rows_deleted=rows_deleted,
        deletion_vectors_removed=dvs_removed,
        seconds=time.monotonic() - started,
    )
