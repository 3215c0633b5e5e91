"""The one clock every operation takes: milliseconds since the epoch, injected.

Operations that depend on the time (retention cut-offs, commit timestamps, the age of a
writer's temporary file) take `clock: Clock | None = None` and read it once, at the start,
through `now_ms(clock)`. Tests pass a fixed clock instead of sleeping or setting the
machine's time; nothing deeper in the logic reads the system clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: Returns milliseconds since the Unix epoch (UTC).
Clock = Callable[[], int]


def system_clock() -> int:
    """Milliseconds since the epoch, from the system clock (the default clock)."""
    return time.time_ns() // 1_000_000


def fixed_clock(ms: int) -> Clock:
    """A clock that always reads `ms` (for a plan made at a known time, and for tests)."""
    value = int(ms)
    return lambda: value


def now_ms(clock: Clock | None = None) -> int:
    """Read `clock` (the system clock when None) once, as an int."""
    return int((clock or system_clock)())


def start_time(clock: Clock | None, now_ms_value: int | None, *, operation: str) -> int:
    """When an operation starts, in ms: `now_ms_value` when given (the older keyword every
    operation still takes), else `clock` read once (the system clock when None).

    Raises:
        ValueError: both were given.
    """
    if clock is not None and now_ms_value is not None:
        raise ValueError(f"give either clock or now_ms to {operation}, not both")
    return now_ms(clock) if now_ms_value is None else int(now_ms_value)


__all__ = ["Clock", "fixed_clock", "now_ms", "start_time", "system_clock"]
