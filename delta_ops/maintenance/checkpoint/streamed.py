"""Write a checkpoint from a streamed state (`load_snapshot(stream=True)`), in bounded memory.

The same checkpoints as `writer.py` (classic, multi-part, V2 with sidecars or embedded
file actions), with the same order of events and the same guarantees, for tables whose
state is not held in memory:

1. Each file is written by a Parquet writer to a local temporary file (never to a buffer
   in memory), one batch of file actions at a time, while a `digest.Digest` of what goes
   in is kept; V2 sidecars are cut from the stream `sidecar_actions` rows at a time and
   written by the engine, as in `writer.py`.
2. The file is read back from disk, one batch at a time, and its digest (counts and hash
   sums of every add's path, size and deletion vector and every remove's path and deletion
   vector) and its non-file actions must equal what was written (`digest.compare`).
3. Only then is it put under its final name, copied from disk (`Storage.put_atomic` with a
   local file: streamed to local storage, a multipart upload to S3).

The temporary files live in a scratch directory of the system's temp location (`$TMPDIR`,
`engine.scratch`), removed when the write ends, whatever happens; one left by a killed
process is removed by the next delta_ops process that makes one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from delta_ops.engine.scratch import ScratchDir
from delta_ops.errors import CheckpointVerificationError
from delta_ops.log import Snapshot, StreamedActions
from delta_ops.maintenance.checkpoint import actions as act
from delta_ops.maintenance.checkpoint.digest import Digest, compare, read_back
from delta_ops.maintenance.checkpoint.plan import CheckpointPlan
from delta_ops.protocol import filenames
from delta_ops.protocol.checkpoint_schema import (
    classic_schema,
    hash_partition,
    null_key_partition,
    v2_schema,
)
from delta_ops.protocol.filenames import LOG_DIR
from delta_ops.storage import Storage

#: Rows buffered per part before a multi-part writer writes a row group.
PART_BUFFER_ROWS = 20_000


def file_tables(
    files: pa.Table | StreamedActions, tombstones: pa.Table | StreamedActions
) -> Iterator[tuple[str, pa.Table]]:
    """("add", table) for the live files, then ("remove", table) for the tombstones, a
    bounded table at a time, from a loaded or a streamed state."""
    for kind, actions in (("add", files), ("remove", tombstones)):
        if isinstance(actions, StreamedActions):
            for t in actions.tables():
                yield kind, t
        else:
            for start in range(0, actions.num_rows, act.BATCH_ROWS):
                yield kind, actions.slice(start, act.BATCH_ROWS)


def _batch(kind: str, t: pa.Table, plan: CheckpointPlan, schema: pa.Schema) -> pa.RecordBatch:
    if kind == "add":
        return act.single_column_batch("add", act.add_struct(t, plan.layout), schema)
    return act.single_column_batch("remove", act.remove_struct(t), schema)


def _writer(path: Path, schema: pa.Schema) -> pq.ParquetWriter:
    return pq.ParquetWriter(
        str(path), schema, compression="snappy", use_dictionary=False, write_statistics=True
    )


def _verify(
    local: Path, name: str, written: Digest, non_file: dict[str, list[Any]], plan: CheckpointPlan
) -> int:
    """Read the local file back and compare it with what was written; its rows."""
    path = f"{LOG_DIR}/{name}"
    try:
        got = read_back(str(local))
    except (pa.ArrowException, OSError) as exc:
        raise CheckpointVerificationError(
            f"the checkpoint file written cannot be read back: {exc}",
            table=plan.table,
            version=plan.version,
            file=path,
        ) from exc
    return compare(got, written, non_file, table=plan.table, version=plan.version, file=path)


def _put(storage: Storage, local: Path, name: str, plan: CheckpointPlan, *, overwrite: bool) -> int:
    """Put a verified local file under `_delta_log/name`; its size."""
    from delta_ops.maintenance.checkpoint.common import _put_verified

    size = local.stat().st_size
    _put_verified(storage, f"{LOG_DIR}/{name}", local, overwrite=overwrite, plan=plan, size=size)
    return size


def write_single_streamed(
    storage: Storage,
    snapshot: Snapshot,
    plan: CheckpointPlan,
    *,
    name: str,
    schema: pa.Schema,
    head: pa.RecordBatch,
    non_file: dict[str, list[Any]],
    embedded: bool,
    overwrite: bool,
) -> tuple[int, int, int]:
    """One Parquet checkpoint file (classic, or a V2 top-level file): non-file actions,
    then every file action when `embedded`. Returns (rows, bytes, adds): the adds written,
    which the read-back verified."""
    with ScratchDir("checkpoint") as tmp:
        local = Path(tmp) / name
        digest = Digest(stats=act.carries_stats(plan.layout))
        with _writer(local, schema) as w:
            w.write_batch(head)
            if embedded:
                for kind, t in file_tables(snapshot.files, plan.tombstones):
                    digest.add_table(kind, t)
                    w.write_batch(_batch(kind, t, plan, schema), row_group_size=act.BATCH_ROWS)
        rows = _verify(local, name, digest, non_file, plan)
        return rows, _put(storage, local, name, plan, overwrite=overwrite), digest.adds


def write_multipart_streamed(
    storage: Storage,
    snapshot: Snapshot,
    plan: CheckpointPlan,
    *,
    head: pa.RecordBatch,
    non_file: dict[str, list[Any]],
) -> tuple[list[str], int, int]:
    """A multi-part checkpoint: file actions go to part `pmod(hash(path), n)` as Spark's
    HashPartitioning puts them, non-file actions to the part of a null key. Every part is
    verified before the first one is put. Returns (names, rows, bytes)."""
    assert plan.parts is not None
    n = plan.parts
    schema = classic_schema(plan.layout.add)
    home = null_key_partition(n)
    names = [filenames.multipart_checkpoint_name(plan.version, p + 1, n) for p in range(n)]
    with ScratchDir("checkpoint") as tmp:
        locals_ = [Path(tmp) / name for name in names]
        digests = [Digest(stats=act.carries_stats(plan.layout)) for _ in range(n)]
        writers = [_writer(p, schema) for p in locals_]
        buffers: list[list[tuple[str, pa.Table]]] = [[] for _ in range(n)]
        buffered = [0] * n
        try:
            writers[home].write_batch(head)

            def flush(p: int) -> None:
                for kind, t in buffers[p]:
                    writers[p].write_batch(_batch(kind, t, plan, schema))
                buffers[p].clear()
                buffered[p] = 0

            for kind, t in file_tables(snapshot.files, plan.tombstones):
                parts = hash_partition(t.column("path"), n)
                for p in range(n):
                    rows = t.filter(pa.array(parts == p))
                    if not rows.num_rows:
                        continue
                    digests[p].add_table(kind, rows)
                    buffers[p].append((kind, rows))
                    buffered[p] += rows.num_rows
                    if buffered[p] >= PART_BUFFER_ROWS:
                        flush(p)
            for p in range(n):
                flush(p)
        finally:
            for w in writers:
                w.close()
        # Verify every part before putting any: a reader ignores an incomplete set, but a
        # part that does not verify must not be published at all.
        rows_total = sum(
            _verify(locals_[p], names[p], digests[p], non_file if p == home else {}, plan)
            for p in range(n)
        )
        size_total = sum(
            _put(storage, locals_[p], names[p], plan, overwrite=True) for p in range(n)
        )
    return names, rows_total, size_total


def sidecar_chunks(
    files: pa.Table | StreamedActions, tombstones: pa.Table | StreamedActions, step: int
) -> Iterator[tuple[pa.Table, pa.Table]]:
    """Consecutive chunks of `step` file actions (live files first, then tombstones; the
    last chunk shorter), each as (adds, removes): one sidecar each."""
    adds: list[pa.Table] = []
    removes: list[pa.Table] = []
    have = 0
    empty = {"add": _empty_like(files), "remove": _empty_like(tombstones)}

    def chunk() -> tuple[pa.Table, pa.Table]:
        a = pa.concat_tables(adds) if adds else empty["add"]
        r = pa.concat_tables(removes) if removes else empty["remove"]
        adds.clear()
        removes.clear()
        return a, r

    for kind, t in file_tables(files, tombstones):
        pos = 0
        while pos < t.num_rows:
            take = min(step - have, t.num_rows - pos)
            (adds if kind == "add" else removes).append(t.slice(pos, take))
            have += take
            pos += take
            if have == step:
                yield chunk()
                have = 0
    if have:
        yield chunk()


def _empty_like(actions: pa.Table | StreamedActions) -> pa.Table:
    return actions.schema.empty_table()


def head_batch(
    snapshot: Snapshot,
    plan: CheckpointPlan,
    *,
    checkpoint_version: int | None = None,
    sidecars: list[dict[str, Any]] | None = None,
) -> tuple[pa.Schema, pa.RecordBatch]:
    schema = (
        v2_schema(plan.layout.add) if plan.kind.is_v2 else classic_schema(plan.layout.add)
    )
    columns = act.non_file_columns(
        snapshot, plan.layout, checkpoint_version=checkpoint_version, sidecars=sidecars
    )
    return schema, act.non_file_batch(columns, schema)


__all__ = [
    "file_tables",
    "head_batch",
    "sidecar_chunks",
    "write_multipart_streamed",
    "write_single_streamed",
]
