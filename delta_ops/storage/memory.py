"""The in-memory backend: fsspec's process-global memory file system.

Its writers are serialized by one process-wide lock, so put-if-absent is an exclusive
create between threads; readers get private copies of what is stored.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Mapping
from typing import Any, BinaryIO

from delta_ops.storage.backend import _ms
from delta_ops.storage.generic import _FsspecBackend, _mtime_ms_from_fsspec

# fsspec's memory file system is one store per process: one lock serializes its writers.
_MEMORY_LOCK = threading.Lock()


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


def _open_memory(name: str, options: dict[str, Any]) -> tuple[str, _MemoryBackend, str]:
    """(root URI, backend, native base) of ``memory://name``."""
    from fsspec.implementations.memory import MemoryFileSystem

    fs = MemoryFileSystem(**options)
    base = f"/{name}" if name else ""
    return f"memory://{name}", _MemoryBackend(fs), base
