"""What the publishing cross-check costs (issue 13): `write_checkpoint` on M and L, the
whole call (table load included) against the cross-check alone, each in a fresh process.

Two shapes per table:

* as generated (commits only after the checkpoint): the segment read is the independent
  path itself, so the cross-check replays nothing again; its cost is the comparison of the
  bytes about to be published, which the writer's verification does anyway;
* with log compaction files over the commits (M: windows of 10 commits over the last 500;
  L: two small commits added after its one commit, and one window over the three): the
  deltas are reconciled again from the commits alone and their winning actions compared
  with those read through the compactions.

Reported: median seconds of the whole `write_checkpoint`, of `cross_check_snapshot` alone on
a loaded snapshot, and the share of the second in the first.
"""

from __future__ import annotations

import json
import shutil
import statistics

from benchmarks.datasets import DATA, table_l, table_m
from benchmarks.harness import measure, print_rows

_COPY = """
import atexit, shutil, tempfile, os
work = tempfile.mkdtemp(prefix="bench_crosscheck_")
atexit.register(shutil.rmtree, work, True)
p = os.path.join(work, "t")
shutil.copytree({src!r}, p)
"""


def _with_compactions(src, name: str, windows: list[tuple[int, int]], *, extra: int = 0):
    """A copy of `src` with `extra` more small commits (an add and a remove each) and
    compaction files over `windows` (made once)."""
    from delta_ops.maintenance.compaction import compact_log
    from delta_ops.storage import Storage

    root = DATA / name
    marker = root / "_delta_log" / ".compactions-done"
    if marker.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(src, root)
    storage = Storage.for_uri(str(root))
    log = root / "_delta_log"
    latest = max(int(p.name[:20]) for p in log.glob("*.json") if p.name[:20].isdigit())
    for v in range(latest + 1, latest + 1 + extra):
        lines = [
            {"commitInfo": {"timestamp": 1_700_000_100_000 + v, "operation": "WRITE"}},
            {"remove": {"path": f"part-{v - 1:08d}-c000.snappy.parquet",
                        "deletionTimestamp": 1_700_000_100_000 + v, "dataChange": True}},
            {"add": {"path": f"extra-{v}.parquet", "partitionValues": {}, "size": 1,
                     "modificationTime": 1_700_000_100_000 + v, "dataChange": True}},
        ]
        (log / f"{v:020d}.json").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    for start, end in windows:
        compact_log(storage, start=start, end=end)
    marker.write_text("")
    return root


def _tables() -> list[tuple[str, object]]:
    m, big = table_m(), table_l()
    m_compacted = _with_compactions(
        m, "M_compacted", [(s, s + 9) for s in range(500, 1000, 10)]
    )
    l_compacted = _with_compactions(big, "L_compacted", [(2, 4)], extra=2)
    return [
        ("M", m),
        ("M, compactions", m_compacted),
        ("L", big),
        ("L, compactions", l_compacted),
    ]


def main(repeats: int = 3) -> list[dict]:
    rows = []
    for label, root in _tables():
        whole, alone = [], []
        for _ in range(repeats):
            whole.append(measure(
                _COPY.format(src=str(root))
                + "from delta_ops.maintenance.checkpoint import write_checkpoint\n",
                "r = write_checkpoint(p)\nassert not r.already_existed",
            ).seconds)
            alone.append(measure(
                "from delta_ops.log.snapshot.loaded_snapshot import load_snapshot\n"
                "from delta_ops.maintenance.crosscheck import cross_check_snapshot\n"
                "from delta_ops.storage import Storage\n"
                f"snap = load_snapshot(Storage.for_uri({str(root)!r}))\n",
                "cross = cross_check_snapshot(snap, operation='checkpoint')",
            ).seconds)
        w, a = statistics.median(whole), statistics.median(alone)
        rows.append({
            "table": label,
            "write_checkpoint_s": round(w, 3),
            "cross_check_s": round(a, 3),
            "cross_check_share": round(a / w, 3) if w else None,
        })
    print_rows(rows)
    return rows


if __name__ == "__main__":
    main()
