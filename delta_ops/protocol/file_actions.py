"""File actions in Arrow: the `add` and `remove` types, and path identity over arrays.

Spec sections: "Add File and Remove File", "Deletion Vectors", "Action Reconciliation".
File actions live in Arrow so a table with millions of files is never a list of Python
objects. The vectorized functions here make the decisions of
`delta_ops.protocol.path_identity` (one path identity), over whole arrays.

`delta_ops.protocol.actions` re-exports every name here, importing this module (and
pyarrow) on first use only.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.protocol.arrays import constant_string, string_array
from delta_ops.protocol.path_identity import (
    CANONICAL_PATTERN,
    READER_PATTERN,
    canonical_path,
    reader_keys,
)

STRING_MAP = pa.map_(pa.string(), pa.string())

DELETION_VECTOR_TYPE = pa.struct(
    [
        pa.field("storageType", pa.string()),
        pa.field("pathOrInlineDv", pa.string()),
        pa.field("offset", pa.int32()),
        pa.field("sizeInBytes", pa.int32()),
        pa.field("cardinality", pa.int64()),
    ]
)

ADD_TYPE = pa.struct(
    [
        pa.field("path", pa.string()),
        pa.field("partitionValues", STRING_MAP),
        pa.field("size", pa.int64()),
        pa.field("modificationTime", pa.int64()),
        pa.field("dataChange", pa.bool_()),
        pa.field("stats", pa.string()),
        pa.field("tags", STRING_MAP),
        pa.field("deletionVector", DELETION_VECTOR_TYPE),
        pa.field("baseRowId", pa.int64()),
        pa.field("defaultRowCommitVersion", pa.int64()),
        pa.field("clusteringProvider", pa.string()),
    ]
)

REMOVE_TYPE = pa.struct(
    [
        pa.field("path", pa.string()),
        pa.field("deletionTimestamp", pa.int64()),
        pa.field("dataChange", pa.bool_()),
        pa.field("extendedFileMetadata", pa.bool_()),
        pa.field("partitionValues", STRING_MAP),
        pa.field("size", pa.int64()),
        pa.field("stats", pa.string()),
        pa.field("tags", STRING_MAP),
        pa.field("deletionVector", DELETION_VECTOR_TYPE),
        pa.field("baseRowId", pa.int64()),
        pa.field("defaultRowCommitVersion", pa.int64()),
    ]
)

ADD_SCHEMA = pa.schema(list(ADD_TYPE))
REMOVE_SCHEMA = pa.schema(list(REMOVE_TYPE))


def canonical_paths(paths: pa.Array, root: str) -> pa.Array:
    """`canonical_path` of each string (nulls stay null); only paths matching
    `CANONICAL_PATTERN` go through Python."""
    paths = paths.cast(pa.string())
    if not len(paths) or not _may_need_canonicalization(paths):
        return paths
    needs = pc.match_substring_regex(paths, CANONICAL_PATTERN)  # null for a null path
    if not pc.any(needs).as_py():
        return paths
    fixed = [
        canonical_path(p, root) if n else p
        for p, n in zip(paths.to_pylist(), needs.to_pylist(), strict=True)
    ]
    return string_array(fixed)


def read_otherwise(paths: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Which of `paths` (strings) a reader may read as another file than themselves, or as
    none: a `READER_PATTERN` match, or empty (`relative_key` names no file for ""), or
    null. The others are their own listing key; only these need `reader_keys` and
    `relative_key` one by one."""
    # No Python value reaches a kernel: one becomes a scalar through `pa.scalar`, which
    # imports pandas (a VACUUM dry run must not).
    empty = pc.invert(pc.cast(pc.binary_length(paths), pa.bool_()))
    odd = pc.or_(pc.match_substring_regex(paths, READER_PATTERN), empty)
    return pc.or_kleene(pc.is_null(paths), odd)


def reader_key_array(paths: pa.Array, root: str) -> pa.Array:
    """`reader_keys` of every string, flattened (nulls dropped); paths that cannot be read
    as another file than themselves (`read_otherwise` false) pass through as they are, and
    when all of them do, the result is `paths` itself (a caller can tell by `is`)."""
    if paths.type != pa.string():
        paths = paths.cast(pa.string())
    if paths.null_count:
        paths = paths.drop_null()
    if not len(paths):
        return paths
    odd = read_otherwise(paths)
    if not pc.any(odd).as_py():
        return paths
    extra = [k for p in paths.filter(odd).to_pylist() for k in reader_keys(p, root)]
    return pa.concat_arrays([paths.filter(pc.invert(odd)), string_array(extra)])


def file_keys(actions: pa.StructArray | pa.ChunkedArray, root: str) -> pa.Array | pa.ChunkedArray:
    """Vectorized `file_key` over an Arrow array of add or remove structs (no nulls)."""
    if isinstance(actions, pa.ChunkedArray):
        return pa.chunked_array([file_keys(c, root) for c in actions.chunks], type=pa.string())
    paths = canonical_paths(actions.field("path"), root)
    if actions.type.get_field_index("deletionVector") < 0:
        return paths
    dv = actions.field("deletionVector")
    if dv.null_count == len(dv):
        return paths
    st = dv.field("storageType")
    pid = dv.field("pathOrInlineDv")
    off = pc.cast(dv.field("offset"), pa.string())
    n = len(paths)
    uid = pc.binary_join_element_wise(st, pid, constant_string("", n))
    uid_off = pc.binary_join_element_wise(uid, off, constant_string("@", n))
    uid = pc.if_else(pc.is_null(off), uid, uid_off)
    keyed = pc.binary_join_element_wise(paths, uid, constant_string("\x00", n))
    # A DV struct can be present with null children (some writers fill every column).
    has_dv = pc.and_(pc.is_valid(dv), pc.is_valid(st))
    return pc.if_else(has_dv, keyed, paths)


def _may_need_canonicalization(paths: pa.Array) -> bool:
    """False when no path can need `canonical_path` (none holds `%` or `:` or starts
    with `/`), decided on the raw string buffers: a memchr over the characters instead of
    a regex per row."""
    n = len(paths)
    if not pa.types.is_string(paths.type) or n == 0:
        return n > 0
    bufs = paths.buffers()
    if bufs[2] is None:
        return False
    offsets = np.frombuffer(bufs[1], dtype=np.int32, count=n + 1, offset=paths.offset * 4)
    lo, hi = int(offsets[0]), int(offsets[-1])
    data = bufs[2].slice(lo, hi - lo).to_pybytes()
    if b"%" in data or b":" in data:
        return True
    starts = offsets[:-1] - lo
    starts = starts[offsets[1:] > offsets[:-1]]  # non-empty strings
    return bool(len(starts)) and bool(
        (np.frombuffer(data, dtype=np.uint8)[starts] == ord("/")).any()
    )


def conform(array: pa.Array | pa.ChunkedArray, target: pa.DataType) -> pa.Array:
    """Make a struct array from some writer's schema fit `target`: missing fields become
    nulls, extra fields are dropped, types are cast (recursively for structs)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    if array.type == target:
        return array
    if pa.types.is_struct(target) and pa.types.is_struct(array.type):
        children = []
        for f in target:
            idx = array.type.get_field_index(f.name)
            if idx < 0:
                children.append(pa.nulls(len(array), f.type))
            else:
                child = array.field(idx)
                children.append(conform(child, f.type))
        mask = array.is_null() if array.null_count else None
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
    if pa.types.is_null(array.type):
        return pa.nulls(len(array), target)
    return array.cast(target)
