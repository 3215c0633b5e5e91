"""VACUUM's listing rules: which names are hidden, which listed files are candidates, which
directories a deletion empties.

Spec sections: "Delta Table Specification" (data lives in non-hidden directories), "Change
Data Files" (`_change_data` files go purely by age). Hidden, as Spark decides it
(`DeltaTableUtils.isHiddenDirectory`): every name starting with `_` or `.`, except
`_change_data` and partition directories (`<partition column>=...`); `metadata` (Iceberg
UniForm) and `_delta_index` too. A Hadoop side checksum `.<name>.crc` goes with `<name>`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.engine.base import NESTED_LOG_MARK
from delta_ops.engine.local import lists_in_ranges, range_specs
from delta_ops.engine.spill import KeyBuckets
from delta_ops.engine.threads import io_map
from delta_ops.errors import DeltaOpsError, NotATableError, UnsafeDeletionError
from delta_ops.protocol.actions import Metadata, is_absolute, reader_keys
from delta_ops.protocol.arrays import sorted_strings
from delta_ops.protocol.filenames import LOG_DIR
from delta_ops.storage import Storage
from delta_ops.storage.sorted_paths import SortedPaths

# Up to this many directories, each is checked against the kept paths with one scan of
# them; beyond, the kept paths' parent directories are computed once instead.
_FEW_DIRS = 32
CHANGE_DATA_DIR = "_change_data"
# Names Spark treats as hidden although they would not be by their first character.
_HIDDEN_NAMES = frozenset({"metadata"})


def partition_prefixes(metadata: Metadata) -> tuple[str, ...]:
    """`<column>=` for each partition column, by logical and (column mapping) physical name."""
    names = list(metadata.partition_columns)
    schema_string = metadata.schema_string
    if schema_string and names:
        try:
            fields = orjson.loads(schema_string).get("fields") or []
        except (orjson.JSONDecodeError, AttributeError):
            fields = []
        for f in fields:
            if isinstance(f, dict) and f.get("name") in metadata.partition_columns:
                physical = (f.get("metadata") or {}).get("delta.columnMapping.physicalName")
                if isinstance(physical, str):
                    names.append(physical)
    return tuple(f"{n}=" for n in names)


def is_hidden(name: str, prefixes: tuple[str, ...] = ()) -> bool:
    """Spark's rule (`DeltaTableUtils.isHiddenDirectory`) for one file or directory name.

    Hidden: a name starting with `_` or `.`, unless it starts with `_change_data` or is a
    partition directory `<partition column>=<value>`; also `metadata` (Iceberg UniForm).
    Unlike Spark, `_delta_index` is hidden too: nothing in the log references its files, so
    treating it as data would delete them by age.
    """
    if name in _HIDDEN_NAMES:
        return True
    if not name.startswith(("_", ".")):
        return False
    if name.startswith(CHANGE_DATA_DIR):
        return False
    return not (prefixes and name.startswith(prefixes))


def _hidden_path(path: str, prefixes: tuple[str, ...]) -> bool:
    return any(is_hidden(part, prefixes) for part in path.split("/"))


def _side_file_of(path: str) -> str | None:
    """`dir/name` for a Hadoop side checksum `dir/.name.crc`, else None."""
    head, _, name = path.rpartition("/")
    if not (name.startswith(".") and name.endswith(".crc")) or len(name) <= 5:
        return None
    main = name[1:-4]
    return f"{head}/{main}" if head else main


def _side_file(path: str) -> str:
    head, _, name = path.rpartition("/")
    return f"{head}/.{name}.crc" if head else f".{name}.crc"


def _has_directories(storage: Storage) -> bool:
    """Object stores (and fsspec's memory store) have no directories to remove."""
    return storage.scheme == "file"


def _ancestors(path: str) -> Iterable[str]:
    parts = path.split("/")[:-1]
    for i in range(len(parts), 0, -1):
        yield "/".join(parts[:i])


def _dirs_emptied(
    storage: Storage, deleted: Sequence[str], keep_chunks: Iterable[pa.Array]
) -> list[str]:
    """Directories that hold no file once `deleted` are gone, deepest first (checked by
    listing only the few directories no kept path lies under; `keep_chunks`: the kept
    paths, in pieces)."""
    if not _has_directories(storage):
        return []
    heads = {p.rpartition("/")[0] for p in deleted}
    candidates = {d for head in heads if head for d in _ancestors(f"{head}/x")}
    if not candidates:
        return []
    for keep in keep_chunks:
        if not candidates:
            break
        if not len(keep):
            continue
        # A directory holding a referenced file does not become empty.
        if len(candidates) <= _FEW_DIRS:
            candidates = {
                d for d in candidates if not pc.any(pc.starts_with(keep, f"{d}/")).as_py()
            }
        else:
            nested = keep.filter(pc.match_substring(keep, "/"))
            parents = pc.unique(pc.replace_substring_regex(nested, r"/[^/]*$", ""))
            for parent in parents.to_pylist():
                candidates.difference_update(_ancestors(f"{parent}/x"))
    gone = set(deleted)
    emptied: set[str] = set()
    for d in sorted(candidates, key=lambda c: (-c.count("/"), c)):
        files = storage.list_dir(d)
        if any(f.path not in gone for f in files):
            continue
        if all(sub in emptied for sub in storage.list_subdirs(d)):
            emptied.add(d)
    return sorted(emptied, key=lambda c: (-c.count("/"), c))


def _listing_dirs(
    storage: Storage, prefixes: tuple[str, ...], keep: pa.Array | KeyBuckets | None = None
) -> list[str]:
    """"" and the root's subdirectories that hold data. On an object store the root's
    listing (its files come in the same pages as its subdirectories) is cut into key ranges
    side by side, the bounds taken from the referenced paths `keep` (`range_specs`), and
    the root's files are kept for the engine's listing of "" that follows, which then sends
    no request)."""
    bounds = range_specs([""], keep)[0][1] if keep is not None else None
    # The kept root files leave out the referenced ones, as the engine's listing does
    # (the same `SortedPaths`: the plan sorted `keep` already).
    referenced = (
        SortedPaths(sorted_strings(keep))
        if isinstance(keep, pa.Array) and lists_in_ranges(storage) else None
    )
    subdirs = [
        d for d in storage.list_subdirs(
            "", follow_symlinks=False, bounds=bounds, remember_files=True,
            exclude=referenced,
        )
        if d != LOG_DIR and not is_hidden(d, prefixes)
    ]
    return ["", *subdirs]


def _select(
    paths: Sequence[str], prefixes: tuple[str, ...]
) -> tuple[list[int], list[int]]:
    """Indexes of deletable files among unreferenced old ones, and of their side files."""
    chosen: list[int] = []
    sides: dict[str, int] = {}
    hidden_dirs: dict[str, bool] = {}  # files share few directories: decide each once
    log_prefix = f"{LOG_DIR}/"
    for i, path in enumerate(paths):
        if path.startswith(log_prefix) or path == LOG_DIR:
            continue
        head, _, name = path.rpartition("/")
        if head:
            hidden = hidden_dirs.get(head)
            if hidden is None:
                hidden = hidden_dirs[head] = _hidden_path(head, prefixes)
            if hidden:
                continue
        if is_hidden(name, prefixes):
            main = _side_file_of(path)
            if main is not None:
                sides[main] = i
            continue
        chosen.append(i)
    side_idx = [sides[paths[i]] for i in chosen if paths[i] in sides]
    return chosen, side_idx


def nested_tables(
    storage: Storage,
    files: Sequence[str],
    prefixes: tuple[str, ...],
    listed: Sequence[str] = (),
    *,
    partitions_too: bool = False,
) -> list[str]:
    """The directories above `files` that hold a `_delta_log` of their own: tables nested
    in this one, whose files this table's log never names. A directory with a file of its
    `_delta_log` among `listed` (the engine's listing returns those whatever their age:
    `NESTED_LOG_MARK`) is one, at no cost; partition directories (`<column>=...`) are
    known only that way unless `partitions_too` (an inventory, which may predate a nested
    log). Each other directory costs one listing of its subdirectories (a data file at the
    root costs none)."""
    seen = sorted({p.partition(NESTED_LOG_MARK)[0] for p in listed if NESTED_LOG_MARK in p})
    below = tuple(f"{d}/" for d in seen)
    dirs: set[str] = set()
    for parent in {path.rpartition("/")[0] for path in files} - {""}:
        if f"{parent}/".startswith(below):
            continue
        parts = parent.split("/")
        for i, part in enumerate(parts):
            if partitions_too or not (prefixes and part.startswith(prefixes)):
                dirs.add("/".join(parts[: i + 1]))
    if not dirs:
        return seen
    ordered = sorted(dirs)

    def holds_a_log(directory: str) -> bool:
        subdirs = storage.list_subdirs(directory, follow_symlinks=False)
        return f"{directory}/{LOG_DIR}" in subdirs

    found = io_map(holds_a_log, ordered) if len(ordered) > 1 else [holds_a_log(ordered[0])]
    return sorted({*seen, *(d for d, yes in zip(ordered, found, strict=True) if yes)})


def nested_references(storage: Storage, nested: Sequence[str], *, version: int) -> set[str]:
    """Keys of this table's files that the tables nested in it name by an absolute path or
    URI (a shallow clone's adds, its tombstones, its `p` deletion vectors): their logs
    reference files of this one. A nested log without commits names nothing; one that does
    not read makes VACUUM refuse, naming it.

    Raises:
        UnsafeDeletionError: A nested table's latest version does not read.
    """
    from delta_ops.log import load_snapshot

    out: set[str] = set()
    for d in nested:
        try:
            snap = load_snapshot(storage.child(d))
        except NotATableError:
            continue
        except DeltaOpsError as exc:
            raise UnsafeDeletionError(
                f"refusing to VACUUM: the table nested at {d}/ does not read ({exc.reason}); "
                "its log may name files of this table by absolute paths, so none can be "
                "proven unreferenced; nothing was deleted",
                table=storage.root, version=version, file=exc.file or f"{d}/{LOG_DIR}",
            ) from exc
        for actions in (snap.files, snap.tombstones):
            tables = [actions] if isinstance(actions, pa.Table) else actions.tables(
                ["path", "deletionVector"])
            for t in tables:
                named = [p for p in t.column("path").to_pylist() if is_absolute(p)]
                named += [dv["pathOrInlineDv"] for dv in t.column("deletionVector").to_pylist()
                          if dv and dv.get("storageType") == "p"]
                for p in named:
                    out.update(reader_keys(p, storage.root))
    return out
