"""Which file a path reaches, by the file system's own lights: VACUUM's aliases.

Spec section: "Add File and Remove File" (a path in the log is relative to the table root
or absolute). A path's text is not its identity on a local file system: a symbolic link,
`..` after one, a bind mount or the root given through a link make several spellings
reach one file. These functions ask the backend (`_Backend.real_paths`, `file_ids`), so
that nothing outside `storage/` touches files. Object stores have no links: every answer
is None there (their scheme spellings are `protocol.path_identity`'s).

Paths are local absolute paths, or paths relative to the storage's root joined to it as
they are (never validated or normalized: they are only resolved, never opened for
writing).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from delta_ops.errors import StorageError
from delta_ops.storage.contract import Storage

__all__ = ["file_ids", "file_links", "real_keys"]


def _ask(storage: Storage, method: str, paths: Iterable[str]) -> list[Any]:
    backend = storage._backend
    base = storage._base.rstrip("/")
    natives = [p if p.startswith("/") else f"{base}/{p}" for p in paths]
    try:
        return getattr(backend, method)(natives)
    except backend.errors as exc:
        raise StorageError(
            f"cannot tell which file a path reaches: {exc}", file=storage.root
        ) from exc


def real_keys(storage: Storage, paths: Iterable[str]) -> list[str | None]:
    """The listing key, relative to the root's own real path, of the file each path reaches
    once every symbolic link and dot segment on it is resolved (the last component's
    too); None when it reaches nothing, or nothing inside the root.

    Raises:
        StorageError: An identity cannot be established (no permission to look, a loop
            of links).
    """
    reals = _ask(storage, "real_paths", paths)
    if all(r is None for r in reals):
        return reals  # nothing reached (or a store without links)
    top = _ask(storage, "real_paths", ["."])[0]  # the root's own real path
    if top is None:
        return [None] * len(reals)
    prefix = f"{top.rstrip('/')}/"
    return [r[len(prefix):] if r and r.startswith(prefix) else None for r in reals]


def file_ids(storage: Storage, paths: Iterable[str]) -> list[tuple[int, int] | None]:
    """(device, inode) of the regular file each path reaches, links followed: the file
    system's own identity of a file, whatever the spelling (bind mounts too); None when
    it reaches no regular file.

    Raises:
        StorageError: An identity cannot be established (no permission, a loop of links).
    """
    return _ask(storage, "file_ids", paths)


def file_links(storage: Storage) -> list[str]:
    """Paths, relative to the root, of every symbolic link below it that does not lead to
    a directory (a link to a file, or to nothing): what a reader opening one reads is
    another file, which its path does not name. [] on a store without links.

    Raises:
        StorageError: A directory below the root cannot be read.
    """
    backend = storage._backend
    try:
        return backend.file_links(storage._base.rstrip("/") or "/")
    except backend.errors as exc:
        raise StorageError(
            f"cannot look for symbolic links below the root: {exc}", file=storage.root
        ) from exc
