"""The one place where delta_ops touches files: listing, reading, writing and deleting.

Every other module goes through a `Storage` rooted at a table (or any directory) and names
files by paths *relative to that root*. This module turns those into backend calls:

* ``file``: the local file system, through `os` directly (fast `os.scandir` listings,
  hard-link based atomic put-if-absent, `os.replace` for atomic overwrite).
* ``s3`` (``s3a://``/``s3n://`` are accepted as aliases): through s3fs, calling S3 itself
  where the semantics matter: ``ListObjectsV2`` with ``StartAfter`` for log listings and a
  conditional ``PutObject`` (``If-None-Match: *``) for put-if-absent.
* ``memory``: fsspec's process-global in-memory file system, mutated under a lock so that
  put-if-absent is exclusive between threads.
* any other protocol fsspec knows: reads work; writes that need atomicity are refused
  unless the caller explicitly accepts a best-effort (non-atomic) write.

The Delta protocol needs two guarantees from storage (see "Requirements for Writers" in
the protocol): *mutual exclusion* when creating a commit file (two writers must never both
believe they wrote version N) and *atomic visibility* (a reader never sees a partial log
file). `Storage.put_if_absent` gives both on every backend it accepts.

Paths are validated: no ``..`` segment, no absolute path, no URI with an authority
(``s3://``, ``file:///``), no drive path on Windows, no backslash; other names with a colon
(``time=1971-07-22T03:06:40Z``, ``C:d.parquet``) are plain names. Nothing a caller passes
can reach outside the root. Storage options may hold credentials; they are
kept as given, handed back by `Storage.to_config` (to rebuild the storage in another
process) and never shown by ``repr``/``str`` or written to logs.
"""

from __future__ import annotations

import errno
import io
import logging
import os
import re
import stat
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Container, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, BinaryIO
from urllib.parse import unquote

import pyarrow as pa

from delta_ops.errors import AtomicityUnsupportedError, StorageError

__all__ = ["FileInfo", "Storage"]

logger = logging.getLogger(__name__)

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
# A relative path that needs no normalizing and cannot escape: non-empty segments that do
# not start with '.', and no '%', ':', backslash or NUL anywhere.
_PLAIN_RELATIVE = re.compile(r"[^/\\\x00%:.][^/\\\x00%:]*(?:/[^/\\\x00%:.][^/\\\x00%:]*)*")
_S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})
# fsspec schemes whose file system loads a native library (and prints its failures).
_NATIVE_LIBRARY_SCHEMES = frozenset({"hdfs", "viewfs", "arrow_hdfs"})
# Errno values meaning "this file system cannot make hard links".
_NO_LINK_ERRNOS = frozenset(
    {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EXDEV, errno.EMLINK}
)
# fsspec's memory file system is one store per process: one lock serializes its writers.
_MEMORY_LOCK = threading.Lock()


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


# --------------------------------------------------------------------------------------
# Backends. They work on backend-native absolute paths ("/abs/dir/x" locally,
# "bucket/key" on S3, "/name/x" in memory); `Storage` validates relative paths and
# translates errors.
# --------------------------------------------------------------------------------------


class _Backend(ABC):
    """Operations of one storage backend, on backend-native paths."""

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

    def walk_names(self, native_dir: str) -> Iterator[tuple[str, list[str]]]:
        """The files `walk` yields, without their sizes and times, by directory: (directory
        relative to `native_dir`, '' for itself; names of its files)."""
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

    def remove_empty_dirs(self, native_dir: str) -> list[str]:
        """Remove empty directories strictly below `native_dir`; their relative paths."""
        return []


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))


class _LocalBackend(_Backend):
    """The local file system, through `os`."""

    errors = (OSError,)
    atomic_put_if_absent = True
    # A name costs no syscall (scandir's d_type); a size or time costs a stat. Calls are
    # short syscalls, each releasing the GIL: threads making many of them side by side
    # mostly hand the GIL to each other, and one thread is faster.
    listing_has_stats = False
    latency_bound = False

    def __init__(self, *, follow_symlinks: bool = True) -> None:
        self.follow = follow_symlinks

    def without_links(self) -> _Backend:
        return self if not self.follow else _NO_LINKS

    def _linked_top(self, native_dir: str) -> bool:
        """Whether a listing that does not follow links must not enter `native_dir`."""
        return not self.follow and os.path.islink(native_dir.rstrip("/") or "/")

    def link_hazards(self, native_base: str, rels: list[str]) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        base = native_base.rstrip("/")
        real_base = os.path.realpath(base)
        parents: dict[str, str | None] = {}
        for rel in rels:
            head, _, _name = rel.rpartition("/")
            if head not in parents:
                expected = f"{real_base}/{head}" if head else real_base
                real = os.path.realpath(f"{base}/{head}" if head else base)
                parents[head] = (
                    None if real == expected
                    else f"its directory resolves to {real!r}, not below the table root "
                    "without a symbolic link"
                )
            problem = parents[head]
            if problem is None:
                try:
                    st = os.lstat(f"{base}/{rel}")
                except (FileNotFoundError, NotADirectoryError):
                    continue
                if stat.S_ISLNK(st.st_mode):
                    problem = "it is a symbolic link"
                elif not _is_regular(st.st_mode):
                    problem = "it is not a regular file"
            if problem is not None:
                out.append((rel, problem))
        return out

    def list_dir(self, native_dir: str, start: str | None) -> list[tuple[str, int, int]]:
        out: list[tuple[str, int, int]] = []
        if self._linked_top(native_dir):
            return out
        follow = self.follow
        try:
            with os.scandir(native_dir) as entries:
                for entry in entries:
                    if start is not None and entry.name < start:
                        continue
                    try:
                        if not entry.is_file(follow_symlinks=follow):
                            continue
                        st = entry.stat(follow_symlinks=follow)
                    except FileNotFoundError:  # deleted while we listed
                        continue
                    out.append((entry.name, st.st_size, st.st_mtime_ns // 1_000_000))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return out

    def walk(self, native_dir: str) -> Iterator[tuple[str, int, int]]:
        if not os.path.isdir(native_dir) or self._linked_top(native_dir):
            return
        prefix_len = len(native_dir.rstrip("/")) + 1
        for dirpath, _dirnames, filenames in os.walk(native_dir, onerror=_raise_unless_missing):
            rel_dir = dirpath[prefix_len:]
            for name in filenames:
                try:
                    st = os.stat(os.path.join(dirpath, name), follow_symlinks=self.follow)
                except FileNotFoundError:
                    continue
                if not _is_regular(st.st_mode):
                    continue
                rel = f"{rel_dir}/{name}" if rel_dir else name
                yield rel, st.st_size, st.st_mtime_ns // 1_000_000

    def list_names(self, native_dir: str, start: str | None) -> list[str]:
        # is_file() follows symlinks like the stat of `list_dir`; it reads the entry's
        # d_type, with no syscall, except for symlinks (and file systems without d_type).
        if self._linked_top(native_dir):
            return []
        follow = self.follow
        try:
            with os.scandir(native_dir) as entries:
                return [
                    e.name for e in entries
                    if (start is None or e.name >= start) and e.is_file(follow_symlinks=follow)
                ]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def walk_names(self, native_dir: str) -> Iterator[tuple[str, list[str]]]:
        # The same tree as `walk` (os.walk without following symlinked directories), but
        # a file is told apart by its d_type instead of a stat: `is_file()` follows
        # symlinks, and is False for what `walk` skips as not regular (FIFOs, sockets,
        # broken links). `stat_files` checks again, since anything may change meanwhile.
        if not os.path.isdir(native_dir) or self._linked_top(native_dir):
            return
        follow = self.follow
        pending = [""]
        base = native_dir.rstrip("/")
        while pending:
            rel_dir = pending.pop()
            try:
                entries = os.scandir(f"{base}/{rel_dir}" if rel_dir else native_dir)
            except OSError as exc:
                _raise_unless_missing(exc)
                continue
            names: list[str] = []
            with entries:
                for entry in entries:
                    if entry.is_file(follow_symlinks=follow):
                        names.append(entry.name)
                        continue
                    try:
                        is_dir = entry.is_dir()
                    except OSError:
                        is_dir = False  # as os.walk does
                    if is_dir and not entry.is_symlink():
                        pending.append(f"{rel_dir}/{entry.name}" if rel_dir else entry.name)
            yield rel_dir, names

    def stat_files(self, native_dir: str, names: list[str]) -> list[tuple[str, int, int]]:
        out: list[tuple[str, int, int]] = []
        if not names:
            return out
        # Names relative to an open directory: the kernel resolves one component per file,
        # not the whole path.
        try:
            fd = os.open(native_dir, os.O_RDONLY | _O_DIRECTORY) if _STAT_DIR_FD else None
        except (FileNotFoundError, NotADirectoryError):  # gone since it was listed
            return out
        base = native_dir.rstrip("/")
        try:
            for name in names:
                try:
                    if fd is None:
                        st = os.stat(f"{base}/{name}", follow_symlinks=self.follow)
                    else:
                        st = os.stat(name, dir_fd=fd, follow_symlinks=self.follow)
                except (FileNotFoundError, NotADirectoryError):  # deleted since listed
                    continue
                if _is_regular(st.st_mode):
                    out.append((name, st.st_size, st.st_mtime_ns // 1_000_000))
        finally:
            if fd is not None:
                os.close(fd)
        return out

    def list_subdirs(self, native_dir: str) -> list[str]:
        if self._linked_top(native_dir):
            return []
        follow = self.follow
        try:
            with os.scandir(native_dir) as entries:
                return [e.name for e in entries if e.is_dir(follow_symlinks=follow)]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def read(self, native: str) -> bytes:
        with open(native, "rb") as f:
            return f.read()

    def info(self, native: str) -> tuple[int, int] | None:
        try:
            st = os.stat(native, follow_symlinks=self.follow)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not _is_regular(st.st_mode):
            return None
        return st.st_size, st.st_mtime_ns // 1_000_000

    def open_input(self, native: str) -> BinaryIO:
        # Arrow's native file reads Parquet without going through Python file objects
        # (several times faster for checkpoints); it is a binary, seekable reader too.
        return pa.OSFile(native, "rb")

    @staticmethod
    def _write_temp(native: str, data: bytes) -> str:
        """Write `data` to a new hidden temp file next to `native`; return its path."""
        parent, name = os.path.split(native)
        os.makedirs(parent, exist_ok=True)
        # A leading '.' makes it a hidden file: Delta readers and VACUUM ignore it.
        tmp = os.path.join(parent, f".{name}.{uuid.uuid4().hex}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with os.fdopen(fd, "wb") as f:
                fd = -1
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            if fd >= 0:
                os.close(fd)
            _unlink_quietly(tmp)
            raise
        return tmp

    def put_if_absent(self, native: str, data: bytes, accept_non_atomic: bool) -> bool:
        tmp = self._write_temp(native, data)
        try:
            try:
                # link() fails with EEXIST when the target exists: exclusive, and the
                # target appears with its full content at once.
                os.link(tmp, native)
            except FileExistsError:
                return False
            except OSError as exc:
                if exc.errno not in _NO_LINK_ERRNOS:
                    raise
                if not accept_non_atomic:
                    raise AtomicityUnsupportedError(
                        "this file system cannot create hard links, so put-if-absent "
                        "cannot be atomic; pass accept_non_atomic=True to accept an "
                        "exclusive but non-atomic write",
                        file=native,
                    ) from exc
                return self._exclusive_write(native, data)
            return True
        finally:
            _unlink_quietly(tmp)

    @staticmethod
    def _exclusive_write(native: str, data: bytes) -> bool:
        """O_EXCL create then write: exclusive, but a reader may see a partial file."""
        try:
            fd = os.open(native, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return True

    def put_atomic(self, native: str, data: bytes) -> None:
        tmp = self._write_temp(native, data)
        try:
            os.replace(tmp, native)
        except BaseException:
            _unlink_quietly(tmp)
            raise

    def delete(self, native: str) -> bool:
        try:
            os.unlink(native)
        except FileNotFoundError:
            return False
        return True

    def remove_empty_dirs(self, native_dir: str) -> list[str]:
        # Never through a symbolic link: not into a linked directory (os.walk does not
        # follow them below), and not when the directory itself is one.
        if not os.path.isdir(native_dir) or os.path.islink(native_dir.rstrip("/") or "/"):
            return []
        prefix_len = len(native_dir.rstrip("/")) + 1
        removed: list[str] = []
        # Bottom-up, so a directory whose only content was empty directories goes too.
        for dirpath, _dirnames, _filenames in os.walk(native_dir, topdown=False):
            rel = dirpath[prefix_len:]
            if not rel:
                continue  # never the directory we were asked about
            try:
                os.rmdir(dirpath)
            except OSError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT, errno.ENOTDIR):
                    continue
                raise
            removed.append(rel)
        return removed


_NO_LINKS = _LocalBackend(follow_symlinks=False)

# Whether files can be stat'ed relative to an open directory here (not on Windows).
_STAT_DIR_FD = os.stat in os.supports_dir_fd and hasattr(os, "O_DIRECTORY")
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def _is_regular(mode: int) -> bool:
    return stat.S_ISREG(mode)


def _raise_unless_missing(exc: OSError) -> None:
    """os.walk error handler: a directory deleted while walking is fine, others are not."""
    if not isinstance(exc, FileNotFoundError):
        raise exc


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _mtime_ms_from_fsspec(entry: Mapping[str, Any]) -> int:
    """Best-effort modification time (ms) from an fsspec info dict of any implementation."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "modified", "created"):
        value = entry.get(key)
        if value is None:
            continue
        if isinstance(value, datetime):
            return _ms(value.timestamp())
        if isinstance(value, (int, float)):
            return _ms(float(value))
        if isinstance(value, str):
            try:
                return _ms(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp())
            except ValueError:
                continue
    return 0


class _FsspecBackend(_Backend):
    """Any fsspec file system: reads, plus best-effort (non-atomic) writes when accepted."""

    errors = (OSError, ValueError)
    atomic_put_if_absent = False

    def __init__(self, fs: Any) -> None:
        self.fs = fs

    def _name(self, entry: Mapping[str, Any]) -> str:
        return str(entry["name"]).rstrip("/")

    def _ls(self, native_dir: str) -> list[dict[str, Any]]:
        try:
            if self.fs.isfile(native_dir):
                return []
            return list(self.fs.ls(native_dir, detail=True))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def _file_stats(self, entry: Mapping[str, Any]) -> tuple[int, int]:
        return int(entry.get("size") or 0), _mtime_ms_from_fsspec(entry)

    def list_dir(self, native_dir: str, start: str | None) -> list[tuple[str, int, int]]:
        out = []
        for entry in self._ls(native_dir):
            if entry.get("type") != "file":
                continue
            name = self._name(entry).rsplit("/", 1)[-1]
            if start is not None and name < start:
                continue
            size, mtime = self._file_stats(entry)
            out.append((name, size, mtime))
        return out

    def walk(self, native_dir: str) -> Iterator[tuple[str, int, int]]:
        prefix = native_dir.rstrip("/") + "/"
        try:
            found = self.fs.find(native_dir, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return
        for name, entry in found.items():
            name = str(name)
            if entry.get("type") != "file" or not name.startswith(prefix):
                continue
            size, mtime = self._file_stats(entry)
            yield name[len(prefix) :], size, mtime

    def list_subdirs(self, native_dir: str) -> list[str]:
        return [
            self._name(e).rsplit("/", 1)[-1]
            for e in self._ls(native_dir)
            if e.get("type") == "directory"
        ]

    def read(self, native: str) -> bytes:
        return bytes(self.fs.cat_file(native))

    def info(self, native: str) -> tuple[int, int] | None:
        try:
            entry = self.fs.info(native)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if entry.get("type") != "file":
            return None
        return self._file_stats(entry)

    def open_input(self, native: str) -> BinaryIO:
        return self.fs.open(native, "rb")

    def put_if_absent(self, native: str, data: bytes, accept_non_atomic: bool) -> bool:
        if not accept_non_atomic:
            raise AtomicityUnsupportedError(
                f"no atomic put-if-absent on the {self.fs.protocol!r} file system; pass "
                "accept_non_atomic=True to accept a check-then-write",
                file=native,
            )
        if self.fs.exists(native):
            return False
        self._make_parent(native)
        self.fs.pipe_file(native, data)
        return True

    def put_atomic(self, native: str, data: bytes) -> None:
        self._make_parent(native)
        self.fs.pipe_file(native, data)

    def _make_parent(self, native: str) -> None:
        parent = self.fs._parent(native)
        if parent and not self.fs.isdir(parent):
            self.fs.makedirs(parent, exist_ok=True)

    def delete(self, native: str) -> bool:
        try:
            self.fs.rm_file(native)
        except FileNotFoundError:
            return False
        return True


class _MemoryBackend(_FsspecBackend):
    """fsspec's in-memory file system; writers serialized by a process-wide lock."""

    errors = (OSError, ValueError)
    atomic_put_if_absent = True

    def _file_stats(self, entry: Mapping[str, Any]) -> tuple[int, int]:
        stored = self.fs.store.get(self._name(entry))
        if stored is None:
            return int(entry.get("size") or 0), _mtime_ms_from_fsspec(entry)
        return stored.size, _ms(stored.modified.timestamp())

    def info(self, native: str) -> tuple[int, int] | None:
        stored = self.fs.store.get(self.fs._strip_protocol(native))
        if stored is None:
            return None
        return stored.size, _ms(stored.modified.timestamp())

    def open_input(self, native: str) -> BinaryIO:
        # fsspec hands out the stored object itself: give each reader a private copy.
        return io.BytesIO(self.read(native))

    def put_if_absent(self, native: str, data: bytes, accept_non_atomic: bool) -> bool:
        key = self.fs._strip_protocol(native)
        with _MEMORY_LOCK:
            if key in self.fs.store or self.fs.isdir(key):
                return False
            self.fs.pipe_file(key, bytes(data))
        return True

    def put_atomic(self, native: str, data: bytes) -> None:
        # pipe_file builds a new file object and swaps it into the store in one step.
        with _MEMORY_LOCK:
            self.fs.pipe_file(native, bytes(data))

    def delete(self, native: str) -> bool:
        key = self.fs._strip_protocol(native)
        with _MEMORY_LOCK:
            if key not in self.fs.store:
                return False
            self.fs.rm_file(key)
        return True


def _client_error_code(exc: BaseException) -> tuple[str | None, int | None]:
    """(error code, HTTP status) of the botocore ClientError behind an s3fs exception."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        response = getattr(current, "response", None)
        if isinstance(response, Mapping):
            code = response.get("Error", {}).get("Code")
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            return (str(code) if code is not None else None), status
        current = current.__cause__ or current.__context__
    return None, None


class _S3Backend(_Backend):
    """S3 through s3fs, calling the S3 API directly where semantics matter."""

    atomic_put_if_absent = True
    #: Attempts when S3 answers 409 ConditionalRequestConflict (a concurrent conditional
    #: write on the same key is in flight).
    conflict_attempts = 5
    #: Below this many keys per directory, delete_many checks existence with HEADs;
    #: from it on, with one listing of the directory's key range.
    list_threshold = 32
    head_concurrency = 32
    #: Keys per ListObjectsV2 page (None: the server's default, 1000 on S3).
    page_size: int | None = None
    #: Keys per DeleteObjects request (S3 accepts at most 1000).
    delete_batch = 1000

    def __init__(self, fs: Any) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        self.fs = fs
        self.errors = (OSError, BotoCoreError, ClientError)

    @staticmethod
    def _split(native: str) -> tuple[str, str]:
        bucket, _, key = native.partition("/")
        return bucket, key

    @staticmethod
    def _dir_prefix(key: str) -> str:
        return f"{key}/" if key else ""

    def _pages(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        token: str | None = None
        while True:
            call = dict(kwargs)
            if self.page_size:
                call["MaxKeys"] = self.page_size
            if token:
                call["ContinuationToken"] = token
            page = self.fs.call_s3("list_objects_v2", **call)
            yield page
            if not page.get("IsTruncated"):
                return
            token = page.get("NextContinuationToken")
            if not token:
                return

    def list_dir(self, native_dir: str, start: str | None) -> list[tuple[str, int, int]]:
        bucket, key = self._split(native_dir)
        prefix = self._dir_prefix(key)
        kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/"}
        if start:
            # StartAfter is exclusive; starting after start[:-1] includes every key
            # >= prefix+start (plus a few smaller ones, filtered below).
            kwargs["StartAfter"] = prefix + start[:-1]
        out = []
        for page in self._pages(**kwargs):
            for obj in page.get("Contents", []):
                name = obj["Key"][len(prefix) :]
                if not name or "/" in name:  # the directory marker itself
                    continue
                if start is not None and name < start:
                    continue
                out.append((name, int(obj["Size"]), _ms(obj["LastModified"].timestamp())))
        return out

    def walk(self, native_dir: str) -> Iterator[tuple[str, int, int]]:
        bucket, key = self._split(native_dir)
        prefix = self._dir_prefix(key)
        for page in self._pages(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                rel = obj["Key"][len(prefix) :]
                if not rel or rel.endswith("/"):  # directory markers
                    continue
                yield rel, int(obj["Size"]), _ms(obj["LastModified"].timestamp())

    def list_subdirs(self, native_dir: str) -> list[str]:
        bucket, key = self._split(native_dir)
        prefix = self._dir_prefix(key)
        out = []
        for page in self._pages(Bucket=bucket, Prefix=prefix, Delimiter="/"):
            for common in page.get("CommonPrefixes", []):
                name = common["Prefix"][len(prefix) :].rstrip("/")
                if name:
                    out.append(name)
        return out

    def read(self, native: str) -> bytes:
        return bytes(self.fs.cat_file(native))

    def _head(self, native: str) -> dict[str, Any] | None:
        bucket, key = self._split(native)
        if not key:
            return None
        try:
            return self.fs.call_s3("head_object", Bucket=bucket, Key=key)
        except FileNotFoundError:
            return None

    def info(self, native: str) -> tuple[int, int] | None:
        head = self._head(native)
        if head is None:
            return None
        return int(head["ContentLength"]), _ms(head["LastModified"].timestamp())

    def open_input(self, native: str) -> BinaryIO:
        return self.fs.open(native, "rb")

    def put_if_absent(self, native: str, data: bytes, accept_non_atomic: bool) -> bool:
        bucket, key = self._split(native)
        for attempt in range(self.conflict_attempts):
            try:
                # One conditional PUT: S3 creates the object only if no object has the
                # key, atomically. (s3fs's open(path, "xb") is not used: it "touches"
                # zero-byte files without the condition, silently overwriting.)
                self.fs.call_s3(
                    "put_object", Bucket=bucket, Key=key, Body=bytes(data), IfNoneMatch="*"
                )
                return True
            except FileExistsError:
                return False
            except OSError as exc:
                code, status = _client_error_code(exc)
                if code == "PreconditionFailed" or status == 412:
                    return False
                if code == "ConditionalRequestConflict" or status == 409:
                    time.sleep(0.05 * 2**attempt)
                    continue
                raise
        raise StorageError(
            f"S3 kept answering ConditionalRequestConflict after {self.conflict_attempts} attempts",
            file=f"s3://{native}",
        )

    def put_atomic(self, native: str, data: bytes) -> None:
        # An S3 PUT (or a completed multipart upload) becomes visible all at once.
        self.fs.pipe_file(native, bytes(data))

    def delete(self, native: str) -> bool:
        if self._head(native) is None:
            return False  # S3 DELETE succeeds on absent keys: ask first to report it
        bucket, key = self._split(native)
        self.fs.call_s3("delete_object", Bucket=bucket, Key=key)
        return True

    def _existing(self, bucket: str, keys: list[str]) -> set[str]:
        """The subset of `keys` (all in `bucket`) that exist."""
        by_dir: dict[str, list[str]] = {}
        for key in keys:
            by_dir.setdefault(key.rpartition("/")[0], []).append(key)
        existing: set[str] = set()
        to_head: list[str] = []
        for directory, group in by_dir.items():
            if len(group) < self.list_threshold:
                to_head.extend(group)
                continue
            # One listing over the key range of the group: ~1 request per 1000 keys.
            group.sort()
            wanted = set(group)
            prefix = self._dir_prefix(directory)
            first, last = group[0], group[-1]
            kwargs = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/"}
            if first[:-1] > prefix:
                kwargs["StartAfter"] = first[:-1]
            done = False
            for page in self._pages(**kwargs):
                for obj in page.get("Contents", []):
                    if obj["Key"] > last:
                        done = True
                        break
                    if obj["Key"] in wanted:
                        existing.add(obj["Key"])
                if done:
                    break
        if to_head:
            existing.update(self._head_many(bucket, to_head))
        return existing

    def _head_many(self, bucket: str, keys: list[str]) -> set[str]:
        import asyncio

        from fsspec.asyn import sync

        async def head(key: str) -> str | None:
            try:
                await self.fs._call_s3("head_object", Bucket=bucket, Key=key)
            except FileNotFoundError:
                return None
            return key

        async def run() -> set[str]:
            found: set[str] = set()
            for i in range(0, len(keys), self.head_concurrency):
                chunk = keys[i : i + self.head_concurrency]
                results = await asyncio.gather(*(head(k) for k in chunk))
                found.update(k for k in results if k is not None)
            return found

        return sync(self.fs.loop, run)

    def delete_many(self, natives: list[str]) -> int:
        by_bucket: dict[str, list[str]] = {}
        for native in natives:
            bucket, key = self._split(native)
            if key:
                by_bucket.setdefault(bucket, []).append(key)
        deleted = 0
        for bucket, keys in by_bucket.items():
            keys = sorted(set(keys))
            existing = sorted(self._existing(bucket, keys))
            for i in range(0, len(existing), self.delete_batch):
                batch = existing[i : i + self.delete_batch]
                response = self.fs.call_s3(
                    "delete_objects",
                    Bucket=bucket,
                    Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
                )
                failures = response.get("Errors", [])
                if failures:
                    first = failures[0]
                    raise StorageError(
                        f"S3 refused to delete {len(failures)} of {len(batch)} objects; "
                        f"first: {first.get('Code')}: {first.get('Message')}",
                        file=f"s3://{bucket}/{first.get('Key')}",
                    )
                deleted += len(batch)
        return deleted


_S3_OPTION_ALIASES = {
    "aws_access_key_id": "key",
    "access_key_id": "key",
    "aws_secret_access_key": "secret",
    "secret_access_key": "secret",
    "aws_session_token": "token",
    "session_token": "token",
    "aws_endpoint_url": "endpoint_url",
    "aws_endpoint": "endpoint_url",
    "endpoint": "endpoint_url",
    "aws_profile": "profile",
}
_S3_REGION_KEYS = frozenset({"aws_region", "region", "region_name", "aws_default_region"})
_S3_BOOL_OPTIONS = frozenset({"anon", "use_ssl", "requester_pays", "use_listings_cache"})


# Options every fsspec file system takes besides its own arguments, and those s3fs hands
# on to the botocore session it makes (`profile`...).
_FSSPEC_COMMON_OPTIONS = frozenset(
    {"skip_instance_cache", "use_listings_cache", "listings_expiry_time", "max_paths",
     "batch_size", "asynchronous", "loop",
     "profile", "session_vars", "event_hooks", "include_builtin_handlers"}
)


def _s3fs_option_names() -> frozenset[str]:
    """The keyword arguments s3fs.S3FileSystem accepts (its own, fsspec's and the botocore
    session's)."""
    import inspect

    import s3fs

    params = inspect.signature(s3fs.S3FileSystem.__init__).parameters.values()
    own = {
        p.name for p in params
        if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    }
    return frozenset(own) | _FSSPEC_COMMON_OPTIONS


def _s3fs_kwargs(options: Mapping[str, Any]) -> dict[str, Any]:
    """s3fs keyword arguments from storage options.

    s3fs's own names (``key``, ``secret``, ``endpoint_url``, ``client_kwargs``...) pass
    through; the object_store/delta-rs spellings (``AWS_ACCESS_KEY_ID``, ``AWS_REGION``,
    ``AWS_ENDPOINT_URL``...) are translated, so one options dict serves both tools.

    Raises:
        StorageError: An option s3fs does not know (named by key, never by value).
    """
    out: dict[str, Any] = {}
    client_kwargs: dict[str, Any] = {}
    for raw_key, value in options.items():
        key = raw_key.lower() if raw_key.lower().startswith("aws_") else raw_key
        if key in _S3_OPTION_ALIASES:
            out[_S3_OPTION_ALIASES[key]] = value
        elif key in _S3_REGION_KEYS:
            client_kwargs["region_name"] = value
        elif key == "client_kwargs":
            client_kwargs = {**dict(value), **client_kwargs}
        elif key in _S3_BOOL_OPTIONS and isinstance(value, str):
            out[key] = value.strip().lower() in ("1", "true", "yes", "on")
        elif key.startswith("aws_"):
            # Other object_store settings (AWS_ALLOW_HTTP, AWS_S3_ALLOW_UNSAFE_RENAME...)
            # mean nothing to s3fs, which would reject them.
            logger.debug("ignoring storage option %s: not used by s3fs", raw_key)
        else:
            out[key] = value
    unknown = sorted(str(k) for k in out if k not in _s3fs_option_names())
    if unknown:
        # Keys only: values may be secrets.
        raise StorageError(
            f"unknown S3 storage option(s) {', '.join(map(repr, unknown))}; known: s3fs's "
            f"own ({', '.join(sorted(_s3fs_option_names()))}) and the AWS_* spellings of "
            "delta-rs (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, "
            "AWS_REGION, AWS_ENDPOINT_URL, AWS_PROFILE)"
        )
    if client_kwargs:
        out["client_kwargs"] = client_kwargs
    # Delta needs fresh listings: a cached listing of _delta_log would hide new commits.
    out.setdefault("use_listings_cache", False)
    return out


# --------------------------------------------------------------------------------------
# Storage
# --------------------------------------------------------------------------------------


def _looks_like_uri(path: str) -> bool:
    """A URI with an authority (`s3://b/x`, `file:///x`) or, on Windows, a drive path.

    Other names with a colon are plain names below the root: a listing holds them
    (`time=1971-07-22T03:06:40Z`, `C:d.parquet`, `file:` as deltalake reads
    `file:/t/a.parquet` as a relative path), and they cannot leave it.
    """
    match = _SCHEME_RE.match(path)
    if match is None:
        return False
    rest = path[match.end() :]
    # A drive (`C:/x`, `C:x`) leaves the root only where drives exist.
    return rest.startswith("//") or (len(match.group(1)) == 1 and os.name == "nt")


def _join_uri(root: str, rel: str) -> str:
    if not rel:
        return root
    return f"{root}{rel}" if root.endswith("/") else f"{root}/{rel}"


class Storage:
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
    def of(cls, table: Any, storage_options: Mapping[str, Any] | None = None) -> Storage:
        """The Storage of what operations accept as a table: a Storage (or a wrapper with
        its interface, e.g. one that instruments it), a DeltaTable (its `.storage`), or a
        table URI (built with `storage_options`)."""
        if isinstance(table, str):
            return cls.for_uri(table, storage_options)
        if isinstance(table, Storage):
            return table
        inner = getattr(table, "storage", None)
        if inner is not None:
            return inner
        if hasattr(table, "put_atomic") and hasattr(table, "list_dir"):
            return table
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
        match = _SCHEME_RE.match(uri)
        scheme = match.group(1).lower() if match else ""
        if not match or len(scheme) == 1:  # a plain path (a one-letter scheme is a drive)
            return cls._local(uri, options)
        rest = uri[match.end() :]
        if scheme == "file":
            if rest.startswith("//"):
                authority, slash, path = rest[2:].partition("/")
                if authority not in ("", "localhost"):
                    raise StorageError(
                        f"file URI {uri!r} names a remote host {authority!r}; only local "
                        "files are supported"
                    )
                rest = slash + path
            if not rest.startswith("/"):
                raise StorageError(f"file URI {uri!r} must hold an absolute path")
            return cls._local(rest, options)
        if scheme in _S3_SCHEMES:
            return cls._s3(uri, rest, options)
        if scheme == "memory":
            name = rest.lstrip("/").rstrip("/")
            return cls._memory(name, options)
        return cls._other(uri, scheme, options)

    @classmethod
    def _local(cls, path: str, options: dict[str, Any]) -> Storage:
        base = os.path.normpath(os.path.abspath(path))
        root = "file://" + (base if base.startswith("/") else "/" + base)
        return cls(root, "file", options, _LocalBackend(), base)

    @classmethod
    def _s3(cls, uri: str, rest: str, options: dict[str, Any]) -> Storage:
        if not rest.startswith("//"):
            raise StorageError(f"S3 URI {uri!r} must look like s3://bucket/prefix")
        bucket, _, key = rest[2:].partition("/")
        key = key.strip("/")
        if not bucket:
            raise StorageError(f"S3 URI {uri!r} names no bucket")
        try:
            import s3fs
        except ImportError as exc:
            raise StorageError(f"s3fs is needed to reach {uri!r}") from exc
        try:
            kwargs = _s3fs_kwargs(options)
        except StorageError as exc:
            raise StorageError(exc.reason, table=uri) from None
        try:
            fs = s3fs.S3FileSystem(**kwargs)
        except (TypeError, ValueError, KeyError) as exc:
            # The message names the offending option, never its value.
            raise StorageError(f"invalid S3 storage options for {uri!r}: {exc}") from exc
        base = f"{bucket}/{key}" if key else bucket
        return cls(f"s3://{base}", "s3", options, _S3Backend(fs), base)

    @classmethod
    def _memory(cls, name: str, options: dict[str, Any]) -> Storage:
        from fsspec.implementations.memory import MemoryFileSystem

        fs = MemoryFileSystem(**options)
        base = f"/{name}" if name else ""
        return cls(f"memory://{name}", "memory", options, _MemoryBackend(fs), base)

    @classmethod
    def _other(cls, uri: str, scheme: str, options: dict[str, Any]) -> Storage:
        import fsspec.core

        if scheme in _NATIVE_LIBRARY_SCHEMES:
            raise StorageError(
                f"unsupported storage scheme {scheme!r} in {uri!r}: it needs a native "
                "Hadoop client (libhdfs and a JVM); delta_ops reaches local files, S3 "
                "(s3://, s3a://) and fsspec file systems in pure Python (webhdfs:// for HDFS)"
            )

        root = uri.rstrip("/")
        try:
            fs, base = fsspec.core.url_to_fs(root, **options)
        except (ValueError, ImportError, TypeError) as exc:
            raise StorageError(f"cannot open storage for scheme {scheme!r}: {exc}") from exc
        return cls(root, scheme, options, _FsspecBackend(fs), str(base).rstrip("/"))

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
        if not isinstance(path, str):
            raise StorageError(
                f"path must be a string, got {type(path).__name__} (root {self.root})",
                file=repr(path),
            )
        problem = None
        if "\\" in path:
            problem = "backslashes are not allowed"
        elif "\x00" in path:
            problem = "NUL characters are not allowed"
        elif path.startswith("/"):
            problem = "absolute paths are not allowed"
        elif _looks_like_uri(path):
            problem = "URIs and drive letters are not allowed"
        parts = [p for p in path.split("/") if p not in ("", ".")]
        if problem is None and any(unquote(p) in ("..", ".") for p in parts):
            problem = "'..' segments are not allowed"
        if problem is None and not parts and not directory:
            problem = "a file path cannot be empty"
        if problem is not None:
            raise StorageError(
                f"unsafe relative path {path!r} under root {self.root}: {problem}",
                file=path,
            )
        return "/".join(parts)

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
        threads at once.

        True on object stores and the other fsspec file systems: each call waits on a
        network round trip. False on the local file system: such calls are short syscalls,
        and threads making them side by side mostly hand the GIL to each other, so one
        thread is faster.
        """
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

    def list_subdirs(self, directory: str = "", *, follow_symlinks: bool = True) -> list[str]:
        """Immediate subdirectories of a directory.

        Args:
            directory: Directory relative to the root ('' for the root).
            follow_symlinks: False leaves out symbolic links to directories (and lists
                nothing in a directory reached through one).

        Returns:
            Their paths relative to the root (just the names when `directory` is ''),
            sorted; [] when the directory is missing.

        Raises:
            StorageError: The listing failed.
        """
        rel = self._clean(directory, directory=True)
        backend = self._lister(rel, follow_symlinks)
        if backend is None:
            return []
        try:
            names = backend.list_subdirs(self._native(rel))
        except self._backend.errors as exc:
            raise self._fail("list subdirectories of", rel, exc) from exc
        prefix = f"{rel}/" if rel else ""
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
            raise StorageError("file not found", file=self.absolute_uri(rel)) from exc
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
            raise StorageError("file not found", file=self.absolute_uri(rel)) from exc
        except self._backend.errors as exc:
            raise self._fail("open file", rel, exc) from exc

    # ---- writing -----------------------------------------------------------------------

    def put_if_absent(self, path: str, data: bytes, *, accept_non_atomic: bool = False) -> bool:
        """Atomically create a file unless one exists there; never overwrites.

        Local: a temp file is written next to the target and hard-linked to it (link
        fails when the target exists). Memory: an exclusive create under a lock. S3: a
        conditional PUT (``If-None-Match: *``); this relies on the store honouring the
        condition, as AWS S3 does since 2024 (an S3-compatible store that ignores it
        would overwrite).

        Args:
            path: File path relative to the root; parent directories are created.
            data: The content.
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
        try:
            written = self._backend.put_if_absent(self._native(rel), data, accept_non_atomic)
        except StorageError:
            raise
        except self._backend.errors as exc:
            raise self._fail("create file", rel, exc) from exc
        logger.debug("put_if_absent %s: %s", self.absolute_uri(rel), written)
        return written

    def put_atomic(self, path: str, data: bytes) -> None:
        """Create or replace a file so that readers see the old or the new content only.

        Args:
            path: File path relative to the root; parent directories are created.
            data: The content.

        Raises:
            StorageError: The write failed.
        """
        rel = self._clean(path, directory=False)
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

    def remove_empty_dirs(self, directory: str = "") -> list[str]:
        """Remove the empty directories below a directory (never that directory itself).

        A directory containing only empty directories is empty too. Symbolic links are
        never followed: a linked directory is neither entered nor removed, and nothing
        happens when `directory` is reached through one. Object stores have no
        directories: nothing to do there.

        Args:
            directory: Directory relative to the root ('' for the root).

        Returns:
            The removed directories, relative to the root, deepest first ([] on object
            stores and in memory).

        Raises:
            StorageError: A removal failed for another reason than non-emptiness.
        """
        rel = self._clean(directory, directory=True)
        if self._lister(rel, False) is None:
            return []  # reached through a symbolic link: never removed through it
        try:
            removed = self._backend.remove_empty_dirs(self._native(rel))
        except self._backend.errors as exc:
            raise self._fail("remove empty directories below", rel, exc) from exc
        prefix = f"{rel}/" if rel else ""
        return [prefix + r for r in removed]
