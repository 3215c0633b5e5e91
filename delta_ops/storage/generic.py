"""The backend of any other file system fsspec knows (``gs://``, ``abfs://``,
``webhdfs://``...).

Reads work; writes that need atomicity are refused unless the caller explicitly accepts a
best-effort (non-atomic) write: fsspec's own ``pipe_file(mode="create")`` checks then
writes, which is not the mutual exclusion the protocol asks of a commit. The memory
backend builds on this one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any, BinaryIO

from delta_ops.errors import AtomicityUnsupportedError, StorageError
from delta_ops.storage.backend import _Backend, _ms

# fsspec schemes whose file system loads a native library (and prints its failures).
_NATIVE_LIBRARY_SCHEMES = frozenset({"hdfs", "viewfs", "arrow_hdfs"})


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


def _open_fsspec(uri: str, scheme: str, options: dict[str, Any]) -> tuple[str, _FsspecBackend, str]:
    """(root URI, backend, native base) of a URI of another fsspec file system."""
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
    return root, _FsspecBackend(fs), str(base).rstrip("/")
