"""The live files a checkpoint is written from, with the statistics their source had.

Spec sections: "Checkpoint Schema" (`add.stats` and `add.stats_parsed`; the table
properties `delta.checkpoint.writeStatsAsJson` and `writeStatsAsStruct` choose which forms
a checkpoint carries) and "Per-file Statistics".

A checkpoint written with `writeStatsAsJson` off keeps a file's statistics only as typed
`stats_parsed`. The state read from it has no JSON `stats` for those files, and a checkpoint
written from that state would carry no statistics for them in either form. Before a
checkpoint is written, such files get their JSON statistics back from the typed ones (as
Delta Spark does, `to_json(stats_parsed)`; `protocol.stats_json`): the checkpoint then
writes `stats` and/or `stats_parsed` from them as the table's properties ask.

* A streamed state reads the typed statistics beside each checkpoint row
  (`StreamedActions.with_typed_stats`): memory stays bounded by a row group.
* A state rebuilt by bucket (`log.snapshot.rebuild`) fills them while it reads the checkpoint into
  its spill files (`rebuild_snapshot(typed_stats=True)`).
* A loaded state (small by definition) reads the checkpoint's `path`, `deletionVector` and
  `stats_parsed` again and fills, by file key, the adds that have no JSON statistics.

`check_source_stats` then proves, for a loaded state and before anything is written, that
no live file lost the statistics its checkpoint row holds: it reads the checkpoint's Parquet
files again with pyarrow alone (not through the log reader that filled them) and refuses
when a file with statistics there has none in the state. The read-back of every written
file (`verify.py`, `digest.py`) then checks that each file with statistics in the state
keeps them in the checkpoint.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.errors import CheckpointVerificationError
from delta_ops.log import Snapshot, StreamedActions, read_checkpoint, read_parsed_stats
from delta_ops.maintenance.checkpoint.verify import has_stats
from delta_ops.protocol.file_actions import file_keys
from delta_ops.protocol.stats_json import stats_json


def _one(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return col


def _keys(t: pa.Table, root: str) -> pa.Array:
    return file_keys(
        pa.StructArray.from_arrays(
            [_one(t.column("path")), _one(t.column("deletionVector"))],
            names=["path", "deletionVector"],
        ),
        root,
    )


def fill_loaded(snapshot: Snapshot, files: pa.Table) -> pa.Table:
    """`files` (a loaded state's live adds) with missing JSON `stats` taken from the typed
    statistics of the snapshot's checkpoint, matched by file key."""
    checkpoint = snapshot.segment.checkpoint
    if checkpoint is None or not files.num_rows:
        return files
    stats = _one(files.column("stats"))
    if not stats.null_count:
        return files
    keys: list[pa.Array] = []
    texts: list[pa.Array] = []
    for t in read_parsed_stats(snapshot.storage, checkpoint):
        if not t.num_rows:
            continue
        keys.append(_keys(t, snapshot.table))
        texts.append(stats_json(t.column("stats_parsed")))
    if not keys:
        return files
    all_keys = pa.concat_arrays(keys)
    all_texts = pa.concat_arrays(texts)
    found = pc.index_in(_keys(files, snapshot.table), value_set=all_keys)
    filled = pc.coalesce(stats, all_texts.take(found))
    return files.set_column(files.schema.get_field_index("stats"), "stats", filled)


def with_source_stats(snapshot: Snapshot) -> Snapshot:
    """`snapshot` whose live files carry JSON statistics wherever their checkpoint row had
    typed ones only (see the module docstring)."""
    files = snapshot.files
    if isinstance(files, StreamedActions):
        if type(files) is not StreamedActions:
            # A state rebuilt by bucket reads its files from its own spill files; the
            # rebuild filled their statistics from the checkpoint (`typed_stats=True`).
            return snapshot
        return dataclasses.replace(snapshot, files=files.with_typed_stats())
    filled = fill_loaded(snapshot, files)
    if filled is files:
        return snapshot
    return dataclasses.replace(snapshot, files=filled)


def _source_keys_with_stats(snapshot: Snapshot) -> pa.Array:
    """File keys of the checkpoint's adds that have statistics in either form, read from
    its Parquet files (parts, V2 top-level file, sidecars) with pyarrow directly."""
    import pyarrow.parquet as pq

    checkpoint = snapshot.segment.checkpoint
    assert checkpoint is not None
    sources = read_checkpoint(snapshot.storage, checkpoint, file_actions=False).file_sources
    keys: list[pa.Array] = []
    for path, fmt in sources:
        if fmt != "parquet":
            continue  # a JSON file holds JSON `stats`, which the state reads as it is
        with snapshot.storage.open_input(path) as fh:
            pf = pq.ParquetFile(fh)
            top = pf.schema_arrow
            if "add" not in top.names:
                continue
            add = top.field("add").type
            columns = ["add.path", "add.deletionVector"]
            forms = [n for n in ("stats", "stats_parsed") if add.get_field_index(n) >= 0]
            if not forms:
                continue
            t = pf.read(columns=columns + [f"add.{n}" for n in forms])
        col = _one(t.column("add"))
        col = col.filter(pc.is_valid(pc.struct_field(col, "path")))
        has = pa.repeat(pa.scalar(False), len(col))
        for n in forms:
            has = pc.or_(has, has_stats(pc.struct_field(col, n)))
        col = col.filter(has)
        if len(col):
            keys.append(_keys(pa.table({
                "path": pc.struct_field(col, "path"),
                "deletionVector": pc.struct_field(col, "deletionVector"),
            }), snapshot.table))
    return pa.concat_arrays(keys) if keys else pa.array([], pa.string())


def check_source_stats(snapshot: Snapshot) -> None:
    """Refuse to checkpoint a loaded state in which a live file has no statistics although
    its row in the checkpoint read has them (JSON or typed). A streamed or rebuilt state is
    not checked here (its files are read once, as they are written).

    Raises:
        CheckpointVerificationError: naming how many files and the first.
    """
    files = snapshot.files
    if isinstance(files, StreamedActions) or snapshot.segment.checkpoint is None:
        return
    if not files.num_rows:
        return
    missing = pc.invert(has_stats(files.column("stats")))
    if not pc.any(missing).as_py():
        return
    source = _source_keys_with_stats(snapshot)
    lost = pc.and_(missing, pc.is_in(_keys(files, snapshot.table), value_set=source))
    n_lost = pc.sum(lost).as_py() or 0
    if n_lost:
        first = _one(files.column("path")).filter(lost)[0].as_py()
        raise CheckpointVerificationError(
            f"{n_lost} live files have no statistics in the state read although the "
            f"checkpoint it was read from holds theirs (first: {first}); refusing to write a "
            "checkpoint that would drop them",
            table=snapshot.table,
            version=snapshot.version,
            file=snapshot.segment.checkpoint.files[0].path,
        )


__all__ = ["check_source_stats", "fill_loaded", "with_source_stats"]
