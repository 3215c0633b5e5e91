"""Columnar reconciliation of JSON commits: every commit of a segment in one Arrow pass.

Spec sections: "Delta Log Entries", "Action Reconciliation". The commits (and compactions)
of a log segment are joined into one newline-delimited buffer. Lines that start the way
every writer writes a file action (`{"add":` or `{"remove":`) are parsed by Arrow's
multi-threaded JSON reader; every other line (protocol, metaData, commitInfo, txn, ...) is
blanked to `{}` for Arrow, so row i is line i, and parsed with orjson in Python. The newest
action per file key `(canonical path, deletion vector unique id)` wins, decided with hash
kernels over the whole buffer. "Newest" is "latest line in the buffer": each file's lines
must come oldest first, so a compaction file's lines are given here reversed
(`delta_ops.log.replay.full_replay.delta_lines_oldest_first`: inside a compaction the first line for
a key wins, see "Log Compaction Files" there).

Arrow has no JSON-to-map conversion, so `partitionValues` and `tags` are inferred as
structs (the union of the keys seen) and turned back into maps. A struct cannot tell an
omitted key from a null value; rows where that matters are re-read with orjson, so the
maps equal what was written. Anything this path does not handle exactly (values that are
not strings, a file action written another way, a field of another type than the spec's,
invalid JSON) makes it step aside: `reconcile` returns None and the caller replays the
commits action by action, which also reports errors with their line numbers.

References-only mode (`reconcile(..., references_only=True)`, what VACUUM reads): the same
reconciliation, but Arrow materializes only `path`, `deletionVector` and (removes)
`deletionTimestamp` (`REFERENCE_ADD_SCHEMA`, `REFERENCE_REMOVE_SCHEMA`); every other field
is skipped by the parser, no map is built, and the winners' keys are returned with them.
And inside one commit an add of a key wins over a remove of it, whatever their order: the
spec ("Deletion Vectors") allows a valid version one add and one remove of the same
`(path, dvId)` and does not order a commit's actions, and readers differ (Spark lets the
last line win, delta-kernel-rs and so deltalake the first), so one may read the file as live
while another reads it as removed. VACUUM keeps what any reader may read. (A compaction
file's lines stay in their order: they come from different versions, newest first, and
the newest wins.) Snapshots keep Spark's reading.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from delta_ops.protocol.actions import (
    ADD_SCHEMA,
    ADD_TYPE,
    DELETION_VECTOR_TYPE,
    REMOVE_SCHEMA,
    REMOVE_TYPE,
    STRING_MAP,
    file_keys,
)
from delta_ops.protocol.arrays import from_numpy, string_array, to_numpy

_ADD_PREFIX = b'{"add":'
_REMOVE_PREFIX = b'{"remove":'
_MAP_FIELDS = ("partitionValues", "tags")
_MIN_BLOCK = 4 << 20
# The JSON reader's threads allocate and free many block-sized buffers; mimalloc (Arrow's
# default pool) keeps them mapped per thread, which costs twice the parse result in peak
# RSS. The system allocator returns them: same speed, half the memory.
_POOL = pa.system_memory_pool()

#: The columns of the references-only mode: what a file action protects (its path and its
#: deletion vector file) and, for a remove, until when (`deletionTimestamp`).
REFERENCE_ADD_TYPE = pa.struct(
    [pa.field("path", pa.string()), pa.field("deletionVector", DELETION_VECTOR_TYPE)]
)
REFERENCE_REMOVE_TYPE = pa.struct(
    [
        pa.field("path", pa.string()),
        pa.field("deletionTimestamp", pa.int64()),
        pa.field("deletionVector", DELETION_VECTOR_TYPE),
    ]
)
REFERENCE_ADD_SCHEMA = pa.schema(list(REFERENCE_ADD_TYPE))
REFERENCE_REMOVE_SCHEMA = pa.schema(list(REFERENCE_REMOVE_TYPE))
_REFERENCE_SCHEMA = pa.schema(
    [pa.field("add", REFERENCE_ADD_TYPE), pa.field("remove", REFERENCE_REMOVE_TYPE)]
)


def _explicit(typ: pa.StructType, keys: dict[str, list[str]]) -> pa.StructType:
    """The action's struct with its map fields as structs of string fields named `keys`
    (further keys are inferred)."""
    fields = []
    for f in typ:
        if f.name in _MAP_FIELDS:
            names = keys.get(f.name)
            if names:
                fields.append(pa.field(f.name, pa.struct([(k, pa.string()) for k in names])))
        else:
            fields.append(f)
    return pa.struct(fields)


def _schema(keys: dict[str, dict[str, list[str]]]) -> pa.Schema:
    return pa.schema(
        [
            pa.field("add", _explicit(ADD_TYPE, keys.get("add", {}))),
            pa.field("remove", _explicit(REMOVE_TYPE, keys.get("remove", {}))),
        ]
    )


def _map_keys(table: pa.Table) -> tuple[dict[str, dict[str, list[str]]], bool]:
    """The keys of the map fields as Arrow inferred them, and whether every one of them
    came out as strings (Arrow infers ISO dates as timestamps, numbers as numbers)."""
    keys: dict[str, dict[str, list[str]]] = {}
    all_strings = True
    for action, name, sub in _map_structs(table):
        keys.setdefault(action, {})[name] = [f.name for f in sub]
        all_strings &= all(pa.types.is_string(f.type) or pa.types.is_null(f.type) for f in sub)
    return keys, all_strings


def _map_structs(table: pa.Table) -> Iterator[tuple[str, str, pa.StructType]]:
    """(action, map field, struct type) of each map field Arrow read as a struct."""
    for action in ("add", "remove"):
        typ = table.schema.field(action).type
        for name in _MAP_FIELDS:
            idx = typ.get_field_index(name)
            if idx >= 0 and pa.types.is_struct(typ.field(idx).type):
                yield action, name, typ.field(idx).type


class _StepAside(Exception):
    """This input needs the action-by-action replay."""


@dataclass
class CommitFile:
    """One commit or compaction file of a segment, oldest first.

    Attributes:
        version: the (last) version the file covers.
        path: the file, relative to the table root.
        data: its lines oldest first, the last line for a key winning (a compaction's as
            `delta_ops.log.replay.full_replay.delta_lines_oldest_first` orders them).
        is_compaction: a compaction file (its lines come from several versions).
    """

    version: int
    path: str
    data: bytes
    is_compaction: bool = False


@dataclass
class ColumnarCommits:
    """Newest file action per key across the commits, plus the other actions' lines.

    Attributes:
        adds: winning add actions (ADD_SCHEMA; references only: REFERENCE_ADD_SCHEMA), in
            log order.
        removes: winning remove actions (REMOVE_SCHEMA; references only:
            REFERENCE_REMOVE_SCHEMA), in log order.
        keys: the keys of all file actions in the commits, each once.
        others: (version, file, action) of every other line, newest first (blank lines
            skipped).
        add_keys: references only: the key of each row of `adds` (else None).
        remove_keys: references only: the key of each row of `removes` (else None).
    """

    adds: pa.Table
    removes: pa.Table
    keys: pa.Array
    others: list[tuple[int, str, dict]]
    add_keys: pa.Array | None = None
    remove_keys: pa.Array | None = None


class _Lines:
    """The commits joined into one buffer, with line boundaries and the file of each line."""

    def __init__(self, files: Sequence[CommitFile]) -> None:
        total = sum(len(f.data) + 1 for f in files)
        buf = bytearray(total)
        counts: list[int] = []
        pos = 0
        for f in files:
            data = f.data
            f.data = b""  # held once: in the joined buffer
            buf[pos : pos + len(data)] = data
            pos += len(data)
            if data and not data.endswith(b"\n"):
                buf[pos] = 10
                pos += 1
            counts.append(data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0))
        del buf[pos:]
        self.buf = buf
        self._arr = np.frombuffer(buf, dtype=np.uint8)
        # Newlines found slice by slice (no temporary the size of the log).
        step = 1 << 23
        found = [
            np.flatnonzero(self._arr[i : i + step] == 10) + i for i in range(0, len(buf), step)
        ]
        self.ends = np.concatenate(found) if found else np.zeros(0, dtype=np.int64)
        self.starts = np.empty_like(self.ends)
        if len(self.ends):
            self.starts[0] = 0
            self.starts[1:] = self.ends[:-1] + 1
        self.file_of_line = np.repeat(np.arange(len(files)), counts)

    def __len__(self) -> int:
        return len(self.ends)

    def starting_with(self, prefix: bytes) -> np.ndarray:
        mask = (self.ends - self.starts) >= len(prefix)
        last = len(self._arr) - 1
        for k, ch in enumerate(prefix):
            mask &= self._arr[np.minimum(self.starts + k, last)] == ch
        return mask

    def release(self) -> None:
        """Drop the joined buffer (line boundaries stay)."""
        self.buf = bytearray()
        self._arr = np.zeros(0, dtype=np.uint8)

    def line(self, i: int) -> bytes:
        return bytes(self.buf[self.starts[i] : self.ends[i]])

    def blanked(self, lines: np.ndarray) -> bytes | bytearray:
        """The buffer with the given lines replaced by `{}`, for Arrow. In place (padded
        with spaces, so every offset stays put) unless some line is too short for `{}`;
        the other lines are untouched either way."""
        lengths = self.ends[lines] - self.starts[lines]
        if len(lines) and int(lengths.min()) < 2:
            view = memoryview(self.buf)
            pieces: list[bytes | memoryview] = []
            pos = 0
            for i in lines.tolist():
                pieces.append(view[pos : self.starts[i]])
                pieces.append(b"{}")
                pos = int(self.ends[i])
            pieces.append(view[pos:])
            return b"".join(pieces)
        arr = self._arr
        for i in lines.tolist():
            s, e = int(self.starts[i]), int(self.ends[i])
            arr[s] = 123  # {
            arr[s + 1] = 125  # }
            arr[s + 2 : e] = 32
        return self.buf


def reconcile(
    files: Sequence[CommitFile],
    root: str,
    *,
    partition_columns: Sequence[str] = (),
    references_only: bool = False,
) -> ColumnarCommits | None:
    """Reconcile the file actions of `files` (oldest first) columnar; None when the input
    needs the action-by-action replay. `partition_columns` (e.g. from the checkpoint the
    commits follow) are read as strings from the start, as are those of the metaData
    actions among the commits. With `references_only`, only the reference columns are read
    (see the module docstring) and the winners' keys come with them.

    The files' `data` is moved into one joined buffer (each is left empty), so the log is
    held in memory once; after None, read the files again for the other replay."""
    try:
        return _reconcile(files, root, partition_columns, references_only)
    except (_StepAside, pa.ArrowException, orjson.JSONDecodeError):
        return None


def _reconcile(
    files: Sequence[CommitFile],
    root: str,
    partition_columns: Sequence[str],
    references_only: bool = False,
) -> ColumnarCommits:
    lines = _Lines(files)
    n = len(lines)
    is_add_line = lines.starting_with(_ADD_PREFIX)
    is_rm_line = lines.starting_with(_REMOVE_PREFIX)
    file_line = is_add_line | is_rm_line
    other_lines = np.flatnonzero(~file_line)
    others = []
    for i in other_lines[::-1].tolist():
        raw = lines.line(i)
        if not raw.strip():
            continue
        obj = orjson.loads(raw)
        if not isinstance(obj, dict) or obj.get("add") is not None or obj.get("remove") is not None:
            raise _StepAside  # not an object, or a file action written another way
        f = files[int(lines.file_of_line[i])]
        others.append((f.version, f.path, obj))
    add_schema = REFERENCE_ADD_SCHEMA if references_only else ADD_SCHEMA
    remove_schema = REFERENCE_REMOVE_SCHEMA if references_only else REMOVE_SCHEMA
    if not file_line.any():
        none = string_array([]) if references_only else None
        return ColumnarCommits(
            _empty(add_schema), _empty(remove_schema), string_array([]), others, none, none
        )

    longest = int((lines.ends - lines.starts).max())
    # The other lines are parsed above; Arrow sees `{}` in their place, so row i is line i.
    arrow_buf = lines.blanked(other_lines)
    # Partition columns are known from the metaData lines: read their values as strings.
    partition_keys: list[str] = list(dict.fromkeys(partition_columns))
    for _, _, obj in others:
        m = obj.get("metaData")
        if isinstance(m, dict) and isinstance(m.get("partitionColumns"), list):
            partition_keys += [c for c in m["partitionColumns"] if c not in partition_keys]
    keys = {a: {"partitionValues": partition_keys} for a in ("add", "remove")}
    read_options = pj.ReadOptions(block_size=max(_MIN_BLOCK, longest + 2))

    def read(keys: dict[str, dict[str, list[str]]]) -> pa.Table:
        return pj.read_json(
            pa.BufferReader(arrow_buf),
            read_options=read_options,
            parse_options=pj.ParseOptions(
                explicit_schema=_schema(keys), unexpected_field_behavior="infer"
            ),
            memory_pool=_POOL,
        )

    if references_only:
        # Only the reference columns: every other field is skipped by the parser.
        table = pj.read_json(
            pa.BufferReader(arrow_buf),
            read_options=read_options,
            parse_options=pj.ParseOptions(
                explicit_schema=_REFERENCE_SCHEMA, unexpected_field_behavior="ignore"
            ),
            memory_pool=_POOL,
        )
    else:
        table = read(keys)
        inferred, all_strings = _map_keys(table)
        if not all_strings:
            # Keys Arrow typed by their values (dates as timestamps): again, all as strings.
            table = read(inferred)
    if table.num_rows != n:
        raise _StepAside
    add = table.column("add")
    rm = table.column("remove")
    add_path = pc.struct_field(add, "path")
    rm_path = pc.struct_field(rm, "path")
    is_add = to_numpy(pc.is_valid(add_path))
    is_rm = to_numpy(pc.is_valid(rm_path))
    # Every prefixed line must be exactly one file action with a path (else: errors and
    # odd shapes are the action-by-action replay's business).
    if not (np.array_equal(is_add, is_add_line) and np.array_equal(is_rm, is_rm_line)):
        raise _StepAside
    # Keep only the lines whose maps Arrow cannot render exactly; drop the joined log.
    written = {i: lines.line(i) for i in _ambiguous_map_lines(table)}
    arrow_buf = b""
    lines.release()

    is_add_arr = from_numpy(is_add)
    add_dv = pc.struct_field(add, "deletionVector")
    rm_dv = pc.struct_field(rm, "deletionVector")

    def pick(name: str) -> pa.Array:
        return _contiguous(
            pc.if_else(is_add_arr, pc.struct_field(add_dv, name), pc.struct_field(rm_dv, name))
        )

    st = pick("storageType")
    dv = pa.StructArray.from_arrays(
        [st, pick("pathOrInlineDv"), pick("offset")],
        names=["storageType", "pathOrInlineDv", "offset"],
        mask=pc.is_null(st),
    )
    path = _contiguous(pc.coalesce(add_path, rm_path, memory_pool=_POOL))  # null: other lines
    keys = file_keys(pa.StructArray.from_arrays([path, dv], names=["path", "deletionVector"]), root)
    # Newest first: the first occurrence of each key in the reversed lines wins.
    if references_only:
        # What VACUUM protects: inside one commit an add wins over a remove of the same key,
        # whichever line comes first (the module docstring says why).
        in_commit = ~np.array([f.is_compaction for f in files])
        add_last = is_add_line & in_commit[lines.file_of_line]
        newest_order = np.lexsort((np.arange(n), add_last, lines.file_of_line))[::-1]
    else:
        newest_order = np.arange(n - 1, -1, -1, dtype=np.int64)
    newest_first = pc.take(keys, from_numpy(newest_order.astype(np.int64)), memory_pool=_POOL)
    unique = pc.unique(newest_first, memory_pool=_POOL)
    first = to_numpy(pc.index_in(unique, value_set=newest_first, memory_pool=_POOL))
    first = first.astype(np.int64)
    winner = np.zeros(n, dtype=bool)
    winner[newest_order[first]] = True
    del newest_order
    winner &= file_line
    add_keys = remove_keys = None
    if references_only:
        add_keys = _contiguous(pc.filter(keys, from_numpy(winner & is_add), memory_pool=_POOL))
        remove_keys = _contiguous(pc.filter(keys, from_numpy(winner & is_rm), memory_pool=_POOL))
    del keys, newest_first, path, dv

    def exact_map(action: str, field: str) -> Callable[[int], dict | None]:
        def lookup(line: int) -> dict | None:
            obj = orjson.loads(written[line])
            value = obj[action].get(field)
            if value is not None and not isinstance(value, dict):
                raise _StepAside
            return value

        return lookup

    adds = _actions(add, winner & is_add, add_schema, lambda f: exact_map("add", f))
    removes = _actions(rm, winner & is_rm, remove_schema, lambda f: exact_map("remove", f))
    return ColumnarCommits(
        adds, removes, pc.drop_null(unique), others, add_keys, remove_keys
    )


def _ambiguous_map_lines(table: pa.Table) -> np.ndarray:
    """Lines where a map field (partitionValues, tags) is present with a null in its
    struct: an omitted key or a null value, Arrow cannot say which."""
    found = np.zeros(table.num_rows, dtype=bool)
    for action, name, sub in _map_structs(table):
        if not sub.num_fields:
            continue
        value = pc.struct_field(table.column(action), name)
        children = [pc.is_valid(pc.struct_field(value, f.name)) for f in sub]
        all_valid = children[0]
        for c in children[1:]:
            all_valid = pc.and_(all_valid, c)
        found |= to_numpy(pc.and_(pc.is_valid(value), pc.invert(all_valid)))
    return np.flatnonzero(found)


def _contiguous(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(array, pa.ChunkedArray):
        return array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    return array


def _empty(schema: pa.Schema) -> pa.Table:
    return pa.Table.from_batches([], schema=schema)


def _actions(
    column: pa.ChunkedArray,
    mask: np.ndarray,
    schema: pa.Schema,
    exact: Callable[[str], Callable[[int], dict | None]],
) -> pa.Table:
    """The rows of an add or remove column where `mask` is set, in log order, as
    `schema` (chunk by chunk: nothing is copied into one contiguous array)."""
    if not mask.any():
        return _empty(schema)
    rows = np.flatnonzero(mask)
    struct = pc.filter(column, from_numpy(mask), memory_pool=_POOL)
    names = [f.name for f in struct.type]
    children = dict(zip(names, struct.flatten(), strict=True))
    arrays = []
    for f in schema:
        child = children.get(f.name)
        if child is None:
            arrays.append(pa.nulls(len(rows), f.type))
        elif f.name in _MAP_FIELDS:
            arrays.append(_to_map(_contiguous(child), rows, exact(f.name)))
        elif child.type != f.type:
            arrays.append(child.cast(f.type))
        else:
            arrays.append(child)
    return pa.Table.from_arrays(arrays, schema=schema)


def _to_map(value: pa.Array, rows: np.ndarray, exact: Callable[[int], dict | None]) -> pa.Array:
    """An inferred struct of string values as a string map; `exact(line)` gives the map
    as written for rows where the struct is ambiguous (a null child: omitted or null?)."""
    if pa.types.is_null(value.type):
        return pa.nulls(len(value), STRING_MAP)
    if not pa.types.is_struct(value.type):
        raise _StepAside
    n = len(value)
    names = [f.name for f in value.type]
    k = len(names)
    for f in value.type:
        if not (pa.types.is_string(f.type) or pa.types.is_null(f.type)):
            raise _StepAside  # numbers, booleans, objects: stringified by the slow path
    row_valid = to_numpy(pc.is_valid(value))
    children = [value.field(j).cast(pa.string()) for j in range(k)]
    include = np.zeros((n, k), dtype=bool)
    for j, child in enumerate(children):
        include[:, j] = to_numpy(pc.is_valid(child))
    include &= row_valid[:, None]
    ambiguous = np.flatnonzero(row_valid & ~include.all(axis=1)) if k else np.zeros(0, np.int64)
    for r in ambiguous.tolist():
        written = exact(int(rows[r])) or {}
        for j, name in enumerate(names):
            include[r, j] = name in written
    counts = include.sum(axis=1)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    flat = include.ravel()
    if k:
        # Entry (row r, key j) is child j's value r, at j * n + r in the children joined.
        key_idx = np.tile(np.arange(k, dtype=np.int64), n)
        order = key_idx * n + np.repeat(np.arange(n, dtype=np.int64), k)
        values = pa.concat_arrays(children).take(from_numpy(order[flat]))
        keys = string_array(names).take(from_numpy(key_idx[flat]))
    else:
        values = keys = string_array([])
    mask = None if row_valid.all() else from_numpy(~row_valid)
    return pa.MapArray.from_arrays(from_numpy(offsets), keys, values, type=STRING_MAP, mask=mask)
