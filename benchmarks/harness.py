"""Measure delta_ops against deltalake in fresh processes, alternating, in one run.

Each measurement runs a small Python snippet in its own interpreter so peak RSS belongs to
that operation alone (VmHWM of the interpreter's own address space: `ru_maxrss` would carry
the parent's peak across fork and exec); the snippet's `setup` runs before the clock
starts and its `run` is timed. Ours and theirs alternate (ABAB...) so drift in the machine
hits both alike.

`measure_process` and `compare_processes` time whole processes instead (interpreter start,
imports and exit included), as a user running `delta-ops` sees them.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Sequence
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


#: GNU time: the peak RSS of the process it runs (`%M`, KB). Run through it, the measured
#: process is forked from a small program, so its peak is its own (a child forked from this
#: benchmark's interpreter would start with this interpreter's resident pages counted).
GNU_TIME = "/usr/bin/time"


def measure_process(argv: Sequence[str], *, cwd: str | None = None) -> Measurement:
    """One whole process (in `cwd`, else this one's): wall time from start to exit (taken
    here, finer than GNU time's centiseconds; the wrapper's own start adds about a
    millisecond) and peak RSS as `/usr/bin/time` reports it. Output is discarded; a
    failure raises with its stderr."""
    if not os.access(GNU_TIME, os.X_OK):
        raise RuntimeError(f"whole-process benchmarks need GNU time at {GNU_TIME}")
    with tempfile.NamedTemporaryFile("r", suffix=".time") as report:
        t0 = time.perf_counter()
        proc = subprocess.run(
            [GNU_TIME, "-f", "%M", "-o", report.name, *argv],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False,
            cwd=cwd,
        )
        dt = time.perf_counter() - t0
        lines = report.read().split()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])}... failed:\n{proc.stderr[-2000:]}")
    return Measurement(dt, int(lines[-1]) / 1024)


def compare_processes(
    name: str,
    ours: Sequence[str],
    theirs: Sequence[str],
    *,
    repeats: int = 5,
    goal_time_ratio: float | None = None,
    before_each: Callable[[], None] | None = None,
    baseline: tuple[Sequence[str], str] | None = None,
) -> dict:
    """Alternate whole processes `ours`/`theirs` (argv lists) `repeats` times; medians of the
    wall times, the largest peak RSS of each side, and ratios (ours / theirs). `before_each`
    runs (untimed) before every process, e.g. to give it a fresh copy of a table.
    `baseline`: (argv, directory) of a third process, e.g. another checkout's command run
    in that checkout, alternated in the same rounds; its median time, ratio to theirs and
    peak RSS join the row (`baseline_*`)."""
    runs: list[tuple[Sequence[str], str | None, list[Measurement]]] = [(ours, None, [])]
    if baseline is not None:
        runs.append((baseline[0], baseline[1], []))
    runs.append((theirs, None, []))
    for _ in range(repeats):
        for argv, cwd, out in runs:
            if before_each is not None:
                before_each()
            out.append(measure_process(argv, cwd=cwd))
    row = _row(name, runs[0][2], runs[-1][2], goal_time_ratio)
    if baseline is not None:
        base = runs[1][2]
        tb = statistics.median(m.seconds for m in runs[-1][2])
        tz = statistics.median(m.seconds for m in base)
        row["baseline_s"] = round(tz, 4)
        row["baseline_time_ratio"] = round(tz / tb, 3) if tb else None
        row["baseline_rss_mb"] = round(max(m.rss_mb for m in base), 1)
    return row


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
    return _row(name, a, b, goal_time_ratio)


def _row(
    name: str, a: list[Measurement], b: list[Measurement], goal_time_ratio: float | None
) -> dict:
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
        "goal_met": None if goal_time_ratio is None or not tb else ta / tb <= goal_time_ratio,
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
