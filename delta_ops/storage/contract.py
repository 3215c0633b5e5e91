"""The storage contract: `Storage`, the one way delta_ops lists, reads, writes and deletes.

A `Storage` is rooted at a table (or any directory) and names files by paths *relative to
that root*. It validates them (`paths`), hands them to its backend (`backend`: `local`,
`memory`, `s3` or `generic`) as native paths, and turns the backend's failures into
`StorageError` naming the file. Which backend serves a URI is `uri.open_uri`'s choice.

The Delta protocol needs two guarantees from storage (see "Requirements for Writers" in
the protocol): *mutual exclusion* when creating a commit file (two writers must never both
believe they wrote version N) and *atomic visibility* (a reader never sees a partial log
file). `Storage.put_if_absent` gives both on every backend it accepts. Listings are sorted
by path, and deletion is idempotent. Listing in key ranges side by side and deleting in
batches, at an object store's request limit, come from `bulk`.

Storage options may hold credentials; they are kept as given, handed back by
`Storage.to_config` (to rebuild the storage in another process) and never shown by
``repr``/``str`` or written to logs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, BinaryIO

from delta_ops.errors import MissingFileError, StorageError
from delta_ops.storage.backend import FileInfo, _Backend, _debug, content_bytes
from delta_ops.storage.bulk import _BulkOps
from delta_ops.storage.parallel import RequestPolicy
from delta_ops.storage.paths import _PLAIN_RELATIVE, _clean_relative, _join_uri
from delta_ops.storage.uri import open_uri

if TYPE_CHECKING:
    from delta_ops.storage.table_like import TableLike


class Storage(_BulkOps):
    """Files under one root (a table root, usually), addressed by relative paths.

    Build one with `Storage.for_uri`; `Storage.child` gives a storage for a
    subdirectory. Thread-safe: instances hold no mutable state of their own.

    Attributes:
        root: Normalized URI of the root: ``file:///abs/dir``, ``s3://bucket/prefix``,
            ``memory://name`` (other fsspec URIs as given, without trailing '/').
        scheme: ``file``, ``s3``, ``memory``, or another fsspec protocol (read-only
            unless non-atomic writes are explicitly accepted).
        storage_options: The options as given (may hold secrets: never shown by repr).
    """

    __slots__ = ("root", "scheme", "storage_options", "_backend", "_base")

    root: str
    scheme: str
    storage_options: dict[str, Any]

    def __init__(
        self,
        root: str,
        scheme: str,
        storage_options: dict[str, Any],
        backend: _Backend,
        base: str,
    ) -> None:
        """Internal: use `Storage.for_uri`, `Storage.from_config` or `Storage.child`."""
        self.root = root
        self.scheme = scheme
        self.storage_options = storage_options
        self._backend = backend
        self._base = base

    # ---- construction ------------------------------------------------------------------

    @classmethod
    def of(cls, table: TableLike, storage_options: Mapping[str, Any] | None = None) -> Storage:
        """The one resolver of a `TableLike` (every operation's table): a Storage (or a wrapper
        with its interface), a DeltaTable's `.storage`, or a URI built with `storage_options`."""
        if isinstance(table, (str, os.PathLike)):  # a URI, a local path, a pathlib.Path
            return cls.for_uri(os.fspath(table), storage_options)
        inner = table if isinstance(table, Storage) else getattr(table, "storage", None)
        if inner is not None:
            return inner
        if hasattr(table, "put_atomic") and hasattr(table, "list_dir"):
            return table  # a wrapper with Storage's interface (e.g. one that instruments it)
        raise TypeError(f"expected a Storage, DeltaTable or URI, got {type(table).__name__}")

    @classmethod
    def for_uri(cls, uri: str, storage_options: Mapping[str, Any] | None = None) -> Storage:
        """A storage rooted at `uri`.

        Args:
            uri: A local path (relative paths are resolved against the current
                directory), ``file:/x``, ``file:///x``, ``file://localhost/x``,
                ``s3://bucket/prefix`` (``s3a://``/``s3n://`` are the same),
                ``memory://name`` or any other URI fsspec understands. Trailing
                slashes are ignored. No percent-decoding is applied.
            storage_options: Backend options (for S3: s3fs arguments such as ``key``,
                ``secret``, ``endpoint_url``, ``client_kwargs``; the ``AWS_*`` spellings
                of delta-rs are translated). Kept as given.

        Returns:
            The storage.

        Raises:
            StorageError: The URI is empty or malformed, or its scheme is unknown.
        """
        if not isinstance(uri, str) or not uri.strip():
            raise StorageError(f"storage URI must be a non-empty string, got {uri!r}")
        options = dict(storage_options or {})
        root, scheme, backend, base = open_uri(uri, options)
        return cls(root, scheme, options, backend, base)

    def child(self, relative_dir: str) -> Storage:
        """A storage rooted at a subdirectory of this one (same backend and options).

        Args:
            relative_dir: The subdirectory, relative to this root.

        Returns:
            The storage of the subdirectory (this storage itself for '').
        """
        rel = self._clean(relative_dir, directory=True)
        if not rel:
            return self
        return Storage(
            _join_uri(self.root, rel),
            self.scheme,
            self.storage_options,
            self._backend,
            self._native(rel),
        )

    def to_config(self) -> dict[str, Any]:
        """What `from_config` needs to rebuild this storage in another process.

        Returns:
            ``{"uri": root, "storage_options": {...}}``. It holds the storage options,
            credentials included: treat it as a secret.
        """
        return {"uri": self.root, "storage_options": dict(self.storage_options)}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Storage:
        """Rebuild a storage from `to_config` output.

        Args:
            config: A mapping with ``uri`` and optionally ``storage_options``.

        Returns:
            The storage.
        """
        try:
            uri = config["uri"]
        except (KeyError, TypeError) as exc:
            raise StorageError(f"storage config has no 'uri': keys {sorted(config)}") from exc
        return cls.for_uri(uri, config.get("storage_options") or None)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Storage.from_config, (self.to_config(),))

    def __repr__(self) -> str:
        return f"Storage({self.root!r})"

    __str__ = __repr__

    # ---- paths -------------------------------------------------------------------------

    def _clean(self, path: str, *, directory: bool) -> str:
        """Validate a relative path and return it normalized ('a//./b/' -> 'a/b')."""
        if path.__class__ is str and _PLAIN_RELATIVE.fullmatch(path):
            return path  # the common case, already clean: nothing to check further
        return _clean_relative(path, self.root, directory=directory)

    def _native(self, rel: str) -> str:
        if not rel:
            return self._base
        return f"{self._base.rstrip('/')}/{rel}"

    def absolute_uri(self, path: str) -> str:
        """Full URI of a path relative to the root.

        Args:
            path: Relative path ('' for the root itself).

        Returns:
            For example ``s3://bucket/table/_delta_log/00000000000000000000.json``.
        """
        return _join_uri(self.root, self._clean(path, directory=True))

    @property
    def supports_atomic_put_if_absent(self) -> bool:
        """Whether `put_if_absent` is atomic here (local, memory and S3 backends)."""
        return self._backend.atomic_put_if_absent

    def _fail(self, action: str, rel: str, exc: BaseException) -> StorageError:
        return StorageError(f"cannot {action}: {exc}", file=self.absolute_uri(rel))

    # ---- listing -----------------------------------------------------------------------

    @property
    def latency_bound(self) -> bool:
        """Whether many small calls (listings, reads of small files) go faster from several
        threads at once. True on object stores and the other fsspec file systems: each
        call waits on a network round trip. False on the local file system: such calls are
        short syscalls, and threads making them side by side mostly hand the GIL to each
        other, so one thread is faster."""
        return self._backend.latency_bound

    def list_dir(
        self,
        directory: str,
        start: str | None = None,
        *,
        exclude: Container[str] | None = None,
        follow_symlinks: bool = True,
    ) -> list[FileInfo]:
        """Files (not directories) directly inside a directory, sorted by path.

        Args:
            directory: Directory relative to the root ('' for the root).
            start: When given, only files whose name (not path) is >= `start` in byte
                order are returned. On S3 the listing starts at that key.
            exclude: Paths (relative to the root) to leave out. On the local file system
                only the names of excluded files are read: no ``stat`` is spent on them.
            follow_symlinks: False lists what may be deleted: no symbolic link is listed
                or followed, and a directory reached through one lists as empty.

        Returns:
            The files, sorted by path in byte order; [] when the directory is missing.

        Raises:
            StorageError: The listing failed.
        """
        rel = self._clean(directory, directory=True)
        native = self._native(rel)
        prefix = f"{rel}/" if rel else ""
        backend = self._lister(rel, follow_symlinks)
        if backend is None:
            return []
        try:
            if exclude is not None and not backend.listing_has_stats:
                names = [
                    name for name in backend.list_names(native, start)
                    if prefix + name not in exclude
                ]
                entries = backend.stat_files(native, names)
            else:
                entries = backend.list_dir(native, start)
                if exclude is not None:
                    entries = [e for e in entries if prefix + e[0] not in exclude]
        except backend.errors as exc:
            raise self._fail("list directory", rel, exc) from exc
        # Python orders str by code point, the same order as their UTF-8 bytes.
        return sorted(
            (FileInfo(prefix + name, size, mtime) for name, size, mtime in entries),
            key=lambda f: f.path,
        )

    def walk(
        self,
        directory: str = "",
        *,
        exclude: Container[str] | None = None,
        follow_symlinks: bool = True,
    ) -> Iterator[FileInfo]:
        """Every file below a directory, recursively, in no particular order.

        Args:
            directory: Directory relative to the root ('' for the whole root).
            exclude: Paths (relative to the root) to leave out. On the local file system
                only the names of excluded files are read: no ``stat`` is spent on them.
            follow_symlinks: False walks what may be deleted: symbolic links are neither
                yielded nor followed (symlinked directories are never entered; without
                it, only those below `directory` are not).

        Yields:
            The files, with paths relative to the root.

        Raises:
            StorageError: The listing failed.
        """
        rel = self._clean(directory, directory=True)
        native = self._native(rel)
        prefix = f"{rel}/" if rel else ""
        backend = self._lister(rel, follow_symlinks)
        if backend is None:
            return
        try:
            if exclude is not None and not backend.listing_has_stats:
                base = native.rstrip("/")
                for sub_dir, names in backend.walk_names(native):
                    dir_prefix = f"{prefix}{sub_dir}/" if sub_dir else prefix
                    wanted = [n for n in names if dir_prefix + n not in exclude]
                    sub_native = f"{base}/{sub_dir}" if sub_dir else native
                    for name, size, mtime in backend.stat_files(sub_native, wanted):
                        yield FileInfo(dir_prefix + name, size, mtime)
            else:
                for sub, size, mtime in backend.walk(native):
                    path = prefix + sub
                    if exclude is None or path not in exclude:
                        yield FileInfo(path, size, mtime)
        except backend.errors as exc:
            raise self._fail("walk directory", rel, exc) from exc

    def list_subdirs(
        self, directory: str = "", *, follow_symlinks: bool = True,
        bounds: Sequence[str] | None = None, policy: RequestPolicy | None = None,
        remember_files: bool = False, exclude: Container[str] | None = None,
    ) -> list[str]:
        """Immediate subdirectories of a directory.

        Args:
            directory: Directory relative to the root ('' for the root).
            follow_symlinks: False leaves out symbolic links to directories (and lists
                nothing in a directory reached through one).
            bounds: Names (no '/'), strictly ascending: an object store lists the key
                ranges they cut side by side (as `list_ranges`); the result is the same.
            policy: Concurrency and retries of that listing.
            remember_files: Object stores keep the files of these pages for the next
                `list_many` of the directory (`_S3Bulk._take_remembered`), but those in
                `exclude` (root-relative paths): that listing must leave out the same.

        Returns:
            Paths relative to the root (names when `directory` is ''), sorted; [] if none.

        Raises:
            StorageError: The listing failed.
        """
        rel = self._clean(directory, directory=True)
        backend = self._lister(rel, follow_symlinks)
        if backend is None:
            return []
        if bounds and any("/" in b for b in bounds):
            raise ValueError("subdirectory listing bounds are names, without '/'")
        prefix = f"{rel}/" if rel else ""
        try:
            if bounds or remember_files:
                names = backend.list_subdir_ranges(
                    self._native(rel), list(bounds or ()), policy or RequestPolicy(),
                    remember_files, None if exclude is None else (prefix, exclude))
            else:
                names = backend.list_subdirs(self._native(rel))
        except self._backend.errors as exc:
            raise self._fail("list subdirectories of", rel, exc) from exc
        return sorted(prefix + name for name in names)

    def _lister(self, rel: str, follow_symlinks: bool) -> _Backend | None:
        """The backend to list `rel` with; None when links are not followed and some
        directory between the root and `rel` (the root excluded) is a symbolic link."""
        if follow_symlinks:
            return self._backend
        backend = self._backend.without_links()
        if rel and backend is not self._backend:
            parts = rel.split("/")
            for i in range(1, len(parts) + 1):
                if os.path.islink(self._native("/".join(parts[:i]))):
                    return None
        return backend

    def deletion_hazards(self, paths: Iterable[str]) -> list[tuple[str, str]]:
        """Why each of `paths` may not be deleted as the file its path names, if it may not.

        Locally a path is safe when it is a regular file (not a symbolic link) and its
        directory's real path is the root's real path joined with the path's directories
        (no symbolic link on the way, nothing outside the root). Object stores have no
        links: every valid path is safe there. Missing files are no hazard.

        Args:
            paths: File paths relative to the root.

        Returns:
            (path, reason) for each unsafe path, in input order.

        Raises:
            StorageError: A path is not a valid relative path.
        """
        rels = [self._clean(p, directory=False) for p in paths]
        try:
            return self._backend.link_hazards(self._base, rels)
        except self._backend.errors as exc:
            raise StorageError(f"cannot check files before deleting them: {exc}",
                               file=self.root) from exc

    # ---- reading -----------------------------------------------------------------------

    def read(self, path: str) -> bytes:
        """The whole content of a file.

        Args:
            path: File path relative to the root.

        Returns:
            The bytes.

        Raises:
            StorageError: The file is missing (the message says so and names it) or
                cannot be read.
        """
        rel = self._clean(path, directory=False)
        try:
            return self._backend.read(self._native(rel))
        except FileNotFoundError as exc:
            raise MissingFileError("file not found", file=self.absolute_uri(rel)) from exc
        except self._backend.errors as exc:
            raise self._fail("read file", rel, exc) from exc

    def read_text(self, path: str) -> str:
        """The content of a file decoded as UTF-8.

        Args:
            path: File path relative to the root.

        Returns:
            The text.

        Raises:
            StorageError: The file is missing, unreadable or not valid UTF-8.
        """
        data = self.read(path)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StorageError(
                f"file is not valid UTF-8: {exc}", file=self.absolute_uri(path)
            ) from exc

    def info(self, path: str) -> FileInfo | None:
        """Size and modification time of a file.

        Args:
            path: File path relative to the root.

        Returns:
            The file's info, or None when no file is there (a directory is no file).

        Raises:
            StorageError: The lookup failed.
        """
        rel = self._clean(path, directory=False)
        try:
            found = self._backend.info(self._native(rel))
        except self._backend.errors as exc:
            raise self._fail("stat file", rel, exc) from exc
        if found is None:
            return None
        return FileInfo(rel, found[0], found[1])

    def exists(self, path: str) -> bool:
        """Whether a file exists at `path` (relative to the root)."""
        return self.info(path) is not None

    def open_input(self, path: str) -> BinaryIO:
        """A seekable binary reader of a file, e.g. for `pyarrow.parquet.ParquetFile`.

        Args:
            path: File path relative to the root.

        Returns:
            A binary file-like object; the caller closes it.

        Raises:
            StorageError: The file is missing or cannot be opened.
        """
        rel = self._clean(path, directory=False)
        try:
            return self._backend.open_input(self._native(rel))
        except FileNotFoundError as exc:
            raise MissingFileError("file not found", file=self.absolute_uri(rel)) from exc
        except self._backend.errors as exc:
            raise self._fail("open file", rel, exc) from exc

    # ---- writing -----------------------------------------------------------------------

    def put_if_absent(
        self, path: str, data: bytes | os.PathLike, *, accept_non_atomic: bool = False
    ) -> bool:
        """Atomically create a file unless one exists there; never overwrites.

        Local: a temp file is written next to the target and hard-linked to it (link
        fails when the target exists). Memory: an exclusive create under a lock. S3: a
        conditional PUT (``If-None-Match: *``); this relies on the store honouring the
        condition, as AWS S3 does since 2024 (an S3-compatible store that ignores it
        would overwrite).

        Args:
            path: File path relative to the root; parent directories are created.
            data: The content, or a local file (`pathlib.Path`) to copy.
            accept_non_atomic: On a backend without atomic put-if-absent, do a
                best-effort check-then-write instead of raising.

        Returns:
            True when this call created the file, False when it already existed.

        Raises:
            AtomicityUnsupportedError: The backend cannot do it atomically and
                `accept_non_atomic` is False.
            StorageError: The write failed.
        """
        rel = self._clean(path, directory=False)
        if isinstance(data, os.PathLike) and not self._backend.streams_files:
            data = content_bytes(data)
        try:
            written = self._backend.put_if_absent(self._native(rel), data, accept_non_atomic)
        except StorageError:
            raise
        except self._backend.errors as exc:
            raise self._fail("create file", rel, exc) from exc
        _debug(__name__, "put_if_absent %s: %s", self.absolute_uri(rel), written)
        return written

    def put_atomic(self, path: str, data: bytes | os.PathLike) -> None:
        """Create or replace a file so that readers see the old or the new content only.

        Args:
            path: File path relative to the root; parent directories are created.
            data: The content, or a local file (`pathlib.Path`) to copy, streamed where the
                backend can (local files, S3 uploads) so that memory does not grow with it.

        Raises:
            StorageError: The write failed.
        """
        rel = self._clean(path, directory=False)
        if isinstance(data, os.PathLike) and not self._backend.streams_files:
            data = content_bytes(data)
        try:
            self._backend.put_atomic(self._native(rel), data)
        except self._backend.errors as exc:
            raise self._fail("write file", rel, exc) from exc

    def delete(self, path: str) -> bool:
        """Delete a file; idempotent.

        Args:
            path: File path relative to the root.

        Returns:
            True when the file existed and was deleted, False when it was absent.

        Raises:
            StorageError: The deletion failed (e.g. the path is a directory).
        """
        rel = self._clean(path, directory=False)
        try:
            return self._backend.delete(self._native(rel))
        except self._backend.errors as exc:
            raise self._fail("delete file", rel, exc) from exc

    def delete_many(self, paths: Iterable[str]) -> int:
        """Delete files (S3: in DeleteObjects batches of 1000); absent ones are skipped.

        Every path is validated before anything is deleted.

        Args:
            paths: File paths relative to the root.

        Returns:
            How many files existed and were deleted.

        Raises:
            StorageError: A path is unsafe, or a deletion failed.
        """
        rels = [self._clean(p, directory=False) for p in paths]
        if not rels:
            return 0
        unique = list(dict.fromkeys(rels))
        try:
            return self._backend.delete_many([self._native(rel) for rel in unique])
        except StorageError:
            raise
        except self._backend.errors as exc:
            raise StorageError(f"cannot delete {len(unique)} files: {exc}", file=self.root) from exc

    def remove_empty_dirs(self, directory: str = "", *,
                          keep: Callable[[str], bool] | None = None) -> list[str]:
        """Remove the empty directories below a directory (never that directory itself).

        A directory containing only empty directories is empty too. Symbolic links are
        never followed: a linked directory is neither entered nor removed, and nothing
        happens when `directory` is reached through one.

        Args:
            directory: Directory relative to the root ('' for the root).
            keep: Directories whose name it accepts are neither removed nor entered.

        Returns:
            The removed directories, relative to the root, deepest first ([] on object
            stores and in memory: they have no directories).

        Raises:
            StorageError: A removal failed for another reason than non-emptiness.
        """
        rel = self._clean(directory, directory=True)
        if self._lister(rel, False) is None:
            return []  # reached through a symbolic link: never removed through it
        try:
            removed = self._backend.remove_empty_dirs(self._native(rel), keep)
        except self._backend.errors as exc:
            raise self._fail("remove empty directories below", rel, exc) from exc
        prefix = f"{rel}/" if rel else ""
        return [prefix + r for r in removed]
