"""Listing and deleting many files at an object store's request limit: the part of the
`Storage` contract that works on thousands of keys at once (a mixin of `Storage`).

`list_ranges`/`list_many` list directories as key ranges side by side (`parallel`), and
`delete_files` deletes in batches; each backend carries them out (`_Backend.list_ranges`,
`_Backend.delete_batches`): S3 with concurrent ``ListObjectsV2`` chains and
``DeleteObjects`` of 1,000 keys under one concurrency limit, the local file system and
memory simply (one listing; one file at a time). No section of the Delta protocol is
implemented here (storage only).
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from typing import TYPE_CHECKING

from delta_ops.storage.backend import FileInfo, _Backend
from delta_ops.storage.parallel import (
    DeleteReport,
    Progress,
    RequestPolicy,
    Window,
    ranges_of,
)

#: What `list_many` lists: (directory, bounds, recursive), optionally with a window.
ListSpec = (
    tuple[str, Sequence[str], bool] | tuple[str, Sequence[str], bool, Window]
)

if TYPE_CHECKING:
    from delta_ops.errors import StorageError


class _BulkOps:
    """`Storage`'s listing in key ranges and batched delete (see the module)."""

    __slots__ = ()

    if TYPE_CHECKING:
        _backend: _Backend

        def _clean(self, path: str, *, directory: bool) -> str: ...
        def _native(self, rel: str) -> str: ...
        def _lister(self, rel: str, follow_symlinks: bool) -> _Backend | None: ...
        def _fail(self, action: str, rel: str, exc: BaseException) -> StorageError: ...

    def list_ranges(
        self,
        directory: str,
        bounds: Sequence[str] = (),
        *,
        recursive: bool = False,
        follow_symlinks: bool = True,
        policy: RequestPolicy | None = None,
        progress: Progress | None = None,
    ) -> list[FileInfo]:
        """The files of a directory, listed as key ranges side by side.

        `bounds` (paths relative to `directory`, strictly ascending) cut the listing into
        the ranges ``(-, b1], (b1, b2], ..., (bk, -)`` (`parallel.ranges_of`); on an object
        store each range is a chain of ``ListObjectsV2`` pages starting after its lower
        bound (cut again after its first page when it goes on:
        `parallel.extrapolated_bounds`), and the ranges run concurrently (at most
        `policy.concurrency` requests in flight, fewer after a SlowDown answer, failed
        requests retried with backoff).
        The result is the same as `list_dir` (or `walk`, when `recursive`) whatever the
        bounds: the ranges are disjoint and cover every key. The local file system and
        memory list once.

        Args:
            directory: Directory relative to the root ('' for the root).
            bounds: Where to cut the listing; `parallel.range_bounds` picks them from
                names known in sorted order.
            recursive: Every file below `directory`, not only those directly in it.
            follow_symlinks: False lists what may be deleted (as `walk`).
            policy: Concurrency and retries (default `RequestPolicy()`).
            progress: Called with (pages, files, bytes) increments as pages arrive.

        Returns:
            The files, paths relative to the root, sorted by path.

        Raises:
            StorageError: A listing request failed after its retries.
            ValueError: The bounds are not strictly ascending.
        """
        return self.list_many(
            [(directory, bounds, recursive)], follow_symlinks=follow_symlinks,
            policy=policy, progress=progress,
        )

    def list_many(
        self,
        specs: Sequence[ListSpec],
        *,
        follow_symlinks: bool = True,
        policy: RequestPolicy | None = None,
        progress: Progress | None = None,
        exclude: Container[str] | None = None,
    ) -> list[FileInfo]:
        """`list_ranges` of several directories at once, under one concurrency limit.

        Args:
            specs: (directory, bounds, recursive) of each directory to list, or
                (directory, bounds, recursive, window): only the names of the directory
                in the window ``(after, stop]`` (None: open end), which holds the bounds
                (`parallel.windows_of` cuts a directory's ranges into windows, for
                listings shared between workers).
            follow_symlinks: See `list_ranges`.
            policy: See `list_ranges`.
            progress: See `list_ranges`.
            exclude: Paths relative to the root left out of the result, as the pages
                arrive (VACUUM's referenced files: the listing then holds only the
                others). They are still listed and counted in `progress`.

        Returns:
            The files of every directory, paths relative to the root, sorted by path
            (but those in `exclude`).

        Raises:
            StorageError: A listing request failed after its retries.
            ValueError: Some bounds are not strictly ascending, or outside their window.
        """
        by_backend: dict[
            int, tuple[_Backend, list[tuple[str, str, list[str], bool, Window]]]
        ] = {}
        for directory, bounds, recursive, *given in specs:
            window: Window = given[0] if given else (None, None)
            ranges_of(bounds, window)  # ValueError before anything is listed
            rel = self._clean(directory, directory=True)
            backend = self._lister(rel, follow_symlinks)
            if backend is None:
                continue  # reached through a symbolic link: lists as empty
            by_backend.setdefault(id(backend), (backend, []))[1].append(
                (rel, self._native(rel), list(bounds), recursive, window)
            )
        out: list[FileInfo] = []
        for backend, group in by_backend.values():
            skips = None if exclude is None else [
                (f"{spec[0]}/" if spec[0] else "", exclude) for spec in group
            ]
            try:
                found = backend.list_ranges(
                    [(native, bounds, rec) for _rel, native, bounds, rec, _w in group],
                    policy or RequestPolicy(), progress, exclude=skips,
                    windows=[spec[4] for spec in group],
                )
            except backend.errors as exc:
                raise self._fail("list directory", group[0][0], exc) from exc
            for (rel, *_spec), entries in zip(group, found, strict=True):
                prefix = f"{rel}/" if rel else ""
                out += [FileInfo(prefix + name, size, mtime) for name, size, mtime in entries]
        out.sort(key=lambda f: f.path)
        return out

    def delete_files(
        self,
        paths: Iterable[str],
        *,
        policy: RequestPolicy | None = None,
        progress: Progress | None = None,
    ) -> DeleteReport:
        """Delete files at the store's request limit, continuing past failures.

        On S3: ``DeleteObjects`` batches of 1,000 keys sent concurrently (at most
        `policy.concurrency` in flight, halved after a SlowDown answer), a request or a key
        that fails transiently retried with exponential backoff and jitter, and no request
        spent on checking that a key exists first: the caller's listing proved that (S3
        confirms an absent key as deleted too). Elsewhere: one file at a time. Every path
        is validated before anything is deleted. A run killed midway has deleted a subset;
        calling again with the same paths finishes the job.

        Args:
            paths: File paths relative to the root.
            policy: Concurrency and retries (default `RequestPolicy()`).
            progress: Called with (requests, files, 0) increments as batches complete.

        Returns:
            The count the store confirmed, and each path still not deleted with why.

        Raises:
            StorageError: A path is not a valid relative path (nothing deleted).
        """
        rels = list(dict.fromkeys(self._clean(p, directory=False) for p in paths))
        if not rels:
            return DeleteReport(0)
        natives = {self._native(rel): rel for rel in rels}
        report = self._backend.delete_batches(
            list(natives), policy or RequestPolicy(), progress
        )
        failed = tuple(sorted((natives.get(n, n), why) for n, why in report.failed))
        return DeleteReport(report.deleted, failed, report.requests)
