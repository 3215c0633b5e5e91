"""Row-tracking backfill of a large table (issue 15): whole `delta-ops row-tracking
backfill` processes under `/usr/bin/time`, the in-memory path against the streamed one.

The table is `big_tables.big_table(n)` (a classic checkpoint of n adds with JSON stats, then
100 commits; no data files: every add's stats hold numRecords, so no footer is read). Each
run copies its `_delta_log` to a scratch table (untimed), then times
`delta-ops row-tracking backfill SCRATCH --quiet` (upgrade, n / 20,000 batches, enable),
alternating the two paths in one run:

- "loaded": `DELTA_OPS_STREAM_THRESHOLD_BYTES` beyond the table, so the state is loaded
  and refreshed after every batch;
- "streamed": the default threshold (16 MiB; the 1M table's checkpoint is ~37 MB), with a
  checkpoint every 250,000 backfilled files (`--checkpoint-every`, default).

After each run (untimed) a streamed snapshot of the scratch table is checked: row tracking
enabled, no live file without row IDs, n live files. deltalake has no backfill, so there is
no ratio against it.

`BENCH_BACKFILL_SIZES` (default `1M`), `BENCH_BACKFILL_REPEATS` (default 1).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys

from benchmarks.bench_startup import delta_ops
from benchmarks.big_tables import big_table
from benchmarks.datasets import DATA
from benchmarks.harness import measure_process, print_rows

_LOADED_ENV = "DELTA_OPS_STREAM_THRESHOLD_BYTES=1000000000000000"
_CHECK = """
import sys
from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
from delta_ops.maintenance.row_tracking import plan_backfill
from delta_ops.storage import Storage
snap = load_snapshot(Storage.for_uri(sys.argv[1]), stream=True)
plan = plan_backfill(snap)
assert plan.already_enabled and plan.files_missing == 0, plan
assert snap.num_files == int(sys.argv[2]), snap.num_files
print(snap.version, snap.checkpoint_version)
"""


def _sizes() -> list[int]:
    raw = os.environ.get("BENCH_BACKFILL_SIZES", "1M")
    return [int(float(s[:-1]) * 1_000_000) if s.endswith("M") else int(s) for s in raw.split(",")]


def _scratch(template, n: int):
    scratch = DATA / f"backfill_scratch_{n}"
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(template / "_delta_log", scratch / "_delta_log")
    return scratch


def _check(scratch, n: int) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", _CHECK, str(scratch), str(n)],
        capture_output=True, text=True, check=True,
    )
    return proc.stdout.strip()


def main(repeats: int | None = None) -> list[dict]:
    repeats = repeats or int(os.environ.get("BENCH_BACKFILL_REPEATS", "1"))
    rows = []
    for n in _sizes():
        template = big_table(n)
        runs: dict[str, list] = {"loaded": [], "streamed": []}
        checks: dict[str, str] = {}
        for _ in range(repeats):
            for path in ("loaded", "streamed"):  # alternated in one run
                scratch = _scratch(template, n)
                argv = delta_ops("row-tracking", "backfill", str(scratch), "--quiet",
                                 "--confirm-protocol-upgrade")
                if path == "loaded":
                    argv = ["/usr/bin/env", _LOADED_ENV, *argv]
                runs[path].append(measure_process(argv))
                checks[path] = _check(scratch, n)
                shutil.rmtree(scratch, ignore_errors=True)
        for path, ms in runs.items():
            rows.append({
                "name": f"row-tracking backfill {n:,} files ({path})",
                "files": n,
                "path": path,
                "delta_ops_s": round(statistics.median(m.seconds for m in ms), 2),
                "delta_ops_rss_mb": round(max(m.rss_mb for m in ms), 1),
                "repeats": len(ms),
                "final_version_and_checkpoint": checks[path],
                "deltalake": "no backfill operation",
            })
    print_rows(rows)
    return rows


if __name__ == "__main__":
    main()
