"""Scratch directories: where spills and checkpoint files live before they are put.

A scratch directory is `delta-ops-<what>-<random suffix>` in the system's temp location
(`tempfile.gettempdir()`, i.e. `$TMPDIR`). It holds a lock file, `.owner`, that the process
using the directory keeps locked (`flock`, exclusive) until it removes the directory. The
kernel releases a lock when its process ends, however it ends: a SIGKILL or the
out-of-memory killer included, which run no cleanup. So a directory whose `.owner` lock can
be taken belongs to no running process, and `sweep` (run whenever a new scratch directory is
made) removes it. A large VACUUM or checkpoint killed mid-way would otherwise leave
gigabytes behind on every attempt.

What is never touched: anything not named `delta-ops-*`, a directory without an `.owner`
file (another program's, or one made by a delta_ops without this module), and a directory
whose lock is held. The lock file is locked before it gets its name (locked under a
temporary name, then renamed), so no sweeper can see an unlocked `.owner` of a live
directory. Where `fcntl` does not exist (Windows), directories are made and removed as
before and nothing is swept.
"""

from __future__ import annotations

import os
import shutil
import tempfile

try:
    import fcntl
except ImportError:  # pragma: no cover - not on the platforms delta_ops runs on
    fcntl = None  # type: ignore[assignment]

__all__ = ["PREFIX", "ScratchDir", "sweep"]

#: The name prefix of every scratch directory.
PREFIX = "delta-ops-"
_OWNER = ".owner"


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # BlockingIOError: another process holds it
        return False
    return True


def sweep(parent: str | None = None) -> list[str]:
    """Remove the scratch directories under `parent` (default: the temp location) whose
    owner is gone; the paths removed."""
    if fcntl is None:
        return []
    parent = parent or tempfile.gettempdir()
    removed: list[str] = []
    try:
        entries = [e for e in os.scandir(parent) if e.name.startswith(PREFIX)]
    except OSError:
        return removed
    for entry in entries:
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            fd = os.open(os.path.join(entry.path, _OWNER), os.O_RDWR | os.O_NOFOLLOW)
        except OSError:  # no lock file (not ours to judge), or gone meanwhile
            continue
        try:
            if _try_lock(fd):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.path)
        finally:
            os.close(fd)
    return removed


class ScratchDir:
    """A scratch directory for `what` (a word in its name) under `parent` (default: the
    temp location), owned by this process until `close` removes it. Making one first sweeps
    away those of processes that died under the same parent.

    Attributes:
        path: The directory.
    """

    def __init__(self, what: str, parent: str | None = None) -> None:
        sweep(parent)
        self.path: str | None = tempfile.mkdtemp(prefix=f"{PREFIX}{what}-", dir=parent)
        self._fd: int | None = None
        if fcntl is not None:
            try:
                pending = os.path.join(self.path, ".owner-pending")
                self._fd = os.open(pending, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
                # Ours alone: nobody else knows the name yet.
                fcntl.flock(self._fd, fcntl.LOCK_EX)
                os.rename(pending, os.path.join(self.path, _OWNER))
            except BaseException:  # a full TMPDIR (no inode left for the lock file)
                self.close()
                raise

    def close(self) -> None:
        """Remove the directory and everything in it (idempotent)."""
        path, fd = self.path, self._fd
        self.path, self._fd = None, None
        try:
            if path is not None:
                shutil.rmtree(path, ignore_errors=True)
        finally:
            if fd is not None:
                os.close(fd)

    def __enter__(self) -> str:
        assert self.path is not None
        return self.path

    def __exit__(self, *exc: object) -> None:
        self.close()
