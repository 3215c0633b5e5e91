"""LocalEngine: the Engine on a thread pool in this process (pyarrow + threads).

The default for the CLI and the library. Listing is split by directory (the table root's
subdirectories, typically partition directories), listed concurrently where that pays off
(object stores, where each listing call is a network round trip) and one after the other on
the local file system (see `Storage.latency_bound`). Deletes and footer reads run
concurrently: storage I/O releases the GIL, so threads scale on object stores.
"""

from __future__ import annotations

import io
import os
from collections.abc import Container, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from delta_ops.engine.base import LISTING_SCHEMA, ROW_COUNT_SCHEMA, UNREADABLE_PREFIX, Engine
from delta_ops.protocol.arrays import from_numpy, from_pylist, int_values, string_array
from delta_ops.storage import FileInfo, Storage


def _readable(info: FileInfo) -> FileInfo:
    """`info`, or for a name that is not valid UTF-8 (undecodable bytes arrive from the
    file system as lone surrogates) the UNREADABLE_PREFIX marker row."""
    try:
        info.path.encode("utf-8")
    except UnicodeEncodeError:
        escaped = info.path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        return FileInfo(UNREADABLE_PREFIX + escaped, -1, 0)
    return info


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


class LocalEngine(Engine):
    """Thread-pool engine.

    Args:
        max_workers: threads for I/O (default: 4 x CPUs, at most 32).
    """

    name = "local"

    def __init__(self, max_workers: int | None = None) -> None:
        self.max_workers = max_workers or min(32, 4 * (os.cpu_count() or 1))

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
    ) -> list[FileInfo]:
        """The files below `directories` (as `list_files`) not in `exclude`, by path."""

        def one(directory: str) -> list[FileInfo]:
            # What is listed here may be deleted: no symbolic link is listed or followed.
            if directory == "":
                return storage.list_dir("", exclude=exclude, follow_symlinks=False)
            return list(storage.walk(directory, exclude=exclude, follow_symlinks=False))

        if storage.latency_bound:
            parts = self._map(one, directories)
        else:
            parts = [one(d) for d in directories]
        return sorted((i for part in parts for i in part), key=_by_path)

    def list_files(self, storage: Storage, directories: Sequence[str]) -> pa.Table:
        return _listing_table(self._list(storage, directories))

    def find_unreferenced(
        self, storage: Storage, directories: Sequence[str], keep: pa.Array, older_than_ms: int
    ) -> pa.Table:
        # The anti-join runs during the listing: on the local file system a kept file costs
        # its name only, never a stat.
        referenced = frozenset(keep.cast(pa.string()).to_pylist())
        listed = [_readable(i) for i in self._list(storage, directories, referenced)]
        return _listing_table([i for i in listed if i.modification_time < older_than_ms])

    def delete_files(self, storage: Storage, paths: Sequence[str]) -> int:
        return sum(self._map(storage.delete, paths))

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


__all__ = ["LocalEngine", "histogram"]
