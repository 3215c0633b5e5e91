"""Verify a streamed checkpoint file by digest: what was written, read back, is what was
meant, without holding either in memory.

A checkpoint written from a streamed state (`log.replay.streamed_actions`) is too large to compare
row by row in memory the way `verify.py` does. Instead both sides are reduced, one batch at a
time, to a `Digest`: per action kind the number of actions and a SHA-256 of each field
verification compares (add: path, size, deletion vector; remove: path, deletion vector),
fed with the values in the order they were written (string lengths and bytes, integers as
8 little-endian bytes, nulls as a value no field holds); for adds also whether each has
statistics (JSON `stats` or typed `stats_parsed`, `verify.has_stats`), so a checkpoint that
drops statistics the state has is refused too. A file is read back in the order
it was written, so the two digests are equal exactly when the same values came back in
the same order, whatever the batch boundaries on either side; a lost, doubled, reordered
or altered action changes them. Non-file actions are few: they are read back and compared
exactly, as in `verify.py`. The file is read back from where it was written, through its
own Parquet reader (`read_back`), independent of how it was serialized.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.errors import CheckpointVerificationError
from delta_ops.maintenance.checkpoint.verify import (
    NON_FILE_COLUMNS,
    _key,
    has_stats,
    normalize,
    stats_column,
)
from delta_ops.protocol.actions import DELETION_VECTOR_TYPE, conform
from delta_ops.protocol.arrays import from_numpy, string_array, to_numpy

_DV_FIELDS = [f.name for f in DELETION_VECTOR_TYPE]
#: Stands for a null string (no path or deletion vector field holds a NUL character).
_NULL_TEXT = "\x00"
#: Stands for a null integer (sizes, offsets and cardinalities are never negative).
_NULL_INT = -1


def _contiguous(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return col


class _Field:
    """The running hash of one field's values, in order."""

    def __init__(self) -> None:
        self.lengths = hashlib.sha256()
        self.data = hashlib.sha256()

    def strings(self, arr: pa.Array) -> None:
        arr = _contiguous(arr)
        if not len(arr):
            return
        if arr.null_count:
            arr = pc.fill_null(arr, string_array([_NULL_TEXT]).cast(arr.type)[0])
        if pa.types.is_large_string(arr.type):
            width, dtype = 8, np.int64
        else:
            if not pa.types.is_string(arr.type):
                arr = pc.cast(arr, pa.string())
            width, dtype = 4, np.int32
        bufs = arr.buffers()
        offsets = np.frombuffer(bufs[1], dtype, count=len(arr) + 1, offset=arr.offset * width)
        self.lengths.update(np.diff(offsets).astype("<i8").tobytes())
        if bufs[2] is not None and offsets[-1] > offsets[0]:
            self.data.update(memoryview(bufs[2])[int(offsets[0]) : int(offsets[-1])])

    def ints(self, arr: pa.Array) -> None:
        arr = _contiguous(arr)
        if not len(arr):
            return
        if arr.null_count:
            # A scalar taken from an array: `pa.scalar` of a Python value imports pandas.
            arr = pc.fill_null(arr, from_numpy(np.array([_NULL_INT])).cast(arr.type)[0])
        if arr.type != pa.int64():
            arr = pc.cast(arr, pa.int64())
        values = to_numpy(arr).astype("<i8")  # not Array.to_numpy: it imports pandas
        self.data.update(values.tobytes())

    def value(self) -> bytes:
        return self.lengths.digest() + self.data.digest()


class _Kind:
    """Count and field hashes of the add (or remove) actions of one file."""

    def __init__(self, with_size: bool) -> None:
        self.count = 0
        self.path = _Field()
        self.size = _Field() if with_size else None
        self.dv = {name: _Field() for name in _DV_FIELDS}
        #: Adds only: which have statistics (in order), and how many.
        self.stats = _Field() if with_size else None
        self.with_stats = 0

    def feed(
        self,
        path: pa.Array,
        size: pa.Array | None,
        dv: pa.Array | None,
        stats: pa.Array | None = None,
    ) -> None:
        n = len(path)
        self.count += n
        if self.stats is not None:
            has = pa.repeat(pa.scalar(False), n) if stats is None else has_stats(stats)
            self.with_stats += int(pc.sum(has).as_py() or 0)
            self.stats.ints(pc.cast(has, pa.int64()))
        self.path.strings(path)
        if self.size is not None:
            self.size.ints(size if size is not None else pa.nulls(n, pa.int64()))
        if dv is None:
            dv = pa.nulls(n, DELETION_VECTOR_TYPE)
        elif dv.type != DELETION_VECTOR_TYPE:
            dv = conform(_contiguous(dv), DELETION_VECTOR_TYPE)
        dv = _contiguous(dv)
        # A null deletion vector hashes as all its fields null, whatever its children hold.
        present = pc.is_valid(dv)
        for i, f in enumerate(DELETION_VECTOR_TYPE):
            child = dv.field(i)
            child = pc.if_else(present, child, pa.nulls(len(child), f.type))
            if pa.types.is_string(f.type):
                self.dv[f.name].strings(child)
            else:
                self.dv[f.name].ints(child)

    def value(self) -> tuple:
        fields = [self.path.value()]
        if self.size is not None:
            fields.append(self.size.value())
        fields += [self.dv[name].value() for name in _DV_FIELDS]
        return (self.count, tuple(fields))

    def stats_value(self) -> tuple:
        return (self.with_stats, self.stats.value() if self.stats is not None else b"")


class Digest:
    """Counts and ordered field hashes of the add and remove actions of one file, and the
    non-file actions read back (`read_back`)."""

    def __init__(self, rows: int = 0, *, stats: bool = False) -> None:
        """`stats`: the file must keep the statistics of the adds fed (the checkpoint's
        layout carries statistics); a digest read back compares against any."""
        self.rows = rows
        self.checks_stats = stats
        self._adds = _Kind(with_size=True)
        self._removes = _Kind(with_size=False)
        self.non_file: dict[str, list[Any]] = {}

    @property
    def adds(self) -> int:
        return self._adds.count

    @property
    def removes(self) -> int:
        return self._removes.count

    @property
    def adds_with_stats(self) -> int:
        return self._adds.with_stats

    def add_files(
        self,
        path: pa.Array,
        size: pa.Array | None,
        dv: pa.Array | None,
        stats: pa.Array | None = None,
    ) -> None:
        """Feed adds; `stats` is their `stats` (JSON) or `stats_parsed` column (None: none
        has statistics)."""
        self._adds.feed(path, size, dv, stats)

    def add_tombstones(self, path: pa.Array, dv: pa.Array | None) -> None:
        self._removes.feed(path, None, dv)

    def add_table(self, kind: str, t: pa.Table) -> None:
        """Feed a table of file actions (ADD_SCHEMA or REMOVE_SCHEMA columns)."""
        path = t.column("path")
        dv = t.column("deletionVector") if "deletionVector" in t.column_names else None
        if kind == "add":
            stats = t.column("stats") if "stats" in t.column_names else None
            self.add_files(path, t.column("size"), dv, stats)
        else:
            self.add_tombstones(path, dv)

    def same_adds(self, other: Digest) -> bool:
        return self._adds.value() == other._adds.value()

    def same_stats(self, other: Digest) -> bool:
        return self._adds.stats_value() == other._adds.stats_value()

    def same_removes(self, other: Digest) -> bool:
        return self._removes.value() == other._removes.value()


def _struct_children(col: pa.Array, names: Iterable[str]) -> dict[str, pa.Array]:
    present = {f.name for f in col.type}
    return {n: col.field(n) for n in names if n in present}


def read_back(path: str) -> Digest:
    """The digest of a Parquet checkpoint file on local disk, read one batch at a time
    (only the columns compared, plus the non-file actions, whose rows are kept)."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    top = pf.schema_arrow
    columns = []
    for name, children in (
        ("add", ("path", "size", "deletionVector")),
        ("remove", ("path", "deletionVector")),
    ):
        if name in top.names:
            sub = top.field(name).type
            columns += [f"{name}.{c}" for c in children if sub.get_field_index(c) >= 0]
    stats_leaf = stats_column(top.field("add").type) if "add" in top.names else None
    if stats_leaf is not None:
        columns.append(f"add.{stats_leaf}")
    stats_name = None if stats_leaf is None else stats_leaf.split(".", 1)[0]
    present = [c for c in NON_FILE_COLUMNS if c in top.names]
    got = Digest(rows=pf.metadata.num_rows)
    for batch in pf.iter_batches(batch_size=65_536, columns=columns + present):
        for name in ("add", "remove"):
            if name not in batch.schema.names:
                continue
            col = batch.column(name)
            if col.null_count == len(col):
                continue
            valid = col.filter(pc.is_valid(col)) if col.null_count else col
            kids = _struct_children(valid, ("path", "size", "deletionVector", stats_name or ""))
            if name == "add":
                got.add_files(
                    kids["path"], kids["size"], kids.get("deletionVector"),
                    kids.get(stats_name or ""),
                )
            else:
                got.add_tombstones(kids["path"], kids.get("deletionVector"))
        for name in present:
            col = batch.column(name)
            if col.null_count == len(col):
                continue
            values = col.filter(pc.is_valid(col)).to_pylist(maps_as_pydicts="strict")
            got.non_file.setdefault(name, []).extend(normalize(v) for v in values)
    return got


def compare(got: Digest, expected: Digest, non_file: dict[str, list[Any]], *, table: str,
            version: int, file: str) -> int:
    """Raise CheckpointVerificationError unless `got` (read back) matches `expected` (what
    was written) and the non-file actions `non_file`; return the number of rows."""
    problem = None
    if got.adds != expected.adds:
        problem = f"holds {got.adds} add actions, expected {expected.adds}"
    elif got.removes != expected.removes:
        problem = f"holds {got.removes} remove actions, expected {expected.removes}"
    elif not got.same_adds(expected):
        problem = "the add actions read back (path, size, deletion vector) differ from the state's"
    elif expected.checks_stats and not got.same_stats(expected):
        problem = (
            f"{got.adds_with_stats} add actions read back have statistics, "
            f"{expected.adds_with_stats} of the state's live files have them: statistics "
            "were lost"
        )
    elif not got.same_removes(expected):
        problem = "the remove actions read back (path, deletion vector) differ from the state's"
    else:
        want = {k: sorted(map(_key, v)) for k, v in non_file.items() if v}
        have = {k: sorted(map(_key, v)) for k, v in got.non_file.items() if v}
        for name in sorted(set(want) | set(have)):
            if want.get(name) != have.get(name):
                problem = (
                    f"{name} actions differ: expected {len(want.get(name, []))}, read "
                    f"{len(have.get(name, []))}"
                )
                break
    if problem is not None:
        raise CheckpointVerificationError(
            f"the checkpoint read back does not reproduce the state: {problem}; it was not "
            "published",
            table=table,
            version=version,
            file=file,
        )
    return got.rows


__all__ = ["Digest", "compare", "read_back"]
