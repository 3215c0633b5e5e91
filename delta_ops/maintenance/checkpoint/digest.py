"""Verify a streamed checkpoint file by digest: what was written, read back, is what was
meant, without holding either in memory.

A checkpoint written from a streamed state (`log.stream`) is too large to compare row by
row in memory the way `verify.py` does. Instead both sides are reduced, one batch at a
time, to a `Digest`: per action kind the number of actions and a 64-bit sum of a per-row
hash of the fields verification compares (add: path, size, deletion vector; remove: path,
deletion vector), two Murmur3 hashes with different seeds side by side. The sum does not
depend on the order of the rows, so it also verifies a multi-part checkpoint part or a
sidecar whatever the row order, and a lost, doubled or altered action changes it (two
different multisets of rows give the same digest with a probability of about 2^-64 per
difference). Non-file actions are few: they are read back and compared exactly, as in
`verify.py`. The file is read back from where it was written, through its own Parquet
reader (`_read_back`), independent of how it was serialized.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.errors import CheckpointVerificationError
from delta_ops.maintenance.checkpoint.verify import NON_FILE_COLUMNS, _key, normalize
from delta_ops.protocol.actions import DELETION_VECTOR_TYPE, conform
from delta_ops.protocol.checkpoint_schema import spark_hash

_SEEDS = (42, 0x2545F491)
_SEP = "\x1f"
_DV_FIELDS = [f.name for f in DELETION_VECTOR_TYPE]


def _as_text(arr: pa.Array) -> pa.Array:
    return pc.fill_null(pc.cast(arr, pa.string()), "")


def _contiguous(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return col


def row_hashes(path: pa.Array, size: pa.Array | None, dv: pa.Array | None) -> np.ndarray:
    """One 64-bit hash per row of the fields verification compares."""
    n = len(path)
    parts = [_as_text(path)]
    if size is not None:
        parts.append(_as_text(size))
    # The deletion vector's fields always take part (empty without one), so a row hashes
    # the same whichever batch it is read in.
    if dv is None or dv.null_count == len(dv):
        empty = pa.repeat(pa.scalar("", pa.string()), n)
        parts.extend([empty] * len(_DV_FIELDS))
    else:
        if dv.type != DELETION_VECTOR_TYPE:
            dv = conform(dv, DELETION_VECTOR_TYPE)
        flat = dv.flatten()
        present = pc.is_valid(dv)
        for i in range(len(_DV_FIELDS)):
            parts.append(pc.if_else(present, _as_text(flat[i]), pa.scalar("", pa.string())))
    text = pc.binary_join_element_wise(*parts, pa.scalar(_SEP, pa.string()))
    hi = spark_hash(text, _SEEDS[0]).view(np.uint32).astype(np.uint64)
    lo = spark_hash(text, _SEEDS[1]).view(np.uint32).astype(np.uint64)
    return (hi << np.uint64(32)) | lo


@dataclass
class Digest:
    """Counts and hash sums of the add and remove actions of one file."""

    adds: int = 0
    removes: int = 0
    add_sum: int = 0
    remove_sum: int = 0
    rows: int = 0
    non_file: dict[str, list[Any]] = field(default_factory=dict)

    def add_files(self, path: pa.Array, size: pa.Array, dv: pa.Array | None) -> None:
        self.adds += len(path)
        self.add_sum = (self.add_sum + _sum(row_hashes(path, size, dv))) & _MASK

    def add_tombstones(self, path: pa.Array, dv: pa.Array | None) -> None:
        self.removes += len(path)
        self.remove_sum = (self.remove_sum + _sum(row_hashes(path, None, dv))) & _MASK

    def add_table(self, kind: str, t: pa.Table) -> None:
        """Count a table of file actions (ADD_SCHEMA or REMOVE_SCHEMA columns)."""
        path = _contiguous(t.column("path"))
        dv = _contiguous(t.column("deletionVector")) if "deletionVector" in t.column_names else None
        if kind == "add":
            self.add_files(path, _contiguous(t.column("size")), dv)
        else:
            self.add_tombstones(path, dv)


_MASK = (1 << 64) - 1


def _sum(h: np.ndarray) -> int:
    return int(h.sum(dtype=np.uint64)) if len(h) else 0


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
            kids = _struct_children(valid, ("path", "size", "deletionVector"))
            if name == "add":
                got.add_files(kids["path"], kids["size"], kids.get("deletionVector"))
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
    elif got.add_sum != expected.add_sum:
        problem = "the add actions read back (path, size, deletion vector) differ from the state's"
    elif got.remove_sum != expected.remove_sum:
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


__all__ = ["Digest", "compare", "read_back", "row_hashes"]
