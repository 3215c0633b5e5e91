"""Bring a snapshot up to date by reading only the commits after it.

Spec sections: "Action Reconciliation" (the new commits' file actions, reconciled by the
core's `replay`, replace the old state's actions with the same (path, DV) key), "Delta Log
Entries". Writers re-read the table before each commit of a long operation (the row-tracking
backfill commits batch after batch); this keeps that cost proportional to what changed.

It belongs with `log.snapshot.loaded_snapshot` (as `Snapshot.refresh()`); it lives here until the
core offers it.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.commit.conflicts import contiguous_commits
from delta_ops.log import Delta, LogSegment, Snapshot
from delta_ops.log import replay_segment as replay
from delta_ops.protocol.actions import file_keys

__all__ = ["refresh_snapshot"]


def _flat(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks()
    return values


def refresh_snapshot(snapshot: Snapshot) -> Snapshot:
    """The latest snapshot, built from `snapshot` plus the commits after it.

    Equivalent to `load_snapshot(storage)`, but reads only the new commits (replayed by the
    core's `replay`) and merges their reconciled file actions into the old state with Arrow
    kernels, so a backfill re-reading the table before each batch does not re-parse the
    whole log. New protocol and metadata actions replace the old ones. Only plain commit
    files are read (a new checkpoint or compaction is not needed: the commits are there).
    """
    storage = snapshot.storage
    start = snapshot.version + 1
    taken = contiguous_commits(storage, start)
    if not taken:
        return snapshot
    deltas = tuple(Delta(v, v, info) for v, info in taken)
    segment = LogSegment(
        table=snapshot.table,
        version=taken[-1][0],
        checkpoint=None,
        deltas=deltas,
        commits=tuple(info for _, info in taken),
    )
    state = replay(storage, segment)
    root = snapshot.table
    touched_parts = [
        _flat(file_keys(t.to_struct_array(), root))
        for t in (state.adds, state.removes)
        if t.num_rows
    ]
    files, tombstones = snapshot.files, snapshot.tombstones
    if touched_parts:
        touched = pa.concat_arrays(touched_parts)
        if files.num_rows:
            files = files.filter(
                pc.invert(pc.is_in(file_keys(files.to_struct_array(), root), value_set=touched))
            )
        if tombstones.num_rows:
            tombstones = tombstones.filter(
                pc.invert(
                    pc.is_in(file_keys(tombstones.to_struct_array(), root), value_set=touched)
                )
            )
    if state.adds.num_rows:
        files = pa.concat_tables([files, state.adds]).combine_chunks()
    if state.removes.num_rows:
        tombstones = pa.concat_tables([tombstones, state.removes]).combine_chunks()
    old = snapshot.segment
    new_segment = dataclasses.replace(
        old,
        version=segment.version,
        deltas=old.deltas + deltas,
        commits=old.commits + segment.commits,
    )
    return dataclasses.replace(
        snapshot,
        segment=new_segment,
        protocol=state.protocol if state.protocol is not None else snapshot.protocol,
        metadata=state.metadata if state.metadata is not None else snapshot.metadata,
        files=files,
        tombstones=tombstones,
        txns={**snapshot.txns, **state.txns},
        all_domains={**snapshot.all_domains, **state.domains},
        commit_infos={**snapshot.commit_infos, **state.commit_infos},
    )


def _flat(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks()
    return values
