"""Big commits (issue 22): whole `delta-ops` processes on tables written the way a CREATE
TABLE AS SELECT writes them, one JSON commit of N adds with statistics, peak RSS and wall
time as `/usr/bin/time` sees them, beside deltalake, alternating.

Tables (`ctas_table(n, commits)`, generated once under benchmarks/data/): version 0 holds
commitInfo, protocol, metaData and N adds (about 330 bytes of JSON each, statistics
included: 1M adds are a 330 MB commit); with `commits` > 1, versions 1.. each add N more
files the same way (an INSERT ... SELECT), so 3 commits of 1M hold 3M live files.

Rows, for 1 commit of N and for 3 commits of N (`BENCH_BIG_COMMIT_SIZES`, default `1M`;
`BENCH_BIG_COMMIT_COMMITS`, default `1,3`):

- `checkpoint`: the table's first checkpoint (no checkpoint before it: the commits pass 64
  MiB, so it is rebuilt by bucket, reading the commits in chunks of 32 MiB) vs deltalake's
  `DeltaTable(p).create_checkpoint()`; the log is restored before every process (untimed).
- `crc compute` at the latest version with no checkpoint: the state rebuilt by bucket from
  the commits read in chunks (as the first checkpoint reads them), then aggregated.
  deltalake has no checksum: its side is `DeltaTable(p)` and its add actions
  (`get_add_actions(flatten=True)`), the same state read from the same commits.
- `optimize plan (dry run)` with no checkpoint: the state read in memory, then the
  OPTIMIZE plan (every file is small, so every file is in a bin; the plan reads the state
  column by column and makes a Python object only per planned file). deltalake has no dry
  run: its side is the same state read, as above.
- `crc compute` at the latest version, a checkpoint there (written once, untimed, before
  the rounds): the checksum of the streamed checkpoint, the commit at that version read
  only up to its commitInfo. deltalake: the state read from the same checkpoint.

Medians of the wall times, the largest peak RSS; RSS per live file as in bench_scale.
Before timing, delta_ops and deltalake must agree on the live files (count and a sample).
`BENCH_BIG_COMMIT_REPEATS` sets the rounds (default 3).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks.bench_startup import _CHECKPOINT, delta_ops, deltalake
from benchmarks.big_tables import PARTS, _path, _size, _stats, keep_commits
from benchmarks.datasets import DATA, PROTOCOL, T0, _metadata
from benchmarks.harness import compare_processes, print_rows

_STATE = (
    "import sys\nfrom deltalake import DeltaTable\n"
    "n = DeltaTable(sys.argv[1]).get_add_actions(flatten=True).num_rows\n"
)
#: Lines written at a time while generating (the generator's memory stays small).
_BATCH = 100_000


def _count(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1_000, "M": 1_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("KM")) * scale)


def ctas_root(n: int, commits: int) -> Path:
    return DATA / f"ctas_{n}x{commits}"


def _add_line(i: int, ts: int) -> str:
    stats = _stats(i).replace('"', '\\"')
    return (
        f'{{"add":{{"path":"{_path(i)}","partitionValues":{{"part":"{i % PARTS}"}},'
        f'"size":{_size(i)},"modificationTime":{ts},"dataChange":true,"stats":"{stats}"}}}}'
    )


def ctas_table(n: int, commits: int) -> Path:
    """A table of `commits` JSON commits of `n` adds each, the first a CTAS (created once;
    returns its root). The marker beside it is written last."""
    root = ctas_root(n, commits)
    done = root.with_name(root.name + ".done")
    if done.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    log = root / "_delta_log"
    log.mkdir(parents=True)
    for version in range(commits):
        ts = T0 + version * 1000
        op = "CREATE TABLE AS SELECT" if version == 0 else "WRITE"
        head = [json.dumps({"commitInfo": {"timestamp": ts, "operation": op,
                                           "txnId": f"bench-{version}"}})]
        if version == 0:
            head += [json.dumps({"protocol": PROTOCOL}), json.dumps({"metaData": _metadata(True)})]
        with open(log / f"{version:020d}.json", "w") as f:
            f.write("\n".join(head) + "\n")
            first = version * n
            for start in range(first, first + n, _BATCH):
                stop = min(first + n, start + _BATCH)
                f.write("\n".join(_add_line(i, ts) for i in range(start, stop)) + "\n")
    done.write_text("")
    return root


def restore_ctas_log(root: Path, commits: int) -> None:
    """Delete what runs wrote in the table's `_delta_log` (checkpoints, `_last_checkpoint`,
    .crc files, temporary files): the commits stay as generated."""
    keep_commits(root, commits)


_CHECK = """
import json, sys
from delta_ops.log.snapshot.rebuild import rebuild_snapshot
from delta_ops.storage import Storage
root = sys.argv[1]
with rebuild_snapshot(Storage.for_uri(root)) as rebuilt:
    tables = rebuilt.snapshot.files.tables(["path"])
    ours = sorted(p for t in tables for p in t.column(0).to_pylist()[:3])
    n_ours = rebuilt.snapshot.num_files
from deltalake import DeltaTable
dt = DeltaTable(root)
paths = dt.get_add_actions(flatten=True).column("path").to_pylist()
live = set(paths)
print(json.dumps({"ours": n_ours, "theirs": len(paths), "sample_in": all(p in live for p in ours)}))
"""


def check_same(root: Path, n: int) -> None:
    """delta_ops (rebuilt by bucket) and deltalake read the same number of live files, and
    a sample of ours is among theirs (in a child process)."""
    proc = subprocess.run([sys.executable, "-c", _CHECK, str(root)], capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"check failed:\n{proc.stderr[-2000:]}")
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    if not (got["ours"] == got["theirs"] == n and got["sample_in"]):
        raise AssertionError(f"delta_ops and deltalake disagree on {root}: {got}")


def _per_file(row: dict, n: int) -> dict:
    row["files"] = n
    for side in ("delta_ops", "deltalake"):
        rss = row.get(f"{side}_rss_mb")
        row[f"{side}_kb_per_file"] = None if rss is None else round(rss * 1024 / n, 3)
    return row


def main(repeats: int | None = None) -> list[dict]:
    repeats = repeats or int(os.environ.get("BENCH_BIG_COMMIT_REPEATS", "3"))
    sizes = [_count(s) for s in os.environ.get("BENCH_BIG_COMMIT_SIZES", "1M").split(",") if s]
    counts = [int(c) for c in os.environ.get("BENCH_BIG_COMMIT_COMMITS", "1,3").split(",") if c]
    rows = []
    for n in sizes:
        for commits in counts:
            size = f"{n // 1_000_000}M" if n % 1_000_000 == 0 else str(n)
            label = f"{commits} x {size} adds"
            root = ctas_table(n, commits)
            restore_ctas_log(root, commits)
            check_same(root, n * commits)
            p = str(root)

            def restore(root=root, commits=commits) -> None:
                restore_ctas_log(root, commits)

            try:
                rows.append(_per_file(compare_processes(
                    f"first checkpoint, {label} (CTAS)", delta_ops("checkpoint", p),
                    deltalake(_CHECKPOINT, p), repeats=repeats, before_each=restore,
                ), n * commits))
                restore()
                rows.append(_per_file(compare_processes(
                    f"crc compute, no checkpoint, {label} (deltalake: read the state)",
                    delta_ops("crc", "compute", p), deltalake(_STATE, p), repeats=repeats,
                ), n * commits))
                restore()
                rows.append(_per_file(compare_processes(
                    f"optimize plan (dry run), no checkpoint, {label} (deltalake: read the "
                    "state)", delta_ops("optimize", p, "--dry-run"), deltalake(_STATE, p),
                    repeats=repeats,
                ), n * commits))
                restore()
                # A checkpoint at the latest version, then the checksum of that version.
                subprocess.run(delta_ops("checkpoint", p), check=True,
                               stdout=subprocess.DEVNULL)
                rows.append(_per_file(compare_processes(
                    f"crc compute at a checkpoint, {label} (deltalake: read the state)",
                    delta_ops("crc", "compute", p), deltalake(_STATE, p), repeats=repeats,
                ), n * commits))
            finally:
                restore()
    print_rows(rows)
    return rows


if __name__ == "__main__":
    main()
