"""Checkpoint writing: delta_ops `write_checkpoint(p)` vs deltalake
`DeltaTable(p).create_checkpoint()`, table load included on both sides, on M (1,000 JSON
commits x 100 adds, 20% removed) and L (1,000,000 adds in a checkpoint plus a commit).

Each run works on a fresh copy of the table (made before the clock starts), in its own
process, ours and theirs alternating. Goal: time ratio <= 0.5, peak RSS ratio <= 1.
"""

from __future__ import annotations

from benchmarks.datasets import table_l, table_m
from benchmarks.harness import compare, print_rows

_SETUP = """
import atexit, shutil, tempfile, os
src = {src!r}
work = tempfile.mkdtemp(prefix="bench_checkpoint_")
atexit.register(shutil.rmtree, work, True)
p = os.path.join(work, "t")
shutil.copytree(src, p)
{imports}
"""


def main(repeats: int = 3) -> list[dict]:
    rows = []
    for label, root in (("checkpoint M", table_m()), ("checkpoint L", table_l())):
        ours = (
            _SETUP.format(
                src=str(root),
                imports="from delta_ops.maintenance.checkpoint import write_checkpoint",
            ),
            "r = write_checkpoint(p)\nassert not r.already_existed",
        )
        theirs = (
            _SETUP.format(src=str(root), imports="from deltalake import DeltaTable"),
            "DeltaTable(p).create_checkpoint()",
        )
        rows.append(compare(label, ours, theirs, repeats=repeats, goal_time_ratio=0.5))
    print_rows(rows)
    return rows


if __name__ == "__main__":
    main()
