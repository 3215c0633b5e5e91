"""Snapshot load: delta_ops `DeltaTable(p).snapshot()` vs deltalake
`DeltaTable(p).get_add_actions()` on M (1,000 JSON commits) and L (1,000,000-add checkpoint).
Goal: time ratio <= 0.5, peak RSS ratio <= 1."""

from __future__ import annotations

from benchmarks.datasets import table_l, table_m
from benchmarks.harness import compare, print_rows


def main(repeats: int = 3) -> list[dict]:
    rows = []
    for label, root in (("snapshot M", table_m()), ("snapshot L", table_l())):
        ours = (
            f"from delta_ops.table import DeltaTable\np = {str(root)!r}",
            "s = DeltaTable(p).snapshot(); n = s.files.num_rows",
        )
        theirs = (
            f"from deltalake import DeltaTable\np = {str(root)!r}",
            "n = DeltaTable(p).get_add_actions(flatten=False).num_rows",
        )
        rows.append(compare(label, ours, theirs, repeats=repeats, goal_time_ratio=0.5))
    print_rows(rows)
    return rows


if __name__ == "__main__":
    main()
