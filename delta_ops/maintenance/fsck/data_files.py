"""The data half of fsck: the live data files and deletion vectors of a version against
one listing of the directories that hold them.

Spec sections: "Add File and Remove File" (a live `add` names a data file of `size`
bytes), "Deletion Vectors" ("Deletion Vector Descriptor Schema": `u` files resolve to
`<root>/<prefix>/deletion_vector_<uuid>.bin`, `p` is a path, `i` is inline; "Deletion Vector
File Storage Format": a version byte, then per DV its size, the bitmap and a CRC-32 of the
bitmap, all big-endian), "Per-file Statistics" (`numRecords`).

Plan from the snapshot: the listing key of every live file (`protocol.path_identity`) and of
every DV file, and the top-level directories that hold them. One listing on the engine
(`Engine.list_files`: threads locally, executors on Spark) answers existence and size for
all of them; a listing error raises (never read as "missing"), and a file the listing does
not show is looked at directly before it is called missing (found: `unlisted_file`, a
warning: a symbolic link, which listings never follow, or a listing that lags). Then, per
DV file, the file is read once and each descriptor pointing into it decoded
(`read_dv_from_file_bytes`: size, CRC-32, bitmap, cardinality); inline DVs are decoded from
the descriptor. With
`verify_data`, every present data file's Parquet footer is read on the engine and its row
count compared with `numRecords` (files whose statistics lack it: footer read only). Files
outside the table root are counted, not checked.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.commit.row_ids import num_records_from_stats
from delta_ops.errors import DeletionVectorError, StorageError
from delta_ops.maintenance.fsck.problems import ERROR, WARNING, Problem
from delta_ops.protocol.deletion_vectors import (
    DeletionVectorDescriptor,
    inline_dv_bitmap,
    read_dv_from_file_bytes,
)
from delta_ops.protocol.path_identity import relative_key
from delta_ops.storage import Storage

if TYPE_CHECKING:
    from delta_ops.engine.base import Engine

#: Data files whose footers one engine call reads.
FOOTER_BATCH = 4096


@dataclass
class LiveFile:
    """A live data file whose check found something (kept for the repair)."""

    key: str
    row: dict[str, Any]
    missing: bool = False
    dv_key: str | None = None
    dv_missing: bool = False
    dv_corrupt: bool = False


@dataclass
class DataCheck:
    """What `check_data` found."""

    problems: list[Problem] = field(default_factory=list)
    damaged: dict[str, LiveFile] = field(default_factory=dict)  # key -> file
    num_files: int = 0
    num_deletion_vectors: int = 0
    num_outside_table: int = 0


def _directory(key: str) -> str:
    """The directory `Engine.list_files` lists to find `key`: its top-level directory
    (listed recursively), or "" (the root's own files)."""
    head, sep, _ = key.partition("/")
    return head if sep else ""


def _tables(files: Any) -> Iterator[pa.Table]:
    if isinstance(files, pa.Table):
        yield files
    else:  # a streamed state
        yield from files.tables()


def dv_key(descriptor: DeletionVectorDescriptor, root: str) -> str | None:
    """The listing key of a `u`/`p` DV's file, None for inline DVs and files outside the
    root."""
    if descriptor.storage_type == "u":
        return descriptor.relative_path()
    if descriptor.storage_type == "p":
        return relative_key(descriptor.path_or_inline_dv, root)
    return None


def check_data(
    storage: Storage, snapshot: Any, engine: Engine, *, verify_data: bool = False
) -> DataCheck:
    """Existence, size and deletion vectors of every live file of `snapshot` (see the module
    docstring).

    Raises:
        StorageError: the listing, or a read of a listed DV file, failed.
    """
    root, version = storage.root, snapshot.version
    out = DataCheck()
    keys: list[str] = []
    sizes: list[int | None] = []
    rows_at: list[tuple[int, int]] = []  # (table index, row) of each key
    stats: list[str | None] = []
    tables: list[pa.Table] = []
    # DV file key -> [(data key, descriptor, table index, row)]
    dv_files: dict[str, list[tuple[str, DeletionVectorDescriptor, int, int]]] = defaultdict(list)
    for t_index, t in enumerate(_tables(snapshot.files) if snapshot.num_files else ()):
        tables.append(t)
        paths = t.column("path").to_pylist()
        t_sizes = t.column("size").to_pylist()
        t_stats = (t.column("stats").to_pylist() if "stats" in t.column_names
                   else [None] * len(paths))
        dvs = (t.column("deletionVector").to_pylist() if "deletionVector" in t.column_names
               else [None] * len(paths))
        for i, path in enumerate(paths):
            out.num_files += 1
            key = relative_key(path, root)
            if key is None:
                out.num_outside_table += 1
                continue
            keys.append(key)
            sizes.append(t_sizes[i])
            stats.append(t_stats[i])
            rows_at.append((t_index, i))
            raw = dvs[i]
            if raw is None or raw.get("storageType") is None:
                continue
            out.num_deletion_vectors += 1
            try:
                descriptor = DeletionVectorDescriptor.from_dict(raw)
                if descriptor.is_inline:
                    bitmap = inline_dv_bitmap(descriptor)
                    if len(bitmap) != descriptor.cardinality:
                        raise DeletionVectorError(
                            f"inline deletion vector holds {len(bitmap)} rows, descriptor "
                            f"cardinality is {descriptor.cardinality}")
                    continue
            except DeletionVectorError as exc:
                out.problems.append(Problem(
                    "corrupt_dv", ERROR, key, f"deletion vector descriptor: {exc.reason}",
                    version, data_file=key))
                _damage(out, key, tables, t_index, i).dv_corrupt = True
                continue
            at = dv_key(descriptor, root)
            if at is None:
                out.num_outside_table += 1
                continue
            dv_files[at].append((key, descriptor, t_index, i))

    directories = sorted({_directory(k) for k in (*keys, *dv_files)})
    listing = engine.list_files(storage, directories) if directories else None
    listed_paths = listing.column("path") if listing is not None else pa.array([], pa.string())
    listed_sizes = listing.column("size") if listing is not None else pa.array([], pa.int64())

    # Data files: present, with the recorded size.
    if keys:
        key_array = pa.array(keys, pa.string())
        found = pc.index_in(key_array, value_set=listed_paths)
        found_list = found.to_pylist()
        listed_size = pc.take(listed_sizes, found.fill_null(0)).to_pylist() \
            if len(listed_sizes) else [None] * len(keys)
        for n, key in enumerate(keys):
            t_index, i = rows_at[n]
            if found_list[n] is None and storage.exists(key):
                out.problems.append(_unlisted(key, version))
            elif found_list[n] is None:
                out.problems.append(Problem(
                    "missing_file", ERROR, key,
                    f"live data file does not exist (the log records {sizes[n]} bytes)", version))
                _damage(out, key, tables, t_index, i).missing = True
            elif sizes[n] is not None and listed_size[n] is not None \
                    and listed_size[n] != sizes[n]:
                out.problems.append(Problem(
                    "size_mismatch", ERROR, key,
                    f"file holds {listed_size[n]} bytes, the log records {sizes[n]}", version))

    # Deletion-vector files: present, and every descriptor into them decodes.
    listed_dv = set(pc.filter(listed_paths, pc.is_in(listed_paths, value_set=pa.array(
        list(dv_files), pa.string()))).to_pylist()) if dv_files else set()
    for at, users in sorted(dv_files.items()):
        if at not in listed_dv and storage.exists(at):
            out.problems.append(_unlisted(at, version))
        elif at not in listed_dv:
            for key, _d, t_index, i in users:
                out.problems.append(Problem(
                    "missing_dv", ERROR, at, "deletion vector file does not exist", version,
                    data_file=key))
                f = _damage(out, key, tables, t_index, i)
                f.dv_key, f.dv_missing = at, True
            continue
        data = storage.read(at)
        for key, descriptor, t_index, i in users:
            problem = dv_problem(data, descriptor, at)
            if problem is not None:
                out.problems.append(Problem(
                    "corrupt_dv", ERROR, at, problem, version, data_file=key))
                f = _damage(out, key, tables, t_index, i)
                f.dv_key, f.dv_corrupt = at, True

    if verify_data and keys:
        present = [n for n, key in enumerate(keys) if key not in out.damaged
                   or not out.damaged[key].missing]
        _verify_footers(storage, engine, [keys[n] for n in present],
                        [stats[n] for n in present], out, version)
    return out


def _unlisted(key: str, version: int) -> Problem:
    return Problem(
        "unlisted_file", WARNING, key,
        "the listing does not show this live file but a direct look finds it (reached "
        "through a symbolic link, or the listing is behind); not checked further", version)


def dv_problem(data: bytes, descriptor: DeletionVectorDescriptor, file: str) -> str | None:
    """Why the DV `descriptor` describes does not decode from `data` (its file's bytes),
    or None when it decodes with the recorded cardinality."""
    try:
        read_dv_from_file_bytes(
            data, descriptor.offset, descriptor.size_in_bytes,
            expected_cardinality=descriptor.cardinality, file=file,
        )
    except DeletionVectorError as exc:
        return exc.reason
    return None


def _damage(out: DataCheck, key: str, tables: list[pa.Table], t_index: int, i: int) -> LiveFile:
    found = out.damaged.get(key)
    if found is None:
        found = out.damaged[key] = LiveFile(key, tables[t_index].slice(i, 1).to_pylist()[0])
    return found


def _verify_footers(
    storage: Storage, engine: Engine, keys: list[str], stats: list[str | None],
    out: DataCheck, version: int,
) -> None:
    """Footers of `keys` read on the engine, a batch at a time; a batch that fails is split
    until the unreadable files are alone."""
    expected = {k: num_records_from_stats(s) for k, s in zip(keys, stats, strict=True)}

    def run(batch: list[str]) -> None:
        try:
            counts = engine.parquet_row_counts(storage, batch)
        except StorageError:
            raise
        except Exception as exc:  # noqa: BLE001 - a footer that does not read is the finding
            if len(batch) == 1:
                out.problems.append(Problem(
                    "unreadable_parquet", ERROR, batch[0],
                    f"Parquet footer does not read: {_first_line(exc)}", version))
                return
            half = len(batch) // 2
            run(batch[:half])
            run(batch[half:])
            return
        for path, n in zip(counts.column("path").to_pylist(),
                           counts.column("num_records").to_pylist(), strict=True):
            want = expected.get(path)
            if want is not None and n != want:
                out.problems.append(Problem(
                    "row_count_mismatch", ERROR, path,
                    f"Parquet footer holds {n} rows, statistics say numRecords {want}",
                    version))

    for start in range(0, len(keys), FOOTER_BATCH):
        run(keys[start:start + FOOTER_BATCH])


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


__all__ = ["DataCheck", "LiveFile", "check_data", "dv_key", "dv_problem"]
