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
all of them, each directory listed once. Up to `LISTING_GROUP` live files are held in
memory and their directories listed together; a larger state is spilled to disk
(`engine.spill.BucketSpill`, as VACUUM's and the rebuild's spills) in four buckets per
`LISTING_GROUP` files by the hash of each file's directory, and checked a group of whole
buckets (about `LISTING_GROUP` files) at a time: the group's directories listed, its files
joined with that listing. So the driver holds one group's files and listing, never the
table's. A listing error raises
(never read as "missing"), and a file the listing does not show is looked at directly before
it is called missing (found: `unlisted_file`, a warning: a symbolic link, which listings
never follow, or a listing that lags). Then, per DV file, the file is read once and each
descriptor pointing into it decoded (`read_dv_from_file_bytes`: size, CRC-32, bitmap,
cardinality); inline DVs are decoded from the descriptor. With `verify_data`, every present
data file's Parquet footer is read on the engine and its row count compared with
`numRecords` (files whose statistics lack it: footer read only). Files outside the table
root are checked for existence by a listing of their directories (`external`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.commit.row_ids import num_records_from_stats
from delta_ops.engine.spill import BucketSpill, bucket_ids
from delta_ops.errors import DeletionVectorError, StorageError
from delta_ops.maintenance.fsck.external import EXTERNAL_CHECKED, check_external
from delta_ops.maintenance.fsck.problems import ERROR, WARNING, Problem
from delta_ops.protocol.deletion_vectors import (
    DeletionVectorDescriptor,
    inline_dv_bitmap,
    read_dv_from_file_bytes,
)
from delta_ops.protocol.path_identity import READER_PATTERN, relative_key
from delta_ops.storage import Storage

if TYPE_CHECKING:
    from delta_ops.engine.base import Engine

#: Data files whose footers one engine call reads.
FOOTER_BATCH = 4096
#: Rows of a loaded state taken at a time (a streamed one comes in its own batches).
BATCH = 100_000
#: Live files whose directories one listing covers (whole directories, so a group may
#: hold more): the listing held at once is about this size, not the table's.
LISTING_GROUP = 100_000


@dataclass
class LiveFile:
    """A live data file whose check found something (kept for the repair)."""

    key: str
    row: dict[str, Any] = field(default_factory=dict)
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
    #: Live files outside the root (as the log names them), up to `EXTERNAL_CHECKED`.
    external: list[str] = field(default_factory=list)


def _directory(key: str) -> str:
    """The directory `Engine.list_files` lists to find `key`: its top-level directory
    (listed recursively), or "" (the root's own files)."""
    head, sep, _ = key.partition("/")
    return head if sep else ""


def _tables(files: Any, columns: list[str] | None = None) -> Iterator[pa.Table]:
    """The live files a batch at a time (a loaded state in slices, a streamed one as it
    streams): the same batches, in the same order, on every call."""
    if isinstance(files, pa.Table):
        t = files if columns is None else files.select(columns)
        for start in range(0, t.num_rows, BATCH):
            yield t.slice(start, BATCH)
    else:
        yield from files.tables(columns)


def dv_key(descriptor: DeletionVectorDescriptor, root: str) -> str | None:
    """The listing key of a `u`/`p` DV's file, None for inline DVs and files outside the
    root."""
    if descriptor.storage_type == "u":
        return descriptor.relative_path()
    if descriptor.storage_type == "p":
        return relative_key(descriptor.path_or_inline_dv, root)
    return None


def _keys(paths: pa.Array, root: str) -> pa.Array:
    """The listing key of each path (null: outside the root); only paths matching
    `READER_PATTERN` (escapes, URIs, dot segments) go through Python."""
    paths = paths.cast(pa.string())
    odd = pc.match_substring_regex(paths, READER_PATTERN)
    if not pc.any(odd).as_py():
        return paths
    keys = [relative_key(p, root) if o else p
            for p, o in zip(paths.to_pylist(), odd.to_pylist(), strict=True)]
    return pa.array(keys, pa.string())


_SPILL = pa.schema([
    ("dir", pa.string()), ("key", pa.string()), ("size", pa.int64()), ("row", pa.int64()),
    ("expected", pa.int64()),
])


class _Check:
    """The state of one `check_data` run: the live files (directory, key, size, row and,
    with `verify_data`, `numRecords`) by bucket of their directory, DV users by DV file."""

    def __init__(
        self, storage: Storage, snapshot: Any, verify_data: bool, group_files: int
    ) -> None:
        self.storage, self.snapshot = storage, snapshot
        self.root, self.version = storage.root, snapshot.version
        self.out = DataCheck()
        self.verify_data = verify_data
        self.total = total = snapshot.num_files
        # One bucket: held in memory; more: spilled by the bucket of the directory, so a
        # bucket's directories are listed together and its files joined with that listing.
        # Four buckets a group, so that groups of whole buckets come out even (a bucket
        # holds whole directories, picked by hash).
        self.group_files = max(1, group_files)
        groups = -(-total // self.group_files)
        self.buckets = 1 if groups <= 1 else 4 * groups
        self.held: list[pa.Table] = []
        self.spill = BucketSpill(_SPILL, "dir", self.buckets, name="fsck") \
            if self.buckets > 1 else None
        self.per_dir: dict[str, int] = {}
        # DV file key -> [(data key, descriptor, global row)]
        self.dv_files: dict[str, list[tuple[str, DeletionVectorDescriptor, int]]] = \
            defaultdict(list)
        self.wanted: dict[int, LiveFile] = {}  # global row -> file whose row the repair needs

    def close(self) -> None:
        if self.spill is not None:
            self.spill.close()

    def read(self) -> None:
        columns = ["path", "size", "deletionVector"] + (["stats"] if self.verify_data else [])
        offset = 0
        for t in _tables(self.snapshot.files, columns) if self.total else ():
            keys = _keys(t.column("path").combine_chunks(), self.root)
            self.out.num_files += t.num_rows
            self.out.num_outside_table += keys.null_count
            room = EXTERNAL_CHECKED - len(self.out.external)
            if keys.null_count and room > 0:
                outside = t.column("path").combine_chunks().filter(keys.is_null())
                self.out.external += outside.slice(0, room).to_pylist()
            self._keep(t, keys, offset)
            self._deletion_vectors(t, keys, offset)
            offset += t.num_rows

    def _keep(self, t: pa.Table, keys: pa.Array, offset: int) -> None:
        """The batch's files inside the root, held or spilled by directory."""
        n = t.num_rows
        expected = pa.array([num_records_from_stats(s) for s in t.column("stats").to_pylist()],
                            pa.int64()) if self.verify_data else pa.nulls(n, pa.int64())
        batch = pa.table([
            _directories(keys), keys, t.column("size").combine_chunks().cast(pa.int64()),
            pa.array(range(offset, offset + n), pa.int64()), expected,
        ], schema=_SPILL)
        if keys.null_count:
            batch = batch.filter(keys.is_valid())
        if not batch.num_rows:
            return
        counts = pc.value_counts(batch.column("dir"))
        for d, c in zip(counts.field("values").to_pylist(),
                        counts.field("counts").to_pylist(), strict=True):
            self.per_dir[d] = self.per_dir.get(d, 0) + c
        if self.spill is None:
            self.held.append(batch)
        else:
            self.spill.append(batch)

    def bucket(self, b: int) -> pa.Table:
        """The live files whose directories are in bucket `b`."""
        if self.spill is None:
            return pa.concat_tables(self.held).combine_chunks() if self.held \
                else _SPILL.empty_table()
        return self.spill.bucket(b).combine_chunks()

    def _deletion_vectors(self, t: pa.Table, keys: pa.Array, offset: int) -> None:
        dv = t.column("deletionVector").combine_chunks()
        has = pc.and_(dv.is_valid(), pc.struct_field(dv, "storageType").is_valid())
        if not pc.any(has).as_py():
            return
        rows = pc.indices_nonzero(has.fill_null(False)).to_pylist()
        for i, raw in zip(rows, dv.take(rows).to_pylist(), strict=True):
            key = keys[i].as_py()
            if key is None:
                continue
            self.out.num_deletion_vectors += 1
            try:
                descriptor = DeletionVectorDescriptor.from_dict(raw)
                if descriptor.is_inline:
                    bitmap = inline_dv_bitmap(descriptor, check_cardinality=False)
                    mismatch = descriptor_mismatch(descriptor, len(bitmap))
                    if mismatch is not None:
                        self.out.problems.append(Problem(
                            "dv_mismatch", ERROR, key,
                            f"inline deletion vector: {mismatch}", self.version,
                            data_file=key))
                    continue
            except DeletionVectorError as exc:
                self.out.problems.append(Problem(
                    "corrupt_dv", ERROR, key, f"deletion vector descriptor: {exc.reason}",
                    self.version, data_file=key))
                self._damage(key, offset + i).dv_corrupt = True
                continue
            at = dv_key(descriptor, self.root)
            if at is None:
                self.out.num_outside_table += 1
                continue
            self.dv_files[at].append((key, descriptor, offset + i))

    def _damage(self, key: str, row: int) -> LiveFile:
        found = self.out.damaged.get(key)
        if found is None:
            found = self.out.damaged[key] = LiveFile(key)
            self.wanted[row] = found
        return found

    def rows_of_damaged(self) -> None:
        """The whole add row of every damaged file (read again, for the repair's remove)."""
        if not self.wanted:
            return
        offset = 0
        for t in _tables(self.snapshot.files):
            for row in [r for r in self.wanted if offset <= r < offset + t.num_rows]:
                self.wanted[row].row = t.slice(row - offset, 1).to_pylist()[0]
            offset += t.num_rows


def check_data(
    storage: Storage, snapshot: Any, engine: Engine, *, verify_data: bool = False,
    group_files: int | None = None,
) -> DataCheck:
    """Existence, size and deletion vectors of every live file of `snapshot` (see the module
    docstring). The snapshot may be loaded or streamed. Up to `group_files` (default
    `LISTING_GROUP`) live files are held in memory and their directories listed at once;
    beyond that they are spilled to disk in four buckets per `group_files` by the hash of
    their directory, and checked a group of whole buckets (about `group_files` files) at
    a time (its directories listed, its files joined with the listing). Python objects
    are held only for the files with a DV and the files found wrong.

    Raises:
        StorageError: the listing, or a read of a listed DV file, failed.
    """
    check = _Check(storage, snapshot, verify_data,
                   LISTING_GROUP if group_files is None else group_files)
    try:
        return _run(storage, engine, check)
    finally:
        check.close()


def _run(storage: Storage, engine: Engine, check: _Check) -> DataCheck:
    check.read()
    out, version = check.out, check.version
    per_dir = check.per_dir
    for at in check.dv_files:
        per_dir.setdefault(_directory(at), 0)
    directories = sorted(per_dir)
    ids = bucket_ids(pa.array(directories, pa.string()), check.buckets).tolist() \
        if directories and check.buckets > 1 else [0] * len(directories)
    by_bucket: dict[int, list[str]] = defaultdict(list)
    for d, b in zip(directories, ids, strict=True):
        by_bucket[b].append(d)
    listed_dv: set[str] = set()
    dv_wanted = pa.array(sorted(check.dv_files), pa.string())
    # A group of buckets (about `group_files` live files) at a time: its directories listed
    # once (each directory is in one bucket), its live files joined with that listing. The
    # driver holds one group's files and listing.
    for group in _groups(by_bucket, check.per_dir, check.group_files):
        listing = engine.list_files(storage, sorted(d for b in group for d in by_bucket[b]))
        listed_paths = listing.column("path").combine_chunks()
        listed_sizes = listing.column("size").combine_chunks()
        del listing
        if len(dv_wanted):
            listed_dv.update(pc.filter(listed_paths, pc.is_in(
                listed_paths, value_set=dv_wanted)).to_pylist())
        files = pa.concat_tables([check.bucket(b) for b in group]).combine_chunks()
        if not files.num_rows:
            continue
        keys = files.column("key").combine_chunks()
        _present(storage, check, files.column("row").combine_chunks(), keys,
                 files.column("size").combine_chunks(), listed_paths, listed_sizes)
        del listed_paths, listed_sizes
        if check.verify_data:
            gone = [k for k, f in out.damaged.items() if f.missing]
            present = pc.invert(pc.is_in(keys, value_set=pa.array(gone, pa.string()))) \
                if gone else pa.array([True] * len(keys))
            _verify_footers(storage, engine, pc.filter(keys, present).to_pylist(),
                            pc.filter(files.column("expected"), present).to_pylist(),
                            out, version)

    # Deletion-vector files: present, and every descriptor into them decodes.
    for at, users in sorted(check.dv_files.items()):
        if at not in listed_dv and storage.exists(at):
            out.problems.append(_unlisted(at, version))
        elif at not in listed_dv and _dangling(storage, at):
            out.problems.append(_dangling_link(at, version))
            continue
        elif at not in listed_dv:
            for key, _d, row in users:
                out.problems.append(Problem(
                    "missing_dv", ERROR, at, "deletion vector file does not exist", version,
                    data_file=key))
                f = check._damage(key, row)
                f.dv_key, f.dv_missing = at, True
            continue
        data = storage.read(at)
        for key, descriptor, row in users:
            problem = dv_problem(data, descriptor, at)
            if problem is None:
                continue
            reason, proven = problem
            out.problems.append(Problem(
                "corrupt_dv" if proven else "dv_mismatch", ERROR, at, reason, version,
                data_file=key))
            if proven:
                f = check._damage(key, row)
                f.dv_key, f.dv_corrupt = at, True
    if out.external:
        out.problems += check_external(storage, out.external, version)
    check.rows_of_damaged()
    return out


def _groups(by_bucket: dict[int, list[str]], per_dir: dict[str, int],
            group_files: int) -> list[list[int]]:
    """Buckets in groups of at most `group_files` live files (a bucket is never split, so
    a bucket larger than that is a group alone)."""
    groups: list[list[int]] = [[]]
    size = 0
    for b in sorted(by_bucket):
        n = sum(per_dir[d] for d in by_bucket[b])
        if groups[-1] and size + n > group_files:
            groups.append([])
            size = 0
        groups[-1].append(b)
        size += n
    return [g for g in groups if g]


def _directories(keys: pa.Array) -> pa.Array:
    """`_directory` of every key (null for null keys), computed in Arrow."""
    if not len(keys):
        return keys
    parts = pc.split_pattern(keys, "/", max_splits=1)
    nested = pc.greater(pc.list_value_length(parts), 1)
    return pc.if_else(nested, pc.list_element(parts, 0), pa.scalar("", pa.string()))


def _present(
    storage: Storage, check: _Check, rows: pa.Array, keys: pa.ChunkedArray,
    sizes: pa.ChunkedArray, listed_paths: pa.Array, listed_sizes: pa.Array,
) -> None:
    """Existence and size of the live files at `rows` (global positions) against the
    listing of their directories."""
    out, version = check.out, check.version
    found = pc.index_in(keys, value_set=listed_paths)
    absent = pc.and_(found.is_null(), keys.is_valid())
    for n in pc.indices_nonzero(absent).to_pylist():
        key = keys[n].as_py()
        if storage.exists(key):
            out.problems.append(_unlisted(key, version))
            continue
        if _dangling(storage, key):
            out.problems.append(_dangling_link(key, version))
            continue
        out.problems.append(Problem(
            "missing_file", ERROR, key,
            f"live data file does not exist (the log records {sizes[n].as_py()} bytes)",
            version))
        check._damage(key, rows[n].as_py()).missing = True
    if len(listed_sizes):
        on_disk = pc.take(listed_sizes, found.fill_null(0))
        differ = pc.and_(found.is_valid(), pc.not_equal(on_disk, sizes)).fill_null(False)
        for n in pc.indices_nonzero(differ).to_pylist():
            out.problems.append(Problem(
                "size_mismatch", ERROR, keys[n].as_py(),
                f"file holds {on_disk[n].as_py()} bytes, the log records "
                f"{sizes[n].as_py()}", version))


def _unlisted(key: str, version: int) -> Problem:
    return Problem(
        "unlisted_file", WARNING, key,
        "the listing does not show this live file but a direct look finds it (reached "
        "through a symbolic link, or the listing is behind); not checked further", version)


def _dangling(storage: Storage, key: str) -> bool:
    """Whether `key`, which no file answers, is a symbolic link (whose target is gone)."""
    return any("symbolic link" in why for _p, why in storage.deletion_hazards([key]))


def _dangling_link(key: str, version: int) -> Problem:
    return Problem(
        "dangling_link", ERROR, key,
        "a symbolic link whose target does not exist (readers fail on it); not repaired: "
        "the target may be on a volume that is not mounted. Restore the target or the "
        "link, or remove the file from the table yourself", version)


def dv_problem(
    data: bytes, descriptor: DeletionVectorDescriptor, file: str
) -> tuple[str, bool] | None:
    """What is wrong with the DV `descriptor` describes in `data` (its file's bytes), and
    whether that proves the file's rows lost: (reason, True) when it does not decode (its
    size, CRC-32 or bitmap: no reader can apply it); (reason, False) when it decodes but
    its descriptor disagrees (`descriptor_mismatch`). None: it decodes as described."""
    offset = 1 if descriptor.offset is None else descriptor.offset
    try:
        bitmap = read_dv_from_file_bytes(data, offset, descriptor.size_in_bytes, file=file)
    except DeletionVectorError as exc:
        return exc.reason, True
    mismatch = descriptor_mismatch(descriptor, len(bitmap))
    return None if mismatch is None else (mismatch, False)


def descriptor_mismatch(descriptor: DeletionVectorDescriptor, rows: int) -> str | None:
    """Why a DV that decodes to `rows` rows disagrees with its descriptor: its
    `cardinality` (which counts answered from the log use), or an on-disk one without
    `offset` (read at 1, where a file's first DV starts, as deltalake reads it); None when
    it agrees. A reader that applies the bitmap reads the file's rows right, so a repair
    keeps the file."""
    if descriptor.offset is None and not descriptor.is_inline:
        return ("the descriptor has no offset (Delta writers always set it); the deletion "
                "vector decodes at offset 1, where a file's first one starts")
    if rows != descriptor.cardinality:
        return (f"the deletion vector holds {rows} rows, its descriptor's cardinality is "
                f"{descriptor.cardinality}: row counts taken from the log are wrong, the "
                "rows read are not")
    return None


def _verify_footers(
    storage: Storage, engine: Engine, keys: list[str], num_records: list[int | None],
    out: DataCheck, version: int,
) -> None:
    """Footers of `keys` read on the engine, a batch at a time; a batch that fails is split
    until the unreadable files are alone."""
    expected = dict(zip(keys, num_records, strict=True))

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


__all__ = ["DataCheck", "LiveFile", "check_data", "descriptor_mismatch", "dv_key",
           "dv_problem"]
