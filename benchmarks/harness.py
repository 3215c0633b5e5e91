"""Measure delta_ops against deltalake in fresh processes, alternating, in one run.

Each measurement runs a small Python snippet in its own interpreter so peak RSS belongs to
that operation alone (VmHWM of the interpreter's own address space: `ru_maxrss` would carry
the parent's peak across fork and exec); the snippet's `setup` runs before the clock
starts and its `run` is timed. Ours and theirs alternate (ABAB...) so drift in the machine
hits both alike.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import textwrap
from dataclasses import dataclass

_RUNNER = """
import json, resource, sys, time, gc
{setup}
gc.collect()
t0 = time.perf_counter()
{run}
dt = time.perf_counter() - t0
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")]
rss_kb = int(hwm[0].split()[1]) if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({{"seconds": dt, "rss_mb": rss_kb / 1024}}))
"""


@dataclass
class Measurement:
    seconds: float
    rss_mb: float


def measure(setup: str, run: str) -> Measurement:
    code = _RUNNER.format(setup=textwrap.dedent(setup), run=textwrap.dedent(run))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark snippet failed:\n{proc.stderr[-2000:]}")
    obj = json.loads(proc.stdout.strip().splitlines()[-1])
    return Measurement(obj["seconds"], obj["rss_mb"])


def compare(
    name: str,
    ours: tuple[str, str],
    theirs: tuple[str, str],
    *,
    repeats: int = 3,
    goal_time_ratio: float | None = None,
) -> dict:
    """Alternate ours/theirs `repeats` times; return medians and ratios (ours / theirs)."""
    a, b = [], []
    for _ in range(repeats):
        a.append(measure(*ours))
        b.append(measure(*theirs))
    ta = statistics.median(m.seconds for m in a)
    tb = statistics.median(m.seconds for m in b)
    ra = max(m.rss_mb for m in a)
    rb = max(m.rss_mb for m in b)
    row = {
        "benchmark": name,
        "delta_ops_s": round(ta, 4),
        "deltalake_s": round(tb, 4),
        "time_ratio": round(ta / tb, 3) if tb else None,
        "delta_ops_rss_mb": round(ra, 1),
        "deltalake_rss_mb": round(rb, 1),
        "rss_ratio": round(ra / rb, 3) if rb else None,
        "goal_time_ratio": goal_time_ratio,
    }
    return row


def print_rows(rows: list[dict]) -> None:
    if not rows:
        return
    keys = list(rows[0])
    widths = {k: max(len(k), *(len(str(r.get(k))) for r in rows)) for k in keys}
    print("  ".join(k.ljust(widths[k]) for k in keys))
    for r in rows:
        print("  ".join(str(r.get(k)).ljust(widths[k]) for k in keys))
