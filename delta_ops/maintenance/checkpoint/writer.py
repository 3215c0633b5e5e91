"""Write a checkpoint: sidecars, then the top-level file(s), then `_last_checkpoint`.

Spec sections: "Checkpoints" (classic, multi-part and UUID-named files; "checkpoints for a
given version must only be created after the associated delta file has been successfully
written"), "V2 Checkpoint Table Feature" / "Checkpoint Specs" (sidecars in
`_delta_log/_sidecars`, exactly one checkpointMetadata action, file actions either all
embedded or all in sidecars), "Last Checkpoint File" (fields and checksum).

Safety, in the order things happen:

0. The snapshot is cross-checked against an independent path (the previous checkpoint plus
   the commits, never compaction files; `delta_ops.maintenance.crosscheck`) before anything
   is written: when the snapshot was read through compaction files, the commits are
   replayed and the live files (keys, count, sizes), the tombstones kept, protocol,
   metadata, txns and domains compared; a difference raises CrossCheckError and nothing is
   written (no part, no sidecar, no `_last_checkpoint`). When the snapshot was read from
   commits only, it is itself that independent replay. Step 1 then compares the bytes
   with the snapshot, so what is published equals the independent replay.
1. Every file is serialized in memory and read back (verify.py) before it gets its final
   name; sidecars, which the engine writes (possibly on Spark executors), are read back
   from storage before the top-level file that references them is written.
2. Files appear atomically under their final names (`Storage.put_atomic`, or
   `put_if_absent` for UUID-named files, which are never overwritten). A sidecar nobody
   references is harmless; a multi-part checkpoint is ignored by readers until its last
   part lands, and every part is verified before the first one is written.
3. `_last_checkpoint` is written last and only ever moves to a newer version
   (`delta_ops.log.advance_last_checkpoint`).

A crash at any point leaves the table readable: readers find checkpoints by listing, and
`_last_checkpoint` only names a checkpoint once it is complete.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from delta_ops.clock import Clock, start_time
from delta_ops.engine.base import Engine
from delta_ops.errors import (
    CheckpointError,
    CheckpointRaceLost,
    CheckpointVerificationError,
    CorruptLogError,
    InvalidCheckpointRequestError,
)
from delta_ops.log import (
    ReadOptions,
    Snapshot,
    StateKind,
    advance_last_checkpoint,
    choose_state,
    find_existing,
    last_checkpoint_of,
    load_snapshot,
    rebuild_snapshot,
    schema_for_last_checkpoint,
)
from delta_ops.maintenance.checkpoint import actions as act
from delta_ops.maintenance.checkpoint import streamed
from delta_ops.maintenance.checkpoint.common import (
    _expected_files,
    _expected_non_file,
    _parquet_bytes,
    _put_verified,
    _Written,
)
from delta_ops.maintenance.checkpoint.plan import CheckpointKind, CheckpointPlan, plan_checkpoint
from delta_ops.maintenance.checkpoint.typed_stats import check_source_stats, with_source_stats
from delta_ops.maintenance.checkpoint.v2 import SIDECARS_PER_ENGINE_CALL as SIDECARS_PER_ENGINE_CALL
from delta_ops.maintenance.checkpoint.v2 import _write_v2
from delta_ops.maintenance.checkpoint.verify import Expected, verify_file
from delta_ops.maintenance.crosscheck import cross_check_snapshot
from delta_ops.protocol import filenames
from delta_ops.protocol.checkpoint_schema import (
    classic_schema,
    hash_partition,
    null_key_partition,
)
from delta_ops.protocol.filenames import LOG_DIR
from delta_ops.protocol.last_checkpoint import LastCheckpoint, build_last_checkpoint
from delta_ops.storage import Storage, TableLike


@dataclass(frozen=True)
class CheckpointResult:
    """What `write_checkpoint` did.

    Attributes:
        version: the version checkpointed.
        kind: classic, multi-part, v2-classic or v2-uuid.
        files: the checkpoint's files relative to `_delta_log` (sidecars as
            `_sidecars/<name>`); for an existing checkpoint, its files.
        num_actions: actions in the checkpoint (sidecars' included).
        num_add_files: add actions in the checkpoint.
        size_in_bytes: total size of the checkpoint's files.
        last_checkpoint_updated: whether `_last_checkpoint` was (re)written.
        already_existed: a valid checkpoint of that kind was already there; nothing but
            `_last_checkpoint` (if it was behind) was written.
        cross_check: what the state was cross-checked against before publishing: the
            independent replay (previous checkpoint + commits) when the snapshot was read
            through compaction files, the commits-only segment itself otherwise, or
            `unavailable (...)` when commits a compaction covers were cleaned up.
        rebuilt_buckets: the number of buckets the state was reconciled in when it was
            rebuilt by bucket (`log.snapshot.rebuild`), 0 when it was loaded or streamed.
    """

    version: int
    kind: str
    files: tuple[str, ...]
    num_actions: int
    num_add_files: int
    size_in_bytes: int
    last_checkpoint_updated: bool
    already_existed: bool
    cross_check: str = ""
    rebuilt_buckets: int = 0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["files"] = list(self.files)
        return out

# ---- the kinds ---------------------------------------------------------------------------------


def _write_classic(storage: Storage, snapshot: Snapshot, plan: CheckpointPlan) -> _Written:
    files, tombstones = snapshot.files, plan.tombstones
    schema = classic_schema(plan.layout.add)
    if snapshot.streamed:
        name = filenames.classic_checkpoint_name(plan.version)
        schema, head = streamed.head_batch(snapshot, plan)
        rows, size, adds = streamed.write_single_streamed(
            storage, snapshot, plan, name=name, schema=schema, head=head,
            non_file=_expected_non_file(snapshot, plan), embedded=True, overwrite=True,
        )
        lc = build_last_checkpoint(
            version=plan.version, size=rows, size_in_bytes=size, num_of_add_files=adds,
            checkpoint_schema=schema_for_last_checkpoint(schema),
        )
        return _Written([name], rows, size, lc)
    batches = itertools.chain(
        [act.non_file_batch(act.non_file_columns(snapshot, plan.layout), schema)],
        act.file_action_batches(files, tombstones, plan.layout, schema),
    )
    buf = _parquet_bytes(schema, batches)
    name = filenames.classic_checkpoint_name(plan.version)
    path = f"{LOG_DIR}/{name}"
    adds, removes = _expected_files(files, tombstones, plan.layout)
    rows = verify_file(
        buf,
        "parquet",
        Expected(adds, removes, _expected_non_file(snapshot, plan)),
        table=plan.table,
        version=plan.version,
        file=path,
    )
    data = buf.to_pybytes()
    del buf
    _put_verified(storage, path, data, overwrite=True, plan=plan)
    lc = build_last_checkpoint(
        version=plan.version,
        size=rows,
        size_in_bytes=len(data),
        num_of_add_files=plan.num_adds,
        checkpoint_schema=schema_for_last_checkpoint(schema),
    )
    return _Written([name], rows, len(data), lc)


def _write_multipart(storage: Storage, snapshot: Snapshot, plan: CheckpointPlan) -> _Written:
    assert plan.parts is not None
    n = plan.parts
    files, tombstones = snapshot.files, plan.tombstones
    schema = classic_schema(plan.layout.add)
    if snapshot.streamed:
        _, head = streamed.head_batch(snapshot, plan)
        names, rows, size = streamed.write_multipart_streamed(
            storage, snapshot, plan, head=head, non_file=_expected_non_file(snapshot, plan)
        )
        lc = build_last_checkpoint(
            version=plan.version, size=rows, size_in_bytes=size, num_of_add_files=plan.num_adds,
            parts=n, checkpoint_schema=schema_for_last_checkpoint(schema),
        )
        return _Written(names, rows, size, lc)
    add_part = hash_partition(files.column("path"), n)
    rm_part = hash_partition(tombstones.column("path"), n)
    add_order = np.argsort(add_part, kind="stable")
    rm_order = np.argsort(rm_part, kind="stable")
    add_bounds = np.concatenate([[0], np.cumsum(np.bincount(add_part, minlength=n))])
    rm_bounds = np.concatenate([[0], np.cumsum(np.bincount(rm_part, minlength=n))])
    home = null_key_partition(n)
    non_file = _expected_non_file(snapshot, plan)
    prepared: list[tuple[str, bytes]] = []
    rows_total = 0
    for p in range(n):
        files_p = files.take(pa.array(add_order[add_bounds[p] : add_bounds[p + 1]]))
        tomb_p = tombstones.take(pa.array(rm_order[rm_bounds[p] : rm_bounds[p + 1]]))
        head = (
            [act.non_file_batch(act.non_file_columns(snapshot, plan.layout), schema)]
            if p == home
            else []
        )
        batches = itertools.chain(
            head, act.file_action_batches(files_p, tomb_p, plan.layout, schema)
        )
        buf = _parquet_bytes(schema, batches)
        name = filenames.multipart_checkpoint_name(plan.version, p + 1, n)
        adds, removes = _expected_files(files_p, tomb_p, plan.layout)
        rows_total += verify_file(
            buf,
            "parquet",
            Expected(adds, removes, non_file if p == home else {}),
            table=plan.table,
            version=plan.version,
            file=f"{LOG_DIR}/{name}",
        )
        prepared.append((name, buf.to_pybytes()))
        del buf, files_p, tomb_p
    if rows_total != 2 + len(snapshot.txns) + len(snapshot.domains) + plan.num_file_actions:
        raise CheckpointVerificationError(
            f"the parts hold {rows_total} actions in all, expected "
            f"{2 + len(snapshot.txns) + len(snapshot.domains) + plan.num_file_actions}",
            table=plan.table,
            version=plan.version,
        )
    size = 0
    for name, data in prepared:
        _put_verified(storage, f"{LOG_DIR}/{name}", data, overwrite=True, plan=plan)
        size += len(data)
    lc = build_last_checkpoint(
        version=plan.version,
        size=rows_total,
        size_in_bytes=size,
        num_of_add_files=plan.num_adds,
        parts=n,
        checkpoint_schema=schema_for_last_checkpoint(schema),
    )
    return _Written([name for name, _ in prepared], rows_total, size, lc)

# ---- the operation ----------------------------------------------------------------------------


def apply_checkpoint(
    storage: Storage, snapshot: Snapshot, plan: CheckpointPlan, engine: Engine
) -> _Written:
    """Write the checkpoint `plan` describes (no `_last_checkpoint`)."""
    if plan.kind is CheckpointKind.CLASSIC:
        return _write_classic(storage, snapshot, plan)
    if plan.kind is CheckpointKind.MULTI_PART:
        return _write_multipart(storage, snapshot, plan)
    return _write_v2(storage, snapshot, plan, engine)


def write_checkpoint(
    table_or_storage: TableLike,
    *,
    version: int | None = None,
    kind: CheckpointKind | str | None = None,
    fmt: str = "parquet",
    sidecar_actions: int | None = None,
    parts: int | None = None,
    now_ms: int | None = None,
    clock: Clock | None = None,
    engine: Engine | None = None,
    storage_options: Mapping[str, Any] | None = None,
    stream_threshold: int | None = None,
    rebuild: bool | None = None,
    rebuild_threshold: int | None = None,
    buckets: int | None = None,
    read_options: ReadOptions | None = None,
) -> CheckpointResult:
    """Write a checkpoint of the table at `version` (latest when None).

    A table whose checkpoint files hold at least `stream_threshold` bytes (default
    `log.replay.streamed_actions.DEFAULT_STREAM_THRESHOLD_BYTES`, or
    `$DELTA_OPS_STREAM_THRESHOLD_BYTES`) is checkpointed from a streamed state (`streamed.py`): the
    same files, in memory that does not grow with the table. A log with no usable checkpoint whose
    commits hold at least
    `rebuild_threshold` bytes of JSON (default
    `log.snapshot.rebuild.DEFAULT_REBUILD_THRESHOLD_BYTES`, 64 MiB, or
    `$DELTA_OPS_REBUILD_THRESHOLD_BYTES`), or any table with `rebuild=True`, is rebuilt by
    bucket (`log.snapshot.rebuild`): every file action of the segment spilled by key to local
    temporary files and reconciled one bucket at a time, then written by the streamed
    writer; memory follows a bucket, not the table.

    Args:
        table_or_storage: a `DeltaTable`, a `Storage` rooted at the table, or a table URI.
        version: the version to checkpoint; its commit must exist.
        kind: "classic", "multi-part", "v2-classic" or "v2-uuid"; None follows the table
            (`delta.checkpointPolicy` = v2 with v2Checkpoint supported -> v2-uuid, else
            classic), or multi-part when `parts` is given.
        fmt: top-level file format for V2 checkpoints: "parquet" or "json" (UUID-named only).
        sidecar_actions: V2 only: most file actions per sidecar (default 50,000); 0 embeds
            every file action in the top-level file.
        parts: multi-part only: the number of parts (at least 2).
        now_ms: the time (ms since the epoch) for tombstone expiry, instead of `clock`.
        clock: the clock (`delta_ops.clock`) read once for tombstone expiry; default: the
            system clock. Give `clock` or `now_ms`, not both.
        engine: where sidecars are written (default `LocalEngine()`). On a distributed
            engine (Spark), a table large enough to stream is checkpointed by one worker
            task running the streamed writer; this process only advances
            `_last_checkpoint`.
        storage_options: options of the table's storage when it is given by URI.
        stream_threshold: checkpoint bytes from which the state is streamed (0: always).
        rebuild: True reconciles the whole segment (checkpoint and commits) by bucket
            instead of loading or streaming it; False never does; None (default) does when
            the log has no usable checkpoint and its commits reach `rebuild_threshold`.
        rebuild_threshold: commits' JSON bytes from which `rebuild=None` rebuilds (0:
            every table).
        buckets: the bucket count of a rebuild (default: one per 250,000 file actions
            estimated from the log's bytes, or `$DELTA_OPS_REBUILD_BUCKETS`).
        read_options: the log's reading thresholds and bucket count for what the three
            arguments above leave unset (None: the environment's, `ReadOptions.from_env`).

    Returns:
        CheckpointResult; `already_existed` when a valid checkpoint of that kind was there.

    Raises:
        UnsupportedFeatureError: the table has features the checkpoint writer does not
            support (nothing is written).
        InvalidCheckpointRequestError: a kind/format/parts/sidecar option the table or the
            spec does not allow.
        CheckpointVerificationError: the checkpoint read back did not reproduce the
            snapshot; it was not published.
        CrossCheckError: the snapshot read through compaction files differs from the
            previous checkpoint plus the commits; nothing was written.
        NotATableError, VersionNotFoundError, CorruptLogError, StorageError.
    """
    storage = Storage.of(table_or_storage, storage_options)
    started = start_time(clock, now_ms, operation="write_checkpoint")
    # A JSON top-level file with every file action embedded is written from memory.
    embedded_json = fmt == "json" and sidecar_actions == 0
    if rebuild and embedded_json:
        raise InvalidCheckpointRequestError(
            "a rebuilt checkpoint cannot embed its file actions in a JSON top-level file; "
            "use sidecars or the parquet format",
            table=storage.root,
            version=version,
        )
    if read_options is None:
        read_options = ReadOptions.from_env()  # what the arguments above leave unset
    state = choose_state(
        storage, version, read_options, rebuild=rebuild, may_rebuild=not embedded_json,
        may_stream=not embedded_json, rebuild_threshold=rebuild_threshold,
        stream_threshold=stream_threshold,
    )
    rebuild = state is StateKind.REBUILT
    stream = state is not StateKind.LOADED
    if buckets is None:
        buckets = read_options.rebuild_buckets
    options = _Options(version, kind, fmt, sidecar_actions, parts, started, rebuild, buckets)
    if stream and engine is not None and engine.distributed:
        # A large table on a distributed engine: the streamed writer runs in one worker
        # (temp file, verification and put there, as Delta on Spark writes a classic
        # checkpoint from one task), after the rebuild's spill there too when asked;
        # this process receives the summary only.
        task = functools.partial(_write_remotely, options)
        result, lc, replace = engine.map_tasks(storage, task, [None])[0]
    else:
        if engine is None:
            from delta_ops.engine.local import LocalEngine

            engine = LocalEngine()
        result, lc, replace = write_checkpoint_files(storage, options, engine, stream=stream)
    updated = advance_last_checkpoint(storage, lc, replace_same_version=replace)
    return dataclasses.replace(result, last_checkpoint_updated=updated)


@dataclass(frozen=True)
class _Options:
    """What `write_checkpoint` was asked for, the clock already read (`now_ms`)."""

    version: int | None
    kind: CheckpointKind | str | None
    fmt: str
    sidecar_actions: int | None
    parts: int | None
    now_ms: int
    rebuild: bool = False
    buckets: int | None = None


def write_checkpoint_files(
    storage: Storage, options: _Options, engine: Engine, *, stream: bool
) -> tuple[CheckpointResult, LastCheckpoint, bool]:
    """Everything `write_checkpoint` does before `_last_checkpoint`: load (streamed when
    `stream`, rebuilt by bucket when `options.rebuild`), check, plan, cross-check, then
    find an existing checkpoint or write one.

    Returns the result (with `last_checkpoint_updated` False), the `_last_checkpoint`
    content to advance to, and whether it may replace one of the same version (not for a
    checkpoint that was already there)."""
    if options.rebuild:
        with rebuild_snapshot(
            storage, options.version, buckets=options.buckets, typed_stats=True
        ) as rebuilt:
            return _checkpoint_snapshot(
                storage, options, engine, rebuilt.snapshot, rebuilt.summary.buckets
            )
    snapshot = load_snapshot(storage, options.version, stream=stream)
    return _checkpoint_snapshot(storage, options, engine, snapshot, 0)


def _checkpoint_snapshot(
    storage: Storage, options: _Options, engine: Engine, snapshot: Snapshot, buckets: int
) -> tuple[CheckpointResult, LastCheckpoint, bool]:
    started = options.now_ms
    snapshot.ensure_supported("checkpoint")
    # Files whose checkpoint row kept only typed statistics get them back as JSON, so that
    # the checkpoint written carries them in the forms the table asks for.
    snapshot = with_source_stats(snapshot)
    check_source_stats(snapshot)
    plan = plan_checkpoint(
        snapshot,
        kind=options.kind,
        fmt=options.fmt,
        sidecar_actions=options.sidecar_actions,
        parts=options.parts,
        now_ms=started,
    )
    cross = cross_check_snapshot(snapshot, operation="checkpoint", now_ms=started)
    existing = find_existing(storage, plan.version, plan.kind, parts=options.parts)
    if existing is None:
        try:
            written = apply_checkpoint(storage, snapshot, plan, engine)
        except CorruptLogError as exc:  # a file action the writer would not publish
            if exc.table is not None:
                raise
            raise CorruptLogError(exc.reason, table=snapshot.table, version=plan.version,
                                  file=exc.file) from None
        except CheckpointRaceLost as lost:  # another writer's landed meanwhile: theirs
            existing = find_existing(storage, plan.version, plan.kind, parts=options.parts)
            if existing is None:
                raise CheckpointError(
                    f"{lost.reason}, and the checkpoint there does not verify as complete "
                    "(another writer may still be writing it); run again later",
                    table=lost.table, version=lost.version, file=lost.file,
                ) from lost
    if existing is not None:
        result = CheckpointResult(
            version=plan.version,
            kind=plan.kind.value,
            files=existing.names,
            num_actions=existing.num_actions,
            num_add_files=existing.num_add_files,
            size_in_bytes=existing.size_in_bytes,
            last_checkpoint_updated=False,
            already_existed=True,
            cross_check=cross.note,
            rebuilt_buckets=buckets,
        )
        return result, last_checkpoint_of(existing, plan.version), False
    result = CheckpointResult(
        version=plan.version,
        kind=plan.kind.value,
        files=tuple(written.names),
        num_actions=written.num_actions,
        num_add_files=(
            plan.num_adds if plan.num_adds is not None
            else written.last_checkpoint.num_of_add_files
        ),
        size_in_bytes=written.size_in_bytes,
        last_checkpoint_updated=False,
        already_existed=False,
        cross_check=cross.note,
        rebuilt_buckets=buckets,
    )
    return result, written.last_checkpoint, True


def _write_remotely(
    options: _Options, storage: Storage, _item: object
) -> tuple[CheckpointResult, LastCheckpoint, bool]:
    """On a worker: `write_checkpoint_files` from a streamed (or rebuilt) state, sidecars
    written by a local engine there."""
    from delta_ops.engine.local import LocalEngine

    return write_checkpoint_files(storage, options, LocalEngine(), stream=True)


__all__ = ["CheckpointResult", "apply_checkpoint", "write_checkpoint", "write_checkpoint_files"]
