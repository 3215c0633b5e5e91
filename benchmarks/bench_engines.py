"""Engines: VACUUM dry run over a 200,000-file table, sequential listing vs the local engine
vs Spark `local[2]`, on an S3 server (moto, real HTTP listing on 127.0.0.1) and on local disk.

The table: 200,000 one-byte data files in 200 partition directories (`part=0` ..
`part=199`), half of them referenced by the single commit, so the dry run finds 100,000
unreferenced files. VACUUM lists each partition directory (one listing per directory), then
anti-joins the listing with the referenced paths.

Contenders (all run `vacuum(dry_run=True)` with a fixed clock; results must be identical):

- sequential: `LocalEngine(max_workers=1)`, one directory listing after another;
- local: `LocalEngine()`, directories listed on a thread pool;
- spark local[2]: `SparkEngine`, directories listed by executor tasks, anti-join in Spark.
  Its start-up (session, then one tiny job that spawns the Python workers) is measured
  apart and reported as its own row; the vacuum rows are warm runs. A 200-file table shows
  what is left for small tables.

The S3 server runs in its own process. Stock moto answers every ListObjectsV2 page by
copying and scanning every key of the bucket in Python (0.6 s per page at 200,000 keys),
which measures moto, not the engines: with it, all three contenders take ~120-135 s, bound
by the server's single CPU. The server process therefore replaces that scan with a
sorted-index range lookup giving the same pages (`indexed_listing`; every contender must
still find exactly the unreferenced files). Requests still go over HTTP and are answered by
moto. An optional per-request delay (`s3_latency_ms`, default 0 and 50 ms) stands in for
an object store's round trip, which is what parallel listing hides.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data"
REPO = Path(__file__).resolve().parents[1]
BUCKET = "bench-engines"
T0 = 1_700_000_000_000
DAY_MS = 86_400_000
SCHEMA_STRING = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "part", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
)


# ---- the table ------------------------------------------------------------------------------


def data_paths(files: int, partitions: int) -> list[str]:
    """Relative paths of the table's data files."""
    return [f"part={i % partitions}/part-{i:08d}-c000.snappy.parquet" for i in range(files)]


def commit_bytes(files: int, partitions: int) -> bytes:
    """Commit 0: protocol, metadata, and an add for every other data file."""
    lines: list[dict[str, Any]] = [
        {"commitInfo": {"timestamp": T0, "operation": "WRITE"}},
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {
            "metaData": {
                "id": "00000000-0000-0000-0000-0000000engine",
                "format": {"provider": "parquet", "options": {}},
                "schemaString": SCHEMA_STRING,
                "partitionColumns": ["part"],
                "configuration": {},
                "createdTime": T0,
            }
        },
    ]
    for i, path in enumerate(data_paths(files, partitions)):
        if i % 2 == 0:
            lines.append(
                {
                    "add": {
                        "path": path,
                        "partitionValues": {"part": str(i % partitions)},
                        "size": 1,
                        "modificationTime": T0,
                        "dataChange": True,
                    }
                }
            )
    return ("\n".join(json.dumps(x) for x in lines) + "\n").encode()


def disk_table(files: int, partitions: int) -> Path:
    """The table on local disk (created once under benchmarks/data)."""
    root = DATA / f"engines_{files}x{partitions}"
    commit = root / "_delta_log" / f"{0:020d}.json"
    if commit.exists():
        return root
    for p in range(partitions):
        (root / f"part={p}").mkdir(parents=True, exist_ok=True)
    for path in data_paths(files, partitions):
        (root / path).write_bytes(b"x")
    commit.parent.mkdir(parents=True, exist_ok=True)
    tmp = commit.with_suffix(".tmp")
    tmp.write_bytes(commit_bytes(files, partitions))
    tmp.rename(commit)  # last: marks the table complete
    return root


def indexed_listing() -> None:
    """Make moto's `list_objects` (behind ListObjectsV2) look keys up in a sorted index of
    the bucket instead of scanning all of them; same results, for buckets whose key set
    does not change between listings (the index is rebuilt when the key count changes)."""
    import bisect

    from moto.s3 import models

    original = models.S3Backend.list_objects
    cache: dict[int, tuple[int, list[str]]] = {}

    def list_objects(self, bucket, prefix, delimiter, marker, max_keys):  # type: ignore[no-untyped-def]
        if isinstance(bucket, models.FakeTableStorageBucket):
            return original(self, bucket, prefix, delimiter, marker, max_keys)
        count = dict.__len__(bucket.keys)
        cached = cache.get(id(bucket))
        if cached is None or cached[0] != count:
            cached = (count, sorted(dict.keys(bucket.keys)))
            cache[id(bucket)] = cached
        names = cached[1]
        prefix = prefix or ""
        keys, folders = [], set()
        for i in range(bisect.bisect_left(names, prefix), len(names)):
            name = names[i]
            if not name.startswith(prefix):
                break
            rest = name[len(prefix):]
            if delimiter and delimiter in rest:
                folders.add(f"{prefix}{rest.split(delimiter)[0]}{delimiter}")
                continue
            key = bucket.keys.get(name)
            if key is not None and not isinstance(key, models.FakeDeleteMarker):
                keys.append(key)
        if marker:
            keys = self._get_results_from_token(keys, self._pagination_tokens.get(marker) or marker)
        truncated, next_marker = False, None
        if max_keys is not None:
            keys, truncated, next_marker = self._truncate_result(keys, max_keys)
        return keys, sorted(folders), truncated, next_marker

    models.S3Backend.list_objects = list_objects


class _Delayed:
    """WSGI wrapper: each request waits `seconds` first (an object store's round trip)."""

    def __init__(self, app: Any, seconds: float) -> None:
        self.app, self.seconds = app, seconds

    def __call__(self, environ: Any, start_response: Any) -> Any:
        time.sleep(self.seconds)
        return self.app(environ, start_response)


def serve_moto(files: int, partitions: int, latency_ms: int = 0, indexed: bool = True) -> None:
    """Child process: an S3 server holding the table at s3://BUCKET/t<files>; prints its
    endpoint as one JSON line, serves until stdin closes."""
    import logging

    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    if indexed:
        indexed_listing()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    if latency_ms:
        wsgi = server._server  # the werkzeug server (threaded: delays overlap)
        wsgi.app = _Delayed(wsgi.app, latency_ms / 1000)
    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    backend.create_bucket(BUCKET, "us-east-1")
    prefix = f"t{files}"
    for path in data_paths(files, partitions):  # straight into the store: no 200k PUTs
        backend.put_object(BUCKET, f"{prefix}/{path}", b"x")
    backend.put_object(
        BUCKET, f"{prefix}/_delta_log/{0:020d}.json", commit_bytes(files, partitions)
    )
    host, port = server.get_host_and_port()
    print(json.dumps({"endpoint": f"http://{host}:{port}", "uri": f"s3://{BUCKET}/{prefix}"}),
          flush=True)
    sys.stdin.read()
    server.stop()


@contextlib.contextmanager
def moto_table(
    files: int, partitions: int, latency_ms: int = 0, indexed: bool = True
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(table URI, storage options) of the table on a moto server in a child process."""
    code = (
        "from benchmarks.bench_engines import serve_moto; "
        f"serve_moto({files}, {partitions}, {latency_ms}, {indexed})"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("the moto server process exited before serving")
        info = json.loads(line)
        options = {
            "endpoint_url": info["endpoint"],
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"region_name": "us-east-1"},
        }
        yield info["uri"], options
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


# ---- measuring -------------------------------------------------------------------------------


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def run_vacuum(uri: str, options: dict[str, Any] | None, engine: Any, now_ms: int) -> Any:
    from delta_ops.maintenance.vacuum import vacuum
    from delta_ops.storage import Storage

    storage = Storage.for_uri(uri, options)
    return vacuum(storage, dry_run=True, now_ms=now_ms, engine=engine)


def main(
    files: int = 200_000,
    partitions: int = 200,
    small_files: int = 200,
    repeats: int = 1,
    s3_latency_ms: tuple[int, ...] = (0, 50),
    indexed: bool = True,
) -> list[dict]:
    """Run every contender on each table; print the table of wall times; return the rows."""
    sys.path.insert(0, str(REPO))
    from benchmarks.harness import print_rows
    from delta_ops.engine.local import LocalEngine
    from delta_ops.engine.session import SparkSessionConfig
    from delta_ops.engine.spark import SparkEngine

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    now_ms = int(time.time() * 1000) + 30 * DAY_MS  # every file is old enough
    spark = SparkEngine(
        SparkSessionConfig(
            master="local[2]", local_ip="127.0.0.1", conf={"spark.ui.enabled": "false"}
        )
    )
    contenders = [
        ("sequential", LocalEngine(max_workers=1)),
        ("local", LocalEngine()),
        ("spark local[2]", spark),
    ]
    rows: list[dict] = []
    try:
        def start_up() -> None:
            import tempfile

            from delta_ops.storage import Storage

            with tempfile.TemporaryDirectory() as empty:
                spark.list_files(Storage.for_uri(empty), [""])  # session + Python workers

        start, _ = timed(start_up)
        rows.append({"table": "-", "engine": "spark local[2] start-up", "seconds": round(start, 2),
                     "unreferenced": None, "vs_sequential": None})

        def measure(label: str, uri: str, options: dict[str, Any] | None) -> None:
            found: set[int] = set()
            base = None
            for name, engine in contenders:
                best = None
                for _ in range(repeats):
                    seconds, result = timed(lambda e=engine: run_vacuum(uri, options, e, now_ms))
                    best = seconds if best is None else min(best, seconds)
                    found.add(result.num_files)
                base = base or best
                rows.append({"table": label, "engine": name, "seconds": round(best, 2),
                             "unreferenced": result.num_files,
                             "vs_sequential": round(base / best, 2)})
                print(f"  {label:<18} {name:<16} {best:8.2f} s", flush=True)
            if len(found) != 1:
                raise RuntimeError(f"engines disagree on {label}: {sorted(found)}")

        small = disk_table(small_files, 4)
        measure(f"disk {small_files} files", str(small), None)
        big = disk_table(files, partitions)
        measure(f"disk {files} files", str(big), None)
        for latency in s3_latency_ms:
            with moto_table(files, partitions, latency, indexed) as (uri, options):
                label = f"s3 {files} files" + (f" +{latency}ms" if latency else "")
                measure(label, uri, options)
    finally:
        spark.close()
    print_rows(rows)
    return rows


if __name__ == "__main__":
    main()
