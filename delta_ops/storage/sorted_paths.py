"""Paths to leave out of a listing, held as one sorted Arrow string array rather than a set
of Python strings: VACUUM's referenced files on an object store. A listing cut into key
ranges asks for the paths of one range at a time (`SortedPaths.in_range`), a slice of the
array turned into a small set, and drops it with the range. No set of every path is held:
the 250,000 paths of a large table cost their Arrow bytes (about 20 MB), where a set of
them took about 40 MB more. (A directory listed as one range reads its whole slice once:
the root of a partitioned table, whose paths are nearly all below it, is read and dropped.)

No section of the Delta protocol is implemented here (storage only).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Container
from typing import Any

__all__ = ["SortedPaths", "as_py", "in_range"]


def as_py(scalar: Any) -> Any:
    """An Arrow scalar's Python value: the key by which `bisect` searches an Arrow array."""
    return scalar.as_py()


class SortedPaths:
    """Root-relative paths in ascending byte order (S3's, and `str`'s code point order),
    usable wherever a listing takes names to leave out (`backend.Skip`).

    Args:
        paths: A pyarrow string array, sorted ascending (not checked here: the caller
            sorts, `protocol.arrays.sorted_strings`). Duplicates are fine; nulls are not.
    """

    def __init__(self, paths: Any) -> None:
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __contains__(self, path: object) -> bool:
        """By bisection (tens of microseconds): for a few lookups; a listing takes a
        range's set instead (`in_range`)."""
        if not isinstance(path, str):
            return False
        i = bisect_left(self.paths, path, key=as_py)
        return i < len(self.paths) and self.paths[i].as_py() == path

    def _span(self, head: str, after: str | None, stop: str | None) -> tuple[int, int]:
        """[lo, hi): the paths below `head` whose name (relative to it) lies in
        ``(after, stop]``."""
        paths = self.paths
        lo = (bisect_left(paths, head, key=as_py) if after is None
              else bisect_right(paths, head + after, key=as_py))
        if stop is not None:
            hi = bisect_right(paths, head + stop, lo, key=as_py)
        elif head:
            # Every path below `head` sorts before head's last '/' raised by one ('0').
            hi = bisect_left(paths, head[:-1] + "0", lo, key=as_py)
        else:
            hi = len(self.paths)
        return lo, max(lo, hi)

    def in_range(
        self, head: str, after: str | None, stop: str | None, recursive: bool
    ) -> frozenset[str]:
        """The paths a listing of the directory `head` (root-relative, with its '/', or
        "" for the root) may meet in its range ``(after, stop]`` of names relative to
        `head` (None: open end): those below `head` (only those directly in it unless
        `recursive`) whose name lies in the range.

        This runs on the listing's event loop, and runs no Arrow kernel: with the '/'
        counted by one, a small VACUUM on S3 peaked 25-33 MB higher (measured; why was
        not pinned down, perhaps an allocator arena for that thread)."""
        lo, hi = self._span(head, after, stop)
        names = self.paths.slice(lo, hi - lo).to_pylist()
        if recursive:
            return frozenset(names)
        depth = head.count("/")
        return frozenset(n for n in names if n.count("/") == depth)

    def same_in(self, other: object, head: str) -> bool:
        """Whether `other` is a `SortedPaths` holding the same paths directly in the
        directory `head` (as `in_range`): then both leave out the same files of it."""
        if not isinstance(other, SortedPaths):
            return False
        if other.paths is self.paths:
            return True
        return self._direct(head).equals(other._direct(head))

    def _direct(self, head: str) -> Any:
        """The paths directly in `head`, as an array (Arrow kernels: for the caller's
        thread, not a listing's event loop)."""
        import pyarrow.compute as pc

        lo, hi = self._span(head, None, None)
        part = self.paths.slice(lo, hi - lo)
        return part.filter(pc.equal(pc.count_substring(part, "/"), head.count("/")))


def in_range(
    names: Container[str], head: str, after: str | None, stop: str | None, recursive: bool
) -> Container[str]:
    """What a listing of one range needs of `names` to leave files out: a `SortedPaths`'s
    (or a container that holds one, with an ``in_range`` method of its own) paths of that
    range, any other container as it is."""
    narrow = getattr(names, "in_range", None)
    return names if narrow is None else narrow(head, after, stop, recursive)
