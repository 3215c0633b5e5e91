"""Row-tracking backfill: a 100,000-file table (stats present) in 20,000-file batches.

The table is created once under benchmarks/data/ through `delta_ops.commit.create_table`
(one commit of 100,000 adds, 100 rows each, no row IDs, legacy protocol (1, 2)); its data
files are not written: with `numRecords` in every add's stats the backfill never opens them.
Each measurement copies the table's log to a scratch directory (setup, untimed) and runs
`backfill_row_tracking` in a fresh interpreter: wall time and peak RSS of that process. The
run is protocol upgrade + 5 batches + enablement = 7 commits. Two variants: the 100,000 adds
in one JSON commit (the first snapshot parses them all), and the same table with a classic
checkpoint of version 0 (how tables of that size are usually read).
"""

from __future__ import annotations

import shutil
import statistics

from benchmarks.datasets import DATA, T0, _stats
from benchmarks.harness import measure, print_rows

FILES = 100_000
BATCH = 20_000


def table_rt(files: int = FILES, *, checkpoint: bool = False) -> str:
    """The template table (created once; returns its root); with `checkpoint`, a copy with a
    classic checkpoint of version 0 (how a real table of this size is usually read)."""
    if checkpoint:
        root = DATA / f"RT_{files}_checkpointed"
        if not (root / "_delta_log" / "_last_checkpoint").exists():
            shutil.rmtree(root, ignore_errors=True)
            shutil.copytree(table_rt(files), root)
            from delta_ops.maintenance.checkpoint import write_checkpoint

            write_checkpoint(str(root), kind="classic")
        return str(root)
    root = DATA / f"RT_{files}"
    if (root / "_delta_log" / f"{0:020d}.json").exists():
        return str(root)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    import pyarrow as pa

    from delta_ops.commit import create_table
    from delta_ops.storage import Storage

    schema = pa.schema([("id", pa.int64()), ("value", pa.string())])
    adds = (
        {
            "path": f"part-{i:08d}-c000.snappy.parquet",
            "partitionValues": {},
            "size": 1000 + (i * 7919) % 100_000,
            "modificationTime": T0,
            "dataChange": True,
            "stats": _stats(i),
        }
        for i in range(files)
    )
    create_table(Storage.for_uri(str(root)), schema, adds=adds, clock=lambda: T0)
    return str(root)


def _measure(template: str, repeats: int) -> dict:
    scratch = str(DATA / "RT_scratch")
    setup = f"""
import shutil
from delta_ops.maintenance.row_tracking import backfill_row_tracking
from delta_ops.storage import Storage
shutil.rmtree({scratch!r}, ignore_errors=True)
shutil.copytree({template!r}, {scratch!r})
storage = Storage.for_uri({scratch!r})
"""
    run = f"""
result = backfill_row_tracking(storage, batch_size={BATCH}, confirm_protocol_upgrade=True)
assert result.enabled and result.files_backfilled == {FILES}, result
"""
    runs = [measure(setup, run) for _ in range(repeats)]
    shutil.rmtree(scratch, ignore_errors=True)
    return {
        "seconds_median": round(statistics.median(m.seconds for m in runs), 3),
        "seconds_min": round(min(m.seconds for m in runs), 3),
        "peak_rss_mb": round(max(m.rss_mb for m in runs), 1),
        "commits": 1 + -(-FILES // BATCH) + 1,
    }


def main(repeats: int = 3) -> dict:
    rows = []
    for label, checkpoint in (("one JSON commit", False), ("classic checkpoint", True)):
        row = {"benchmark": f"backfill {FILES:,} files / {BATCH:,} per batch, {label}"}
        row.update(_measure(table_rt(checkpoint=checkpoint), repeats))
        rows.append(row)
    print_rows(rows)
    return {"rows": rows}


if __name__ == "__main__":
    main()
