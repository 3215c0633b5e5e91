"""A real Storage that counts its reads: `read`, `exists`, `info`, `open_input` and
`list_dir` calls by (method, path), for tests that prove how often a step reads the log."""

from __future__ import annotations

from collections import Counter

from delta_ops.storage import Storage


class CountingStorage(Storage):
    """The real storage of a table, counting `read`, `exists`, `info`, `open_input` and
    `list_dir` calls by (method, path) into `calls`."""

    __slots__ = ("calls",)

    @classmethod
    def wrap(cls, plain: Storage, calls: Counter) -> CountingStorage:
        out = cls(plain.root, plain.scheme, plain.storage_options, plain._backend, plain._base)
        object.__setattr__(out, "calls", calls)
        return out

    def read(self, path: str) -> bytes:
        self.calls["read", path] += 1
        return super().read(path)

    def exists(self, path: str) -> bool:
        self.calls["exists", path] += 1
        return super().exists(path)

    def info(self, path: str):
        self.calls["info", path] += 1
        return super().info(path)

    def open_input(self, path: str):
        self.calls["open_input", path] += 1
        return super().open_input(path)

    def list_dir(self, directory: str = "", *args, **kwargs):
        self.calls["list_dir", directory] += 1
        return super().list_dir(directory, *args, **kwargs)
