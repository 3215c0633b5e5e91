"""Scaling (issue 15): whole `delta-ops` processes on tables of 1M, 3M and 10M live files
(`benchmarks.big_tables`: a classic checkpoint of N adds at version 1, 100 commits of 100
removes and 100 adds after it), peak RSS and wall time as `/usr/bin/time` sees them.

For each size:

- `checkpoint` (full rebuild at version 101, from the old checkpoint and the commits) vs
  deltalake's `DeltaTable(p).create_checkpoint()`, alternating; the table's `_delta_log` is
  restored before every process (untimed).
- `vacuum --retention-hours 0 --force-retention --dry-run` (a full listing of the N + 10,000
  placeholder data files) vs deltalake's `vacuum(..., dry_run=True, full=True)`, alternating;
  only on the sizes generated with placeholder files (up to 3M, `BENCH_SCALE_FILES_MAX`).
  These tables take VACUUM's partitioned path (references and listing spilled by bucket);
  the operation `vacuum-memory` runs the same command on the in-memory path
  (`DELTA_OPS_VACUUM_PARTITION_FILES` set beyond the table) against deltalake again.
- `crc compute --full` (the checksum of version 101 from the whole state); no deltalake
  counterpart.
- `rebuild`: `checkpoint --rebuild` (the same version, its whole state reconciled by bucket
  from the old checkpoint and the commits, `log.snapshot.rebuild`) vs deltalake's
  `create_checkpoint()`, alternating, the log restored before every process.
- `json-first`: the first checkpoint of a log of commits only (`big_tables.json_table`: N
  adds with statistics over 100 JSON commits, about 330 bytes each, no checkpoint), which
  `checkpoint` rebuilds by bucket because its commits pass 64 MiB, vs deltalake's
  `create_checkpoint()`; `json-first-memory` runs the same with the rebuild threshold set
  beyond the log (the commits reconciled in memory, as before the rebuild existed).

Each row also has RSS per live file (peak RSS / N, interpreter included). Medians of the
wall times, the largest peak RSS. Before timing, delta_ops and deltalake load the table once
(in a child) and must agree on its live files.

Sizes: `BENCH_SCALE_SIZES` (comma-separated, `1M,3M,10M` or plain numbers; default `1M`, so
`make bench` stays reasonable); `BENCH_SCALE_OPS` (default `checkpoint,vacuum,crc`; also
`vacuum-memory`, `rebuild`, `json-first`, `json-first-memory`);
`BENCH_SCALE_REPEATS` (default 3); placeholder files for
sizes up to `BENCH_SCALE_FILES_MAX` (default 3M). Generating a table takes about 25 s per
million files with placeholders (once; kept under benchmarks/data/).
"""

from __future__ import annotations

import os
import statistics

from benchmarks.bench_startup import _CHECKPOINT, _VACUUM, delta_ops, deltalake
from benchmarks.big_tables import (
    big_table,
    check_same,
    json_table,
    restore_json_log,
    restore_log,
)
from benchmarks.harness import compare_processes, measure_process, print_rows

#: VACUUM's in-memory path whatever the table's size (`env` execs the command: the process
#: measured is still delta-ops).
_IN_MEMORY = ["env", "DELTA_OPS_VACUUM_PARTITION_FILES=1000000000000000"]
#: The commits of a JSON-only log reconciled in memory (no rebuild by bucket).
_NO_REBUILD = ["env", "DELTA_OPS_REBUILD_THRESHOLD_BYTES=1000000000000000"]


def _count(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1_000, "M": 1_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("KM")) * scale)


def sizes() -> list[int]:
    return [_count(s) for s in os.environ.get("BENCH_SCALE_SIZES", "1M").split(",") if s.strip()]


def _per_file(row: dict, n: int) -> dict:
    row["files"] = n
    for side in ("delta_ops", "deltalake"):
        rss = row.get(f"{side}_rss_mb")
        row[f"{side}_kb_per_file"] = None if rss is None else round(rss * 1024 / n, 3)
    return row


def _ours_only(name: str, argv: list[str], repeats: int) -> dict:
    runs = [measure_process(argv) for _ in range(repeats)]
    return {
        "benchmark": name,
        "delta_ops_s": round(statistics.median(m.seconds for m in runs), 4),
        "deltalake_s": None,
        "time_ratio": None,
        "delta_ops_rss_mb": round(max(m.rss_mb for m in runs), 1),
        "deltalake_rss_mb": None,
        "rss_ratio": None,
        "goal_time_ratio": None,
    }


def files_max() -> int:
    """The largest size generated with placeholder data files (`BENCH_SCALE_FILES_MAX`)."""
    return _count(os.environ.get("BENCH_SCALE_FILES_MAX", "3M"))


def _json_first(n: int, label: str, ops: list[str], repeats: int) -> list[dict]:
    """The first checkpoint of a log of n files in JSON commits: rebuilt by bucket (the
    default above 64 MiB of commits) and, with `json-first-memory`, in memory."""
    wanted = [op for op in ("json-first", "json-first-memory") if op in ops]
    if not wanted:
        return []
    root = json_table(n)
    p = str(root)

    def restore(root=root) -> None:
        restore_json_log(root)

    rows = []
    try:
        for op in wanted:
            ours = delta_ops("checkpoint", p)
            name = f"first checkpoint of JSON {label}"
            if op == "json-first-memory":
                ours, name = [*_NO_REBUILD, *ours], f"{name}, in memory"
            rows.append(_per_file(compare_processes(
                name, ours, deltalake(_CHECKPOINT, p), repeats=repeats, goal_time_ratio=0.5,
                before_each=restore,
            ), n))
    finally:
        restore()
    return rows


def main(repeats: int | None = None) -> list[dict]:
    repeats = repeats or int(os.environ.get("BENCH_SCALE_REPEATS", "3"))
    most_files = files_max()
    ops = os.environ.get("BENCH_SCALE_OPS", "checkpoint,vacuum,crc").split(",")
    rows = []
    for n in sizes():
        label = f"{n // 1_000_000}M" if n % 1_000_000 == 0 else str(n)
        rows += _json_first(n, label, ops, repeats)
        if not {"checkpoint", "vacuum", "vacuum-memory", "crc", "rebuild"} & set(ops):
            continue
        with_files = n <= most_files
        root = big_table(n, with_files=with_files)
        restore_log(root, n)  # also after an interrupted run
        check_same(root, n)
        p = str(root)

        def restore(root=root, n=n) -> None:
            restore_log(root, n)

        if "checkpoint" in ops:
            try:
                rows.append(_per_file(compare_processes(
                    f"checkpoint {label}", delta_ops("checkpoint", p),
                    deltalake(_CHECKPOINT, p), repeats=repeats, goal_time_ratio=0.5,
                    before_each=restore,
                ), n))
            finally:
                restore()
        if "rebuild" in ops:
            try:
                rows.append(_per_file(compare_processes(
                    f"checkpoint --rebuild {label}", delta_ops("checkpoint", "--rebuild", p),
                    deltalake(_CHECKPOINT, p), repeats=repeats, goal_time_ratio=0.5,
                    before_each=restore,
                ), n))
            finally:
                restore()
        dry_run = delta_ops(
            "vacuum", p, "--retention-hours", "0", "--force-retention", "--dry-run"
        )
        if with_files and "vacuum" in ops:
            rows.append(_per_file(compare_processes(
                f"vacuum dry run {label}", dry_run, deltalake(_VACUUM, p), repeats=repeats,
            ), n))
        if with_files and "vacuum-memory" in ops:
            rows.append(_per_file(compare_processes(
                f"vacuum dry run {label}, in memory", [*_IN_MEMORY, *dry_run],
                deltalake(_VACUUM, p), repeats=repeats,
            ), n))
        if "crc" in ops:
            rows.append(_per_file(_ours_only(
                f"crc compute {label}", delta_ops("crc", "compute", "--full", p), repeats
            ), n))
    print_rows(rows)
    return rows


if __name__ == "__main__":
    main()
