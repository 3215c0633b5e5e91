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
* A state rebuilt by bucket (`log.rebuild`) fills them while it reads the checkpoint into
  its spill files (`rebuild_snapshot(typed_stats=True)`).
* A loaded state (small by definition) reads the checkpoint's `path`, `deletionVector` and
  `stats_parsed` again and fills, by file key, the adds that have no JSON statistics.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.log.checkpoint_reader import read_parsed_stats
from delta_ops.log.snapshot import Snapshot
from delta_ops.log.stream import StreamedActions
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


__all__ = ["fill_loaded", "with_source_stats"]
