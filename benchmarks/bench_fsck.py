"""fsck at scale (issue 27): whole `delta-ops fsck` processes on the scale benchmarks' table
(`benchmarks.big_tables.big_table(n, with_files=True)`: N live files in 100 partitions, 100
commits after a classic checkpoint, a placeholder for every file ever added), beside a
listing of the same directories alone (`LocalEngine.list_files` one directory at a time,
each listing dropped once counted: the cheapest listing with sizes, streamed, as fsck's
data check lists a group of directories at a time), peak RSS and wall time as
`/usr/bin/time` sees them.

The placeholders are empty; before timing they are given the sizes the log records (sparse,
`os.truncate`, once: a marker `<root>.sized` beside the table), so a healthy table reports
no size mismatch. Rows:

- `listing N`: the listing alone (one process: open the storage, list the 100 directories
  one by one);
- `fsck --no-leftovers N`: the log, the latest `.crc`, every live file from one listing;
- `fsck N`: the same plus VACUUM's dry-run plan (a second listing) for unreferenced files.

Every placeholder is younger than VACUUM's retention, so `fsck N` finds no unreferenced
file: the figures are the cost of looking, not of the findings.

Figures (2 rounds, peak RSS the largest, 2026-11-26, 2 cores, mostly quiet):

| N | listing alone | fsck --no-leftovers | fsck |
|---|---|---|---|
| 1M | 8.9 s, 81 MB | 10.1 s, 310 MB | 12.5 s, 375 MB |
| 3M | 37.1 s, 91 MB | 40.9 s, 313 MB | 51.0 s, 380 MB |

Before the leftovers pass was made flat (Arrow's mimalloc pool, VACUUM's own bucket sizing;
and the listing held whole): 1M 16 s, 551 MB / 16 s, 393 MB / 21 s, 513 MB; 3M 35 s,
1,486 MB / 43 s, 411 MB / 53 s, 597 MB (a shared machine, load 3 to 5).

Each row has RSS per live file (peak RSS / N). No deltalake counterpart (it has no fsck).

Sizes: `BENCH_FSCK_SIZES` (comma-separated, `100000`, `1M`, `3M`; default `300000`, quick
on a shared machine; `3M` is the scale benchmarks' 3M-file table, generated once under
benchmarks/data/ in a few minutes plus the sizing: 1M took about 130 s here);
`BENCH_FSCK_REPEATS` (default 3).
"""

from __future__ import annotations

import os
import statistics
import sys

from benchmarks.bench_startup import delta_ops
from benchmarks.big_tables import COMMITS, PER_COMMIT, _path, _size, big_table
from benchmarks.harness import measure_process, print_rows

_LISTING = """
import sys
from delta_ops.engine.local import LocalEngine
from delta_ops.storage import Storage
storage = Storage.for_uri(sys.argv[1])
engine = LocalEngine()
try:
    dirs = sorted(p.rsplit("/", 1)[-1] for p in storage.list_subdirs(""))
    dirs = [d for d in dirs if not d.startswith(("_", "."))]
    # One directory at a time (what fsck's data check lists per group), nothing kept.
    print(sum(engine.list_files(storage, [d]).num_rows for d in dirs))
finally:
    engine.close()
"""


def _count(text: str) -> int:
    text = text.strip().upper()
    return int(float(text[:-1]) * 1_000_000) if text.endswith("M") else int(text)


def sizes() -> list[int]:
    return [_count(s) for s in os.environ.get("BENCH_FSCK_SIZES", "300000").split(",")]


def sized_table(n: int):
    """The scale table of `n` live files, its placeholders at the sizes the log records."""
    root = big_table(n, with_files=True)
    marker = root.with_name(root.name + ".sized")
    if not marker.exists():
        base = os.fspath(root) + "/"
        for i in range(n + COMMITS * PER_COMMIT):
            os.truncate(base + _path(i), _size(i))
        marker.write_text("")
    return root


def _row(name: str, argv: list[str], n: int, repeats: int) -> dict:
    runs = [measure_process(argv) for _ in range(repeats)]
    rss = max(m.rss_mb for m in runs)
    return {
        "benchmark": name,
        "delta_ops_s": round(statistics.median(m.seconds for m in runs), 4),
        "deltalake_s": None,
        "time_ratio": None,
        "delta_ops_rss_mb": round(rss, 1),
        "deltalake_rss_mb": None,
        "rss_ratio": None,
        "goal_time_ratio": None,
        "rss_kb_per_file": round(rss * 1024 / n, 3),
    }


def main(repeats: int | None = None) -> list[dict]:
    repeats = repeats or int(os.environ.get("BENCH_FSCK_REPEATS", "3"))
    rows = []
    for n in sizes():
        label = f"{n // 1_000_000}M" if n % 1_000_000 == 0 else str(n)
        p = str(sized_table(n))
        # Alternated: listing, fsck without leftovers, fsck; one of each per round.
        runs: dict[str, list[dict]] = {"listing": [], "no-leftovers": [], "fsck": []}
        for _ in range(repeats):
            runs["listing"].append(_row(
                f"listing {label}", [sys.executable, "-c", _LISTING, p], n, 1))
            runs["no-leftovers"].append(_row(
                f"fsck --no-leftovers {label}", delta_ops("fsck", "--no-leftovers", p), n, 1))
            runs["fsck"].append(_row(f"fsck {label}", delta_ops("fsck", p), n, 1))
        for got in runs.values():
            row = dict(got[0])
            row["delta_ops_s"] = round(statistics.median(r["delta_ops_s"] for r in got), 4)
            row["delta_ops_rss_mb"] = max(r["delta_ops_rss_mb"] for r in got)
            row["rss_kb_per_file"] = round(row["delta_ops_rss_mb"] * 1024 / n, 3)
            rows.append(row)
    print_rows(rows)
    return rows


if __name__ == "__main__":
    main()
