"""LocalEngine: the Engine on a thread pool in this process (pyarrow + threads).

The default for the CLI and the library. Listing is split by directory (the table root's
subdirectories, typically partition directories), listed concurrently where that pays off
(object stores, where each listing call is a network round trip) and one after the other on
the local file system (see `Storage.latency_bound`). On an object store each directory is
further cut into key ranges of about one page each, the bounds taken from the referenced
paths the log already holds (`range_specs`), and every range of every directory is listed
side by side under one concurrency limit (`Storage.list_many`), so that an unpartitioned
table lists as fast as a partitioned one. Deletes go to the store in batches
(`Storage.delete_files`: DeleteObjects of 1,000 keys, concurrently, no request spent on
existence); footer reads run on threads: storage I/O releases the GIL.
"""

from __future__ import annotations

import io
import os
from bisect import bisect_left
from collections import deque
from collections.abc import Container, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from itertools import islice

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.engine.base import (
    LISTING_SCHEMA,
    NESTED_LOG_MARK,
    ROW_COUNT_SCHEMA,
    UNREADABLE_PREFIX,
    Engine,
)
from delta_ops.engine.progress import DELETE, LIST, Progress
from delta_ops.engine.spill import BucketSpill, KeyBuckets
from delta_ops.errors import StorageError
from delta_ops.protocol.arrays import (
    constant_string,
    from_numpy,
    from_pylist,
    int_values,
    sorted_strings,
    string_array,
)
from delta_ops.storage import FileInfo, Storage
from delta_ops.storage.bulk import ListSpec
from delta_ops.storage.names import listing_has_stats, stat_files, walk_names
from delta_ops.storage.parallel import KEYS_PER_RANGE, DeleteReport, RequestPolicy, range_bounds
from delta_ops.storage.parallel import Progress as StorageHook
from delta_ops.storage.sorted_paths import SortedPaths, as_py


def _readable(info: FileInfo) -> FileInfo:
    """`info`, or for a name that is not valid UTF-8 (undecodable bytes arrive from the
    file system as lone surrogates) the UNREADABLE_PREFIX marker row."""
    try:
        info.path.encode("utf-8")
    except UnicodeEncodeError:
        escaped = info.path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        return FileInfo(UNREADABLE_PREFIX + escaped, -1, 0)
    return info


def _old_or_nested_log(infos: Sequence[FileInfo], older_than_ms: int) -> list[FileInfo]:
    """The files `find_unreferenced` returns: the old ones, and any below a nested log."""
    return [
        i for i in infos if i.modification_time < older_than_ms or NESTED_LOG_MARK in i.path
    ]


def _listing_table(infos: Sequence[FileInfo]) -> pa.Table:
    # Built from buffers: `pa.array` on Python objects would import pandas.
    infos = [_readable(i) for i in infos]
    n = len(infos)
    return pa.Table.from_arrays(
        [
            string_array([i.path for i in infos]),
            from_numpy(np.fromiter((i.size for i in infos), dtype=np.int64, count=n)),
            from_numpy(
                np.fromiter((i.modification_time for i in infos), dtype=np.int64, count=n)
            ),
        ],
        schema=LISTING_SCHEMA,
    )


def _by_path(info: FileInfo) -> str:
    return info.path


# A walk reports its progress every this many files (one "page").
_PROGRESS_PAGE = 1000


def _reported(walked, progress: Progress) -> list[FileInfo]:  # type: ignore[no-untyped-def]
    """The files of a walk, reporting every `_PROGRESS_PAGE` of them to `progress`."""
    out: list[FileInfo] = []
    files = size = 0
    for info in walked:
        out.append(info)
        files += 1
        size += max(info.size, 0)
        if files == _PROGRESS_PAGE:
            progress.advance(LIST, pages=1, files=files, bytes=size)
            files = size = 0
    if files:
        progress.advance(LIST, pages=1, files=files, bytes=size)
    return out


def _every(ordered: pa.Array, per_range: int, lo: int = 0, hi: int | None = None) -> list[str]:
    """`parallel.range_bounds` of `ordered[lo:hi]` (ascending), taking only the bounds out
    of Arrow."""
    end = len(ordered) if hi is None else hi
    # Indexes from a buffer (`from_numpy`): `pa.array` would have pyarrow import pandas.
    picked = ordered.take(from_numpy(np.arange(lo + per_range - 1, end, per_range, np.int64)))
    return range_bounds(picked.to_pylist(), 1)


def lists_in_ranges(storage: Storage) -> bool:
    """Whether `storage` is listed in key ranges side by side (`range_specs`): an object
    store, whose listings carry sizes and times and whose requests wait on the network."""
    return storage.latency_bound and listing_has_stats(storage)


def range_specs(
    directories: Sequence[str], keep: pa.Array | KeyBuckets | None
) -> list[tuple[str, list[str], bool]]:
    """(directory, range bounds, recursive) to list each of `directories` with
    (`Storage.list_many`): "" is the root's own files, the others are listed recursively.

    The bounds are every `KEYS_PER_RANGE`-th referenced path below each directory, in
    sorted order, so that a range holds about one listing page. Referenced paths held in
    buckets (too many for memory) are sampled: one bucket holds a hash-chosen share of
    them, so every `KEYS_PER_RANGE / buckets`-th of its sorted paths cuts as evenly. The
    bounds only decide how the listing is cut, never what it finds (`parallel.ranges_of`).
    """
    per_range = KEYS_PER_RANGE
    sample: pa.Array | None = None
    if isinstance(keep, KeyBuckets):
        if keep.buckets >= 1:
            sample = sorted_strings(keep.bucket(0))
            per_range = max(1, KEYS_PER_RANGE // keep.buckets)
    elif keep is not None and len(keep):
        sample = sorted_strings(keep)
    if sample is None or not len(sample):
        return [(d, [], d != "") for d in directories]
    out: list[tuple[str, list[str], bool]] = []
    for d in directories:
        if d == "":
            # The root's own files: the paths without '/', still in order.
            root = sample.filter(pc.invert(pc.match_substring(sample, "/")))
            out.append((d, _every(root, per_range), False))
            continue
        # The paths below `d` ("d/...") lie together in the order, before "d0" ('0'
        # follows '/'); bounds are relative to `d`.
        lo = bisect_left(sample, f"{d}/", key=as_py)
        hi = bisect_left(sample, f"{d}0", lo, key=as_py)
        out.append((d, [b[len(d) + 1:] for b in _every(sample, per_range, lo, hi)], True))
    return out


def _hook(progress: Progress | None, phase: str) -> StorageHook | None:
    """The storage layer's progress callable (requests or pages, files, bytes) feeding
    `progress` as `phase`."""
    if progress is None:
        return None

    def hook(pages: int, files: int, size: int) -> None:
        progress.advance(phase, pages=pages, files=files, bytes=size)

    return hook


class LocalEngine(Engine):
    """Thread-pool engine.

    Args:
        max_workers: threads for I/O (default: 4 x CPUs, at most 32).
        policy: Requests in flight and retries for listing and deleting on object stores
            (default `RequestPolicy()`: 64 at once, 10 attempts with backoff).
    """

    name = "local"

    def __init__(
        self, max_workers: int | None = None, *, policy: RequestPolicy | None = None
    ) -> None:
        self.max_workers = max_workers or min(32, 4 * (os.cpu_count() or 1))
        self.policy = policy or RequestPolicy()

    def _map(self, fn, items):
        items = list(items)
        if len(items) <= 1:
            return [fn(i) for i in items]
        with ThreadPoolExecutor(min(self.max_workers, len(items))) as pool:
            return list(pool.map(fn, items))

    def _list(
        self,
        storage: Storage,
        directories: Sequence[str],
        exclude: Container[str] | None = None,
        keep: pa.Array | KeyBuckets | None = None,
        progress: Progress | None = None,
    ) -> list[FileInfo]:
        """The files below `directories` (as `list_files`) not in `exclude`, by path;
        `keep` (referenced paths) only decides where an object store's listing is cut."""
        if lists_in_ranges(storage):
            # The referenced files are left out as the pages arrive: the listing holds
            # only the others, whatever the number of live files.
            return storage.list_many(
                range_specs(directories, keep), follow_symlinks=False, policy=self.policy,
                progress=_hook(progress, LIST), exclude=exclude,
            )

        def one(directory: str) -> list[FileInfo]:
            # What is listed here may be deleted: no symbolic link is listed or followed.
            if directory == "":
                found = storage.list_dir("", exclude=exclude, follow_symlinks=False)
                if progress is not None:
                    progress.advance(LIST, pages=1, files=len(found),
                                     bytes=sum(max(i.size, 0) for i in found))
                return found
            walked = storage.walk(directory, exclude=exclude, follow_symlinks=False)
            if progress is None:
                return list(walked)
            return _reported(walked, progress)

        if storage.latency_bound:
            parts = self._map(one, directories)
        else:
            parts = [one(d) for d in directories]
        return sorted((i for part in parts for i in part), key=_by_path)

    def list_files(self, storage: Storage, directories: Sequence[str]) -> pa.Table:
        return _listing_table(self._list(storage, directories))

    def list_windows(self, storage: Storage, specs: Sequence[ListSpec]) -> pa.Table:
        """`LISTING_SCHEMA` rows of the files of each (directory, bounds, recursive,
        window) of `specs` (`Storage.list_many`, no symbolic link followed): a share of
        the listings `range_specs` plans, for an engine that spreads them over workers
        (the Spark engine's executors, `parallel.windows_of`)."""
        return _listing_table(
            storage.list_many(specs, follow_symlinks=False, policy=self.policy))

    def find_unreferenced(
        self,
        storage: Storage,
        directories: Sequence[str],
        keep: pa.Array | KeyBuckets,
        older_than_ms: int,
        *,
        progress: Progress | None = None,
    ) -> pa.Table:
        if isinstance(keep, KeyBuckets):
            return find_unreferenced_in_buckets(
                storage, directories, keep, older_than_ms,
                threads=self.max_workers if storage.latency_bound else 1,
                policy=self.policy, progress=progress,
            )
        # The anti-join runs during the listing: on the local file system a kept file costs
        # its name only, never a stat. On an object store each key range takes its share
        # of the sorted paths (`SortedPaths.in_range`): no set of them all is built.
        referenced: Container[str] = (
            SortedPaths(sorted_strings(keep)) if lists_in_ranges(storage)
            else frozenset(keep.cast(pa.string()).to_pylist())
        )
        listed = [
            _readable(i)
            for i in self._list(storage, directories, referenced, keep, progress)
        ]
        return _listing_table(_old_or_nested_log(listed, older_than_ms))

    def delete_files(
        self, storage: Storage, paths: Sequence[str], *, progress: Progress | None = None
    ) -> int:
        """Delete `paths`: on an object store in concurrent DeleteObjects batches, failed
        requests and keys retried with backoff (`Storage.delete_files`); elsewhere on
        threads. Returns the files the store confirmed deleted (on S3 an absent key is
        confirmed too).

        Raises:
            StorageError: Some files were still not deleted after their retries; it names
                them (the others were deleted: a re-run finishes the job).
        """
        if not storage.latency_bound:
            def one(path: str) -> tuple[int, tuple[str, str] | None]:
                try:  # each file on its own: one failure does not hide the others' fate
                    return int(storage.delete(path)), None
                except (OSError, StorageError) as exc:
                    return 0, (path, getattr(exc, "reason", None) or str(exc))

            done = self._map(one, paths)
            report = DeleteReport(sum(n for n, _ in done), tuple(f for _, f in done if f))
            if progress is not None:
                progress.advance(DELETE, pages=len(paths), files=report.deleted)
        else:
            report = storage.delete_files(
                paths, policy=self.policy, progress=_hook(progress, DELETE))
        if report.failed:
            raise StorageError(
                report.failure_message(len(set(paths)), retried=storage.latency_bound),
                file=storage.absolute_uri(report.failed[0][0]))
        return report.deleted

    def parquet_row_counts(self, storage: Storage, paths: Sequence[str]) -> pa.Table:
        import pyarrow.parquet as pq  # with its filesystems (and ssl): only where Parquet is

        def one(path: str) -> int:
            with storage.open_input(path) as fh:
                return pq.ParquetFile(fh).metadata.num_rows

        counts = self._map(one, paths)
        return pa.table(
            {
                "path": string_array(list(paths)),
                "num_records": from_pylist(counts, pa.int64()),
            },
            schema=ROW_COUNT_SCHEMA,
        )

    def write_parquet_files(
        self, storage: Storage, files: Sequence[tuple[str, pa.Table]]
    ) -> list[int]:
        import pyarrow.parquet as pq

        def one(item: tuple[str, pa.Table]) -> int:
            path, table = item
            buf = io.BytesIO()
            pq.write_table(table, buf, compression="snappy")
            data = buf.getvalue()
            storage.put_atomic(path, data)
            return len(data)

        return self._map(one, files)

    def size_histogram(
        self, sizes: pa.Array, boundaries: Sequence[int]
    ) -> tuple[list[int], list[int]]:
        return histogram(sizes, boundaries)

    def map_tasks(self, storage: Storage, fn, items, *, parallel=None):  # type: ignore[no-untyped-def]
        """`fn(storage, item)` for each item on this engine's threads, at most `parallel` (and
        `max_workers`) at once, results in input order. An item starts as soon as a thread
        is free. After a failure no further item starts; the earliest failed item's error
        is raised once the running ones have ended."""
        items = list(items)
        limit = min(self.max_workers, parallel or self.max_workers, len(items))
        if limit <= 1:
            return [fn(storage, item) for item in items]
        pool = ThreadPoolExecutor(limit)
        try:
            futures = [pool.submit(fn, storage, item) for item in items]
            wait(futures, return_when=FIRST_EXCEPTION)
            if any(f.done() and f.exception() is not None for f in futures):
                for f in futures:
                    f.cancel()  # the items not yet started; `exception()` waits for the rest
                failed = [f.exception() for f in futures if not f.cancelled()]
                raise next(exc for exc in failed if exc is not None)
            return [f.result() for f in futures]
        finally:
            # Also on an interrupt in this thread: the items not yet started never start.
            pool.shutdown(wait=True, cancel_futures=True)


def histogram(sizes: pa.Array, boundaries: Sequence[int]) -> tuple[list[int], list[int]]:
    """Counts and byte totals of `sizes` per bin of `boundaries` (last bin open-ended)."""
    counts = [0] * len(boundaries)
    totals = [0] * len(boundaries)
    if len(sizes) == 0:
        return counts, totals
    # Nulls count as 0 bytes. Read from the buffers: `pc.fill_null(sizes, 0)` would convert
    # the Python 0, and pyarrow imports pandas on its first such conversion.
    values, valid = int_values(sizes)
    arr = np.where(valid, values, 0).astype(np.int64, copy=False)
    idx = np.searchsorted(np.asarray(boundaries, dtype=np.int64), arr, side="right") - 1
    idx = np.clip(idx, 0, len(boundaries) - 1)
    c = np.bincount(idx, minlength=len(boundaries))
    t = np.zeros(len(boundaries), dtype=np.int64)
    np.add.at(t, idx, arr)  # exact integer sums (float weights would round large totals)
    return [int(x) for x in c], [int(x) for x in t]


# --------------------------------------------------------------------------------------
# The anti-join against a referenced set held in buckets (issue 15)
# --------------------------------------------------------------------------------------

#: Most listed paths checked against a bucket's keys in one go (the keys' hash set is
#: built once per go).
_JOIN_ROWS = 1_048_576
#: Most listed files (with sizes and times) put in one spill page.
_PAGE_ROWS = 65_536
_SPILL_LISTING = pa.schema(
    [pa.field("path", pa.string()), pa.field("size", pa.int64()),
     pa.field("modification_time", pa.int64())]
)


def _paths_array(prefix: str, names: list[str]) -> pa.Array:
    """`prefix + name` of each of `names` (file names: never a NUL) as a string array,
    split from one encoded buffer. UnicodeEncodeError when a name is not valid UTF-8."""
    if not names:
        return string_array([])
    blob = "\0".join(names).encode("utf-8")
    offsets = np.array([0, len(blob)], dtype=np.int64)
    one = pa.Array.from_buffers(
        pa.large_string(), 1, [None, pa.py_buffer(offsets), pa.py_buffer(blob)]
    )
    out = pc.split_pattern(one, "\0").flatten().cast(pa.string())
    if prefix:
        n = len(out)
        out = pc.binary_join_element_wise(
            constant_string(prefix, n), out, constant_string("", n)
        )
    return out


def _windowed(fn, items: Sequence, width: int):
    """`map(fn, items)` on `width` threads, in order, with at most `width` results pending
    (a thread pool's `map` would hold every result at once)."""
    if width <= 1 or len(items) <= 1:
        yield from map(fn, items)
        return
    with ThreadPoolExecutor(min(width, len(items))) as pool:
        it = iter(items)
        pending = deque(pool.submit(fn, item) for item in islice(it, width))
        try:
            while pending:
                result = pending.popleft().result()
                for item in islice(it, 1):
                    pending.append(pool.submit(fn, item))
                yield result
        finally:
            for f in pending:
                f.cancel()


class _Pages:
    """The listing of `directories` (as `LocalEngine.list_files`, links neither listed nor
    followed) as spill pages: with sizes and times where listings carry them, else names
    only (sizes and times null, read later for the few files that need them); names that
    are not valid UTF-8 are set aside as (directory, name)."""

    def __init__(
        self,
        storage: Storage,
        directories: Sequence[str],
        threads: int,
        keep: KeyBuckets | None = None,
        policy: RequestPolicy | None = None,
    ) -> None:
        self.storage = storage
        self.directories = list(directories)
        self.threads = threads
        self.keep = keep
        self.policy = policy
        self.undecodable: list[tuple[str, str]] = []

    def __iter__(self):
        storage = self.storage
        if lists_in_ranges(storage):
            # An object store: every key range of every directory side by side.
            infos = storage.list_many(
                range_specs(self.directories, self.keep), follow_symlinks=False,
                policy=self.policy,  # the caller reports each page it is handed
            )
            for start in range(0, len(infos), _PAGE_ROWS):
                yield _listing_table(infos[start : start + _PAGE_ROWS])
            return
        if listing_has_stats(storage):

            def one(directory: str) -> list[FileInfo]:
                if directory == "":
                    return storage.list_dir("", follow_symlinks=False)
                return list(storage.walk(directory, follow_symlinks=False))

            for infos in _windowed(one, self.directories, self.threads):
                for start in range(0, len(infos), _PAGE_ROWS):
                    yield _listing_table(infos[start : start + _PAGE_ROWS])
            return
        for directory in self.directories:
            pages = walk_names(
                storage, directory, recursive=directory != "", follow_symlinks=False
            )
            for rel_dir, names in pages:
                prefix = f"{rel_dir}/" if rel_dir else ""
                try:
                    paths = _paths_array(prefix, names)
                except UnicodeEncodeError:
                    good = []
                    for n in names:  # the directory's own name may be the culprit
                        try:
                            (prefix + n).encode("utf-8")
                        except UnicodeEncodeError:
                            self.undecodable.append((rel_dir, n))
                        else:
                            good.append(n)
                    paths = _paths_array(prefix, good) if good else string_array([])
                n = len(paths)
                yield pa.Table.from_arrays(
                    [paths, pa.nulls(n, pa.int64()), pa.nulls(n, pa.int64())],
                    schema=_SPILL_LISTING,
                )


def _unreferenced(spill: BucketSpill, keep: KeyBuckets) -> list[pa.Table]:
    """The spilled listing minus the referenced keys, bucket by bucket."""
    out: list[pa.Table] = []

    def join(batches: list[pa.RecordBatch], keys: pa.Array) -> None:
        chunk = pa.Table.from_batches(batches, schema=_SPILL_LISTING).combine_chunks()
        if len(keys):
            chunk = chunk.filter(pc.invert(pc.is_in(chunk.column("path"), value_set=keys)))
        if chunk.num_rows:
            out.append(chunk)

    for b in range(spill.buckets):
        if not spill.rows[b]:
            continue
        keys = keep.bucket(b)
        batches: list[pa.RecordBatch] = []
        rows = 0
        for batch in spill.batches(b):
            batches.append(batch)
            rows += batch.num_rows
            if rows >= _JOIN_ROWS:
                join(batches, keys)
                batches, rows = [], 0
        if batches:
            join(batches, keys)
        del keys
    return out


def find_unreferenced_in_buckets(
    storage: Storage,
    directories: Sequence[str],
    keep: KeyBuckets,
    older_than_ms: int,
    *,
    threads: int = 1,
    policy: RequestPolicy | None = None,
    progress: Progress | None = None,
) -> pa.Table:
    """`Engine.find_unreferenced` against a referenced set in buckets, in bounded memory.

    The listing is walked once and spilled by the bucket of each path (a listed path is
    its own listing key, bucketed by the function the keys were: `engine.spill`); then,
    bucket by bucket, the bucket's keys are one hash set and its listed paths pass by it.
    Only the unreferenced files are then stat'ed (where listings carry no sizes and times:
    a kept file costs its name only, as in the in-memory anti-join). Memory: one bucket's
    keys, one page of the listing, and the unreferenced files.
    """
    pages = _Pages(storage, directories, threads, keep, policy)
    with BucketSpill(_SPILL_LISTING, "path", keep.buckets, name="vacuum-listing") as spill:
        for page in pages:
            spill.append(page)
            if progress is not None:
                sizes = page.column("size")
                total = pc.sum(sizes).as_py() if sizes.null_count < len(sizes) else 0
                progress.advance(LIST, pages=1, files=page.num_rows, bytes=int(total or 0))
        found = _unreferenced(spill, keep)
    infos: list[FileInfo] = []
    by_dir: dict[str, list[str]] = {}
    for table in found:
        sizes = table.column("size")
        if sizes.null_count == 0:
            infos += [
                FileInfo(p, s, m) for p, s, m in zip(
                    table.column("path").to_pylist(), sizes.to_pylist(),
                    table.column("modification_time").to_pylist(), strict=True,
                )
            ]
            continue
        for path in table.column("path").to_pylist():
            head, _, name = path.rpartition("/")
            by_dir.setdefault(head, []).append(name)
    for rel_dir, name in pages.undecodable:
        by_dir.setdefault(rel_dir, []).append(name)
    for rel_dir, names in by_dir.items():
        infos += stat_files(storage, rel_dir, names, follow_symlinks=False)
    listed = [_readable(i) for i in infos]
    return _listing_table(_old_or_nested_log(listed, older_than_ms)).sort_by("path")


__all__ = ["LocalEngine", "find_unreferenced_in_buckets", "histogram"]
