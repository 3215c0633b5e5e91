"""Tables of 1M to 10M+ live files for the scaling benchmarks (issue 15), generated once
under benchmarks/data/ and written the way a long-lived table looks, without gigabytes of
JSON: a classic checkpoint written directly (Parquet, Spark's checkpoint columns, see
`datasets.checkpoint_schema`), then commits.

Layout of `big_table(n)` (partitioned by `part`, 100 values; every add has JSON stats):

- version 1: a classic checkpoint of `n` adds (`part=P/part-IIIIIIIIII-c000.snappy.parquet`),
  plus the commit file of version 1 (commitInfo only; commit 0 is gone, as metadata cleanup
  leaves it) and `_last_checkpoint`.
- versions 2..101: 100 commits, each removing 100 files of the checkpoint (spread evenly
  over its row groups) and adding 100 new ones, so the table still has `n` live files and
  10,000 tombstones at version 101.

The checkpoint is written one row group (100,000 adds) at a time from vectorized columns,
so the generator's memory does not grow with `n`. With `with_files=True` every file ever
added (live or removed) also exists as an empty placeholder, for `vacuum --dry-run` over a
full listing (above 3M files, hard links to a few empty files: see `_touch_all`).

`python -m benchmarks.big_tables 1000000 [--files]` generates one table and prints its root.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.datasets import DATA, PROTOCOL, T0, _metadata, checkpoint_schema
from delta_ops.protocol.actions import ADD_TYPE
from delta_ops.protocol.last_checkpoint import build_last_checkpoint

ROW_GROUP = 100_000
PARTS = 100
COMMITS = 100
PER_COMMIT = 100
CHECKPOINT_VERSION = 1
#: Placeholder files of tables larger than this are hard links (see `_touch_all`).
LINKED_FROM = 3_000_000
#: Under ext4's limit of 65,000 links per inode.
_LINKS_PER_INODE = 60_000
LATEST_VERSION = CHECKPOINT_VERSION + COMMITS


def _path(i: int) -> str:
    return f"part={i % PARTS}/part-{i:010d}-c000.snappy.parquet"


def _size(i: int) -> int:
    return 1000 + (i * 7919) % 100_000


def _stats(i: int) -> str:
    # json.dumps(..., separators=(",", ":")) of datasets._stats, without its cost per row
    return (
        f'{{"numRecords":100,"minValues":{{"id":{i * 100},"value":"a{i}"}},'
        f'"maxValues":{{"id":{i * 100 + 99},"value":"z{i}"}},"nullCount":{{"id":0,"value":0}}}}'
    )


def removed_index(commit: int, j: int, n: int) -> int:
    """The checkpoint file the j-th remove of commit `commit` (0-based) removes: 10,000
    distinct indices spread evenly over the checkpoint."""
    return (commit * PER_COMMIT + j) * (n // (COMMITS * PER_COMMIT))


def added_index(commit: int, j: int, n: int) -> int:
    return n + commit * PER_COMMIT + j


def _add_batch(start: int, stop: int, schema: pa.Schema) -> pa.RecordBatch:
    """Checkpoint rows start..stop-1: `add` set, the other columns null."""
    idx = np.arange(start, stop, dtype=np.int64)
    rows = stop - start
    paths = pa.array([_path(i) for i in range(start, stop)], pa.string())
    stats = pa.array([_stats(i) for i in range(start, stop)], pa.string())
    offsets = pa.array(np.arange(rows + 1, dtype=np.int32))
    keys = pa.array(["part"] * rows, pa.string())
    items = pa.array([str(p) for p in (idx % PARTS).tolist()], pa.string())
    pvs = pa.MapArray.from_arrays(offsets, keys, items, type=ADD_TYPE.field("partitionValues").type)
    cols = {
        "path": paths,
        "partitionValues": pvs,
        "size": pa.array(1000 + (idx * 7919) % 100_000, pa.int64()),
        "modificationTime": pa.array(np.full(rows, T0 + CHECKPOINT_VERSION * 1000), pa.int64()),
        "dataChange": pa.array(np.zeros(rows, dtype=bool), pa.bool_()),
        "stats": stats,
    }
    children = [
        cols[f.name] if f.name in cols else pa.nulls(rows, f.type) for f in ADD_TYPE
    ]
    add = pa.StructArray.from_arrays(children, fields=list(ADD_TYPE))
    arrays = [add if f.name == "add" else pa.nulls(rows, f.type) for f in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _write_checkpoint(path: Path, n: int) -> None:
    schema = checkpoint_schema()
    with pq.ParquetWriter(path, schema, compression="snappy") as writer:
        md = dict(_metadata(True), name=None, description=None)
        md["format"] = {"provider": "parquet", "options": []}
        md["configuration"] = []
        head = pa.Table.from_pylist([{"protocol": PROTOCOL}, {"metaData": md}], schema=schema)
        writer.write_table(head)
        for start in range(0, n, ROW_GROUP):
            batch = _add_batch(start, min(n, start + ROW_GROUP), schema)
            writer.write_table(pa.Table.from_batches([batch]), row_group_size=ROW_GROUP)


def _commit_lines(commit: int, n: int) -> list[str]:
    version = CHECKPOINT_VERSION + 1 + commit
    ts = T0 + version * 1000
    lines = [{"commitInfo": {"timestamp": ts, "operation": "WRITE"}}]
    for j in range(PER_COMMIT):
        i = removed_index(commit, j, n)
        lines.append({"remove": {
            "path": _path(i), "deletionTimestamp": ts, "dataChange": True,
            "extendedFileMetadata": True, "partitionValues": {"part": str(i % PARTS)},
            "size": _size(i),
        }})
    for j in range(PER_COMMIT):
        i = added_index(commit, j, n)
        lines.append({"add": {
            "path": _path(i), "partitionValues": {"part": str(i % PARTS)}, "size": _size(i),
            "modificationTime": ts, "dataChange": True, "stats": _stats(i),
        }})
    return [json.dumps(x, separators=(",", ":")) for x in lines]


def _touch_all(root: Path, n: int) -> None:
    """An empty placeholder for every file ever added: the checkpoint's and the commits'.

    Up to `LINKED_FROM` files each is a file of its own; beyond, they are hard links to a
    few empty files in a directory beside the table (`<root>.links`, at most
    `_LINKS_PER_INODE` links each): a listing sees the same directory entries, but 10M
    files cost a few hundred inodes instead of 10M and are created about 5x faster. The
    files are never written, so sharing an inode changes nothing but stat's cache hits."""
    for p in range(PARTS):
        (root / f"part={p}").mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    base = os.fspath(root) + "/"
    total = n + COMMITS * PER_COMMIT
    if n <= LINKED_FROM:
        for i in range(total):
            os.close(os.open(base + _path(i), flags, 0o644))
        return
    links = root.with_name(root.name + ".links")
    shutil.rmtree(links, ignore_errors=True)
    links.mkdir()
    source = ""
    for i in range(total):
        if i % _LINKS_PER_INODE == 0:
            source = os.fspath(links / f"empty-{i // _LINKS_PER_INODE}")
            os.close(os.open(source, flags, 0o644))
        os.link(source, base + _path(i))


def table_root(n: int, *, with_files: bool = False) -> Path:
    return DATA / f"big_{n}{'_files' if with_files else ''}"


def big_table(n: int, *, with_files: bool = False) -> Path:
    """The table of `n` live files (created once; returns its root). The marker beside it
    (outside the table, so no listing sees it) is written last: an interrupted generation
    starts over."""
    if n < COMMITS * PER_COMMIT:
        raise ValueError(f"n must be at least {COMMITS * PER_COMMIT}")
    root = table_root(n, with_files=with_files)
    done = root.with_name(root.name + ".done")
    if done.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    log = root / "_delta_log"
    log.mkdir(parents=True)
    cp = log / f"{CHECKPOINT_VERSION:020d}.checkpoint.parquet"
    _write_checkpoint(cp, n)
    (log / "_last_checkpoint").write_bytes(_last_checkpoint(log, n))
    ts = T0 + CHECKPOINT_VERSION * 1000
    (log / f"{CHECKPOINT_VERSION:020d}.json").write_text(
        json.dumps({"commitInfo": {"timestamp": ts, "operation": "WRITE"}}) + "\n"
    )
    for commit in range(COMMITS):
        version = CHECKPOINT_VERSION + 1 + commit
        f = log / f"{version:020d}.json"
        f.write_text("\n".join(_commit_lines(commit, n)) + "\n")
        t = (T0 + version * 1000) / 1000
        os.utime(f, (t, t))
    if with_files:
        _touch_all(root, n)
    done.write_text("")
    return root


def _last_checkpoint(log: Path, n: int) -> bytes:
    size = (log / f"{CHECKPOINT_VERSION:020d}.checkpoint.parquet").stat().st_size
    lc = build_last_checkpoint(
        version=CHECKPOINT_VERSION, size=n + 2, size_in_bytes=size, num_of_add_files=n
    )
    return lc.to_json_bytes()


def restore_log(root: Path, n: int) -> None:
    """Put `_delta_log` back as generated: delete what runs wrote there (checkpoints,
    .crc files, temporary files), also after an interrupted run, and rewrite
    `_last_checkpoint`."""
    log = root / "_delta_log"
    generated = {"_last_checkpoint", f"{CHECKPOINT_VERSION:020d}.checkpoint.parquet"}
    generated |= {f"{v:020d}.json" for v in range(CHECKPOINT_VERSION, LATEST_VERSION + 1)}
    for e in log.iterdir():
        if e.name not in generated:
            if e.is_dir():
                shutil.rmtree(e)
            else:
                e.unlink()
    (log / "_last_checkpoint").write_bytes(_last_checkpoint(log, n))


# ---- a log of commits only (the first checkpoint of a large JSON log) -----------------------

#: Commits of a JSON-only table (version 0 holds protocol and metadata only).
JSON_COMMITS = 100
#: Files each JSON commit after the first removes (from the commit before it) and re-adds.
JSON_CHURN = 100


def json_table_root(n: int) -> Path:
    return DATA / f"json_{n}"


def _json_commit(commit: int, n: int) -> str:
    """Commit `commit + 1`: its share of the n adds; after the first, also 100 removes of
    the previous commit's files and 100 new adds, so the table keeps n live files."""
    version = commit + 1
    ts = T0 + version * 1000
    per = n // JSON_COMMITS
    lines = [json.dumps({"commitInfo": {"timestamp": ts, "operation": "WRITE"}})]
    if commit:
        step = per // JSON_CHURN
        for j in range(JSON_CHURN):
            i = (commit - 1) * per + j * step
            lines.append(
                f'{{"remove":{{"path":"{_path(i)}","deletionTimestamp":{ts},"dataChange":true,'
                f'"extendedFileMetadata":true,"partitionValues":{{"part":"{i % PARTS}"}},'
                f'"size":{_size(i)}}}}}'
            )
    extra = range(n + commit * JSON_CHURN, n + (commit + 1) * JSON_CHURN) if commit else ()
    for i in [*range(commit * per, (commit + 1) * per), *extra]:
        stats = _stats(i).replace('"', '\\"')
        lines.append(
            f'{{"add":{{"path":"{_path(i)}","partitionValues":{{"part":"{i % PARTS}"}},'
            f'"size":{_size(i)},"modificationTime":{ts},"dataChange":true,"stats":"{stats}"}}}}'
        )
    return "\n".join(lines) + "\n"


def json_table(n: int) -> Path:
    """A table of `n` live files whose log is commits only, no checkpoint (created once;
    returns its root): version 0 (protocol, metadata), then `JSON_COMMITS` commits of n/100
    adds each with statistics, the later ones also removing 100 files of the one before
    and adding 100 more. About 330 bytes of JSON per file."""
    if n % JSON_COMMITS or n // JSON_COMMITS < JSON_CHURN:
        raise ValueError(f"n must be a multiple of {JSON_COMMITS} and at least "
                         f"{JSON_COMMITS * JSON_CHURN}")
    root = json_table_root(n)
    done = root.with_name(root.name + ".done")
    if done.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    log = root / "_delta_log"
    log.mkdir(parents=True)
    md = _metadata(True)
    (log / f"{0:020d}.json").write_text(
        json.dumps({"protocol": PROTOCOL}) + "\n" + json.dumps({"metaData": md}) + "\n"
    )
    for commit in range(JSON_COMMITS):
        (log / f"{commit + 1:020d}.json").write_text(_json_commit(commit, n))
    done.write_text("")
    return root


def restore_json_log(root: Path) -> None:
    """Delete what runs wrote in a JSON-only table's `_delta_log` (checkpoints, sidecars,
    `_last_checkpoint`, .crc files), so the next run writes its first checkpoint again."""
    keep_commits(root, JSON_COMMITS + 1)


def keep_commits(root: Path, commits: int) -> None:
    """Delete everything in `root/_delta_log` but the JSON commits 0 .. commits - 1."""
    generated = {f"{v:020d}.json" for v in range(commits)}
    for e in (root / "_delta_log").iterdir():
        if e.name not in generated:
            if e.is_dir():
                shutil.rmtree(e)
            else:
                e.unlink()


_CHECK = """
import gc, json, random, sys
import pyarrow as pa
import pyarrow.compute as pc
from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
from delta_ops.storage import Storage
from benchmarks.big_tables import COMMITS, PER_COMMIT, LATEST_VERSION, _path, removed_index
root, n = sys.argv[1], int(sys.argv[2])

def sorted_paths(col):
    col = pa.chunked_array(col).combine_chunks()  # pyarrow, or arro3 (deltalake)
    return col.take(pc.array_sort_indices(col))

# One side at a time, paths kept as sorted Arrow arrays: 10M files fit beside one table.
snap = load_snapshot(Storage.for_uri(root))
version = snap.version
ours = sorted_paths(snap.files.column("path"))
del snap
gc.collect()
from deltalake import DeltaTable
dt = DeltaTable(root)
version_deltalake = dt.version()
theirs = sorted_paths(dt.get_add_actions(flatten=True).column("path"))
del dt
removed = {removed_index(c, j, n) for c in range(COMMITS) for j in range(PER_COMMIT)}
sample = random.Random(15).sample(range(n + COMMITS * PER_COMMIT), 1000) + sorted(removed)[:100]
live = pc.is_in(pa.array([_path(i) for i in sample]), value_set=ours).to_pylist()
print(json.dumps({
    "sample_as_generated": all(hit == (i not in removed) for i, hit in zip(sample, live)),
    "version": version, "version_deltalake": version_deltalake,
    "files": len(ours), "files_deltalake": len(theirs),
    "same_paths": ours.equals(theirs),
    "sample": ours.slice(0, 3).to_pylist(),
}))
"""


def check_same(root: Path, n: int) -> dict:
    """Load the table with delta_ops and deltalake (in a child process, so its memory does
    not count anywhere) and compare versions, file counts and the set of live paths, which
    must also match what the generator wrote. Raises AssertionError when they differ."""
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-c", _CHECK, str(root), str(n)],
        capture_output=True, text=True, check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"check failed:\n{proc.stderr[-2000:]}")
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    ok = (
        got["version"] == got["version_deltalake"] == LATEST_VERSION
        and got["files"] == got["files_deltalake"] == n
        and got["same_paths"]
        and got["sample_as_generated"]
    )
    if not ok:
        raise AssertionError(f"delta_ops and deltalake disagree on {root}: {got}")
    return got


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--files"]
    print(big_table(int(args[0]), with_files="--files" in sys.argv[1:]))
