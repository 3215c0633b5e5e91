"""Scaling on Spark (issue 15): whole `delta-ops --engine spark` processes on the generated
tables of `benchmarks.big_tables`, on a `local-cluster` master.

For each size and operation (`checkpoint` at version 101, from the old checkpoint and the
commits; `rebuild`, the same checkpoint rebuilt by bucket (`checkpoint --rebuild`, in
one executor task); `crc compute --full`; `vacuum`, a dry run with a full listing of the table
generated with placeholder data files, up to `BENCH_SCALE_FILES_MAX` as in `bench_scale`),
one process runs under `/usr/bin/time` (its figure is the largest peak RSS of the
process tree: driver, driver JVM, executors and their Python workers, whichever is
largest). The process also reports, just before the engine stops its session, the peak RSS
(`VmHWM`) of each of its processes by role: the Python driver itself, the driver JVM, the
executor JVMs and the executors' Python workers. The Python driver's figure is the one the
issue's goal is about (the state must not be held there).

Environment: `BENCH_SCALE_SIZES` (as `bench_scale`, default `1M`), `BENCH_SCALE_OPS`
(`checkpoint,crc`; also `rebuild`, `vacuum`), `BENCH_SCALE_REPEATS` (default 1),
`BENCH_SPARK_MASTER` (default `local-cluster[2,1,1024]`), `DELTA_OPS_STREAM_THRESHOLD_BYTES`
(passed through: the default streams tables whose checkpoint holds 16 MiB or more).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

from benchmarks.bench_scale import files_max, sizes
from benchmarks.big_tables import big_table, restore_log
from benchmarks.harness import measure_process, print_rows

#: Runs the command line; before the Spark session stops, writes the peak RSS of every
#: process of the tree by role to $BENCH_SPARK_REPORT.
_RUNNER = r"""
import json, os, resource, sys
from delta_ops.engine.spark import engine as spark_engine

def _status(pid):
    out = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                out[key] = value.strip()
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            out["cmd"] = fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    return out

def _tree(root):
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _status(name)
            if st:
                children.setdefault(int(st.get("PPid", 0)), []).append((int(name), st))
    todo, found = [root], []
    while todo:
        for pid, st in children.get(todo.pop(), []):
            found.append(st)
            todo.append(pid)
    return found

def _mb(st):
    return int(st.get("VmHWM", "0 kB").split()[0]) / 1024

def _report():
    roles = {"driver_jvm": 0.0, "executor_jvm": 0.0, "python_worker": 0.0}
    for st in _tree(os.getpid()):
        cmd = st["cmd"]
        if "java" in st.get("Name", "") or cmd.startswith("java") or "/java " in cmd:
            role = "executor_jvm" if "CoarseGrainedExecutorBackend" in cmd else "driver_jvm"
        elif "python" in cmd:
            role = "python_worker"
        else:
            continue
        roles[role] = max(roles[role], _mb(st))
    roles["python_driver"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with open(os.environ["BENCH_SPARK_REPORT"], "w") as fh:
        json.dump(roles, fh)

_close = spark_engine.SparkEngine.close
def close(self):
    if self.started:
        _report()
    _close(self)
spark_engine.SparkEngine.close = close

from delta_ops.cli import run
sys.exit(run())
"""


def _command(master: str, *args: str) -> list[str]:
    return [sys.executable, "-c", _RUNNER, *args, "--engine", "spark", "--spark-master", master]


def main() -> list[dict]:
    repeats = int(os.environ.get("BENCH_SCALE_REPEATS", "1"))
    ops = os.environ.get("BENCH_SCALE_OPS", "checkpoint,crc").split(",")
    master = os.environ.get("BENCH_SPARK_MASTER", "local-cluster[2,1,1024]")
    rows = []
    for n in sizes():
        root = big_table(n)
        restore_log(root, n)
        label = f"{n // 1_000_000}M" if n % 1_000_000 == 0 else str(n)
        commands = {
            "checkpoint": ("checkpoint", str(root)),
            "crc": ("crc", "compute", "--full", str(root)),
            "rebuild": ("checkpoint", "--rebuild", str(root)),
        }
        if "vacuum" in ops and n <= files_max():
            # VACUUM reads the log and lists N + 10,000 placeholder files; the Spark engine
            # lists on the executors and anti-joins the references there.
            with_files = big_table(n, with_files=True)
            commands["vacuum"] = (
                "vacuum", str(with_files), "--retention-hours", "0", "--force-retention",
                "--dry-run",
            )
        for op in ops:
            if op not in commands:
                continue
            for _ in range(repeats):
                restore_log(root, n)
                with tempfile.NamedTemporaryFile("r", suffix=".json") as report:
                    os.environ["BENCH_SPARK_REPORT"] = report.name
                    m = measure_process(_command(master, *commands[op]))
                    roles = json.loads(report.read() or "{}")
                rows.append(
                    {
                        "benchmark": f"{op} {label} spark",
                        "seconds": round(m.seconds, 2),
                        "tree_peak_rss_mb": round(m.rss_mb, 1),
                        **{f"{k}_mb": round(v, 1) for k, v in sorted(roles.items())},
                    }
                )
        restore_log(root, n)
    print_rows(rows)
    return rows


if __name__ == "__main__":
    main()
