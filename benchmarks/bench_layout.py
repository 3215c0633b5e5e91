"""The layout wing (OPTIMIZE, DV purge) against deltalake and pyarrow, whole processes.

Tables (generated once under benchmarks/data/, data files written with pyarrow, the log with
`delta_ops.commit`; schema `id long, x double, s string, part string`, partitioned by `part`,
every add with stats):

- SMALL: 2,000 files of about 1 MB (about 31,000 rows each), 100 in each of 20 partitions.
- DV: SMALL plus two commits: a protocol upgrade enabling deletion vectors, then a DELETE
  that gives 30% of the files (600, spread over every partition) a deletion vector removing
  10% of their rows (the bitmaps in one DV file, as one Spark task writes them).
- BIN: one partition of 200 files of about 10 MB (about 2 GB), which one bin holds.

Measurements, each process on a fresh copy of its table (data files hard-linked: neither
side changes a file it did not write; the log copied), sides alternated in every round:

1. `delta-ops optimize SMALL --target-size 64 MiB` vs `DeltaTable(p).optimize.compact(
   target_size=64 MiB)` in one Python process each. Goals: time ratio <= 0.5, peak RSS <=
   deltalake's. A third process gives the floor: pyarrow alone reading every partition
   and writing it back (one partition per core, row groups of 1Mi rows, snappy).
   deltalake 1.6.6 differs in its writer: it writes ZSTD (the table's files are snappy,
   which ours keeps) in row groups of 1Mi rows, and runs a bin per core as ours does.
   A fourth process is OPTIMIZE as a Dagster user runs it: the table's `optimize` asset in
   a run (`execute_in_process`) after building the definitions, reported beside deltalake
   with no goal of its own. It carries Dagster's own cost: its imports, the definitions,
   the instance and the run's events.
2. `delta-ops purge DV` vs the floor: one Python process that reads the same 600 files with
   pyarrow (`pq.read_table`) and writes each back (`pq.write_table`, snappy). Reported as MB/s
   of input bytes; goal: ours takes at most 1.5x the floor's time.
3. `delta-ops optimize BIN --target-size 4 GiB` (one bin of about 2 GB): peak RSS under
   0.5 GB. deltalake's compact of the same bin is measured beside it (fewer rounds).

After every run the table is checked (untimed) with deltalake: the same row count, and
fewer files after optimize or no deletion vector after purge, so both sides did the work.

Figures (2026-11-27, last, 3 rounds, medians, peak RSS the largest; see docs/layout.md):
optimize SMALL 9.11 s vs deltalake 18.35 s (ratio 0.50), 197 vs 296 MB, the pyarrow floor
0.51; the same as a Dagster asset 12.05 s (0.66), 315 MB; purge DV 3.49 s vs the floor
8.58 s (0.41), 193 vs 166 MB; BIN 16.13 s vs deltalake 29.09 s (0.55), 170 vs 295 MB. Earlier
figures: docs/layout.md.

`python -m benchmarks.bench_layout [--rounds N]` runs it alone (3 rounds by default; the
2 GB bin gets half as many, at least one).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import uuid
from pathlib import Path

from benchmarks.datasets import DATA, T0
from benchmarks.harness import Measurement, measure_process, print_rows

MIB = 1024 * 1024
SMALL_FILES, SMALL_PARTS, SMALL_ROWS = 2_000, 20, 31_000
BIN_FILES, BIN_ROWS = 200, 370_000
DV_SHARE, DV_DELETE = 0.30, 0.10
TARGET = 64 * MIB
BIN_TARGET = 4096 * MIB
OPTIMIZE_GOAL, PURGE_GOAL, BIN_RSS_GOAL_MB = 0.5, 1.5, 512
RUNS = DATA / "layout_runs"
PYTHON = sys.executable


# ---- table generation ---------------------------------------------------------------------


def _data_file(path: Path, seed: int, rows: int, first_id: int) -> dict:
    """Write one Parquet file (`id`, `x`, `s`; incompressible values) and return its add's
    stats fields (numRecords, min/max, null counts)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    width = 12
    letters = rng.integers(97, 123, size=rows * width, dtype=np.uint8)
    offsets = np.arange(0, (rows + 1) * width, width, dtype=np.int32)
    s = pa.StringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(letters))
    x = rng.random(rows)
    t = pa.table({"id": pa.array(np.arange(first_id, first_id + rows, dtype=np.int64)),
                  "x": pa.array(x), "s": s})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(t, path, compression="snappy")
    mm = pc.min_max(s)
    return {
        "numRecords": rows,
        "minValues": {"id": first_id, "x": float(x.min()), "s": mm["min"].as_py()},
        "maxValues": {"id": first_id + rows - 1, "x": float(x.max()), "s": mm["max"].as_py()},
        "nullCount": {"id": 0, "x": 0, "s": 0},
    }


def _create(root: Path, files: list[tuple[str, str | None, int]]) -> None:
    """A table at `root` (partitioned by `part`) of `files` = (name, part, rows)."""
    import pyarrow as pa

    from delta_ops.commit import create_table
    from delta_ops.storage import Storage

    adds, first = [], 0
    for i, (name, part, rows) in enumerate(files):
        rel = f"part={part}/{name}"
        stats = _data_file(root / rel, i, rows, first)
        first += rows
        adds.append({
            "path": rel, "partitionValues": {"part": part},
            "size": (root / rel).stat().st_size, "modificationTime": T0,
            "dataChange": True, "stats": json.dumps(stats),
        })
    schema = pa.schema([("id", pa.int64()), ("x", pa.float64()), ("s", pa.string()),
                        ("part", pa.string())])
    create_table(Storage.for_uri(str(root)), schema, ["part"], adds=adds, clock=lambda: T0)


def _table(name: str, files: list[tuple[str, str | None, int]]) -> Path:
    root = DATA / name
    if (root / "_delta_log" / f"{0:020d}.json").exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    print(f"  writing {name} ({len(files)} files)...", flush=True)
    _create(root, files)
    return root


def table_small() -> Path:
    per = SMALL_FILES // SMALL_PARTS
    return _table("LAYOUT_SMALL", [
        (f"part-{i:05d}-{uuid.UUID(int=i)}.c000.snappy.parquet", f"p{i // per:02d}", SMALL_ROWS)
        for i in range(SMALL_FILES)
    ])


def table_bin() -> Path:
    return _table("LAYOUT_BIN", [
        (f"part-{i:05d}-{uuid.UUID(int=i)}.c000.snappy.parquet", "p00", BIN_ROWS)
        for i in range(BIN_FILES)
    ])


def dv_files(n: int = SMALL_FILES) -> list[int]:
    """Which of SMALL's files get a deletion vector (30%, spread over every partition)."""
    return [i for i in range(n) if (i * 37) % 100 < DV_SHARE * 100]


def table_dv() -> Path:
    """SMALL (data hard-linked) + version 1 enabling deletion vectors + version 2 deleting
    10% of the rows of 30% of the files through deletion vectors in one DV file."""
    root = DATA / "LAYOUT_DV"
    if (root / "_delta_log" / f"{2:020d}.json").exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    print("  writing LAYOUT_DV...", flush=True)
    _fresh_copy(table_small(), root)
    import numpy as np

    from benchmarks.dv_writer import encode_uuid_path, write_dv_file
    from delta_ops.commit import Transaction
    from delta_ops.protocol.deletion_vectors import RoaringBitmap64
    from delta_ops.storage import Storage

    storage = Storage.for_uri(str(root))
    txn = Transaction(storage, operation="SET TBLPROPERTIES", clock=lambda: T0 + 1000,
                      operation_parameters={"properties": '{"delta.enableDeletionVectors":"true"}'})
    txn.add_features(["deletionVectors"]).update_configuration(
        {"delta.enableDeletionVectors": "true"})
    txn.commit()
    adds = {a["path"]: a for a in _adds(root, 0)}
    names = sorted(adds)
    chosen = [names[i] for i in dv_files(len(names))]
    rng = np.random.default_rng(7)
    bitmaps = []
    for path in chosen:
        rows = json.loads(adds[path]["stats"])["numRecords"]
        picked = rng.choice(rows, size=int(rows * DV_DELETE), replace=False)
        bitmaps.append(RoaringBitmap64.from_ints(int(r) for r in np.sort(picked)))
    data, entries = write_dv_file(bitmaps)
    u = uuid.uuid4()
    storage.put_atomic(f"deletion_vector_{u}.bin", data)
    removes, new_adds = [], []
    for path, bm, (offset, size) in zip(chosen, bitmaps, entries, strict=True):
        a = adds[path]
        removes.append({"path": path, "deletionTimestamp": T0 + 2000, "dataChange": True,
                        "extendedFileMetadata": True, "partitionValues": a["partitionValues"],
                        "size": a["size"]})
        stats = {**json.loads(a["stats"]), "tightBounds": False}
        new_adds.append({**a, "dataChange": True, "stats": json.dumps(stats),
                         "deletionVector": {"storageType": "u",
                                            "pathOrInlineDv": encode_uuid_path(u),
                                            "offset": offset, "sizeInBytes": size,
                                            "cardinality": len(bm)}})
    txn = Transaction(storage, operation="DELETE", clock=lambda: T0 + 2000,
                      operation_parameters={"predicate": '["(rand() < 0.1)"]'})
    txn.remove_files(removes).add_files(new_adds)
    txn.commit()
    return root


def _adds(root: Path, version: int) -> list[dict]:
    lines = (root / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    return [a["add"] for a in map(json.loads, lines) if "add" in a]


def _fresh_copy(template: Path, dest: Path) -> None:
    """`dest` as a copy of `template`: the log copied, everything else hard-linked."""
    shutil.rmtree(dest, ignore_errors=True)
    for dirpath, _dirs, names in os.walk(template):
        rel = Path(dirpath).relative_to(template)
        (dest / rel).mkdir(parents=True, exist_ok=True)
        for n in names:
            src, dst = Path(dirpath) / n, dest / rel / n
            if "_delta_log" in rel.parts:
                shutil.copy2(src, dst)
            else:
                os.link(src, dst)


# ---- the processes ------------------------------------------------------------------------


def _ours(verb: str, path: Path, *extra: str) -> list[str]:
    return [PYTHON, "-m", "delta_ops.cli", verb, str(path), *extra]


def _deltalake_compact(path: Path, target: int) -> list[str]:
    code = (f"from deltalake import DeltaTable\n"
            f"DeltaTable({str(path)!r}).optimize.compact(target_size={target})\n")
    return [PYTHON, "-c", code]


_FLOOR = """
import json, sys
import pyarrow.parquet as pq
root, out, names = sys.argv[1], sys.argv[2], json.loads(open(sys.argv[3]).read())
for i, name in enumerate(names):
    pq.write_table(pq.read_table(root + "/" + name), f"{out}/floor-{i:05d}.parquet",
                   compression="snappy")
"""


#: OPTIMIZE as a Dagster user runs it: the table's `optimize` asset in a run of the implicit
#: asset job (`execute_in_process`, the in-process executor, an ephemeral instance), in a
#: process that builds the definitions from a one-table registry first, as a run worker
#: loads its code location. The table's `.crc` is written before the clock starts: the
#: asset runs only when the newest one says OPTIMIZE is due.
_DAGSTER_OPTIMIZE = """
import sys
from pathlib import Path
import yaml
from dagster import AssetKey, DagsterInstance
from delta_ops.defs import build_definitions
table, target, registry = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
registry.write_text(yaml.safe_dump({"defaults": {"engine": "local", "optimize": {
    "cron": None, "target_size": target}}, "tables": [{"name": "t", "uri": table}]}))
result = build_definitions(str(registry)).resolve_implicit_global_asset_job_def(
    ).execute_in_process(instance=DagsterInstance.ephemeral(),
                         asset_selection=[AssetKey(["t", "optimize"])])
done = [e.event_specific_data.materialization.metadata
        for e in result.get_asset_materialization_events()]
assert result.success and done and "files_after" in done[0], done
"""


def _write_crc(path: Path) -> None:
    from delta_ops.maintenance.checksum import write_checksum
    from delta_ops.storage import Storage

    write_checksum(Storage.for_uri(str(path)))


#: The floor of (1): the same partitions read and written by pyarrow alone, one partition per
#: core at a time, in row groups of 1Mi rows with the table's codec (no plan, statistics,
#: row tracking or commit).
_FLOOR_COMPACT = """
import glob, os, sys
from concurrent.futures import ThreadPoolExecutor
import pyarrow as pa, pyarrow.parquet as pq
root, out = sys.argv[1], sys.argv[2]
parts = sorted(glob.glob(root + "/part=*"))
def one(i):
    w, buf, n = None, [], 0
    for f in sorted(glob.glob(parts[i] + "/*.parquet")):
        for b in pq.ParquetFile(f).iter_batches(batch_size=65536):
            if w is None:
                w = pq.ParquetWriter(f"{out}/floor-{i:03d}.parquet", b.schema,
                                     compression="snappy")
            buf.append(b)
            n += b.num_rows
            if n >= 1 << 20:
                w.write_table(pa.Table.from_batches(buf), row_group_size=n)
                buf, n = [], 0
    if buf:
        w.write_table(pa.Table.from_batches(buf), row_group_size=n)
    w.close()
with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
    list(pool.map(one, range(len(parts))))
"""


def _check(path: Path, rows: int, *, max_files: int | None = None, no_dvs: bool = False) -> None:
    """deltalake reads `rows` rows (its SQL engine applies deletion vectors); at most
    `max_files` live files; with `no_dvs`, no live file keeps a deletion vector (our
    snapshot: deltalake does not expose them)."""
    got = _rows_of(path)
    if got != rows:
        raise AssertionError(f"{path}: deltalake reads {got} rows, expected {rows}")
    from delta_ops.log import load_snapshot
    from delta_ops.storage import Storage

    snap = load_snapshot(Storage.for_uri(str(path)))
    if max_files is not None and snap.num_files > max_files:
        raise AssertionError(f"{path}: {snap.num_files} files left, expected <= {max_files}")
    left = snap.num_files - snap.files.column("deletionVector").null_count
    if no_dvs and left:
        raise AssertionError(f"{path}: {left} deletion vectors left after purge")


def _alternate(sides: list[tuple], rounds: int) -> dict:
    """Each side = (name, template, argv, check[, prepare]); per round, every side in turn
    on a fresh copy of its template at RUNS/t (made, and prepared, before the clock starts),
    checked after."""
    out: dict[str, list[Measurement]] = {side[0]: [] for side in sides}
    dest = RUNS / "t"
    for _ in range(rounds):
        for name, template, argv, check, *prepare in sides:
            _fresh_copy(template, dest)
            for step in prepare:
                step(dest)
            (RUNS / "out").mkdir(parents=True, exist_ok=True)
            out[name].append(measure_process(argv))
            check(dest)  # type: ignore[operator]
            shutil.rmtree(RUNS / "out", ignore_errors=True)
    return out


def _summary(ms: list[Measurement]) -> tuple[float, float]:
    return statistics.median(m.seconds for m in ms), max(m.rss_mb for m in ms)


_COUNT = """
import sys
import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
q = QueryBuilder().register("t", DeltaTable(sys.argv[1])).execute("select count(*) from t")
print(pa.table(q.read_all()).column(0)[0].as_py())
"""

#: Seconds deltalake gets to count a table's rows. Its query engine once hung here on the DV
#: table (all tokio workers parked, nothing read) and held the whole bench for 15 minutes;
#: in a child process with a limit, a hang fails the row with the table named instead.
COUNT_TIMEOUT_S = 600


def _rows_of(root: Path) -> int:
    """The rows deltalake reads from the table (its SQL engine applies deletion vectors),
    counted in a child process that is stopped after `COUNT_TIMEOUT_S`."""
    try:
        out = subprocess.run([PYTHON, "-c", _COUNT, str(root)], capture_output=True,
                             text=True, check=True, timeout=COUNT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{root}: deltalake did not count the rows within "
                           f"{COUNT_TIMEOUT_S} s") from None
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(f"{root}: deltalake could not count the rows:\n"
                           f"{exc.stderr[-2000:]}") from None
    return int(out.stdout.split()[-1])


def main(argv: list[str] | None = None) -> list[dict]:
    argv = sys.argv[1:] if argv is None else argv
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 3
    small, dv, big = table_small(), table_dv(), table_bin()
    dest = RUNS / "t"
    rows: list[dict] = []

    # 1. optimize vs deltalake's compact on SMALL
    n = _rows_of(small)
    per_part = -(-sum(a["size"] for a in _adds(small, 0)) // SMALL_PARTS // TARGET) + 1
    check = lambda p: _check(p, n, max_files=SMALL_PARTS * per_part)  # noqa: E731
    res = _alternate([
        ("ours", small, _ours("optimize", dest, "--target-size", str(TARGET)), check),
        ("deltalake", small, _deltalake_compact(dest, TARGET), check),
        ("floor", small, [PYTHON, "-c", _FLOOR_COMPACT, str(dest), str(RUNS / "out")],
         lambda p: None),
        ("dagster", small, [PYTHON, "-c", _DAGSTER_OPTIMIZE, str(dest), str(TARGET),
                            str(RUNS / "tables.yaml")], check, _write_crc),
    ], rounds)
    (ta, ra), (tb, rb) = _summary(res["ours"]), _summary(res["deltalake"])
    tf, rf = _summary(res["floor"])
    td, rd = _summary(res["dagster"])
    rows.append({"benchmark": "optimize SMALL (2,000 x 1 MB, 20 parts, target 64 MiB)",
                 "ours_s": round(ta, 2), "theirs_s": round(tb, 2), "theirs": "deltalake",
                 "time_ratio": round(ta / tb, 3),
                 "ours_rss_mb": round(ra), "theirs_rss_mb": round(rb),
                 "floor_s": round(tf, 2), "floor_ratio": round(tf / tb, 3),
                 "floor_rss_mb": round(rf),
                 "goal": f"time <= {OPTIMIZE_GOAL}, rss <= 1",
                 "goal_met": ta / tb <= OPTIMIZE_GOAL and ra <= rb})
    rows.append({"benchmark": "optimize SMALL in a Dagster run (the table's optimize asset)",
                 "ours_s": round(td, 2), "theirs_s": round(tb, 2), "theirs": "deltalake",
                 "time_ratio": round(td / tb, 3),
                 "ours_rss_mb": round(rd), "theirs_rss_mb": round(rb),
                 "goal": "reported (no goal)", "goal_met": None})

    # 2. purge vs a pyarrow read-and-write of the same files
    n_dv = _rows_of(dv)
    names = [a["path"] for a in _adds(dv, 2)]
    in_bytes = sum(a["size"] for a in _adds(dv, 2))
    RUNS.mkdir(parents=True, exist_ok=True)
    listing = RUNS / "floor_files.json"
    listing.write_text(json.dumps(names))
    res = _alternate([
        ("ours", dv, _ours("purge", dest), lambda p: _check(p, n_dv, no_dvs=True)),
        ("floor", dv, [PYTHON, "-c", _FLOOR, str(dest), str(RUNS / "out"), str(listing)],
         lambda p: None),
    ], rounds)
    (ta, ra), (tb, rb) = _summary(res["ours"]), _summary(res["floor"])
    mb = in_bytes / MIB
    rows.append({"benchmark": f"purge DV ({len(names)} files with DVs, {mb:.0f} MiB)",
                 "ours_s": round(ta, 2), "theirs_s": round(tb, 2), "theirs": "pyarrow floor",
                 "time_ratio": round(ta / tb, 3),
                 "ours_rss_mb": round(ra), "theirs_rss_mb": round(rb),
                 "ours_mb_s": round(mb / ta, 1), "floor_mb_s": round(mb / tb, 1),
                 "goal": f"time <= {PURGE_GOAL}", "goal_met": ta / tb <= PURGE_GOAL})

    # 3. one bin of about 2 GB
    n_big = _rows_of(big)
    big_bytes = sum(a["size"] for a in _adds(big, 0))
    check = lambda p: _check(p, n_big, max_files=1)  # noqa: E731
    res = _alternate([
        ("ours", big, _ours("optimize", dest, "--target-size", str(BIN_TARGET)), check),
        ("deltalake", big, _deltalake_compact(dest, BIN_TARGET), check),
    ], max(1, rounds // 2))
    (ta, ra), (tb, rb) = _summary(res["ours"]), _summary(res["deltalake"])
    label = f"optimize BIN (one bin: {BIN_FILES} files, {big_bytes / MIB:.0f} MiB)"
    rows.append({"benchmark": label,
                 "ours_s": round(ta, 2), "theirs_s": round(tb, 2), "theirs": "deltalake",
                 "time_ratio": round(ta / tb, 3),
                 "ours_rss_mb": round(ra), "theirs_rss_mb": round(rb),
                 "goal": f"ours rss < {BIN_RSS_GOAL_MB} MB", "goal_met": ra < BIN_RSS_GOAL_MB})
    shutil.rmtree(RUNS, ignore_errors=True)
    print_rows(rows)
    return rows


if __name__ == "__main__":
    main()
