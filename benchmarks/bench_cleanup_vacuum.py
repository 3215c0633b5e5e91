"""Metadata cleanup and VACUUM against deltalake, alternating in one run.

1. VACUUM dry run on M with its data files present (1,000 commits x 100 adds with stats,
   partitioned by `part`, 20% of the files later removed, so 20,000 removed files are on
   disk): `vacuum(p, retention_hours=0, force_retention=True, dry_run=True)` vs deltalake's
   `DeltaTable(p).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=True,
   full=True)`. Goal: time ratio <= 0.5.
2. Metadata cleanup on M with aged commits (every commit older than the 30-day default log
   retention) and a checkpoint at the latest version: `cleanup_metadata(p, dry_run=False)` vs
   `DeltaTable(p).cleanup_metadata()`; each run gets a fresh copy of the log (made before
   the clock starts). Goal: time ratio <= 0.3.

Both sides start from a path (loading the table is part of the operation). Before timing,
each operation is run once on each side and their results compared (same files found, same
number deleted), so the figures compare equal work.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks.datasets import DATA, table_m
from benchmarks.harness import compare, measure, print_rows

VACUUM_GOAL = 0.5
CLEANUP_GOAL = 0.3
SCRATCH = DATA / "cleanup_runs"


def _cleanup_template() -> Path:
    """M's log (commit files keep their old mtimes) plus a checkpoint at the latest version,
    written once by deltalake."""
    template = DATA / "M_cleanup_template"
    if (template / "_delta_log" / "_last_checkpoint").exists():
        return template
    shutil.rmtree(template, ignore_errors=True)
    src = table_m()
    (template / "_delta_log").mkdir(parents=True)
    for entry in (src / "_delta_log").iterdir():
        shutil.copy2(entry, template / "_delta_log" / entry.name)
    measure(
        f"from deltalake import DeltaTable\np = {str(template)!r}",
        "DeltaTable(p).create_checkpoint()",
    )
    return template


def _copy_setup(template: Path) -> str:
    return (
        "import shutil, tempfile\n"
        f"d = tempfile.mkdtemp(dir={str(SCRATCH)!r})\n"
        f"p = d + '/t'\nshutil.copytree({str(template)!r}, p)\n"
    )


_CHECK = """
import json, os, shutil, sys
from deltalake import DeltaTable
from delta_ops.maintenance.cleanup import cleanup_metadata
from delta_ops.maintenance.vacuum import vacuum
vacuum_root, template, scratch = sys.argv[1:4]
ours = vacuum(vacuum_root, retention_hours=0, force_retention=True, dry_run=True)
theirs = DeltaTable(vacuum_root).vacuum(
    retention_hours=0, enforce_retention_duration=False, dry_run=True, full=True)
prefix = vacuum_root.rstrip("/") + "/"
theirs_rel = {t.removeprefix("file://").removeprefix(prefix) for t in theirs}
a, b = os.path.join(scratch, "check_a"), os.path.join(scratch, "check_b")
shutil.copytree(template, a)
shutil.copytree(template, b)
ours_c = cleanup_metadata(a, dry_run=False)
DeltaTable(b).cleanup_metadata()
kept_a = sorted(n for n in os.listdir(os.path.join(a, "_delta_log")) if n.endswith(".json"))
kept_b = sorted(n for n in os.listdir(os.path.join(b, "_delta_log")) if n.endswith(".json"))
print(json.dumps({
    "vacuum_same": set(ours.files) == theirs_rel, "vacuum_files": ours.num_files,
    "vacuum_files_deltalake": len(theirs_rel),
    "vacuum_diff": sorted(set(ours.files) ^ theirs_rel)[:5],
    "cleanup_same": kept_a == kept_b, "cleanup_files": ours_c.num_files,
    "commits_kept": len(kept_a), "commits_kept_deltalake": len(kept_b),
}))
"""


def _check_same_work(vacuum_root: Path, template: Path) -> dict:
    """Run each operation once on each side (untimed, in a child process so that its memory
    does not count in the measured processes' peak RSS) and compare what they do."""
    proc = subprocess.run(
        [sys.executable, "-c", _CHECK, str(vacuum_root), str(template), str(SCRATCH)],
        capture_output=True, text=True, check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"comparison run failed:\n{proc.stderr[-2000:]}")
    work = json.loads(proc.stdout.strip().splitlines()[-1])
    if not (work["vacuum_same"] and work["cleanup_same"]):
        raise AssertionError(f"delta_ops and deltalake disagree: {work}")
    return {k: work[k] for k in ("vacuum_files", "cleanup_files", "commits_kept")}


def main(repeats: int = 3) -> list[dict]:
    shutil.rmtree(SCRATCH, ignore_errors=True)
    SCRATCH.mkdir(parents=True)
    vacuum_root = table_m(with_files=True)
    template = _cleanup_template()
    work = _check_same_work(vacuum_root, template)
    print(f"same work: {work}")
    rows = []
    rows.append(compare(
        "vacuum dry run M",
        (f"from delta_ops.maintenance.vacuum import vacuum\np = {str(vacuum_root)!r}",
         "r = vacuum(p, retention_hours=0, force_retention=True, dry_run=True)"),
        (f"from deltalake import DeltaTable\np = {str(vacuum_root)!r}",
         "r = DeltaTable(p).vacuum(retention_hours=0, enforce_retention_duration=False, "
         "dry_run=True, full=True)"),
        repeats=repeats, goal_time_ratio=VACUUM_GOAL,
    ))
    rows.append(compare(
        "cleanup M (aged)",
        ("from delta_ops.maintenance.cleanup import cleanup_metadata\n" + _copy_setup(template),
         "r = cleanup_metadata(p, dry_run=False)"),
        ("from deltalake import DeltaTable\n" + _copy_setup(template),
         "DeltaTable(p).cleanup_metadata()"),
        repeats=repeats, goal_time_ratio=CLEANUP_GOAL,
    ))
    for row in rows:
        row.update(work)
    print_rows(rows)
    shutil.rmtree(SCRATCH, ignore_errors=True)
    return rows


if __name__ == "__main__":
    main()
