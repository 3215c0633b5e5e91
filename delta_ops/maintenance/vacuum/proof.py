"""The proof every file of a VACUUM plan passes before anything is deleted.

A regular file whose real path is the root's real path joined with its own (no symbolic
link on the way: `Storage.deletion_hazards`), and unreferenced by a second, independent
normalisation of its path and of every referenced path (decoded until nothing changes, any
scheme and `//localhost` dropped, slashes collapsed, dot segments resolved). It shares
nothing with `reader_keys`, which chose the candidates; any doubt refuses the whole run.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.errors import UnsafeDeletionError
from delta_ops.log.reference_buckets import SpilledReferences
from delta_ops.log.references import FileReferences
from delta_ops.protocol.arrays import string_array
from delta_ops.storage import Storage

# The independent check of a plan. It shares nothing with `reader_keys`: paths are decoded
# until nothing changes, any scheme and `//localhost` dropped, slashes collapsed, dot
# segments resolved, and for references also taken relative to the root spelt the same way.
_ANY_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:(//localhost(?=/))?", re.IGNORECASE)
_PLAIN = r"%|:|^/|//|(^|/)\.|/$"


def _loose(text: str) -> str:
    for _ in range(16):
        decoded = unquote(text)
        if decoded == text:
            break
        text = decoded
    text = posixpath.normpath(re.sub(r"/+", "/", text)) if text else text
    return "" if text == "." else text.lstrip("/")


def _loose_references(written: pa.Array, root: str) -> pa.Array:
    """Loose spellings of the referenced paths: each path, without its scheme, and
    relative to the root when it starts with the root's loose spelling."""
    if not len(written):
        return written
    odd = pc.match_substring_regex(written, _PLAIN)
    if not pc.any(odd).as_py():
        return written
    root_loose = _loose(_ANY_SCHEME.sub("", root)) + "/"
    out: list[str] = []
    for p in written.filter(odd).to_pylist():
        whole = _loose(p)
        bare = _loose(_ANY_SCHEME.sub("", p))
        out += [whole, bare]
        for form in (whole, bare):
            if form.startswith(root_loose):
                out.append(form[len(root_loose) :])
    return pa.concat_arrays([written.filter(pc.invert(odd)), string_array(out)])


def _found_in(candidates: pa.Array, references: pa.Array) -> pa.Array:
    """Which `candidates` are among `references`. The hash set is built over the
    candidates (a plan's files, few) and the references probe it, instead of a set over
    every reference."""
    if not len(references):
        return pc.is_in(candidates, value_set=string_array([]))
    hits = references.filter(pc.is_in(references, value_set=candidates))
    return pc.is_in(candidates, value_set=hits)


def _prove_deletable(
    storage: Storage,
    files: Sequence[str],
    refs: FileReferences | SpilledReferences,
    *,
    version: int,
) -> None:
    """Refuse the whole run unless every file of the plan is proven deletable: no symbolic
    link on its way and inside the root (`Storage.deletion_hazards`), and unreferenced by
    a second, independent normalisation of its path and of every referenced path.

    Raises:
        UnsafeDeletionError: Naming the table, version and (first) file.
    """
    if not files:
        return
    table = storage.root
    candidates = string_array(list(files))
    odd = pc.match_substring_regex(candidates, _PLAIN)
    if pc.any(odd).as_py():
        loose = string_array([
            _loose(f) if o else f for f, o in zip(files, odd.to_pylist(), strict=True)
        ])
    else:
        loose = candidates  # nothing to decode or collapse: each is its own loose form
    # Every referenced path is looked at, piece by piece when the references are spilled
    # (no bucket is trusted here: the proof does not depend on how they were split).
    named = pc.is_in(candidates, value_set=string_array([]))
    for keep in refs.keep_chunks():
        named = pc.or_(named, _found_in(candidates, keep))
    for written in refs.written_chunks():
        named = pc.or_(named, _found_in(loose, _loose_references(written, table)))
    if pc.any(named).as_py():
        clash = candidates.filter(named).to_pylist()
        raise UnsafeDeletionError(
            f"refusing to VACUUM: {len(clash)} file(s) chosen for deletion match a path the "
            f"log references once both are decoded and normalized another way (first: "
            f"{clash[0]!r}); nothing was deleted",
            table=table, version=version, file=clash[0],
        )
    hazards = storage.deletion_hazards(files)
    if hazards:
        path, reason = hazards[0]
        raise UnsafeDeletionError(
            f"refusing to VACUUM: {len(hazards)} file(s) chosen for deletion cannot be "
            f"proven inside the table root (first: {path!r}: {reason}); nothing was deleted",
            table=table, version=version, file=path,
        )
