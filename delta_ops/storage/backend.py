"""The contract every storage backend implements, on backend-native paths.

`Storage` (in `contract`) validates the relative paths callers pass, maps them to the
backend's native absolute paths ("/abs/dir/x" locally, "bucket/key" on S3, "/name/x" in
memory) and translates the backend's errors; a backend (`local`, `memory`, `s3`,
`generic`) only carries out the calls below on those native paths.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Container, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from delta_ops.storage.parallel import (
    DeleteReport,
    Progress,
    RequestPolicy,
    Window,
    ranges_of,
)
from delta_ops.storage.sorted_paths import in_range

#: Most names in one page of a names-only listing (`walk_names`, `list_name_pages`) where
#: the backend pages them (the local file system).
NAMES_PAGE = 65_536


@dataclass(frozen=True, slots=True)
class FileInfo:
    """A file found in storage.

    Attributes:
        path: Path relative to the storage root, '/'-separated, without a leading '/'.
        size: Size in bytes.
        modification_time: Last modification time in milliseconds since the epoch.
    """

    path: str
    size: int
    modification_time: int


#: Files a listing leaves out of its result: (head, names). An entry listed as `rel` in its
#: directory is left out when `head + rel` is in `names` (`head`: the directory relative to
#: the storage root, with its '/', so that `names` holds root-relative paths).
Skip = tuple[str, Container[str]]


def without(
    entries: list[tuple[str, int, int]], skip: Skip | None
) -> list[tuple[str, int, int]]:
    """`entries` (rel, size, mtime) but those `skip` names."""
    if skip is None:
        return entries
    head, names = skip
    names = in_range(names, head, None, None, True)  # a `SortedPaths`: one set of its paths
    return [e for e in entries if head + e[0] not in names]


def content_bytes(data: bytes | os.PathLike) -> bytes:
    """`data` itself, or the content of the local file it names (for backends that send a
    file in one request)."""
    if isinstance(data, os.PathLike):
        with open(data, "rb") as f:
            return f.read()
    return data


class _Backend(ABC):
    """Operations of one storage backend, on backend-native paths."""

    #: Whether `put_if_absent`/`put_atomic` take a local file (`os.PathLike`) as `data`
    #: themselves; for the others `Storage` reads the file into memory first.
    streams_files: bool = False

    #: Exception types that mean "the storage operation failed" for this backend.
    errors: tuple[type[BaseException], ...] = (OSError,)
    #: Whether `put_if_absent` is atomic (exclusive and all-or-nothing).
    atomic_put_if_absent: bool = False
    #: Whether listings carry sizes and modification times at no extra cost (object store
    #: listings do); when False, each costs a call per file and `Storage` lists names first
    #: (`list_names`, `walk_names`) when a caller excludes files, then stats the rest.
    listing_has_stats: bool = True
    #: Whether a call waits on a network round trip, so that many small calls (listings,
    #: small reads) go faster from several threads; see `Storage.latency_bound`.
    latency_bound: bool = True

    def without_links(self) -> _Backend:
        """This backend listing without following symbolic links (object stores have
        none: the backend itself)."""
        return self

    def link_hazards(self, native_base: str, rels: list[str]) -> list[tuple[str, str]]:
        """(path, reason) of each of `rels` (below `native_base`) that is not a regular
        file reached without a symbolic link; missing files are no hazard."""
        return []

    def real_paths(self, natives: list[str]) -> list[str | None]:
        """The real path of the file each native path reaches (every symbolic link and
        dot segment resolved), None when it reaches nothing; on a store without links,
        every answer is None (a path has no spelling but its own there)."""
        return [None] * len(natives)

    def file_ids(self, natives: list[str]) -> list[tuple[int, int] | None]:
        """(device, inode) of the file each native path reaches (links followed), None
        when it reaches no regular file; on a store without links, every answer is None."""
        return [None] * len(natives)

    def file_links(self, native_dir: str) -> list[str]:
        """Paths, relative to `native_dir`, of the symbolic links at any depth below it
        that do not lead to a directory (links to directories are not entered); a store
        without links has none."""
        return []

    @abstractmethod
    def list_dir(self, native_dir: str, start: str | None) -> list[tuple[str, int, int]]:
        """(name, size, mtime_ms) of the files directly inside `native_dir`."""

    @abstractmethod
    def walk(self, native_dir: str) -> Iterator[tuple[str, int, int]]:
        """(path relative to `native_dir`, size, mtime_ms) of every file below it."""

    @abstractmethod
    def list_subdirs(self, native_dir: str) -> list[str]:
        """Names of the immediate subdirectories of `native_dir`."""

    def list_names(self, native_dir: str, start: str | None) -> list[str]:
        """Names of the files `list_dir` lists, without their sizes and times."""
        return [name for name, _size, _mtime in self.list_dir(native_dir, start)]

    def list_name_pages(self, native_dir: str) -> Iterator[list[str]]:
        """`list_names(native_dir, None)` in pages (here one)."""
        yield self.list_names(native_dir, None)

    def walk_names(self, native_dir: str) -> Iterator[tuple[str, list[str]]]:
        """The files `walk` yields, without their sizes and times, by directory: (directory
        relative to `native_dir`, '' for itself; names of its files). A directory may come
        in several pages."""
        by_dir: dict[str, list[str]] = {}
        for sub, _size, _mtime in self.walk(native_dir):
            head, _, name = sub.rpartition("/")
            by_dir.setdefault(head, []).append(name)
        yield from by_dir.items()

    def stat_files(self, native_dir: str, names: list[str]) -> list[tuple[str, int, int]]:
        """(name, size, mtime_ms) of each of `names` that is a file directly inside
        `native_dir`; the others (deleted since they were listed, say) are left out."""
        base = native_dir.rstrip("/")
        out = []
        for name in names:
            found = self.info(f"{base}/{name}")
            if found is not None:
                out.append((name, found[0], found[1]))
        return out

    @abstractmethod
    def read(self, native: str) -> bytes:
        """Whole content of a file; FileNotFoundError when absent."""

    @abstractmethod
    def info(self, native: str) -> tuple[int, int] | None:
        """(size, mtime_ms) of a file, None when there is no file there."""

    @abstractmethod
    def open_input(self, native: str) -> BinaryIO:
        """A seekable binary reader; FileNotFoundError when absent."""

    @abstractmethod
    def put_if_absent(self, native: str, data: bytes, accept_non_atomic: bool) -> bool:
        """Create the file with `data` unless it exists; True when written."""

    @abstractmethod
    def put_atomic(self, native: str, data: bytes) -> None:
        """Create or replace the file so that readers never see a partial content."""

    @abstractmethod
    def delete(self, native: str) -> bool:
        """Delete a file; False when it was already absent."""

    def delete_many(self, natives: list[str]) -> int:
        """Delete files; the number that existed and were deleted."""
        return sum(1 for native in natives if self.delete(native))

    def list_ranges(
        self,
        specs: list[tuple[str, list[str], bool]],
        policy: RequestPolicy,
        progress: Progress | None,
        exclude: Sequence[Skip | None] | None = None,
        windows: Sequence[Window] | None = None,
    ) -> list[list[tuple[str, int, int]]]:
        """For each (native directory, bounds, recursive) of `specs`: (path relative to the
        directory, size, mtime_ms) of every file below it (recursive) or directly in it,
        listed in the key ranges the bounds cut (`parallel.ranges_of`), in no particular
        order. `exclude`, one per spec: the files it names (`Skip`) are listed and counted
        in `progress`, but not returned (nor held while the others are listed). `windows`,
        one per spec: only the names in that window ``(after, stop]`` (the bounds inside
        it).

        This default lists each directory once (the local file system and memory answer a
        listing without a round trip; the ranges partition the names, so every entry lies
        in exactly one); object stores list all the ranges side by side."""
        out = []
        for i, (native_dir, bounds, recursive) in enumerate(specs):
            after, stop = windows[i] if windows else (None, None)
            ranges_of(bounds, (after, stop))  # the bounds are checked as everywhere
            entries = (
                list(self.walk(native_dir)) if recursive else self.list_dir(native_dir, None)
            )
            if after is not None or stop is not None:
                entries = [e for e in entries if (after is None or e[0] > after)
                           and (stop is None or e[0] <= stop)]
            if progress is not None:
                progress(1, len(entries), sum(e[1] for e in entries))
            out.append(without(entries, exclude[i] if exclude else None))
        return out

    def list_subdir_ranges(
        self, native_dir: str, bounds: list[str], policy: RequestPolicy,
        remember: bool = False, exclude: Skip | None = None,
    ) -> list[str]:
        """`list_subdirs`, listed in the key ranges `bounds` cut (object stores, where a
        directory's files come in the same pages as its subdirectories; `remember`: an
        object store keeps those files, but those `exclude` names, for the next
        `list_ranges` of the directory that leaves out the same, once and briefly, so that
        it is not listed twice)."""
        ranges_of(bounds)
        return self.list_subdirs(native_dir)

    def delete_batches(
        self, natives: list[str], policy: RequestPolicy, progress: Progress | None
    ) -> DeleteReport:
        """Delete files, continuing past failures; what was deleted and what failed.

        This default deletes one file at a time and counts the files that existed."""
        deleted = 0
        failed: list[tuple[str, str]] = []
        for native in natives:
            try:
                if self.delete(native):
                    deleted += 1
            except self.errors as exc:
                failed.append((native, str(exc) or type(exc).__name__))
        if progress is not None:
            progress(len(natives), deleted, 0)
        return DeleteReport(deleted, tuple(sorted(failed)), len(natives))

    def remove_empty_dirs(
        self, native_dir: str, keep: Callable[[str], bool] | None = None
    ) -> list[str]:
        """Remove empty directories strictly below `native_dir`, but none whose name `keep`
        accepts nor any below one; their relative paths, deepest first."""
        return []


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))


def _debug(logger: str, msg: str, *args: object) -> None:
    """Log `msg` at debug level to `logger`; `logging` is imported with the first message
    (a command that logs nothing does not load it)."""
    import logging

    logging.getLogger(logger).debug(msg, *args)
