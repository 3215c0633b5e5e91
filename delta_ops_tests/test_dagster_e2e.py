"""End to end: `dagster dev` on 127.0.0.1 against a temporary registry of corpus copies.

Queries the asset graph over GraphQL (every table x component, the lineage edges), launches
`maintenance` and waits for it, checks the files it wrote, waits for the partitions sensor
to register the tables, launches `row_tracking_backfill` for one partition, and stops every
process it started: `dagster dev` runs in its own session (process group = its PID) with
SIGINT/SIGTERM reset to their defaults before exec (a non-interactive shell starts children
with them ignored, and `dagster dev` would then ignore SIGTERM), and the whole group is
killed by that PID at the end.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from delta_ops.log.snapshot import load_snapshot
from delta_ops.protocol import features
from delta_ops.storage import Storage
from delta_ops_tests.conftest import REPO_ROOT, copy_corpus_table

pytestmark = pytest.mark.e2e

COMPONENTS = ("delta_log", "checkpoint", "version_checksum", "log_compaction",
              "metadata_cleanup", "vacuum", "row_tracking")
EDGES = {
    ("checkpoint", "delta_log"), ("version_checksum", "delta_log"),
    ("log_compaction", "delta_log"), ("vacuum", "delta_log"), ("row_tracking", "delta_log"),
    ("metadata_cleanup", "checkpoint"),
}
LOCATION = {"repositoryLocationName": "delta_ops", "repositoryName": "__repository__"}
DEADLINE_S = 170  # the whole test, start to stop, stays under 3 minutes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _reset_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group `pgid`."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(entry))
    return out


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the group dagster dev leads, then SIGKILL whatever is left of it."""
    pgid = proc.pid
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and group_members(pgid):
        time.sleep(0.5)
    for pid in group_members(pgid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=20)


class Dagit:
    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, text: str, variables: dict | None = None) -> dict:
        body = json.dumps({"query": text, "variables": variables or {}}).encode()
        req = urllib.request.Request(self.url, data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            out = json.loads(resp.read())
        assert "errors" not in out, out["errors"]
        return out["data"]

    def launch(self, job: str, run_config: dict | None = None,
               partition: str | None = None) -> str:
        params: dict = {"selector": {**LOCATION, "jobName": job},
                        "runConfigData": run_config or {}}
        if partition is not None:
            params["executionMetadata"] = {"tags": [{"key": "dagster/partition",
                                                     "value": partition}]}
        data = self.query(
            """mutation($p: ExecutionParams!) { launchRun(executionParams: $p) {
                 __typename ... on LaunchRunSuccess { run { runId } }
                 ... on PythonError { message } ... on RunConfigValidationInvalid {
                 errors { message } } } }""",
            {"p": params},
        )["launchRun"]
        assert data["__typename"] == "LaunchRunSuccess", data
        return data["run"]["runId"]

    def wait(self, run_id: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.query(
                "query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }",
                {"id": run_id},
            )["runOrError"]["status"]
            if status in ("SUCCESS", "FAILURE", "CANCELED"):
                return status
            time.sleep(1)
        raise AssertionError(f"run {run_id} did not finish in {timeout} s")

    def messages(self, run_id: str) -> list[str]:
        data = self.query(
            """query($id: ID!) { logsForRun(runId: $id) { ... on EventConnection {
                 events { ... on MessageEvent { message } } } } }""",
            {"id": run_id},
        )
        return [e.get("message") or "" for e in data["logsForRun"]["events"]]


@pytest.fixture
def dagster_dev(tmp_path):
    tables = tmp_path / "tables"
    roots = {
        "ckpt": copy_corpus_table("golden__checkpoint", tables / "ckpt"),
        "dv": copy_corpus_table("golden__dv-partitioned-with-checkpoint", tables / "dv"),
        "stats": copy_corpus_table(
            "golden__data-skipping-change-stats-collected-across-versions", tables / "stats"),
    }
    registry = tmp_path / "tables.yaml"
    registry.write_text(yaml.safe_dump({
        "defaults": {"engine": "local"},
        "tables": [
            {"name": "ckpt", "uri": "tables/ckpt", "checkpoint": {"interval": 2}},
            {"name": "dv", "uri": "tables/dv"},
            {"name": "stats", "uri": "tables/stats", "compaction": {"interval": 2}},
        ],
    }))
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home), "DELTA_OPS_REGISTRY": str(registry)}
    log = open(tmp_path / "dagster_dev.log", "wb")
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "dagster"), "dev", "-w", "workspace.yaml",
         "-h", "127.0.0.1", "-p", str(port)],
        cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True, preexec_fn=_reset_signals,
    )
    try:
        yield Dagit(f"http://127.0.0.1:{port}/graphql"), roots, proc
    finally:
        stop_group(proc)
        log.close()
        leftover = group_members(proc.pid)
        assert not leftover, f"processes of dagster dev still running: {leftover}"


def wait_for_location(dagit: Dagit, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "dagster dev exited"
        try:
            data = dagit.query("""{ workspaceOrError { ... on Workspace { locationEntries {
                name locationOrLoadError { __typename ... on PythonError { message } } } } } }""")
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(1)
            continue
        entries = data["workspaceOrError"]["locationEntries"]
        loaded = [e for e in entries if e["name"] == "delta_ops" and e["locationOrLoadError"]]
        if loaded:
            assert loaded[0]["locationOrLoadError"]["__typename"] == "RepositoryLocation", loaded
            return
        time.sleep(1)
    raise AssertionError(f"the delta_ops code location did not load in {timeout} s")


def wait_for_partitions(dagit: Dagit, names: set[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        data = dagit.query(
            """query($r: RepositorySelector!) { partitionSetOrError(repositorySelector: $r,
                 partitionSetName: "row_tracking_backfill_partition_set") {
                 ... on PartitionSet { partitionsOrError { ... on Partitions {
                 results { name } } } } } }""",
            {"r": LOCATION},
        )
        found = {p["name"] for p in
                 data["partitionSetOrError"]["partitionsOrError"]["results"]}
        if found == names:
            return
        time.sleep(2)
    raise AssertionError(f"the partitions sensor did not register {sorted(names)}")


def test_dagster_dev_end_to_end(dagster_dev):
    started = time.monotonic()
    dagit, roots, proc = dagster_dev
    wait_for_location(dagit, proc, timeout=120)

    nodes = dagit.query("""{ assetNodes { assetKey { path } dependencyKeys { path }
                           groupName isObservable } }""")["assetNodes"]
    keys = {tuple(n["assetKey"]["path"]) for n in nodes}
    assert keys == {(t, c) for t in roots for c in COMPONENTS}
    for table in roots:
        mine = [n for n in nodes if n["assetKey"]["path"][0] == table]
        edges = {(n["assetKey"]["path"][1], d["path"][1]) for n in mine
                 for d in n["dependencyKeys"]}
        assert edges == EDGES
        assert {n["groupName"] for n in mine} == {table}
        assert [n["assetKey"]["path"][1] for n in mine if n["isObservable"]] == ["delta_log"]

    run_id = dagit.launch("maintenance")
    assert dagit.wait(run_id, timeout=90) == "SUCCESS"
    log = roots["ckpt"] / "_delta_log"
    assert (log / "00000000000000000014.checkpoint.parquet").exists()
    assert (log / "00000000000000000014.crc").exists()
    assert json.loads((log / "_last_checkpoint").read_text())["version"] == 14
    assert (roots["dv"] / "_delta_log" / "00000000000000000015.crc").exists()
    assert (roots["stats"] / "_delta_log" /
            "00000000000000000002.00000000000000000003.compacted.json").exists()

    wait_for_partitions(dagit, set(roots), timeout=60)
    run_id = dagit.launch(
        "row_tracking_backfill",
        {"ops": {"backfill_row_tracking": {"config": {"batch_size": 5,
                                                      "confirm_protocol_upgrade": True}}}},
        partition="dv",
    )
    assert dagit.wait(run_id, timeout=60) == "SUCCESS"
    snap = load_snapshot(Storage.for_uri(str(roots["dv"])))
    assert features.is_feature_enabled(snap.protocol, snap.metadata.configuration, "rowTracking")
    assert snap.files.column("baseRowId").null_count == 0
    progress = [m for m in dagit.messages(run_id) if "row tracking batch committed" in m]
    assert len(progress) == 3  # 15 files in batches of 5
    assert time.monotonic() - started < DEADLINE_S
