"""V2 checkpoints: sidecars written by the engine, then the top-level file (Parquet or
JSON, classic- or UUID-named) that references them (spec: "V2 Checkpoint Table Feature",
"Sidecar File Information"). The order of events and the guarantees are `writer.py`'s."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from delta_ops.engine.base import Engine
from delta_ops.errors import CheckpointError, CheckpointVerificationError, StorageError
from delta_ops.log import Snapshot, schema_for_last_checkpoint
from delta_ops.maintenance.checkpoint import actions as act
from delta_ops.maintenance.checkpoint import streamed
from delta_ops.maintenance.checkpoint.common import (
    _expected_files,
    _expected_non_file,
    _parquet_bytes,
    _put_verified,
    _Written,
)
from delta_ops.maintenance.checkpoint.plan import CheckpointKind, CheckpointPlan
from delta_ops.maintenance.checkpoint.verify import Expected, verify_file
from delta_ops.protocol import filenames
from delta_ops.protocol.checkpoint_schema import (
    sidecar_schema,
    v2_schema,
)
from delta_ops.protocol.filenames import LOG_DIR
from delta_ops.protocol.last_checkpoint import build_last_checkpoint
from delta_ops.storage import Storage

#: Spark's defaults for the V2 details copied into `_last_checkpoint` (non-file actions and
#: sidecar list are left out when longer).
LAST_CHECKPOINT_LIST_THRESHOLD = 30
#: Sidecars handed to the engine per call (bounds how many are in memory at once).
SIDECARS_PER_ENGINE_CALL = 8


def _write_sidecars(
    storage: Storage,
    snapshot: Snapshot,
    plan: CheckpointPlan,
    engine: Engine,
    written: list[str],
) -> tuple[list[dict[str, Any]], int, int]:
    """Write and verify the sidecars; returns (sidecar actions, rows, bytes)."""
    files, tombstones = snapshot.files, plan.tombstones
    schema = sidecar_schema(plan.layout.add)
    sidecars: list[dict[str, Any]] = []
    rows_total = size_total = 0
    chunks = streamed.sidecar_chunks(files, tombstones, plan.sidecar_actions)
    while True:
        group = list(itertools.islice(chunks, SIDECARS_PER_ENGINE_CALL))
        if not group:
            break
        items: list[tuple[str, pa.Table]] = []
        for adds_t, removes_t in group:
            path = filenames.sidecar_path(f"{uuid.uuid4()}.parquet")
            batches = list(
                act.file_action_batches(adds_t, removes_t, plan.layout, schema)
            )
            items.append((path, pa.Table.from_batches(batches, schema=schema)))
        written.extend(path for path, _ in items)
        sizes = engine.write_parquet_files(storage, items)
        del items
        for (adds_t, removes_t), path, size in zip(
            group, written[-len(group) :], sizes, strict=True
        ):
            info = storage.info(path)
            if info is None or info.size != size:
                raise CheckpointVerificationError(
                    f"sidecar written with {size} bytes is "
                    f"{'missing' if info is None else f'{info.size} bytes'} in storage",
                    table=plan.table,
                    version=plan.version,
                    file=path,
                )
            adds, removes = _expected_files(adds_t, removes_t, plan.layout)
            with storage.open_input(path) as fh:
                rows = verify_file(
                    fh,
                    "parquet",
                    Expected(adds, removes, {}),
                    table=plan.table,
                    version=plan.version,
                    file=path,
                )
            rows_total += rows
            size_total += info.size
            sidecars.append(
                {
                    "path": path.rsplit("/", 1)[-1],
                    "sizeInBytes": info.size,
                    "modificationTime": info.modification_time,
                }
            )
        del group
    return sidecars, rows_total, size_total


def _write_v2(
    storage: Storage, snapshot: Snapshot, plan: CheckpointPlan, engine: Engine
) -> _Written:
    files, tombstones = snapshot.files, plan.tombstones
    v = plan.version
    sidecar_paths: list[str] = []
    sidecars: list[dict[str, Any]] = []
    side_rows = side_bytes = 0
    published = False
    try:
        if plan.uses_sidecars:
            sidecars, side_rows, side_bytes = _write_sidecars(
                storage, snapshot, plan, engine, sidecar_paths
            )
        embedded = not plan.uses_sidecars
        schema = v2_schema(plan.layout.add)
        if snapshot.streamed and embedded:
            # Every file action in the top-level Parquet file (JSON is not streamed).
            name = (
                filenames.uuid_checkpoint_name(v, str(uuid.uuid4()), plan.fmt)
                if plan.kind is CheckpointKind.V2_UUID
                else filenames.classic_checkpoint_name(v)
            )
            path = f"{LOG_DIR}/{name}"
            _, head = streamed.head_batch(snapshot, plan, checkpoint_version=v, sidecars=[])
            published = True  # put_atomic/put_if_absent run inside; nothing to discard
            rows, size, _ = streamed.write_single_streamed(
                storage, snapshot, plan, name=name, schema=schema, head=head,
                non_file=_expected_non_file(snapshot, plan, checkpoint_version=v, sidecars=[]),
                embedded=True, overwrite=plan.kind is CheckpointKind.V2_CLASSIC,
            )
            return _v2_written(storage, snapshot, plan, name, path, rows, size, [], 0, 0, [])
        if plan.fmt == "parquet":
            head = act.non_file_batch(
                act.non_file_columns(
                    snapshot, plan.layout, checkpoint_version=v, sidecars=sidecars
                ),
                schema,
            )
            tail: Iterator[pa.RecordBatch] = (
                act.file_action_batches(files, tombstones, plan.layout, schema)
                if embedded
                else iter(())
            )
            buf = _parquet_bytes(schema, itertools.chain([head], tail))
            source: Any = buf
        else:
            objs = act.non_file_dicts(snapshot, checkpoint_version=v, sidecars=sidecars)
            lines = act.json_lines(objs)
            if embedded:
                lines = itertools.chain(
                    lines, act.json_file_action_lines(files, tombstones, plan.layout)
                )
            source = b"".join(lines)
        if plan.kind is CheckpointKind.V2_UUID:
            name = filenames.uuid_checkpoint_name(v, str(uuid.uuid4()), plan.fmt)
        else:
            name = filenames.classic_checkpoint_name(v)
        path = f"{LOG_DIR}/{name}"
        if embedded:
            adds, removes = _expected_files(files, tombstones, plan.layout)
        else:
            adds, removes = _expected_files(
                files.schema.empty_table(), tombstones.schema.empty_table(), plan.layout
            )
        expected = Expected(
            adds,
            removes,
            _expected_non_file(
                snapshot, plan, json=plan.fmt == "json", checkpoint_version=v, sidecars=sidecars
            ),
        )
        rows = verify_file(source, plan.fmt, expected, table=plan.table, version=v, file=path)
        data = source.to_pybytes() if isinstance(source, pa.Buffer) else source
        del source
        published = True  # from here on a failure may leave the file in place
        _put_verified(
            storage, path, data, overwrite=plan.kind is CheckpointKind.V2_CLASSIC, plan=plan
        )
    except (CheckpointError, StorageError):
        if not published:
            _discard(storage, sidecar_paths)
        raise
    return _v2_written(
        storage, snapshot, plan, name, path, rows, len(data), sidecars, side_rows, side_bytes,
        sidecar_paths,
    )


def _v2_written(
    storage: Storage,
    snapshot: Snapshot,
    plan: CheckpointPlan,
    name: str,
    path: str,
    rows: int,
    size: int,
    sidecars: list[dict[str, Any]],
    side_rows: int,
    side_bytes: int,
    sidecar_paths: list[str],
) -> _Written:
    """The `_last_checkpoint` and summary of a V2 checkpoint whose files are in place."""
    v = plan.version
    schema = v2_schema(plan.layout.add)
    info = storage.info(path)
    mtime = info.modification_time if info is not None else plan.now_ms
    v2: dict[str, Any] = {"path": name, "sizeInBytes": size, "modificationTime": mtime}
    non_file = act.non_file_dicts(snapshot) + [{"checkpointMetadata": {"version": v}}]
    if len(non_file) <= LAST_CHECKPOINT_LIST_THRESHOLD:
        v2["nonFileActions"] = non_file
    if len(sidecars) <= LAST_CHECKPOINT_LIST_THRESHOLD:
        v2["sidecarFiles"] = sidecars
    lc = build_last_checkpoint(
        version=v,
        size=rows + side_rows,
        size_in_bytes=size + side_bytes,
        num_of_add_files=plan.num_adds,
        checkpoint_schema=schema_for_last_checkpoint(schema) if plan.fmt == "parquet" else None,
        v2_checkpoint=v2,
    )
    names = [name] + [p[len(LOG_DIR) + 1 :] for p in sidecar_paths]
    return _Written(names, rows + side_rows, size + side_bytes, lc)


def _discard(storage: Storage, paths: list[str]) -> None:
    """Best-effort removal of sidecars no checkpoint references (harmless if it fails:
    metadata cleanup removes unreferenced sidecars)."""
    for path in paths:
        try:
            storage.delete(path)
        except StorageError:
            pass
