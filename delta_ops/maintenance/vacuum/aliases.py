"""VACUUM's candidates that a referenced path reaches through another spelling of a
directory: a symbolic link, `..` after a link, the root given through a link while the
log spells the real path (or the other way round).

Spec section: "Add File and Remove File" (a path is relative to the table root, or an
absolute URI). The listing never follows links and the one path identity
(`protocol.path_identity`) compares text, so `file:///t/link/a.parquet` with
`link -> real` protects the key `link/a.parquet`, while the file it reaches lists as
`real/a.parquet`. Only the file system can say which file a spelling reaches: each local
reading of a referenced path (`path_identity.local_readings`) is resolved
(`storage.identity.real_keys`: every link, the last component's too, and dot segments)
and taken relative to the root's own real path. Which readings are resolved: every
reading of an absolute path that does not spell the root as the storage does, and of
any other path those whose last name is a candidate's (a link on the way leaves the last
name as it is; a path below the root spelt as the storage does whose last component is
itself a link to a file of another name is not looked at here). Every link below the root
that does not lead to a directory (`storage.identity.file_links`) is resolved too, named
by the log or not: a reader opening it reads its target, which the listing (it never
follows links) finds under another name; its target is kept. Object stores have no
links; their scheme spellings (`s3a://`, `s3://`) are the path identity's.

The plan drops what this finds; the proof (`proof._prove_no_alias`) checks the plan again
by the file system's own identity of a file (device and inode), sharing nothing with this.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.protocol.arrays import string_array
from delta_ops.protocol.path_identity import local_readings
from delta_ops.storage import Storage
from delta_ops.storage.identity import file_links, real_keys

#: Paths that may be absolute.
_ABSOLUTE = r"^/|^[A-Za-z][A-Za-z0-9+.\-]+:"
#: Paths whose file may not be named by their plain last segment.
_ODD_END = r"/\.?$|%[^/]*$"


def _inside_prefixes(root: str) -> list[str]:
    """How an absolute path spelling the root as the storage does may start."""
    path = root.removeprefix("file://")
    forms = dict.fromkeys((path, quote(path)))
    return [f"{lead}{form}/" for form in forms
            for lead in ("", "file:", "file://", "file://localhost")]


def _selected(written: pa.Array, names: pa.Array, inside: list[str]) -> list[tuple[str, bool]]:
    """The written paths worth resolving, each with whether every reading of it is:
    absolute paths that do not spell the root as the storage does (they may end in a link
    to a file of any name), and else those whose last segment is a candidate's name, or
    encoded, or empty or `.`. An absolute path spelling the root is read like a relative
    one (a link on its way leaves the last name as it is)."""
    written = written.cast(pa.string()).drop_null()
    if not len(written):
        return []
    last = pc.replace_substring_regex(written, r"^.*/", "")
    absolute = pc.match_substring_regex(written, _ABSOLUTE)
    for prefix in inside:
        absolute = pc.and_(absolute, pc.invert(pc.starts_with(written, prefix)))
    mask = pc.or_(
        pc.or_(pc.is_in(last, value_set=names), pc.match_substring_regex(written, _ODD_END)),
        absolute,
    )
    return list(zip(written.filter(mask).to_pylist(), absolute.filter(mask).to_pylist(),
                    strict=True))


def reached_through_aliases(
    storage: Storage, candidates: Sequence[str], written_chunks: Iterable[pa.Array]
) -> set[str]:
    """The candidates some referenced path reaches once the file system resolves it.

    Args:
        storage: The table's storage.
        candidates: Listing keys VACUUM would delete.
        written_chunks: The referenced paths as written (the log's and the staged
            commits'), in pieces.

    Raises:
        StorageError: A referenced path's identity cannot be established (no permission
            to look, a loop of links): VACUUM refuses.
    """
    if storage.scheme != "file" or not candidates:
        return set()
    wanted = set(candidates)
    names = {c.rsplit("/", 1)[-1] for c in candidates}
    names_array = string_array(sorted(names))
    root = storage.root
    inside = _inside_prefixes(root)
    spellings: dict[str, None] = {}
    for written in written_chunks:
        for path, every in _selected(written, names_array, inside):
            for reading in local_readings(path, root):
                for form in _trimmed(reading):
                    if every or form.rsplit("/", 1)[-1] in names:
                        spellings[form] = None
    # A link to a file below the root (the listing skips it) reaches its target under
    # another name: every such link is resolved, whatever names it.
    keys = real_keys(storage, [*spellings, *file_links(storage)])
    return {k for k in keys if k is not None and k in wanted}


def _trimmed(reading: str) -> tuple[str, ...]:
    """The reading, and without trailing empty and `.` segments (a reader that
    normalizes first opens the file `a/x/.` names)."""
    trimmed = reading
    while trimmed.endswith(("/", "/.")):
        trimmed = trimmed[:-1] if trimmed.endswith("/") else trimmed[:-2]
    return (reading,) if trimmed == reading or not trimmed else (reading, trimmed)
