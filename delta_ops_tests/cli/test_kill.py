"""Kill tests: SIGKILL `delta-ops` at random points, re-run, and the table is whole.

For each operation (VACUUM, metadata cleanup, checkpoint of two kinds, `crc write` and the
row-tracking backfill) a table large enough that the uninterrupted command takes about a
second is generated once (`kill_tables.build_table`, JSON commits written directly and real
Parquet files). Then, for each kill, a fresh copy of it gets the real CLI started as a process
of its own group and killed with SIGKILL (the whole group) at a random point: one kill in
three after a delay drawn uniformly from [0, measured run time], the others after a delay
drawn uniformly from [0, measured writing time] counted from the run's first change to the
table (startup and planning take most of a run and change nothing). Each is checked twice:

* as the kill left it: the latest version loads with delta_ops and holds the same live files
  as before; every file under a final name in `_delta_log` is complete (JSON lines parse,
  Parquet footers read);
* after the same command re-run to completion: delta_ops and deltalake read the same live
  files as the uninterrupted run left, `delta-ops crc verify --all` passes, and the
  operation's own promise holds (VACUUM: every live file exists and exactly the
  uninterrupted run's files remain; cleanup: the same log files remain and the oldest
  version kept loads with both readers; checkpoint: the latest version has a checkpoint that
  both read; crc: every checksum of the range exists; backfill: every live file has row IDs,
  ranges disjoint, row tracking enabled).

Kill points come from `random.Random(f"{KILL_SEED}-{operation}")`; set `DELTA_OPS_KILL_SEED` to
replay another draw, `DELTA_OPS_KILLS` for more kills. A failure message names the
operation, seed, kill index and delay.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

import deltalake
import orjson
import pyarrow.parquet as pq
import pytest

from delta_ops import cli
from delta_ops.log.snapshot.loaded_snapshot import Snapshot, load_snapshot
from delta_ops.maintenance.row_tracking import verify_row_tracking
from delta_ops.storage import Storage
from delta_ops_tests.support.kill_tables import TableSpec, build_table, log_names

KILL_SEED = int(os.environ.get("DELTA_OPS_KILL_SEED", "20261124"))
KILLS = max(20, int(os.environ.get("DELTA_OPS_KILLS", "20")))


@dataclass(frozen=True)
class Operation:
    """One command under test: the table it runs on and its arguments after the table."""

    spec: TableSpec
    argv: Callable[[str], list[str]]


OPERATIONS: dict[str, Operation] = {
    "vacuum": Operation(
        TableSpec(commits=300, adds_per_commit=8, removes_per_commit=5, orphans=2500,
                  checkpoints=(250,), checksums=(290, 300)),
        lambda t: ["vacuum", t],
    ),
    "cleanup": Operation(
        TableSpec(commits=2500, adds_per_commit=2, removes_per_commit=1,
                  checkpoints=(800, 1600, 2400), checksums=(2450, 2500)),
        lambda t: ["cleanup", t],
    ),
    "checkpoint-multi-part": Operation(
        TableSpec(commits=400, adds_per_commit=25, removes_per_commit=5,
                  checkpoints=(200,), checksums=(400,)),
        lambda t: ["checkpoint", t, "--parts", "4"],
    ),
    "checkpoint-v2": Operation(
        TableSpec(commits=600, adds_per_commit=25, removes_per_commit=5, v2=True,
                  checkpoints=(200,), checksums=(600,)),
        lambda t: ["checkpoint", t, "--kind", "v2-uuid", "--sidecar-actions", "2000"],
    ),
    "crc-write": Operation(
        TableSpec(commits=600, adds_per_commit=8, removes_per_commit=3,
                  checkpoints=(500,), checksums=(570,)),
        lambda t: ["crc", "write", t, "--from", "571", "--to", "600"],
    ),
    "row-tracking-backfill": Operation(
        TableSpec(commits=300, adds_per_commit=8, removes_per_commit=3, no_stats_every=4,
                  checkpoints=(200,), checksums=(300,)),
        lambda t: ["row-tracking", "backfill", t, "--batch-size", "300", "--quiet",
                   "--confirm-protocol-upgrade"],
    ),
}


def _copy_table(src: Path, dest: Path) -> Path:
    """A copy the command may change freely, made of hard links (cheap for thousands of
    files). Safe because every writer here creates new files (a temporary file linked or
    renamed into place) and deletion unlinks a name, leaving the pristine table's link;
    `_tree_state` checks after each operation's kills that the pristine table is intact."""
    for dirpath, _dirs, files in os.walk(src):
        target = dest / os.path.relpath(dirpath, src)
        target.mkdir(parents=True, exist_ok=True)
        for name in files:
            os.link(os.path.join(dirpath, name), target / name)
    return dest


def _tree_state(root: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file under `root`, by relative path."""
    state = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            st = os.stat(os.path.join(dirpath, name))
            state[os.path.relpath(os.path.join(dirpath, name), root)] = (
                st.st_size, st.st_mtime_ns)
    return state


def _cli_command(table: Path, op: str) -> list[str]:
    return [sys.executable, "-m", "delta_ops.cli", *OPERATIONS[op].argv(str(table))]


def _run_in_process(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, out.getvalue() + err.getvalue()


def _live_paths(snap: Snapshot) -> set[str]:
    return set(snap.files.column("path").to_pylist())


def _deltalake_paths(root: Path, version: int | None = None) -> tuple[int, set[str]]:
    dt = deltalake.DeltaTable(str(root), version=version)
    paths = set()
    for uri in dt.file_uris():
        local = unquote(urlparse(uri).path) if uri.startswith("file:") else uri
        paths.add(os.path.relpath(local, root))
    return dt.version(), paths


def _data_files(root: Path) -> set[str]:
    return {e.name for e in os.scandir(root) if e.is_file()}


def _malformed_log_files(root: Path) -> list[str]:
    """Files under final names in `_delta_log` that a reader would choke on."""
    bad = []
    log = root / "_delta_log"
    for name in sorted(log_names(root)):
        base = name.rsplit("/", 1)[-1]
        if base.startswith("."):
            continue  # temporary or Hadoop side files: not read as log files
        path = log / name
        try:
            if name.endswith(".json") or name.endswith(".crc") or name == "_last_checkpoint":
                data = path.read_bytes()
                lines = [ln for ln in data.split(b"\n") if ln.strip()]
                if not lines:
                    raise ValueError("empty file")
                for ln in lines:
                    orjson.loads(ln)
            elif name.endswith(".parquet"):
                pq.read_metadata(path)
        except Exception as exc:  # noqa: BLE001 - any failure to read is the finding
            bad.append(f"{name}: {type(exc).__name__}: {exc}")
    return bad


def _raw_replay(root: Path) -> tuple[dict[str, dict], dict[str, dict]]:
    """Live adds by path and live domain metadata by domain, from the JSON commits alone
    (every commit from version 0 must be present), read as the spec's reconciliation says:
    the newest action for a path or domain wins. Independent of delta_ops' replay."""
    log = root / "_delta_log"
    commits = sorted(n for n in os.listdir(log) if n.endswith(".json") and n[:20].isdigit())
    assert commits and int(commits[0][:20]) == 0, "raw replay needs every commit"
    adds: dict[str, dict] = {}
    domains: dict[str, dict] = {}
    for name in commits:
        for line in (log / name).read_bytes().splitlines():
            if not line.strip():
                continue
            action = orjson.loads(line)
            if "add" in action:
                adds[unquote(action["add"]["path"])] = action["add"]
            elif "remove" in action:
                adds.pop(unquote(action["remove"]["path"]), None)
            elif "domainMetadata" in action:
                dm = action["domainMetadata"]
                if dm.get("removed"):
                    domains.pop(dm["domain"], None)
                else:
                    domains[dm["domain"]] = dm
    return adds, domains


def _row_id_violations(root: Path, *, complete: bool) -> list[str]:
    """Row-tracking invariants checked from the raw log and Parquet footers: assigned
    ranges `[baseRowId, baseRowId + numRecords)` are disjoint and below the high-water
    mark; with `complete`, every live add has baseRowId and defaultRowCommitVersion."""
    adds, domains = _raw_replay(root)
    problems = []
    hwm_dm = domains.get("delta.rowTracking")
    hwm = orjson.loads(hwm_dm["configuration"])["rowIdHighWaterMark"] if hwm_dm else -1
    ranges = []
    for path, add in adds.items():
        base = add.get("baseRowId")
        if base is None or add.get("defaultRowCommitVersion") is None:
            if complete:
                problems.append(f"{path}: baseRowId {base}, "
                                f"defaultRowCommitVersion {add.get('defaultRowCommitVersion')}")
            continue
        stats = orjson.loads(add["stats"]) if add.get("stats") else {}
        rows = stats.get("numRecords")
        if rows is None:
            rows = pq.read_metadata(root / path).num_rows
        ranges.append((base, base + rows, path))
    ranges.sort()
    for (_, end, a), (start, _, b) in zip(ranges, ranges[1:], strict=False):
        if start < end:
            problems.append(f"row ID ranges overlap: {a} and {b}")
    if ranges and max(end for _, end, _ in ranges) - 1 > hwm:
        problems.append(f"high-water mark {hwm} below the highest row ID")
    return problems


def _temp_files(root: Path) -> list[str]:
    return sorted(n for n in log_names(root) if n.rsplit("/", 1)[-1].endswith(".tmp"))


@dataclass
class Pristine:
    """A generated table, its state, and what the uninterrupted command leaves."""

    root: Path
    version: int
    live: set[str]
    run_seconds: float
    first_change: float
    ref_version: int
    ref_live: set[str]
    ref_log: set[str]
    ref_data: set[str]
    ref_oldest: int | None
    ref_oldest_live: set[str] | None
    log: set[str]
    data: set[str]
    tree: dict[str, tuple[int, int]]


def _timed_run(cmd: list[str], table: Path, stderr_path: Path) -> tuple[float, float]:
    """Run `cmd` to completion on `table`: (wall seconds, seconds until the first file
    under the table changed, found by polling the listings)."""
    before = _fingerprint(table)
    first_change = None
    with open(stderr_path, "wb") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        while proc.poll() is None:
            if first_change is None:
                if _fingerprint(table) != before:
                    first_change = time.perf_counter() - started
                time.sleep(0.002)
            else:
                time.sleep(0.01)
        seconds = time.perf_counter() - started
    assert proc.returncode == 0, f"uninterrupted {cmd} failed: {stderr_path.read_text()}"
    return seconds, seconds if first_change is None else first_change


def _fingerprint(table: Path) -> tuple[int, ...]:
    """Cheap enough to poll every few milliseconds: the modification times of the
    directories a command adds files to or deletes files from (any entry created, renamed
    or removed moves them)."""
    dirs = (table, table / "_delta_log", table / "_delta_log" / "_sidecars")
    return tuple(d.stat().st_mtime_ns if d.is_dir() else 0 for d in dirs)


def _plan(rng: random.Random, p: Pristine) -> list[tuple[str, float]]:
    """(mode, delay) per kill. One kill in three is `anywhere`: `delay` after the start,
    drawn from [0, run time]. The others are `writing`: `delay` after the run's first
    change to the table (a file written or deleted), drawn from [0, 4/5 of the uninterrupted
    run's time from its first change to its end]. Startup and planning change nothing and
    would otherwise take most draws, since the writes are the last part of a run."""
    # Four fifths of the reference window: runs vary, and a draw past the end of a faster
    # run's writes kills nothing.
    window = max(0.8 * (p.run_seconds - p.first_change), 0.01)
    planned = [
        ("anywhere", rng.uniform(0.0, p.run_seconds)) if i % 3 == 0
        else ("writing", rng.uniform(0.0, window))
        for i in range(KILLS)
    ]
    # Spares, used only while too few kills have landed among the writes (a run that ends
    # sooner than the reference lets a late draw kill nothing): early in the write window.
    spares = [("writing", rng.uniform(0.0, window / 2)) for _ in range(2 * KILLS)]
    return planned + spares


def _oldest_checkpoint(root: Path) -> int | None:
    versions = [
        int(n[:20]) for n in log_names(root) if ".checkpoint." in n and n[:20].isdigit()
    ]
    return min(versions, default=None)


@pytest.fixture(scope="session")
def pristine_tables(tmp_path_factory):
    """op name -> Pristine, built on first use (one table and one timed run per op)."""
    cache: dict[str, Pristine] = {}
    base = tmp_path_factory.mktemp("kill_pristine")

    def get(op: str) -> Pristine:
        if op in cache:
            return cache[op]
        root = build_table(base / op, OPERATIONS[op].spec)
        before = load_snapshot(Storage.for_uri(str(root)))
        ref = _copy_table(root, base / f"{op}-reference")
        seconds, first_change = _timed_run(_cli_command(ref, op), ref, base / f"{op}.err")
        after = load_snapshot(Storage.for_uri(str(ref)))
        oldest = _oldest_checkpoint(ref)
        oldest_live = (
            _live_paths(load_snapshot(Storage.for_uri(str(root)), oldest))
            if oldest is not None
            else None
        )
        print(f"\n[kill] {op}: uninterrupted run {seconds:.2f} s (first file change at "
              f"{first_change:.2f} s), version "
              f"{before.version} -> {after.version}, {len(_live_paths(after))} live files")
        cache[op] = Pristine(
            root=root,
            version=before.version,
            live=_live_paths(before),
            run_seconds=seconds,
            first_change=first_change,
            ref_version=after.version,
            ref_live=_live_paths(after),
            ref_log=log_names(ref) - set(_temp_files(ref)),
            ref_data=_data_files(ref),
            ref_oldest=oldest,
            ref_oldest_live=oldest_live,
            log=log_names(root),
            data=_data_files(root),
            tree=_tree_state(root),
        )
        return cache[op]

    return get


def _kill_once(
    cmd: list[str], table: Path, mode: str, delay: float, stderr_path: Path
) -> tuple[bool, int]:
    """Start `cmd` in a new session, SIGKILL its process group `delay` seconds after the
    start (`anywhere`) or after its first change to `table` (`writing`). Returns (killed,
    returncode); asserts that nothing of the group survives."""
    before = _fingerprint(table) if mode == "writing" else None
    with open(stderr_path, "wb") as err:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True
        )
        if before is not None:
            while proc.poll() is None and _fingerprint(table) == before:
                time.sleep(0.002)
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(min(0.005, max(deadline - time.monotonic(), 0)))
        if proc.poll() is None:
            # The leader is not reaped before wait(), so its group id stays valid here.
            os.killpg(proc.pid, signal.SIGKILL)
        code = proc.wait()
    killed = code == -signal.SIGKILL  # it may have exited on its own just before
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)  # no member of the group is left
    return killed, code


def _log_summary(root: Path) -> str:
    names = sorted(log_names(root))
    interesting = [n for n in names if not (n.endswith(".json") and n[:20].isdigit())]
    commits = [n for n in names if n.endswith(".json") and n[:20].isdigit()]
    span = f"{commits[0][:20]}..{commits[-1][:20]}" if commits else "none"
    return f"commits {len(commits)} ({span}); other: {interesting}"


@pytest.mark.parametrize("op", list(OPERATIONS))
def test_sigkill_then_rerun_leaves_table_whole(op, pristine_tables, tmp_path):
    p = pristine_tables(op)
    rng = random.Random(f"{KILL_SEED}-{op}")
    plan = _plan(rng, p)
    killed_count = 0
    changed = 0  # kills that left the table's files different from the pristine ones
    stray_temps = 0
    runs = 0
    for i, (mode, delay) in enumerate(plan):
        if i >= KILLS and changed >= KILLS // 4:
            break  # the planned kills ran and enough of them landed while writing
        runs += 1
        where = (f"{op}: kill {i} of seed {KILL_SEED} (DELTA_OPS_KILL_SEED), {delay:.3f} s "
                 f"after {'the start' if mode == 'anywhere' else 'the first change'} "
                 f"(run {p.run_seconds:.2f} s, first change at {p.first_change:.2f} s)")
        table = _copy_table(p.root, tmp_path / f"k{i}")
        killed, code = _kill_once(
            _cli_command(table, op), table, mode, delay, tmp_path / f"k{i}.err"
        )
        if killed:
            killed_count += 1
        else:
            assert code == 0, f"{where}: run finished with {code}: " + (
                tmp_path / f"k{i}.err").read_text()

        # As the kill left it.
        state = f"{where}\n_delta_log after the kill: {_log_summary(table)}"
        bad = _malformed_log_files(table)
        assert not bad, f"{state}\nunreadable files under final names: {bad}"
        try:
            mid = load_snapshot(Storage.for_uri(str(table)))
        except Exception as exc:
            pytest.fail(f"{state}\ndelta_ops cannot load the killed table: {exc!r}")
        assert _live_paths(mid) == p.live, f"{state}\nlive files changed by the killed run"
        try:
            dl_version, dl_live = _deltalake_paths(table)
        except Exception as exc:
            pytest.fail(f"{state}\ndeltalake cannot load the killed table: {exc!r}")
        assert (dl_version, dl_live) == (mid.version, p.live), f"{state}\ndeltalake differs"
        _check_killed_state(op, p, table, state)
        if killed and (log_names(table) != p.log or _data_files(table) != p.data):
            changed += 1

        # Re-run to completion.
        argv = OPERATIONS[op].argv(str(table))
        code, output = _run_in_process(argv)
        state = f"{where}\n_delta_log after the re-run: {_log_summary(table)}"
        assert code == 0, f"{state}\nre-run failed ({code}): {output}"
        assert not _malformed_log_files(table), state
        snap = load_snapshot(Storage.for_uri(str(table)))
        live = _live_paths(snap)
        assert live == p.ref_live, f"{state}\nlive files differ from the uninterrupted run"
        dl_version, dl_live = _deltalake_paths(table)
        assert dl_version == snap.version, state
        assert dl_live == live, f"{state}\ndeltalake reads other files than delta_ops"
        code, output = _run_in_process(["crc", "verify", "--all", str(table)])
        assert code == 0, f"{state}\ncrc verify --all: {output}"
        _check_operation(op, p, table, snap, state)
        stray_temps += len(_temp_files(table))
        shutil.rmtree(table)
    print(f"\n[kill] {op}: {runs} runs, {killed_count} killed mid-run, "
          f"{changed} of them after the command had changed files, "
          f"run time {p.run_seconds:.2f} s, temp files left by killed writers: {stray_temps}")
    assert _tree_state(p.root) == p.tree, f"{op}: the pristine table changed through a link"
    # A kill test whose kills never land among the writes tests nothing.
    assert changed >= KILLS // 4, (
        f"{op}: only {changed} of {runs} kills came after the command changed files")


def _check_killed_state(op: str, p: Pristine, table: Path, state: str) -> None:
    """What each operation promises at every instant, checked where the kill left it."""
    if op == "vacuum":
        missing = sorted(n for n in p.live if not (table / n).is_file())
        assert not missing, f"{state}\nlive files deleted: {missing[:5]}"
    elif op == "cleanup":
        # Every version from the checkpoint the run keeps on stays readable at every step.
        old = load_snapshot(Storage.for_uri(str(table)), p.ref_oldest)
        assert _live_paths(old) == p.ref_oldest_live, f"{state}\nversion {p.ref_oldest}"
        assert _deltalake_paths(table, p.ref_oldest) == (p.ref_oldest, p.ref_oldest_live), (
            f"{state}\ndeltalake reads version {p.ref_oldest} differently")
    elif op == "row-tracking-backfill":
        problems = _row_id_violations(table, complete=False)
        assert not problems, f"{state}\nrow IDs: {problems[:5]}"


def _check_operation(op: str, p: Pristine, table: Path, snap: Snapshot, state: str) -> None:
    if op != "row-tracking-backfill":
        assert snap.version == p.ref_version, state
    if op != "cleanup":
        raw, _ = _raw_replay(table)
        assert set(raw) == _live_paths(snap), f"{state}\nthe raw log replays other files"
    if op == "vacuum":
        missing = sorted(n for n in _live_paths(snap) if not (table / n).is_file())
        assert not missing, f"{state}\nlive files deleted: {missing[:5]}"
        assert _data_files(table) == p.ref_data, (
            f"{state}\nfiles on disk differ from the uninterrupted VACUUM")
    elif op == "cleanup":
        left = log_names(table) - set(_temp_files(table))
        assert left == p.ref_log, (
            f"{state}\nlog files differ: extra {sorted(left - p.ref_log)[:5]}, "
            f"missing {sorted(p.ref_log - left)[:5]}")
        oldest = _oldest_checkpoint(table)
        assert oldest == p.ref_oldest, state
        old = load_snapshot(Storage.for_uri(str(table)), oldest)
        assert _live_paths(old) == p.ref_oldest_live, f"{state}\nversion {oldest} differs"
        dl_version, dl_live = _deltalake_paths(table, oldest)
        assert (dl_version, dl_live) == (oldest, p.ref_oldest_live), (
            f"{state}\ndeltalake reads version {oldest} differently")
    elif op.startswith("checkpoint"):
        assert snap.checkpoint_version == snap.version, (
            f"{state}\nno usable checkpoint at the latest version")
        last = orjson.loads((table / "_delta_log" / "_last_checkpoint").read_bytes())
        assert last["version"] == snap.version, f"{state}\n_last_checkpoint: {last}"
        if op == "checkpoint-multi-part":
            left = log_names(table) - set(_temp_files(table))
            assert left == p.ref_log, f"{state}\nextra {sorted(left - p.ref_log)}"
    elif op == "crc-write":
        crcs = {n for n in log_names(table) if n.endswith(".crc")}
        assert crcs == {n for n in p.ref_log if n.endswith(".crc")}, state
    elif op == "row-tracking-backfill":
        problems = _row_id_violations(table, complete=True)
        assert not problems, f"{state}\nrow IDs: {problems[:5]}"
        assert not verify_row_tracking(snap), f"{state}\n{verify_row_tracking(snap)}"
        dt = deltalake.DeltaTable(str(table))
        assert dt.metadata().configuration.get("delta.enableRowTracking") == "true", state
        assert "rowTracking" in (dt.protocol().writer_features or []), state
