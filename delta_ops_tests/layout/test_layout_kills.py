"""Kill tests for OPTIMIZE: SIGKILL `delta-ops optimize` at random points, on local files and
on the moto S3 server; every kill leaves a whole table and a re-run finishes.

The table (built once per test): 40 partitions of 3 small files each (500 rows a file),
row tracking on, a few files with deletion vectors. With the target used every partition
is one bin, so the 40 bins commit in three batches of at most 16 (`DEFAULT_BINS_PER_COMMIT`)
and a kill may land before, between or inside the batch commits.

For each of `KILLS` kills a fresh copy of the table gets the real CLI started as a process
group of its own, killed with SIGKILL after a random delay: one kill in three after a
delay drawn uniformly from [0, measured run time], the others from [first new data file,
measured run time] (start-up and planning change nothing). A run that exits before its
kill is checked the same way, shrinks the window to its own time and is drawn again (at
most `2 * KILLS` runs in all). Then:

- as the kill left it: the latest version loads; our reader (deletion vectors applied)
  gives the same rows with the same stable row IDs and row commit versions as before;
  deltalake agrees (local: the same rows; S3: the same live files, see
  `_deltalake_agrees`); data files written and not committed are unreferenced;
- after the same command re-run to completion (through `delta_ops.cli.main` in this
  process): the same rows again, deltalake agrees, and a
  dry run plans nothing (no small files left per the plan).

Kill points come from `random.Random(f"{KILL_SEED}-{backend}")`; `DELTA_OPS_KILL_SEED`
replays another draw, `DELTA_OPS_KILLS` asks for more kills.
"""

from __future__ import annotations

import io
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote, unquote

import deltalake
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import QueryBuilder

from delta_ops.cli import main as cli_main
from delta_ops.commit import Transaction, append_files, create_table
from delta_ops.layout.optimize import optimize
from delta_ops.log import load_snapshot
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import REPO_ROOT
from delta_ops_tests.support.dv_writer import inline_descriptor
from delta_ops_tests.support.layout_tables import our_rows

KILL_SEED = int(os.environ.get("DELTA_OPS_KILL_SEED", "20261126"))
KILLS = max(20, int(os.environ.get("DELTA_OPS_KILLS", "20")))
PARTITIONS, FILES_PER_PARTITION, ROWS = 40, 3, 500
TARGET = "1mb"

pytestmark = pytest.mark.slow


def _build(root: Path) -> None:
    """The kill table at `root` (local): `id long, value string, part string`."""
    storage = Storage.for_uri(str(root))
    schema = pa.schema([("id", pa.int64()), ("value", pa.string()), ("part", pa.string())])
    create_table(storage, schema, ["part"], {"delta.enableRowTracking": "true",
                                             "delta.enableDeletionVectors": "true"})
    next_id = 0
    for _ in range(FILES_PER_PARTITION):
        adds = []
        for p in range(PARTITIONS):
            ids = list(range(next_id, next_id + ROWS))
            next_id += ROWS
            data = pa.table({"id": pa.array(ids, pa.int64()),
                             "value": [f"v{i}-{'x' * (i % 7)}" for i in ids]})
            buf = io.BytesIO()
            pq.write_table(data, buf, compression="snappy")
            key = f"part=p {p:02d}/part-00000-{uuid.uuid4()}-c000.snappy.parquet"
            storage.put_atomic(key, buf.getvalue())
            adds.append({"path": quote(key, safe="/="), "partitionValues": {"part": f"p {p:02d}"},
                         "size": len(buf.getvalue()), "modificationTime": 1,
                         "dataChange": True,
                         "stats": orjson.dumps({"numRecords": ROWS}).decode()})
        append_files(storage, adds)
    live = sorted(load_snapshot(storage).files.to_pylist(), key=lambda r: r["path"])
    for n, add in enumerate(live[::37]):
        body = {k: v for k, v in add.items() if v is not None}
        body["partitionValues"] = dict(body["partitionValues"])
        if "tags" in body:
            body["tags"] = dict(body["tags"])
        body["deletionVector"] = inline_descriptor([0, 5 + n, 100 + n]).to_dict()
        rm = {"path": add["path"], "deletionTimestamp": 2, "dataChange": True,
              "extendedFileMetadata": True, "partitionValues": body["partitionValues"],
              "size": add["size"]}
        Transaction(storage, operation="DELETE").remove_files([rm]).add_files([body]).commit()


class _Backend:
    """Where the copies live: `fresh()` returns a (uri, Storage) of a new copy of the
    template; `data_files(uri)` counts its data files; `cli_options` reach it."""

    def __init__(self, template: Path, tmp: Path, s3=None) -> None:  # type: ignore[no-untyped-def]
        self.template, self.tmp, self.s3 = template, tmp, s3
        self.options = None if s3 is None else s3.storage_options
        self.dl_options = None if s3 is None else s3.object_store_options
        self.cli_options: list[str] = []
        if s3 is not None:
            for k in ("endpoint_url", "key", "secret"):
                self.cli_options += ["--storage-option", f"{k}={self.options[k]}"]
            self.cli_options += ["--storage-option", "region=us-east-1"]

    def fresh(self) -> tuple[str, Storage]:
        if self.s3 is None:
            dest = self.tmp / f"t-{uuid.uuid4().hex[:8]}"
            shutil.copytree(self.template, dest)
            uri = str(dest)
        else:
            uri = self.s3.fresh_uri("kill")
            bucket, prefix = uri[len("s3://"):].split("/", 1)
            client = self.s3.client()
            files = [p for p in self.template.rglob("*") if p.is_file()]
            # One PUT each, 16 at a time: a serial copy of the template was most of
            # each kill's time on moto.
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(lambda path: client.upload_file(
                    str(path), bucket, f"{prefix}/{path.relative_to(self.template)}"), files))
        return uri, Storage.for_uri(uri, self.options)

    def data_files(self, uri: str) -> int:
        if self.s3 is None:
            return sum(1 for p in Path(uri).rglob("*.parquet") if "_delta_log" not in p.parts)
        bucket, prefix = uri[len("s3://"):].split("/", 1)
        pages = self.s3.client().get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=prefix + "/part=")
        return sum(len(page.get("Contents", [])) for page in pages)


def _cli(backend: _Backend, uri: str) -> list[str]:
    return [sys.executable, "-m", "delta_ops.cli", "optimize", uri, "--target-size", TARGET,
            *backend.cli_options]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT)}


def _timed_run(backend: _Backend, uri: str) -> tuple[float, float]:
    """Run to completion; (seconds to exit, seconds to the first new data file)."""
    before = backend.data_files(uri)
    t0 = time.monotonic()
    proc = subprocess.Popen(_cli(backend, uri), env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    first = None
    while proc.poll() is None:
        if first is None and backend.data_files(uri) > before:
            first = time.monotonic() - t0
        time.sleep(0.01)
    total = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr.read().decode() if proc.stderr else ""
    return total, total if first is None else first


def _kill_once(backend: _Backend, uri: str, delay: float,
               after_first_file: bool) -> tuple[int, float]:
    """(exit code, seconds from the delay's start to the exit): the delay starts at the
    process start, or at its first new data file if `after_first_file`."""
    before = backend.data_files(uri) if after_first_file else None
    proc = subprocess.Popen(_cli(backend, uri), env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    t0 = time.monotonic()
    if before is not None:
        while proc.poll() is None and backend.data_files(uri) == before:
            time.sleep(0.005)
        t0 = time.monotonic()
    deadline = t0 + delay
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.005)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    code = proc.wait()
    elapsed = time.monotonic() - t0
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)  # nothing of the group is left
    return code, elapsed


def _deltalake_agrees(backend: _Backend, storage: Storage, rows: list[tuple]) -> None:
    """Local: deltalake reads the same (id, value, part) rows. S3: deltalake lists the same
    live files as our snapshot (its Parquet GETs do not get through to moto's server, its log
    reads do)."""
    t = deltalake.DeltaTable(storage.root, storage_options=backend.dl_options)
    if backend.s3 is None:
        got = pa.table(QueryBuilder().register("t", t).execute(
            'select "id", "value", "part" from t').read_all()).to_pydict()
        theirs = sorted(zip(got["id"], got["value"], got["part"], strict=True), key=repr)
        assert theirs == sorted((r[:3] for r in rows), key=repr)
        return

    def plain(p: str) -> str:
        while unquote(p) != p:
            p = unquote(p)
        return p

    prefix = storage.root.rstrip("/") + "/"
    ours = sorted(plain(p) for p in load_snapshot(storage).files.column("path").to_pylist())
    assert sorted(plain(u.removeprefix(prefix)) for u in t.file_uris()) == ours


@pytest.fixture(scope="module")
def kill_template(tmp_path_factory) -> tuple[Path, list[tuple]]:
    root = tmp_path_factory.mktemp("layout-kill") / "template"
    root.mkdir()
    _build(root)
    return root, our_rows(Storage.for_uri(str(root)))


@pytest.mark.parametrize("backend_name", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_sigkill_mid_optimize_leaves_the_table_whole_and_a_rerun_finishes(
    backend_name, kill_template, tmp_path, request, capsys
):
    template, rows = kill_template
    s3 = request.getfixturevalue("s3_server") if backend_name == "s3" else None
    backend = _Backend(template, tmp_path, s3)
    uri, storage = backend.fresh()
    # Every partition is one bin: 40 bins, committed in three batches (module docstring).
    assert optimize(storage, target_size=TARGET).bins == PARTITIONS
    total, first = _timed_run(backend, uri)
    assert our_rows(storage) == rows
    assert optimize(storage, target_size=TARGET).bins == 0
    files_after_clean_run = load_snapshot(storage).num_files
    rng = random.Random(f"{KILL_SEED}-{backend_name}")
    # The windows the delays are drawn from: the measured run, shrunk to the quickest run
    # seen since. A run that exits before its kill (one timed run on a busy machine can be
    # slower than the rest) is checked like the others and does not count as a kill.
    windows = {True: max(total - first, 0.05), False: total}
    killed = attempts = 0
    while killed < KILLS and attempts < 2 * KILLS:
        anywhere = attempts % 3 == 0
        attempts += 1
        delay = rng.uniform(0, windows[not anywhere])
        uri, storage = backend.fresh()
        code, elapsed = _kill_once(backend, uri, delay, after_first_file=not anywhere)
        assert code in (0, -signal.SIGKILL), f"attempt {attempts}: exit {code}"
        if code == -signal.SIGKILL:
            killed += 1
        else:
            windows[not anywhere] = max(min(windows[not anywhere], elapsed), 0.05)
        where = (f"{backend_name} attempt {attempts} (seed {KILL_SEED}, delay {delay:.3f}s, "
                 f"exit {code})")
        snap = load_snapshot(storage)
        assert our_rows(storage) == rows, where
        _deltalake_agrees(backend, storage, rows)
        # Written but not committed: on disk, unreferenced (left for VACUUM).
        assert backend.data_files(uri) >= snap.num_files, where
        # The re-run goes through the same CLI entry point in this process: the kills
        # need fresh processes, the re-run only needs to finish (41 process starts were
        # half of this test's time).
        code = cli_main(_cli(backend, uri)[3:])
        assert code == 0, f"{where}: re-run failed: {capsys.readouterr().err[-2000:]}"
        assert our_rows(storage) == rows, where
        _deltalake_agrees(backend, storage, rows)
        assert optimize(storage, target_size=TARGET).bins == 0, where
        assert load_snapshot(storage).num_files == files_after_clean_run, where
    # The kills must land while the command runs, or the test proves little.
    assert killed == KILLS, f"only {killed} of {attempts} runs were killed mid-run"
