"""Listing in two steps, names first: for callers that decide from a file's path whether
they need its size and time at all (VACUUM's anti-join against a referenced set too large
to hold, issue 15).

`Storage.walk` and `Storage.list_dir` with `exclude` do the same in one step when the set
to leave out fits in memory. On the local file system a name costs no syscall (the
directory entry's type) while a size or time costs a ``stat``; object store listings carry
both at no extra cost (`listing_has_stats`), so there a caller lists with `Storage.walk`.
Links are handled as by `Storage.walk`: with follow_symlinks=False none is listed, followed
or stat'ed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from delta_ops.storage.contract import FileInfo, Storage

__all__ = ["listing_has_stats", "stat_files", "walk_names"]


def listing_has_stats(storage: Storage) -> bool:
    """Whether `storage`'s listings carry sizes and modification times at no extra cost
    (object stores); False on the local file system, where each costs a ``stat``."""
    return storage._backend.listing_has_stats


def walk_names(
    storage: Storage, directory: str = "", *, recursive: bool = True,
    follow_symlinks: bool = True,
) -> Iterator[tuple[str, list[str]]]:
    """The names of the files below a directory, without sizes or times, in pages:
    (directory relative to the root, names of files directly in it). A large directory
    comes in several pages (on the local file system at most `backend.NAMES_PAGE` names
    each), so memory follows a page, not the directory.

    Args:
        storage: The storage.
        directory: Directory relative to the root ('' for the root).
        recursive: False lists only `directory` itself (as `Storage.list_dir`).
        follow_symlinks: False walks what may be deleted (as `Storage.walk`).

    Raises:
        StorageError: The listing failed.
    """
    rel = storage._clean(directory, directory=True)
    native = storage._native(rel)
    prefix = f"{rel}/" if rel else ""
    backend = storage._lister(rel, follow_symlinks)
    if backend is None:
        return
    try:
        if recursive:
            for sub_dir, names in backend.walk_names(native):
                if names:
                    yield (f"{prefix}{sub_dir}" if sub_dir else rel), names
        else:
            for names in backend.list_name_pages(native):
                if names:
                    yield rel, names
    except backend.errors as exc:
        raise storage._fail("walk directory", rel, exc) from exc


def stat_files(
    storage: Storage, directory: str, names: Iterable[str], *, follow_symlinks: bool = True
) -> list[FileInfo]:
    """Sizes and times of the files `names` directly inside `directory` that are still
    regular files there (the others, deleted since they were listed, are left out), in
    input order. follow_symlinks=False (for names `walk_names` listed without following
    links) leaves out symbolic links and everything reached through one.

    Raises:
        StorageError: Reading them failed.
    """
    rel = storage._clean(directory, directory=True)
    prefix = f"{rel}/" if rel else ""
    backend = storage._lister(rel, follow_symlinks)
    if backend is None:
        return []
    try:
        found = backend.stat_files(storage._native(rel), list(names))
    except backend.errors as exc:
        raise storage._fail("read file sizes in", rel, exc) from exc
    return [FileInfo(prefix + name, size, mtime) for name, size, mtime in found]
