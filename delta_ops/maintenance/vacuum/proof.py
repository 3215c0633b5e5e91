"""The proof every file of a VACUUM plan passes before anything is deleted.

A regular file whose real path is the root's real path joined with its own (no symbolic
link on the way: `Storage.deletion_hazards`), and unreferenced by a second, independent
normalisation of its path and of every referenced path (decoded until nothing changes, any
scheme and `//localhost` dropped, slashes collapsed, dot segments resolved). It shares
nothing with `reader_keys`, which chose the candidates; any doubt refuses the whole run.

Two more readings the plan also makes, made here again on their own:

* the staged commits (spec "Catalog-managed tables": a catalog may still publish any of
  them): `_delta_log/_staged_commits` is read again and its lines parsed here, line by
  line, every `path` of an add or a remove and every deletion vector file they name taken
  as referenced; a file that does not parse, or has an object with a key given twice
  (readers disagree which one wins), refuses the run;
* the versions VACUUM was asked to keep (`keep_versions`): each is loaded again as a full
  snapshot (`log.load_snapshot`, not the references-only replay the plan used) and every
  data file and deletion vector file its live adds name is taken as referenced; a kept
  version that cannot be loaded refuses the run;
* aliases on local storage: a referenced path may reach a candidate through a symbolic
  link or `..` after one (`aliases`, which resolved real paths, chose what to drop). Here
  the file system's own identity of a file (device and inode, links followed: a bind
  mount too) of each candidate is compared with that of every spelling of the referenced
  paths that could reach it (absolute ones, and those ending in a candidate's name), and
  with that of every link to a file below the root (a reader opening one reads it).
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Iterable, Sequence
from itertools import chain
from typing import Any
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.errors import (
    CorruptLogError,
    DeletionVectorError,
    DeltaOpsError,
    StorageError,
    UnsafeDeletionError,
)
from delta_ops.log import (
    STAGED_DIR,
    FileReferences,
    SpilledReferences,
    list_log,
    load_snapshot,
    read_log_files,
    read_staged_commits,
)
from delta_ops.protocol.arrays import string_array
from delta_ops.protocol.deletion_vectors import DeletionVectorDescriptor, decode_uuid_path
from delta_ops.protocol.filenames import LogFileKind
from delta_ops.storage import Storage
from delta_ops.storage.identity import file_ids, file_links

# The independent check of a plan. It shares nothing with `reader_keys`: paths are decoded
# until nothing changes, any scheme and `//localhost` dropped, slashes collapsed, dot
# segments resolved, and for references also taken relative to the root spelt the same way.
_ANY_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:(//localhost(?=/))?", re.IGNORECASE)
_PLAIN = r"%|:|[?#]|^/|//|(^|/)\.|/$"
_ABSOLUTE = r"^/|^[A-Za-z][A-Za-z0-9+.\-]*:"
_ODD_END = r"/\.?$|%[^/]*$"


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
    for written_path in written.filter(odd).to_pylist():
        # A URI reader opens the path before an unencoded `?` (query) or `#` (fragment).
        for p in dict.fromkeys((written_path, re.split(r"[?#]", written_path)[0])):
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


def _staged_written(storage: Storage, version: int) -> pa.Array:
    """Every path the staged commits' adds and removes name, and their DV files, read
    here line by line (not through `log.replay.staged_commits.staged_references`)."""
    table = storage.root
    try:
        commits = read_staged_commits(storage)
    except (StorageError, CorruptLogError) as exc:
        raise UnsafeDeletionError(
            f"refusing to VACUUM: cannot read the staged commits in {STAGED_DIR} "
            f"({exc.reason}); nothing was deleted",
            table=table, version=version, file=exc.file or STAGED_DIR,
        ) from exc
    out: list[str] = []
    for commit in commits:
        out += _commit_names(commit.data, commit.path, table, version, staged=True)
    return string_array(out)


def _kept_written(storage: Storage, versions: Sequence[int], version: int) -> pa.Array:
    """Every data file and DV file the live adds of the kept versions name, read again
    through each version's full snapshot (not the plan's references-only replay)."""
    table = storage.root
    out: list[str] = []
    for v in versions:
        try:
            snap = load_snapshot(storage, v)
            rows = snap.files.select(["path", "deletionVector"]).to_pylist()
            for row in rows:
                out.append(row["path"])
                dv = row["deletionVector"]
                if dv and dv.get("storageType") in ("u", "p"):
                    desc = DeletionVectorDescriptor.from_dict(
                        {k: val for k, val in dv.items() if val is not None}
                    )
                    out.append(desc.relative_path() or desc.path_or_inline_dv)
        except DeltaOpsError as exc:
            raise UnsafeDeletionError(
                f"refusing to VACUUM: cannot read version {v}, which is to be kept "
                f"({exc.reason}); nothing was deleted",
                table=table, version=version, file=exc.file,
            ) from exc
    return string_array(out)


def _commit_names(data: bytes, path: str, table: str, version: int, *, staged: bool
                  ) -> list[str]:
    """Every path a commit's adds and removes name, and their DV files, line by line."""
    out: list[str] = []
    for n, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            # Duplicate keys refuse: readers disagree which one wins (serde_json
            # refuses them, Jackson and orjson keep the last).
            action = json.loads(line, object_pairs_hook=_unique_keys)
            if not isinstance(action, dict):
                raise ValueError("not a JSON object")
            for kind in ("add", "remove"):
                if kind in action:
                    out += _named_by(action[kind])
        except (ValueError, TypeError, KeyError, DeletionVectorError) as exc:
            what = ("a staged commit cannot be read ({exc}); the catalog may still "
                    "publish it" if staged else "a commit cannot be read ({exc})")
            raise UnsafeDeletionError(
                f"refusing to VACUUM: line {n} of {what.format(exc=exc)}, and which files "
                "it needs is unknown; nothing was deleted",
                table=table, version=version, file=path,
            ) from exc
    return out


def prove_unchanged_since_plan(storage: Storage, files: Sequence[str], version: int) -> None:
    """Right before deleting: read again every staged commit and every published commit
    after the plan's `version` (spec "Catalog-managed tables", "Delta Log Entries"), and
    refuse when one names a file of the plan (as written, decoded and normalized, or
    through an alias: `_prove_no_alias`, which also looks again for links to files); and
    check again that no symbolic link has come on the way to a file of the plan
    (`Storage.deletion_hazards`).

    A commit written since the plan adds new files, which the retention protects; but one
    may re-add an old file removed long ago (a RESTORE does): the retention does not
    protect that file, this does (short of a commit landing during the delete itself).

    Raises:
        UnsafeDeletionError: Naming the table, the plan's version and the file.
    """
    if not files:
        return
    # A directory swapped for a link since the plan would send a delete elsewhere.
    _prove_inside(storage, files, version)
    table = storage.root
    try:
        newer = [lf.path for lf, _info in list_log(storage, version + 1)
                 if lf.kind in (LogFileKind.COMMIT, LogFileKind.COMPACTION)
                 and lf.version > version]
        blobs = read_log_files(storage, newer)
    except StorageError as exc:
        raise UnsafeDeletionError(
            f"refusing to VACUUM: cannot read the commits written since the plan "
            f"({exc.reason}); nothing was deleted",
            table=table, version=version, file=exc.file,
        ) from exc
    names: list[str] = []
    for path, data in zip(newer, blobs, strict=True):
        names += _commit_names(data, path, table, version, staged=False)
    named = string_array(names)
    written = pa.concat_arrays([named, _staged_written(storage, version)])
    if not len(written):
        return
    candidates = string_array(list(files))
    odd = pc.match_substring_regex(candidates, _PLAIN).to_pylist()
    loose = string_array([_loose(f) if o else f for f, o in zip(files, odd, strict=True)])
    hit = pc.or_(_found_in(candidates, written),
                 _found_in(loose, _loose_references(written, table)))
    if pc.any(hit).as_py():
        clash = candidates.filter(hit).to_pylist()
        raise UnsafeDeletionError(
            f"refusing to VACUUM: a commit read again right before deleting names "
            f"{len(clash)} file(s) of the plan (first: {clash[0]!r}): it was written since "
            "the plan (it may re-add a file removed long ago); nothing was deleted",
            table=table, version=version, file=clash[0],
        )
    _prove_no_alias(storage, files, [written], version)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's members as a dict; ValueError naming a key given twice."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"duplicate key {twice!r} in one JSON object")
    return out


def _named_by(action: object) -> list[str]:
    """The path of a file action and its DV file's (`u`: `<prefix>/deletion_vector_<uuid>
    .bin` below the root; `p`: as written)."""
    if not isinstance(action, dict) or not isinstance(action.get("path"), str):
        raise ValueError(f"file action without a path: {action!r:.200}")
    out = [action["path"]]
    dv = action.get("deletionVector")
    if isinstance(dv, dict) and isinstance(dv.get("pathOrInlineDv"), str):
        if dv.get("storageType") == "p":
            out.append(dv["pathOrInlineDv"])
        elif dv.get("storageType") == "u":
            prefix, uid = decode_uuid_path(dv["pathOrInlineDv"])
            name = f"deletion_vector_{uid}.bin"
            out.append(f"{prefix}/{name}" if prefix else name)
    return out


def _spellings(path: str) -> list[str]:
    """Paths the file system may open for a referenced path: as written and decoded, each
    joined to the root and, without its scheme, as an absolute path when it is one;
    trailing empty and `.` segments dropped too."""
    out: list[str] = []
    for form in dict.fromkeys((path, _decoded(path))):
        bare = _ANY_SCHEME.sub("", form)
        # `./` + an absolute spelling: it joined to the root (a reader joining every path).
        joined = f".{form}" if form.startswith("/") else form
        for p in (joined, bare) if bare.startswith("/") else (joined,):
            out.append(p)
            trimmed = re.sub(r"(/\.?)+$", "", p)
            if trimmed and trimmed != p:
                out.append(trimmed)
    return out


def _decoded(text: str) -> str:
    for _ in range(16):
        decoded = unquote(text)
        if decoded == text:
            break
        text = decoded
    return text


def _prove_no_alias(
    storage: Storage, files: Sequence[str], written: Iterable[pa.Array], version: int
) -> None:
    """Refuse when a referenced path reaches a file of the plan by the file system's own
    identity (device, inode), whatever its spelling (local storage; object stores have
    no links)."""
    if storage.scheme != "file":
        return
    table = storage.root
    try:
        ids = file_ids(storage, files)
        by_id = {i: f for i, f in zip(ids, files, strict=True) if i is not None}
        if not by_id:
            return
        names = {f.rsplit("/", 1)[-1] for f in by_id.values()}
        name_set = string_array(sorted(names))
        # An absolute path below the root as written in `storage.root` reaches what its
        # relative remainder does: read like a relative path.
        local_root = _ANY_SCHEME.sub("", table)
        own = [f"{lead}{r}/" for r in {local_root, quote(local_root)}
               for lead in ("", "file:", "file://", "file://localhost")]
        spellings: dict[str, None] = {}
        for chunk in written:
            chunk = chunk.cast(pa.string()).drop_null()
            if not len(chunk):
                continue
            # Only paths ending in a candidate's name, or spelt in a way that may not
            # (encoded, ending in a slash or dot), or absolute elsewhere, can reach one.
            last = pc.replace_substring_regex(chunk, r"^.*/", "")
            elsewhere = pc.match_substring_regex(chunk, _ABSOLUTE)
            for prefix in own:
                elsewhere = pc.and_(elsewhere, pc.invert(pc.starts_with(chunk, prefix)))
            worth = pc.or_(pc.or_(pc.is_in(last, value_set=name_set),
                                  pc.match_substring_regex(chunk, _ODD_END)), elsewhere)
            for path, anywhere in zip(chunk.filter(worth).to_pylist(),
                                      elsewhere.filter(worth).to_pylist(), strict=True):
                for sp in _spellings(path):
                    # An absolute path elsewhere may end in a link to a file of any name.
                    if (anywhere and sp.startswith("/")) or sp.rsplit("/", 1)[-1] in names:
                        spellings[sp] = None
        found = file_ids(storage, list(spellings))
        # Every link to a file below the root: the listing skips it, a reader reads its
        # target.
        links = file_links(storage)
        linked = file_ids(storage, links)
    except StorageError as exc:
        raise UnsafeDeletionError(
            f"refusing to VACUUM: cannot tell which file a referenced path reaches "
            f"({exc.reason}); nothing was deleted",
            table=table, version=version, file=exc.file,
        ) from exc
    for link, fid in zip(links, linked, strict=True):
        if fid is not None and fid in by_id:
            raise UnsafeDeletionError(
                f"refusing to VACUUM: the file chosen for deletion {by_id[fid]!r} is the "
                f"target of the symbolic link {link!r} in the table, which a reader "
                "opening that link reads; nothing was deleted",
                table=table, version=version, file=by_id[fid],
            )
    for spelling, fid in zip(spellings, found, strict=True):
        if fid is not None and fid in by_id:
            raise UnsafeDeletionError(
                f"refusing to VACUUM: the file chosen for deletion {by_id[fid]!r} is the "
                f"file the log's path {spelling!r} reaches (another spelling of its "
                "directory: a symbolic link, `..` or a mount); nothing was deleted",
                table=table, version=version, file=by_id[fid],
            )


def _prove_deletable(
    storage: Storage,
    files: Sequence[str],
    refs: FileReferences | SpilledReferences,
    *,
    version: int,
    keep_versions: Sequence[int] = (),
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
    staged = _staged_written(storage, version)
    if keep_versions:
        staged = pa.concat_arrays([staged, _kept_written(storage, keep_versions, version)])
    named = pc.or_(named, _found_in(candidates, staged))
    named = pc.or_(named, _found_in(loose, _loose_references(staged, table)))
    if pc.any(named).as_py():
        clash = candidates.filter(named).to_pylist()
        raise UnsafeDeletionError(
            f"refusing to VACUUM: {len(clash)} file(s) chosen for deletion match a path the "
            f"log references once both are decoded and normalized another way (first: "
            f"{clash[0]!r}); nothing was deleted",
            table=table, version=version, file=clash[0],
        )
    _prove_no_alias(storage, files, chain(refs.written_chunks(), [staged]), version)
    _prove_inside(storage, files, version)


def _prove_inside(storage: Storage, files: Sequence[str], version: int) -> None:
    """Refuse unless every file is a regular file reached without a symbolic link, inside
    the root (`Storage.deletion_hazards`)."""
    hazards = storage.deletion_hazards(files)
    if hazards:
        path, reason = hazards[0]
        raise UnsafeDeletionError(
            f"refusing to VACUUM: {len(hazards)} file(s) chosen for deletion cannot be "
            f"proven inside the table root (first: {path!r}: {reason}); nothing was deleted",
            table=storage.root, version=version, file=path,
        )
