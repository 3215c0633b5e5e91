"""Version checksums and log compaction.

1. On L (1,000,000 files in a checkpoint at version 1, commit 2 with 100 adds), with `1.crc`
   present: writing `2.crc` incrementally (goal < 0.2 s), beside computing version 2's
   checksum by full replay of the checkpoint.
2. JSON replay of M (1,000 commits x 100 adds with stats, 20% removed): loading the latest
   snapshot with compactions every 10 commits vs from the commits alone (time ratio).

Each figure is the median of `repeats` fresh-process runs (benchmarks.harness.measure). The
tables are linked (or copied) from benchmarks/data so the shared datasets stay untouched.
"""

from __future__ import annotations

import os
import shutil
import statistics
from pathlib import Path

from benchmarks.datasets import DATA, table_l, table_m
from benchmarks.harness import measure, print_rows

GOAL_INCREMENTAL_S = 0.2


def _link_log(src: Path, dest: Path) -> Path:
    """A table at `dest` whose `_delta_log` files are hard links to `src`'s (copies when the
    file system cannot link); data files are not needed by these benchmarks."""
    if dest.exists():
        shutil.rmtree(dest)
    log = dest / "_delta_log"
    log.mkdir(parents=True)
    for entry in (src / "_delta_log").iterdir():
        if not entry.is_file():
            continue
        try:
            os.link(entry, log / entry.name)
        except OSError:
            shutil.copy2(entry, log / entry.name)
    return dest


def _median(setup: str, run: str, repeats: int) -> tuple[float, float]:
    runs = [measure(setup, run) for _ in range(repeats)]
    return statistics.median(m.seconds for m in runs), max(m.rss_mb for m in runs)


def bench_l(repeats: int) -> list[dict]:
    root = _link_log(table_l(), DATA / "crc_L")
    # N-1.crc for the incremental path, written in a child process: a child forked from a
    # parent that loaded L would inherit its peak RSS and spoil the RSS figures.
    measure(
        "from delta_ops.maintenance.checksum import write_checksum",
        f"write_checksum({str(root)!r}, version=1, method='full')",
    )
    crc2 = root / "_delta_log" / "00000000000000000002.crc"
    incremental = _median(
        f"import os\nfrom delta_ops.maintenance.checksum import write_checksum\n"
        f"p = {str(root)!r}\ncrc = {str(crc2)!r}\n"
        "os.path.exists(crc) and os.remove(crc)",
        "r = write_checksum(p, version=2)\nassert r.written and r.method == 'incremental', r",
        repeats,
    )
    full = _median(
        f"from delta_ops.maintenance.checksum import compute_version_checksum\np = {str(root)!r}",
        "c = compute_version_checksum(p, version=2, method='full')\n"
        "assert c.checksum.num_files == 1_000_100",
        repeats,
    )
    return [
        {"benchmark": "write 2.crc on L, incremental", "seconds": round(incremental[0], 4),
         "rss_mb": round(incremental[1], 1), "goal_s": GOAL_INCREMENTAL_S,
         "meets_goal": incremental[0] < GOAL_INCREMENTAL_S},
        {"benchmark": "checksum of v2 on L, full replay", "seconds": round(full[0], 4),
         "rss_mb": round(full[1], 1), "goal_s": None, "meets_goal": None},
    ]


def bench_m(repeats: int) -> list[dict]:
    plain = table_m()
    compacted = _link_log(plain, DATA / "compacted_M")
    measure(
        "from delta_ops.maintenance.compaction import compact_by_policy",
        f"r = compact_by_policy({str(compacted)!r}, interval=10)\nassert len(r) == 100, len(r)",
    )
    load = "s = load_snapshot(st)\nassert s.version == 999 and s.files.num_rows == 80_020"
    tables = (("replay M, commits only", plain), ("replay M, compactions/10", compacted))
    runs: dict[str, list] = {label: [] for label, _ in tables}
    for _ in range(repeats):  # alternate, so machine drift hits both alike
        for label, root in tables:
            runs[label].append(measure(
                "from delta_ops.log.snapshot.loaded_snapshot import load_snapshot\n"
                "from delta_ops.storage import Storage\n"
                f"st = Storage.for_uri({str(root)!r})",
                load,
            ))
    rows = []
    figures = {}
    for label, _ in tables:
        t = statistics.median(m.seconds for m in runs[label])
        figures[label] = t
        rows.append({"benchmark": label, "seconds": round(t, 4),
                     "rss_mb": round(max(m.rss_mb for m in runs[label]), 1),
                     "goal_s": None, "meets_goal": None})
    ratio = figures["replay M, compactions/10"] / figures["replay M, commits only"]
    rows[-1]["ratio_vs_commits"] = round(ratio, 3)
    rows[0]["ratio_vs_commits"] = 1.0
    return rows


def main(repeats: int = 5) -> dict:
    rows = bench_l(repeats) + bench_m(repeats)
    for r in rows:
        r.setdefault("ratio_vs_commits", None)
    print_rows(rows)
    return {
        "rows": rows,
        "incremental_crc_L_s": rows[0]["seconds"],
        "full_crc_L_s": rows[1]["seconds"],
        "replay_M_commits_s": rows[2]["seconds"],
        "replay_M_compacted_s": rows[3]["seconds"],
        "replay_M_ratio": rows[3]["ratio_vs_commits"],
    }


if __name__ == "__main__":
    main()
