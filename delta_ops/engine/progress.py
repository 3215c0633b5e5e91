"""Progress of long listings and deletes (VACUUM): what the loops report while they run.

No protocol section: this is how a long VACUUM tells its operator where it is (pages
listed, files and bytes seen or deleted, the rate), never what it decides. The loops that
list and delete call one small interface, `Progress`; what shows it is chosen at the edge:
the CLI a terminal bar (`commands/vacuum.py`, through `tqdm`, only when stderr is a
terminal and never with `--json`), Dagster a log line every few seconds
(`LogProgress` with `context.log.info`), the library nothing (`NO_PROGRESS`).

The interface (what a listing or delete loop calls, from any thread):

* `progress.begin(phase, total_files=None, total_bytes=None)`: a phase starts
  (`LIST`, `PROBE`, `DELETE`, `INVENTORY`); totals when known (a delete knows them).
* `progress.advance(phase, pages=0, files=0, bytes=0)`: increments since the last call
  (a listing page of `files` entries and their `bytes`; a batch of confirmed deletes).
* `progress.end(phase)`: the phase is over (a final report).

Counters are summed under a lock, so parallel listing and delete workers may call it
directly. A phase that never began is begun by its first `advance`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "DELETE",
    "INVENTORY",
    "LIST",
    "NO_PROGRESS",
    "PROBE",
    "LogProgress",
    "PhaseTotals",
    "Progress",
    "Tracker",
    "format_totals",
    "human_bytes",
]

LIST = "list"
"""Listing the table's data directories (pages, files, bytes listed)."""
PROBE = "probe"
"""Checking candidates one by one (lite mode, inventory): files that exist, their bytes."""
DELETE = "delete"
"""Deleting the plan's files (confirmed deletes, their bytes)."""
INVENTORY = "inventory"
"""Reading an inventory (pages are its data files, files its rows)."""


class Progress:
    """Receives progress from VACUUM's loops; this base reports nothing."""

    def begin(
        self, phase: str, *, total_files: int | None = None, total_bytes: int | None = None
    ) -> None:
        """A phase starts (totals when known)."""

    def advance(self, phase: str, *, pages: int = 0, files: int = 0, bytes: int = 0) -> None:  # noqa: A002
        """Increments of a phase since the last call."""

    def end(self, phase: str) -> None:
        """A phase is over."""


NO_PROGRESS = Progress()
"""The progress that shows nothing (the library's default)."""


@dataclass(frozen=True)
class PhaseTotals:
    """Where one phase is.

    Attributes:
        phase: `LIST`, `PROBE`, `DELETE` or `INVENTORY`.
        pages: Listing pages (or inventory data files) so far.
        files: Files so far.
        bytes: Their bytes.
        elapsed_s: Seconds since the phase began.
        total_files: The phase's total file count, when known.
        total_bytes: The phase's total bytes, when known.
        done: The phase has ended.
    """

    phase: str
    pages: int
    files: int
    bytes: int
    elapsed_s: float
    total_files: int | None = None
    total_bytes: int | None = None
    done: bool = False

    @property
    def files_per_s(self) -> float:
        """Files per second since the phase began."""
        return self.files / self.elapsed_s if self.elapsed_s > 0 else 0.0


def human_bytes(n: float) -> str:
    """`1.5 MiB`, `300 B`."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover (the loop always returns)


def format_totals(t: PhaseTotals) -> str:
    """One line for a phase: `vacuum list: 12 pages, 12,000 files, 3.1 MiB, 2,400 files/s`."""
    files = f"{t.files:,}" if t.total_files is None else f"{t.files:,}/{t.total_files:,}"
    parts = [f"{files} files", human_bytes(t.bytes), f"{t.files_per_s:,.0f} files/s"]
    if t.pages:
        parts.insert(0, f"{t.pages:,} pages")
    return f"vacuum {t.phase}{' done' if t.done else ''}: " + ", ".join(parts)


class Tracker(Progress):
    """Sums what the loops report (thread-safe) and hands each phase's totals to `show`.

    Subclasses implement `show`; `show` is called after every `advance` unless
    `min_interval_s` has not passed since the last time, and always at `end`.

    Args:
        min_interval_s: The least time between two reports of a phase (0: every call).
        clock: Seconds, monotonic (default `time.monotonic`).
    """

    def __init__(
        self, *, min_interval_s: float = 0.0, clock: Callable[[], float] | None = None
    ) -> None:
        self._lock = threading.Lock()
        self._clock = clock or time.monotonic
        self._min_interval = min_interval_s
        self._phases: dict[str, dict[str, float | int | None]] = {}

    def _state(self, phase: str) -> dict[str, float | int | None]:
        state = self._phases.get(phase)
        if state is None:
            now = self._clock()
            state = self._phases[phase] = {
                "pages": 0, "files": 0, "bytes": 0, "start": now, "shown": None,
                "total_files": None, "total_bytes": None,
            }
        return state

    def _totals(self, phase: str, state: dict, *, done: bool) -> PhaseTotals:
        return PhaseTotals(
            phase=phase, pages=int(state["pages"]), files=int(state["files"]),
            bytes=int(state["bytes"]), elapsed_s=self._clock() - float(state["start"]),
            total_files=state["total_files"], total_bytes=state["total_bytes"], done=done,
        )

    def begin(
        self, phase: str, *, total_files: int | None = None, total_bytes: int | None = None
    ) -> None:
        with self._lock:
            self._phases.pop(phase, None)
            state = self._state(phase)
            state["total_files"] = total_files
            state["total_bytes"] = total_bytes
            totals = self._totals(phase, state, done=False)
        self.show(totals)

    def advance(self, phase: str, *, pages: int = 0, files: int = 0, bytes: int = 0) -> None:  # noqa: A002
        with self._lock:
            state = self._state(phase)
            state["pages"] = int(state["pages"]) + pages
            state["files"] = int(state["files"]) + files
            state["bytes"] = int(state["bytes"]) + bytes
            now = self._clock()
            shown = state["shown"]
            if shown is not None and now - float(shown) < self._min_interval:
                return
            state["shown"] = now
            totals = self._totals(phase, state, done=False)
        self.show(totals)

    def end(self, phase: str) -> None:
        with self._lock:
            state = self._state(phase)
            totals = self._totals(phase, state, done=True)
        self.show(totals)

    def totals(self, phase: str) -> PhaseTotals | None:
        """The totals of a phase so far (None when it never began)."""
        with self._lock:
            state = self._phases.get(phase)
            return None if state is None else self._totals(phase, state, done=False)

    def show(self, totals: PhaseTotals) -> None:
        """Show one phase's totals (subclasses)."""


class LogProgress(Tracker):
    """Progress as log lines, at most one per phase every `every_s` seconds (and one when a
    phase ends): what a Dagster run writes through `context.log.info`.

    Args:
        log: Receives each line.
        every_s: The least time between two lines of one phase.
        clock: Seconds, monotonic (default `time.monotonic`).
    """

    def __init__(
        self,
        log: Callable[[str], None],
        *,
        every_s: float = 10.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(min_interval_s=every_s, clock=clock)
        self._log = log

    def begin(
        self, phase: str, *, total_files: int | None = None, total_bytes: int | None = None
    ) -> None:
        # Only the rate limit starts here: a line per phase start would double the lines.
        with self._lock:
            self._phases.pop(phase, None)
            state = self._state(phase)
            state["total_files"] = total_files
            state["total_bytes"] = total_bytes
            state["shown"] = self._clock()

    def show(self, totals: PhaseTotals) -> None:
        self._log(format_totals(totals))
