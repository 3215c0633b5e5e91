"""Listing and deleting at an object store's request limit: key ranges, backoff, a
concurrency limit that lowers itself, and what a batched delete reports.

An object store answers one listing request with at most 1,000 keys, and the pages of one
listing come one after another (each carries the token of the next). A prefix holding
millions of keys is listed faster as several *key ranges* side by side: the range
``(after, stop]`` starts with ``StartAfter=after`` and ends at the first key past `stop`.
`range_bounds` picks the bounds from names already known in sorted order (VACUUM takes
them from the log's referenced paths), so each range holds about one page. The ranges of
bounds ``b1 < b2 < ... < bk`` are ``(-, b1], (b1, b2], ..., (bk, -)``: disjoint, and
together every key, so their union is exactly the serial listing. A range still paging
after its first page cuts the rest of itself the same way (`extrapolated_bounds`, bounds
guessed from that page's names): known names are not needed for every range.

A request answered with ``503 SlowDown`` (or another transient failure) is retried after
an exponential backoff with full jitter (`RequestPolicy`), and the number of requests in
flight is halved (`AdaptiveLimit`), then grows back by one after as many successes as the
limit, the additive-increase/multiplicative-decrease rule TCP uses.

No section of the Delta protocol is implemented here (storage only).
"""

from __future__ import annotations

import asyncio
import bisect
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: A progress hook: called with increments (requests completed, files, bytes) after each
#: listing page or delete batch. It runs on the thread doing the I/O and must be quick.
Progress = Callable[[int, int, int], None]

#: Known names per listing range (`range_bounds`): under the 1,000 keys of one page,
#: leaving room for the unreferenced files between known names.
KEYS_PER_RANGE = 850


@dataclass(frozen=True)
class RequestPolicy:
    """How many requests run at once and how a failed one is retried.

    Attributes:
        concurrency: Most requests in flight at once (the ceiling of `AdaptiveLimit`).
        attempts: Tries per request (the first included) before it is given up.
        base_delay: Seconds of the first backoff; each retry doubles it.
        max_delay: The longest backoff, in seconds.
        seed: Seeds the jitter (None: unpredictable). For reproducible tests.
    """

    concurrency: int = 64
    attempts: int = 10
    base_delay: float = 0.05
    max_delay: float = 5.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {self.attempts}")

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Seconds to wait before retry number `attempt` (0 for the first retry): uniform
        in [0, min(max_delay, base_delay * 2**attempt)] ("full jitter")."""
        return rng.uniform(0.0, min(self.max_delay, self.base_delay * (2**attempt)))


@dataclass(frozen=True)
class DeleteReport:
    """What a batched delete did.

    Attributes:
        deleted: Files the store confirmed deleted. An object store confirms an absent
            key too (its DELETE is idempotent), so there this counts the keys asked for
            and confirmed, not the keys that existed.
        failed: (path, reason) of each file still not deleted after its retries, sorted.
        requests: Delete requests sent (retries included).
    """

    deleted: int
    failed: tuple[tuple[str, str], ...] = ()
    requests: int = 0

    def failure_message(self, asked: int, *, shown: int = 20, retried: bool = True) -> str:
        """One line naming the files not deleted (the first `shown`) of `asked` files."""
        named = "; ".join(f"{p}: {why}" for p, why in self.failed[:shown])
        more = len(self.failed) - shown
        return (f"{len(self.failed)} of {asked} files were not deleted"
                f"{' after retries' if retried else ''} ({self.deleted} were; run again to "
                f"finish): {named}" + (f" and {more} more" if more > 0 else ""))


class AdaptiveLimit:
    """A concurrency limit for coroutines on one event loop that halves when the store
    says "slow down" and grows by one after `limit` successes, up to its ceiling.

    Args:
        ceiling: The most requests in flight at once.
    """

    def __init__(self, ceiling: int) -> None:
        self.ceiling = max(1, ceiling)
        self.limit = self.ceiling
        self.lowest = self.ceiling
        self.throttles = 0
        self._active = 0
        self._successes = 0
        self._cond = asyncio.Condition()

    async def acquire(self) -> None:
        """Wait for a free slot and take it."""
        async with self._cond:
            while self._active >= self.limit:
                await self._cond.wait()
            self._active += 1

    async def release(self, *, throttled: bool) -> None:
        """Give a slot back; `throttled` when the store answered "slow down"."""
        async with self._cond:
            self._active -= 1
            if throttled:
                self.throttles += 1
                self.limit = max(1, self.limit // 2)
                self.lowest = min(self.lowest, self.limit)
                self._successes = 0
            else:
                self._successes += 1
                if self.limit < self.ceiling and self._successes >= self.limit:
                    self.limit += 1
                    self._successes = 0
            self._cond.notify_all()


def range_bounds(sorted_names: Sequence[str], per_range: int = KEYS_PER_RANGE) -> list[str]:
    """Bounds splitting a listing into ranges of about `per_range` known names each.

    Args:
        sorted_names: Names (paths relative to the listed directory) in ascending order;
            duplicates are fine.
        per_range: Known names per range.

    Returns:
        Strictly ascending bounds: every `per_range`-th name.
    """
    if per_range < 1:
        raise ValueError(f"per_range must be at least 1, got {per_range}")
    out: list[str] = []
    for i in range(per_range - 1, len(sorted_names), per_range):
        name = sorted_names[i]
        if not out or name > out[-1]:
            out.append(name)
    return out


#: A window of a listing, ``(after, stop]`` (None: open end).
Window = tuple[str | None, str | None]


def ranges_of(
    bounds: Sequence[str], window: Window = (None, None)
) -> list[tuple[str | None, str | None]]:
    """The ranges ``(after, stop]`` that `bounds` cut a listing (or its `window`) into
    (None: open end).

    Raises:
        ValueError: The bounds are not strictly ascending, or not inside the window.
    """
    edges: list[str | None] = [window[0], *bounds, window[1]]
    for a, b in zip(edges, edges[1:], strict=False):
        if a is not None and b is not None and not a < b:
            raise ValueError(f"range bounds must be strictly ascending: {a!r} then {b!r}")
    return list(zip(edges[:-1], edges[1:], strict=True))


def windows_of(bounds: Sequence[str], per_window: int) -> list[tuple[Window, list[str]]]:
    """The ranges of `bounds` (`ranges_of`) in groups of `per_window` consecutive ones:
    (window, the bounds inside it) each. The windows are disjoint and cover every key, and
    the ranges of all windows are exactly the ranges of `bounds`: a listing can be shared
    between workers window by window.

    Raises:
        ValueError: `per_window` is below 1, or the bounds are not strictly ascending.
    """
    if per_window < 1:
        raise ValueError(f"per_window must be at least 1, got {per_window}")
    ranges_of(bounds)
    edges: list[str | None] = [None, *bounds, None]
    out = []
    for first in range(0, len(bounds) + 1, per_window):
        last = min(first + per_window, len(bounds) + 1)  # ranges first .. last - 1
        out.append(((edges[first], edges[last]), list(bounds[first:last - 1])))
    return out


def range_prefix(after: str | None, stop: str | None, recursive: bool = True) -> str:
    """The longest prefix every name of the range ``(after, stop]`` starts with: the
    common prefix of its two bounds ("" for an open range).

    A name ``k`` with ``after < k <= stop`` starts with it: at the first place where ``k``
    left the common prefix, ``k`` would sort before `after` (a smaller character, or ``k``
    ended) or after `stop` (a larger one). Code point order is the UTF-8 byte order S3
    sorts keys by. Listing a range under this prefix instead of the directory's returns
    the same keys, and a store that gathers a prefix's keys for every page (moto sorts
    them) gathers only those. With a delimiter (`recursive` False) the prefix stops before
    its first ``/``, so that subdirectories roll up as they do under the directory.
    """
    if after is None or stop is None:
        return ""
    common = os.path.commonprefix([after, stop])  # character by character
    if not recursive:
        common = common.split("/", 1)[0]
    return common


#: Bounds `extrapolated_bounds` proposes at once, and how many times a range split off
#: one may split again.
SPLIT_PARTS = 16
SPLIT_DEPTH = 4

_CLASSES = (
    "0123456789",
    "0123456789abcdef",
    "0123456789ABCDEF",
    "0123456789abcdefghijklmnopqrstuvwxyz",
    "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
)


def _class(chars: set[str], at_least: int = 0) -> int:
    """Index in `_CLASSES` of the smallest class (from `at_least` on) holding `chars`;
    len(_CLASSES) when none does."""
    for i in range(at_least, len(_CLASSES)):
        if chars <= set(_CLASSES[i]):
            return i
    return len(_CLASSES)


def extrapolated_bounds(
    seen: Sequence[str], end: str, stop: str | None, parts: int = SPLIT_PARTS
) -> list[str]:
    """Bounds cutting the rest ``(end, stop]`` of a range still paging into pieces of
    about one page each, learned from the names of its first page.

    Names are read as numbers whose digits are their characters from a little before the
    first position where the page's first and last names differ (each position's digit
    taken from the class of the characters seen there: digits, hex, alphanumerics); a page
    spans the distance from its first to its last name, so the next pages are expected to
    end at that distance again and again. A guess only decides where the listing is cut:
    whatever it is, the bounds returned are strictly ascending, above `end` and below
    `stop`, and hold no '/', so the ranges ``(end, b1], (b1, b2], ..., (bk, stop]`` are
    disjoint and together the rest of the range (`ranges_of`).

    Args:
        seen: Names of the first page, ascending (paths relative to the listed prefix).
        end: The last name the page covered (files or subdirectory prefixes).
        stop: The range's upper bound (None: open).
        parts: Most bounds returned.

    Returns:
        The bounds; empty when the page says nothing of the spacing.
    """
    if len(seen) < 2 or parts < 1:
        return []
    first, last = seen[0], seen[-1]
    c = 0
    while c < min(len(first), len(last)) and first[c] == last[c]:
        c += 1
    c0 = max(0, c - 4)
    width = c - c0 + 8
    observed = [{s[j] for s in (*seen, end) if len(s) > j} or {"0"}
                for j in range(c0, c0 + width)]
    # The class of the positions that vary on the page (a uuid's hex digits) is the class
    # of those that happened not to (its first digit, all '0' on the first page).
    widest = max((_class(chars) for chars in observed if len(chars) > 1), default=0)
    widest = min(widest, len(_CLASSES) - 1)
    alphabets = []
    for chars in observed:
        k = _class(chars, widest)
        alphabets.append(_CLASSES[k] if k < len(_CLASSES) else "".join(sorted(chars)))

    def number(s: str) -> int:
        n = 0
        for j, alpha in enumerate(alphabets):
            ch = s[c0 + j] if len(s) > c0 + j else ""
            n = n * len(alpha) + (max(0, bisect.bisect_right(alpha, ch) - 1) if ch else 0)
        return n

    total = 1
    for alpha in alphabets:
        total *= len(alpha)
    head = end[:c0]
    if len(end) < c0 or first[:c0] != head:
        return []
    step = number(last) - number(first)
    if step <= 0:
        return []
    base = number(end)
    out: list[str] = []
    for m in range(1, parts + 1):
        n = base + m * step
        if n >= total:
            break
        chars = []
        for alpha in reversed(alphabets):
            n, digit = divmod(n, len(alpha))
            chars.append(alpha[digit])
        bound = head + "".join(reversed(chars))
        if stop is not None and bound >= stop:
            break
        if bound > end and "/" not in bound and (not out or bound > out[-1]):
            out.append(bound)
    return out
