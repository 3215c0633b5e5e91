"""Whole processes, as `/usr/bin/time` sees them: the `delta-ops` command against the
deltalake program doing the same, each a fresh interpreter (start, imports, work, exit),
alternating in one run (`benchmarks.harness.compare_processes`).

- `snapshot` of a one-file corpus table (`golden__hive__deltatbl-map-types-correctly`):
  the fixed cost. deltalake: `DeltaTable(p)` then version, metadata, protocol and the add
  actions (what `delta-ops snapshot` prints: version, protocol, metadata, file count and
  size). Goal: time ratio <= 1.
- `snapshot` of M (1,000 JSON commits) and L (1,000,000 adds in a checkpoint), the same
  programs. Goal <= 0.5.
- The two JSON-only snapshots again with the small-log path off
  (`DELTA_OPS_SMALL_LOG_BYTES=0`, `log.snapshot.small_snapshot`): the Arrow path, for reference.
- `checkpoint` of M (a fresh copy of the table before every process, untimed) vs
  `DeltaTable(p).create_checkpoint()`. Goal <= 0.5.
- `vacuum --retention-hours 0 --force-retention --dry-run` of M with its data files vs
  `DeltaTable(p).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=True,
  full=True)`. Goal <= 0.5.

`delta-ops` runs as its console script does (`sys.exit(delta_ops.cli.run())`) with this
interpreter. Run from a byte-compiled checkout (`make install` compiles it), or the first
processes pay for compiling the project when the environment sets PYTHONDONTWRITEBYTECODE.

`BENCH_STARTUP_REPEATS` sets the rounds (default 5). With `BENCH_BASELINE=DIR` (another
checkout, e.g. `git worktree add DIR COMMIT`, then `python -m compileall -q DIR/delta_ops`),
that checkout's `delta-ops` runs too, in the same rounds, and the rows gain `baseline_s`,
`baseline_time_ratio` and `baseline_rss_mb`: before and after a change, measured under the
same conditions.
"""

from __future__ import annotations

import os
import shutil
import sys

from benchmarks.datasets import DATA, table_l, table_m
from benchmarks.harness import compare_processes, print_rows
from delta_ops_tests.support.corpus import corpus_root

ONE_FILE_TABLE = "delta/golden__hive__deltatbl-map-types-correctly"
SMALL_GOAL = 1.0
GOAL = 0.5

_DELTA_OPS = "import sys\nfrom delta_ops.cli import run\nsys.exit(run())\n"
_SNAPSHOT = (
    "import sys\nfrom deltalake import DeltaTable\n"
    "t = DeltaTable(sys.argv[1])\n"
    "t.version(); t.metadata(); t.protocol()\n"
    "n = t.get_add_actions(flatten=False).num_rows\n"
)
_CHECKPOINT = (
    "import sys\nfrom deltalake import DeltaTable\nDeltaTable(sys.argv[1]).create_checkpoint()\n"
)
_VACUUM = (
    "import sys\nfrom deltalake import DeltaTable\n"
    "DeltaTable(sys.argv[1]).vacuum(retention_hours=0, enforce_retention_duration=False,"
    " dry_run=True, full=True)\n"
)


def delta_ops(*args: str, arrow: bool = False) -> list[str]:
    """The `delta-ops` command with `args`, run with this interpreter; with `arrow`, the
    small-log path of `snapshot` is off (`env` execs the interpreter: the process measured
    is still the interpreter's)."""
    argv = [sys.executable, "-c", _DELTA_OPS, *args]
    return ["/usr/bin/env", "DELTA_OPS_SMALL_LOG_BYTES=0", *argv] if arrow else argv


def deltalake(program: str, *args: str) -> list[str]:
    return [sys.executable, "-c", program, *args]


def _baseline(*args: str) -> tuple[list[str], str] | None:
    """`BENCH_BASELINE`'s `delta-ops` with `args`, run in that checkout (None when unset)."""
    checkout = os.environ.get("BENCH_BASELINE")
    if not checkout:
        return None
    checkout = os.path.abspath(checkout)
    env = ["/usr/bin/env", f"PYTHONPATH={checkout}"]
    return [*env, sys.executable, "-c", _DELTA_OPS, *args], checkout


def main(repeats: int | None = None, *, large: bool = True) -> list[dict]:
    repeats = repeats or int(os.environ.get("BENCH_STARTUP_REPEATS", "5"))
    one = str(corpus_root() / ONE_FILE_TABLE)
    m = str(table_m())
    rows = [
        compare_processes(
            "snapshot 1 file", delta_ops("snapshot", one), deltalake(_SNAPSHOT, one),
            repeats=repeats, goal_time_ratio=SMALL_GOAL, baseline=_baseline("snapshot", one),
        ),
        compare_processes(
            "snapshot M", delta_ops("snapshot", m), deltalake(_SNAPSHOT, m),
            repeats=repeats, goal_time_ratio=GOAL, baseline=_baseline("snapshot", m),
        ),
        compare_processes(
            "snapshot 1 file, Arrow path", delta_ops("snapshot", one, arrow=True),
            deltalake(_SNAPSHOT, one), repeats=repeats,
        ),
        compare_processes(
            "snapshot M, Arrow path", delta_ops("snapshot", m, arrow=True),
            deltalake(_SNAPSHOT, m), repeats=repeats,
        ),
    ]
    if large:
        big = str(table_l())
        rows.append(compare_processes(
            "snapshot L", delta_ops("snapshot", big), deltalake(_SNAPSHOT, big),
            repeats=repeats, goal_time_ratio=GOAL, baseline=_baseline("snapshot", big),
        ))
    work = DATA / "startup_runs" / "t"

    def fresh_copy() -> None:
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(m, work)

    rows.append(compare_processes(
        "checkpoint M", delta_ops("checkpoint", str(work)), deltalake(_CHECKPOINT, str(work)),
        repeats=repeats, goal_time_ratio=GOAL, before_each=fresh_copy,
        baseline=_baseline("checkpoint", str(work)),
    ))
    shutil.rmtree(work.parent, ignore_errors=True)
    with_files = str(table_m(with_files=True))
    vacuum = ("vacuum", with_files, "--retention-hours", "0", "--force-retention", "--dry-run")
    rows.append(compare_processes(
        "vacuum dry run M", delta_ops(*vacuum), deltalake(_VACUUM, with_files),
        repeats=repeats, goal_time_ratio=GOAL, baseline=_baseline(*vacuum),
    ))
    print_rows(rows)
    return rows


if __name__ == "__main__":
    main(large="--no-large" not in sys.argv)
