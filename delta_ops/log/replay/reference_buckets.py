"""VACUUM's references for large tables, partitioned by listing key into spill files.

Spec sections: those of `log.replay.references` ("Action Reconciliation", "Checkpoints" V1 and V2
with sidecars, "Log Compaction Files", "Add File and Remove File", "Deletion Vectors").

The same reading as `log.replay.references.file_references`, in bounded memory (issue 15). The
commits (and compactions) since the checkpoint are reconciled as there, in memory: their
size follows the log since the checkpoint, not the table. The checkpoint's file actions
are already reconciled (one per key), so its state is each of its actions whose key no
commit touched; they are streamed `CHECKPOINT_BATCH_ROWS` rows at a time
(`log.replay.streamed_actions._parquet_groups`; a JSON part one part at a time), the commits' keys
taken out, and each slice's references computed row by row (`log.replay.references.reference_parts`)
and spilled (`engine.spill`):

* the listing keys to keep and those expired tombstones name, flagged, by the bucket of
  the key (the listing key of `protocol.actions.reader_keys`, the one path identity: a
  listed file and a reference to it have the same key, so the same bucket);
* the paths as written, unbucketed, for the independent proof of the plan.

When the segment uses compaction files, the second reading `file_references` unites with
the first (the covered commits, else the compactions read in the other order) is spilled
as its own reading; a reading that fails is dropped whole, as the in-memory path drops it.

Which path a table takes: `read_references` estimates the table's file actions from the
checkpoint's bytes (parts, and sidecars by their `sizeInBytes`: at least
`CHECKPOINT_BYTES_PER_ACTION` bytes per action in any Parquet checkpoint seen, so the
estimate errs high) plus the deltas' bytes (`DELTA_BYTES_PER_ACTION` per action). From
`partition_threshold()` estimated actions on (default `DEFAULT_PARTITION_FILES`,
`ReadOptions.vacuum_partition_files` overrides, 0 partitions every table) the references
are spilled into `bucket_count(estimate)` buckets: one per `KEYS_PER_BUCKET` estimated
actions, at least 1 and at most `MAX_BUCKETS` (`ReadOptions.vacuum_buckets` overrides).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.engine.spill import BucketSpill, KeyBuckets
from delta_ops.errors import DeltaOpsError
from delta_ops.log.files.checkpoint_reader import _read_parquet_actions, read_json_part
from delta_ops.log.files.sidecars import require_sidecar, sidecar_files
from delta_ops.log.read_options import DEFAULT_PARTITION_FILES, ReadOptions
from delta_ops.log.replay.columnar_commits import REFERENCE_ADD_TYPE, REFERENCE_REMOVE_TYPE
from delta_ops.log.replay.references import (
    FileReferences,
    _action_rows,
    _column,
    _dict_rows,
    commit_rows,
    file_references,
    read_deltas,
    reference_parts,
)
from delta_ops.log.replay.streamed_actions import _parquet_groups
from delta_ops.log.segment.log_segment import CheckpointFiles, LogSegment, build_log_segment
from delta_ops.protocol.arrays import from_numpy, not_in, sorted_unique, string_array
from delta_ops.storage import Storage

__all__ = [
    "CHECKPOINT_BATCH_ROWS",
    "DEFAULT_PARTITION_FILES",
    "KEYS_PER_BUCKET",
    "MAX_BUCKETS",
    "SpilledReferences",
    "bucket_count",
    "partition_threshold",
    "read_references",
    "spilled_file_references",
]

#: Estimated file actions per bucket: a bucket's keys and the hash set built over them
#: (~150 B per key) take about 75 MB.
KEYS_PER_BUCKET = 500_000
#: Most buckets (and open spill files): beyond 128M actions the buckets grow instead.
MAX_BUCKETS = 256
#: Fewest bytes per file action in a Parquet checkpoint (31 B for short paths and
#: statistics; Spark's are 40 to 60 B, wide statistics several hundred).
CHECKPOINT_BYTES_PER_ACTION = 32
#: Fewest bytes per file action in a JSON commit or compaction.
DELTA_BYTES_PER_ACTION = 128
#: Checkpoint rows decoded, turned into references and spilled at once. The batches of the
#: streamed state (`streamed_actions.BATCH_ROWS`, 131,072) read ahead two row groups of up
#: to that size: 141 MB against 178 MB peak for 100k and 250k files (8 buckets). At 32,768
#: rows, a row group larger than that is decoded where it is consumed: 111 MB against
#: 117 MB, in the same time.
CHECKPOINT_BATCH_ROWS = 32_768

#: A spilled reference: a listing key, and whether an expired tombstone names it (else a
#: live add or an unexpired tombstone does, and the file is kept).
KEY_SCHEMA = pa.schema([("key", pa.string()), ("expired", pa.bool_())])
WRITTEN_SCHEMA = pa.schema([("path", pa.string())])


def partition_threshold(value: int | None = None, options: ReadOptions | None = None) -> int:
    """Estimated file actions from which VACUUM partitions its references: `value` when
    given, else `options.vacuum_partition_files` (`DEFAULT_PARTITION_FILES` without)."""
    if value is not None:
        return int(value)
    return (options or ReadOptions()).vacuum_partition_files


def bucket_count(
    estimated_actions: int, value: int | None = None, options: ReadOptions | None = None
) -> int:
    """Buckets for a table of `estimated_actions` file actions: `value` when given, else
    `options.vacuum_buckets`, else one per `KEYS_PER_BUCKET` (1 to `MAX_BUCKETS`)."""
    fixed = value if value is not None else (options or ReadOptions()).vacuum_buckets
    if fixed:
        return int(fixed)
    return max(1, min(MAX_BUCKETS, math.ceil(estimated_actions / KEYS_PER_BUCKET)))


# --------------------------------------------------------------------------------------
# The spilled references
# --------------------------------------------------------------------------------------


@dataclass
class _Reading:
    """One reading of the state, spilled: listing keys by bucket, paths as written."""

    keys: BucketSpill
    written: BucketSpill

    def add(self, rows: pa.Table, delete_before: int, root: str) -> None:
        if not rows.num_rows:
            return
        written, keep, expired = reference_parts(rows, delete_before, root)
        flags = np.concatenate([np.zeros(len(keep), bool), np.ones(len(expired), bool)])
        keys = pa.concat_arrays([keep, expired])
        self.keys.append(pa.Table.from_arrays([keys, from_numpy(flags)], schema=KEY_SCHEMA))
        self.written.append(pa.Table.from_arrays([written], schema=WRITTEN_SCHEMA))

    def finish(self) -> None:
        self.keys.finish()
        self.written.finish()

    def close(self) -> None:
        try:
            self.keys.close()
        finally:
            self.written.close()


class _KeepBuckets(KeyBuckets):
    """The kept keys of every reading, bucket by bucket (for the engine's anti-join)."""

    def __init__(self, refs: SpilledReferences) -> None:
        self.refs = refs
        self.buckets = refs.buckets

    def bucket(self, b: int) -> pa.Array:
        return self.refs._bucket(b, expired=False)


class SpilledReferences:
    """What `FileReferences` says, spilled by bucket: the same reading interface
    (`keep_chunks`, `written_chunks`, `expired_keys`, `close`), and `keep` as `KeyBuckets`
    for the engine. Close it (or use `with`) to remove its files."""

    def __init__(self, buckets: int) -> None:
        self.buckets = buckets
        self._readings: list[_Reading] = []
        self.keep = _KeepBuckets(self)

    def _new_reading(self) -> _Reading:
        for r in self._readings:
            r.finish()  # at most one reading's writers open at a time
        keys = BucketSpill(KEY_SCHEMA, "key", self.buckets, name="vacuum-keys")
        try:
            written = BucketSpill(WRITTEN_SCHEMA, "path", 1, name="vacuum-written")
        except BaseException:
            keys.close()
            raise
        reading = _Reading(keys, written)
        self._readings.append(reading)
        return reading

    def _drop(self, reading: _Reading) -> None:
        self._readings.remove(reading)
        reading.close()

    def _bucket(self, b: int, *, expired: bool) -> pa.Array:
        parts: list[pa.Array] = []
        for r in self._readings:
            for batch in r.keys.batches(b):
                flag = batch.column(1)
                parts.append(batch.column(0).filter(flag if expired else pc.invert(flag)))
        return pa.concat_arrays(parts) if parts else string_array([])

    def keep_chunks(self) -> Iterator[pa.Array]:
        """The kept listing keys, a piece at a time (duplicates possible)."""
        for b in range(self.buckets):
            for r in self._readings:
                for batch in r.keys.batches(b):
                    keep = batch.column(0).filter(pc.invert(batch.column(1)))
                    if len(keep):
                        yield keep

    def written_chunks(self) -> Iterator[pa.Array]:
        """The referenced paths as written, a piece at a time (duplicates possible)."""
        for r in self._readings:
            for batch in r.written.batches(0):
                yield batch.column(0)

    def expired_keys(self) -> pa.Array:
        """`FileReferences.expired`: listing keys expired tombstones name that nothing kept
        names, unique and sorted (built bucket by bucket)."""
        out: list[pa.Array] = []
        for b in range(self.buckets):
            expired = self._bucket(b, expired=True)
            if not len(expired):
                continue
            out.append(not_in(sorted_unique(expired), self._bucket(b, expired=False)))
        if not out:
            return string_array([])
        expired = pa.concat_arrays(out)
        return expired.take(pc.array_sort_indices(expired))

    def include(self, other: FileReferences) -> None:
        """Add a reading held in memory (the staged commits' references): what it keeps is
        kept, and its expired keys are lite mode's candidates only where nothing keeps
        them, as `FileReferences.union` has it."""
        reading = self._new_reading()
        flags = np.concatenate(
            [np.zeros(len(other.keep), bool), np.ones(len(other.expired), bool)]
        )
        keys = pa.concat_arrays([other.keep, other.expired])
        reading.keys.append(pa.Table.from_arrays([keys, from_numpy(flags)], schema=KEY_SCHEMA))
        reading.written.append(pa.Table.from_arrays([other.written], schema=WRITTEN_SCHEMA))
        reading.finish()

    def close(self) -> None:
        """Remove every spill file (idempotent)."""
        readings, self._readings = self._readings, []
        errors: list[BaseException] = []
        for r in readings:
            try:
                r.close()
            except OSError as exc:  # keep removing the others
                errors.append(exc)
        if errors:
            raise errors[0]

    def __enter__(self) -> SpilledReferences:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------------------
# Reading the log into it
# --------------------------------------------------------------------------------------


def _checkpoint_sources(
    storage: Storage, checkpoint: CheckpointFiles
) -> tuple[list[tuple[str, str]], int]:
    """The files holding the checkpoint's file actions as (path, "parquet" | "json"), every
    part then every sidecar (each checked to exist), and their bytes (sidecars by their
    `sizeInBytes`). Only the `sidecar` actions of the parts are decoded."""
    table = storage.root
    sources: list[tuple[str, str]] = []
    total = 0
    sidecars: list[dict] = []
    for lf, info in zip(checkpoint.log_files, checkpoint.files, strict=True):
        sources.append((info.path, lf.format))
        total += info.size
        if lf.format == "json":
            actions = read_json_part(storage, lf.version, info.path)
            sidecars += [a["sidecar"] for a in actions if isinstance(a.get("sidecar"), dict)]
        else:
            found = _read_parquet_actions(
                storage, info.path, lf.version, add_type=pa.struct([]),
                remove_type=pa.struct([]), non_file_columns=("sidecar",),
            )
            sidecars += [a["sidecar"] for a in found.non_file
                         if isinstance(a.get("sidecar"), dict)]
    named = [s for s in sidecars if s.get("path")]
    paths = sidecar_files(
        [s["path"] for s in named], table, checkpoint.version, checkpoint.files[0].path
    )
    for path, action in zip(paths, named, strict=True):
        require_sidecar(storage, path, checkpoint.version)
        sources.append((path, "parquet"))
        size = action.get("sizeInBytes")
        total += int(size) if isinstance(size, int) and size > 0 else 0
    return sources, total


def _checkpoint_rows(
    storage: Storage, version: int, sources: list[tuple[str, str]]
) -> Iterator[pa.Table]:
    """The checkpoint's adds and removes as reference rows, a row group (or JSON part) at
    a time, as `log.replay.references.read_checkpoint_references` reads them whole."""
    root = storage.root
    for path, fmt in sources:
        if fmt == "json":
            actions = read_json_part(storage, version, path)
            for name, is_add in (("add", True), ("remove", False)):
                rows = [a[name] for a in actions if isinstance(a.get(name), dict)]
                yield _dict_rows(rows, is_add, root, version=version, file=path)
            continue
        for kind, target, is_add in (
            ("add", REFERENCE_ADD_TYPE, True), ("remove", REFERENCE_REMOVE_TYPE, False)
        ):
            for actions in _parquet_groups(storage, path, version, kind, target,
                                           batch_rows=CHECKPOINT_BATCH_ROWS):
                yield _action_rows(actions, is_add, None, root)


def _spill_reading(
    reading: _Reading,
    storage: Storage,
    segment: LogSegment,
    blobs: Mapping[str, bytes] | None,
    delete_before: int,
    *,
    compaction_first_wins: bool = True,
    sources: list[tuple[str, str]] | None = None,
) -> None:
    """`log.replay.references.reference_rows` of `segment`, slice by slice into `reading`
    (`sources`: the checkpoint's, when already known)."""
    root = storage.root
    if blobs is None:
        blobs = read_deltas(storage, segment)
    commits = commit_rows(segment, blobs, root, compaction_first_wins=compaction_first_wins)
    reading.add(commits, delete_before, root)
    if segment.checkpoint is None:
        return
    touched = _column(commits, "key") if commits.num_rows else None
    if sources is None:
        sources, _ = _checkpoint_sources(storage, segment.checkpoint)
    for rows in _checkpoint_rows(storage, segment.checkpoint.version, sources):
        if touched is not None and rows.num_rows:
            # The checkpoint's actions only for keys no commit touched.
            rows = rows.filter(pc.invert(pc.is_in(rows.column("key"), value_set=touched)))
        reading.add(rows, delete_before, root)


def spilled_file_references(
    storage: Storage,
    segment: LogSegment,
    blobs: Mapping[str, bytes] | None,
    delete_before: int,
    *,
    buckets: int,
    sources: list[tuple[str, str]] | None = None,
) -> SpilledReferences:
    """`log.replay.references.file_references`, spilled into `buckets` buckets (see the module
    docstring). The caller closes the result; on error nothing is left behind.

    Raises:
        As `file_references`.
    """
    refs = SpilledReferences(buckets)
    try:
        _spill_reading(refs._new_reading(), storage, segment, blobs, delete_before,
                       sources=sources)
        if any(d.is_compaction for d in segment.deltas):
            second = refs._new_reading()
            try:
                commits = build_log_segment(storage, segment.version, use_compactions=False)
                _spill_reading(second, storage, commits, None, delete_before)
            except DeltaOpsError:
                # As `file_references`: the covered commits are gone (or that segment's
                # checkpoint cannot be read), and the compactions read in the other order
                # stand in for them; what the failed reading spilled is dropped whole.
                refs._drop(second)
                _spill_reading(refs._new_reading(), storage, segment, blobs, delete_before,
                               compaction_first_wins=False, sources=sources)
        for r in refs._readings:
            r.finish()
    except BaseException:
        refs.close()
        raise
    return refs


def _estimate(
    storage: Storage, segment: LogSegment, blobs: Mapping[str, bytes]
) -> tuple[int, list[tuple[str, str]] | None]:
    """How many file actions the segment holds, estimated from bytes (errs high), and the
    checkpoint's sources (None without a checkpoint)."""
    total = sum(len(b) for b in blobs.values()) // DELTA_BYTES_PER_ACTION
    if segment.checkpoint is None:
        return total, None
    sources, size = _checkpoint_sources(storage, segment.checkpoint)
    return total + size // CHECKPOINT_BYTES_PER_ACTION, sources


def read_references(
    storage: Storage,
    segment: LogSegment,
    blobs: Mapping[str, bytes] | None,
    delete_before: int,
    *,
    threshold: int | None = None,
    buckets: int | None = None,
    options: ReadOptions | None = None,
) -> FileReferences | SpilledReferences:
    """What VACUUM protects at `segment.version`: in memory (`file_references`) for a
    table estimated below `partition_threshold(threshold)` file actions, else spilled into
    `bucket_count(estimate, buckets)` buckets (`options` gives what `threshold` and
    `buckets` leave unset). Either has `keep_chunks`, `written_chunks`,
    `expired_keys` and `close`; close it when done.

    Raises:
        As `file_references`.
    """
    if blobs is None:
        blobs = read_deltas(storage, segment)
    limit = partition_threshold(threshold, options)
    estimate, sources = _estimate(storage, segment, blobs)
    if estimate < limit:
        return file_references(storage, segment, blobs, delete_before)
    return spilled_file_references(
        storage, segment, blobs, delete_before, sources=sources,
        buckets=bucket_count(estimate, buckets, options),
    )
