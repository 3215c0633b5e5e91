"""Where the memory of a full checkpoint rebuild goes (issue 15, docs/scaling.md): the
stages of `write_checkpoint` for a classic checkpoint run one by one in this process, with
for each the growth of the peak RSS (VmHWM, reset before each stage through
/proc/self/clear_refs), the Arrow memory pool's bytes at the end and its peak, and the
Python heap's peak (tracemalloc, only with --tracemalloc: it slows the Python parts).
Then the bytes of the snapshot's file actions per column.

    python -m benchmarks.scale_breakdown 1000000 [--tracemalloc]

Runs on `big_tables.big_table(n, with_files=True)` when it exists, else on the table
without placeholder files (generated if missing). Nothing is written to the table: the
checkpoint's bytes are built, verified and copied as `write_checkpoint` does, then dropped.
Linux only (reads /proc/self/status).
"""

from __future__ import annotations

import json
import sys
import time
import tracemalloc

import pyarrow as pa


def _status(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(key)


def _reset_hwm() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


class Stages:
    def __init__(self, trace: bool) -> None:
        self.trace = trace
        self.rows: list[dict] = []
        self.pool = pa.default_memory_pool()

    def run(self, name: str, fn):
        rss0 = _status("VmRSS")
        _reset_hwm()
        if self.trace:
            tracemalloc.start()
        t0 = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t0
        py_peak = None
        if self.trace:
            py_peak = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
        self.rows.append({
            "stage": name,
            "seconds": round(dt, 2),
            "rss_before_mb": round(rss0, 1),
            "rss_peak_mb": round(_status("VmHWM"), 1),
            "rss_after_mb": round(_status("VmRSS"), 1),
            "arrow_after_mb": round(pa.total_allocated_bytes() / 2**20, 1),
            "arrow_pool_peak_mb": round(self.pool.max_memory() / 2**20, 1),
            "python_peak_mb": None if py_peak is None else round(py_peak, 1),
        })
        return out


def main(argv: list[str]) -> int:
    from benchmarks.big_tables import big_table, table_root

    n = int(argv[0]) if argv else 1_000_000
    trace = "--tracemalloc" in argv
    root = table_root(n, with_files=True)
    if not root.with_name(root.name + ".done").exists():
        root = big_table(n)
    s = Stages(trace)
    s.run("imports", lambda: __import__("delta_ops.maintenance.checkpoint.writer"))
    from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
    from delta_ops.maintenance.checkpoint import actions as act
    from delta_ops.maintenance.checkpoint import writer as w
    from delta_ops.maintenance.checkpoint.plan import plan_checkpoint
    from delta_ops.maintenance.crosscheck import cross_check_snapshot
    from delta_ops.storage import Storage

    storage = Storage.for_uri(str(root))
    now = int(time.time() * 1000)
    snap = s.run("load_snapshot", lambda: load_snapshot(storage))
    plan = s.run("plan_checkpoint", lambda: plan_checkpoint(snap, now_ms=now))
    s.run("cross_check", lambda: cross_check_snapshot(snap, operation="checkpoint", now_ms=now))
    schema = w.classic_schema(plan.layout.add)

    def serialize():
        batches = [act.non_file_batch(act.non_file_columns(snap, plan.layout), schema)]
        batches = __import__("itertools").chain(
            batches, act.file_action_batches(snap.files, plan.tombstones, plan.layout, schema)
        )
        return w._parquet_bytes(schema, batches)

    buf = s.run("serialize (parquet bytes in memory)", serialize)

    def verify():
        adds, removes = w._expected_files(snap.files, plan.tombstones)
        return w.verify_file(
            buf, "parquet",
            w.Expected(adds, removes, w._expected_non_file(snap, plan)),
            table=plan.table, version=plan.version, file="(not written)",
        )

    s.run("verify (read back and compare)", verify)
    data = s.run("to_pybytes (copy for the put)", buf.to_pybytes)
    columns = {
        name: round(snap.files.column(name).nbytes / n, 1) for name in snap.files.column_names
    }
    report = {
        "table": root.name,
        "files": snap.num_files,
        "checkpoint_bytes": len(data),
        "stages": s.rows,
        "snapshot_files_bytes_per_file": round(snap.files.nbytes / n, 1),
        "snapshot_files_bytes_per_file_by_column": columns,
        "tombstones_bytes": snap.tombstones.nbytes,
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
