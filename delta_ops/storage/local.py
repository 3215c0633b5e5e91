"""The local file system backend, through `os` directly.

Listings use `os.scandir` (when a caller excludes files: names first, then a ``stat`` only
for the files it keeps). Put-if-absent writes a temporary file and hard-links it to its
final name: exclusive and atomic, the mutual exclusion and atomic visibility the protocol's
"Requirements for Writers" ask of a commit file. Overwrites go through `os.replace`.
Listings can refuse to follow symbolic links, so that what VACUUM deletes is never reached
through one.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import uuid
from collections.abc import Callable, Iterator
from typing import BinaryIO

from delta_ops.errors import AtomicityUnsupportedError, StorageError
from delta_ops.storage.backend import NAMES_PAGE, _Backend, content_bytes

# Errno values meaning "this file system cannot make hard links".
_NO_LINK_ERRNOS = frozenset(
    {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EXDEV, errno.EMLINK}
)


#: Bytes copied at a time when a local file is put (`Storage.put_atomic(path, Path)`).
_COPY_CHUNK = 8 * 1024 * 1024


class _LocalBackend(_Backend):
    streams_files = True
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

    def real_paths(self, natives: list[str]) -> list[str | None]:
        # The directory's real path once per directory; the last component resolved only
        # when it is a link itself. A missing component reaches nothing; any other
        # failure (no permission, a loop) leaves the identity unknown: OSError.
        dirs: dict[str, str | None] = {}
        out: list[str | None] = []
        for native in natives:
            head, _, name = native.rpartition("/")
            if name in ("", ".", ".."):
                out.append(_strict_realpath(native))  # a directory
                continue
            if head not in dirs:
                dirs[head] = _strict_realpath(head or "/")
            real_dir = dirs[head]
            if real_dir is None:
                out.append(None)
                continue
            full = f"{real_dir.rstrip('/')}/{name}"
            try:
                is_link = stat.S_ISLNK(os.lstat(full).st_mode)
            except (FileNotFoundError, NotADirectoryError):
                out.append(None)
                continue
            out.append(_strict_realpath(full) if is_link else full)
        return out

    def file_ids(self, natives: list[str]) -> list[tuple[int, int] | None]:
        out: list[tuple[int, int] | None] = []
        for native in natives:
            try:
                st = os.stat(native)
            except (FileNotFoundError, NotADirectoryError):
                out.append(None)
                continue
            out.append((st.st_dev, st.st_ino) if _is_regular(st.st_mode) else None)
        return out

    def file_links(self, native_dir: str) -> list[str]:
        # The entries' types come with the directory listing (no stat per file); only a
        # link is asked whether it leads to a directory.
        top = native_dir.rstrip("/") or "/"
        if not os.path.isdir(top) or os.path.islink(top):
            return []
        prefix_len = len(top.rstrip("/")) + 1
        out: list[str] = []
        stack = [top]
        while stack:
            directory = stack.pop()
            try:
                with os.scandir(directory) as entries:
                    for entry in entries:
                        if entry.is_symlink():
                            if not os.path.isdir(entry.path):
                                out.append(entry.path[prefix_len:])
                        elif entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
            except (FileNotFoundError, NotADirectoryError):
                continue  # removed while we looked
        return sorted(out)

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

    def list_name_pages(self, native_dir: str) -> Iterator[list[str]]:
        # `list_names` without a start, NAMES_PAGE names at a time.
        if self._linked_top(native_dir):
            return
        follow = self.follow
        try:
            entries = os.scandir(native_dir)
        except (FileNotFoundError, NotADirectoryError):
            return
        names: list[str] = []
        with entries:
            for e in entries:
                if e.is_file(follow_symlinks=follow):
                    names.append(e.name)
                    if len(names) >= NAMES_PAGE:
                        yield names
                        names = []
        if names:
            yield names

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
                        if len(names) >= NAMES_PAGE:
                            yield rel_dir, names
                            names = []
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
        # Imported here: a command that reads only JSON never loads pyarrow.
        import pyarrow as pa

        return pa.OSFile(native, "rb")

    @staticmethod
    def _write_temp(native: str, data: bytes | os.PathLike) -> str:
        """Write `data` to a new hidden temp file next to `native`; return its path."""
        parent, name = os.path.split(native)
        os.makedirs(parent, exist_ok=True)
        # A leading '.' makes it a hidden file: Delta readers and VACUUM ignore it.
        tmp = os.path.join(parent, f".{name}.{uuid.uuid4().hex}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with os.fdopen(fd, "wb") as f:
                fd = -1
                if isinstance(data, os.PathLike):
                    with open(data, "rb") as src:
                        shutil.copyfileobj(src, f, _COPY_CHUNK)
                else:
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
                return self._exclusive_write(native, content_bytes(data))
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

    def remove_empty_dirs(
        self, native_dir: str, keep: Callable[[str], bool] | None = None
    ) -> list[str]:
        # Never through a symbolic link: not into a linked directory (os.walk does not
        # follow them below), and not when the directory itself is one.
        if not os.path.isdir(native_dir) or os.path.islink(native_dir.rstrip("/") or "/"):
            return []
        prefix_len = len(native_dir.rstrip("/")) + 1
        removed: list[str] = []
        # Top-down to leave out the kept directories (and all below them), then bottom-up,
        # so a directory whose only content was empty directories goes too.
        walked: list[str] = []
        for dirpath, dirnames, _filenames in os.walk(native_dir):
            if keep is not None:
                dirnames[:] = [d for d in dirnames if not keep(d)]
            walked.append(dirpath)
        for dirpath in reversed(walked):
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


def _strict_realpath(path: str) -> str | None:
    """`os.path.realpath` that resolves every link or says why it cannot: None when a
    component is missing (nothing is there); OSError for anything else."""
    try:
        return os.path.realpath(path, strict=True)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _open_local(path: str) -> tuple[str, _LocalBackend, str]:
    """(root URI, backend, native base) of a local directory (relative paths are resolved
    against the current directory)."""
    base = os.path.normpath(os.path.abspath(path))
    if ".." in path.replace("\\", "/").split("/"):
        # `a/link/../t` is `t` beside `link` as text, but the file system resolves the link
        # first: a table elsewhere. When the two differ, which table was meant is unknown.
        physical = os.path.realpath(os.path.join(os.getcwd(), path))
        if physical != os.path.realpath(base):
            raise StorageError(
                f"the table path {path!r} is {base!r} read as text but {physical!r} on the "
                "file system (a symbolic link before '..'); give the path without '..'",
                file=path,
            )
    root = "file://" + (base if base.startswith("/") else "/" + base)
    return root, _LocalBackend(), base
