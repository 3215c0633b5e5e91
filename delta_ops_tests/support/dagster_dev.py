"""A real `dagster dev` on 127.0.0.1 and a small GraphQL client for it (`test_dagster_e2e`,
`docs/screenshots.py`).

`dagster dev` runs in its own session (process group = its PID) with SIGINT/SIGTERM reset
to their defaults before exec (a non-interactive shell starts children with them ignored,
and `dagster dev` would then ignore SIGTERM); `stop_group` ends the whole group by that PID,
SIGTERM first, then SIGKILL for whatever is left.
"""

from __future__ import annotations

import contextlib
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
from typing import IO

import yaml

LOCATION = {"repositoryLocationName": "delta_ops", "repositoryName": "__repository__"}
FINISHED = ("SUCCESS", "FAILURE", "CANCELED")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _reset_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def start_dagster_dev(
    workspace: Path, cwd: Path, env: dict[str, str], log: IO[bytes], port: int
) -> subprocess.Popen:
    """`dagster dev -w workspace` on 127.0.0.1:port, leading its own process group."""
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "dagster"), "dev", "-w", str(workspace),
         "-h", "127.0.0.1", "-p", str(port)],
        cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True, preexec_fn=_reset_signals,
    )


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
    # SIGKILL what is left until nothing is: a process started while the group shut down
    # never got the SIGTERM (dagster dev restarts a code server it sees exit, even then),
    # and a killed process leaves the process table a moment after the signal.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (left := group_members(pgid)):
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
    proc.wait(timeout=20)


class Dagit:
    """The webserver's GraphQL endpoint, with the queries the tests and the docs need."""

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

    # ---- the code location -------------------------------------------------------------

    def wait_for_location(self, proc: subprocess.Popen, timeout: float) -> None:
        """Until the delta_ops location is loaded (an error loading it fails at once)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert proc.poll() is None, "dagster dev exited"
            try:
                data = self.query("""{ workspaceOrError { ... on Workspace { locationEntries {
                    name loadStatus locationOrLoadError { __typename
                    ... on PythonError { message } } } } } }""")
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(1)
                continue
            entries = [e for e in data["workspaceOrError"]["locationEntries"]
                       if e["name"] == LOCATION["repositoryLocationName"]]
            if entries and entries[0]["loadStatus"] == "LOADED" and \
                    entries[0]["locationOrLoadError"]:
                loaded = entries[0]["locationOrLoadError"]
                assert loaded["__typename"] == "RepositoryLocation", loaded
                return
            time.sleep(1)
        raise AssertionError(f"the delta_ops code location did not load in {timeout} s")

    def reload(self) -> None:
        """Deployment -> Reload of the delta_ops location (returns once it has reloaded)."""
        out = self.query(
            """mutation($name: String!) { reloadRepositoryLocation(repositoryLocationName:
                 $name) { __typename ... on WorkspaceLocationEntry { loadStatus
                 locationOrLoadError { __typename ... on PythonError { message } } }
                 ... on PythonError { message } } }""",
            {"name": LOCATION["repositoryLocationName"]},
        )["reloadRepositoryLocation"]
        assert out["__typename"] == "WorkspaceLocationEntry", out
        assert out["locationOrLoadError"]["__typename"] == "RepositoryLocation", out

    def asset_nodes(self) -> list[dict]:
        return self.query("""{ assetNodes { assetKey { path } dependencyKeys { path }
                             groupName isObservable } }""")["assetNodes"]

    # ---- runs ----------------------------------------------------------------------------

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

    def status(self, run_id: str) -> str:
        return self.query(
            "query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }",
            {"id": run_id},
        )["runOrError"]["status"]

    def wait(self, run_id: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.status(run_id)
            if status in FINISHED:
                return status
            time.sleep(1)
        raise AssertionError(f"run {run_id} did not finish in {timeout} s")

    def step_stats(self, run_id: str) -> dict[str, str]:
        """Step key -> SUCCESS / FAILURE / SKIPPED of a finished run."""
        data = self.query(
            """query($id: ID!) { runOrError(runId: $id) { ... on Run {
                 stepStats { stepKey status } } } }""",
            {"id": run_id},
        )["runOrError"]
        return {s["stepKey"]: s["status"] for s in data["stepStats"]}

    def events(self, run_id: str) -> list[dict]:
        """The run's events: message, type, step, and for failures and materializations
        what they carry."""
        data = self.query(
            """query($id: ID!) { logsForRun(runId: $id) { ... on EventConnection {
                 events { __typename ... on MessageEvent { message stepKey }
                   ... on ExecutionStepFailureEvent { error { message }
                     failureMetadata { description } }
                   ... on MaterializationEvent { assetKey { path }
                     metadataEntries { label ... on IntMetadataEntry { intValue } } }
                 } } } }""",
            {"id": run_id},
        )
        return data["logsForRun"]["events"]

    def messages(self, run_id: str) -> list[str]:
        return [e.get("message") or "" for e in self.events(run_id)]

    def runs(self, tags: dict[str, str]) -> list[dict]:
        """Runs carrying every tag in `tags`: id, status and tags."""
        data = self.query(
            """query($f: RunsFilter) { runsOrError(filter: $f) { ... on Runs {
                 results { runId status tags { key value } } } } }""",
            {"f": {"tags": [{"key": k, "value": v} for k, v in tags.items()]}},
        )
        return [{"runId": r["runId"], "status": r["status"],
                 "tags": {t["key"]: t["value"] for t in r["tags"]}}
                for r in data["runsOrError"]["results"]]

    def partitions(self, partition_set: str) -> set[str]:
        data = self.query(
            """query($r: RepositorySelector!, $p: String!) { partitionSetOrError(
                 repositorySelector: $r, partitionSetName: $p) { ... on PartitionSet {
                 partitionsOrError { ... on Partitions { results { name } } } } } }""",
            {"r": LOCATION, "p": partition_set},
        )
        return {p["name"] for p in
                data["partitionSetOrError"]["partitionsOrError"]["results"]}

    def latest_observation(self, asset: list[str]) -> dict:
        """label -> value (numbers and text) of the asset's newest observation."""
        data = self.query(
            """query($k: AssetKeyInput!) { assetOrError(assetKey: $k) { ... on Asset {
                 assetObservations(limit: 1) { metadataEntries { label
                   ... on IntMetadataEntry { intValue } ... on TextMetadataEntry { text }
                 } } } } }""",
            {"k": {"path": asset}},
        )["assetOrError"]["assetObservations"]
        assert data, f"no observation of {asset}"
        return {m["label"]: m.get("intValue", m.get("text"))
                for m in data[0]["metadataEntries"]}

    def latest_observation_full(self, asset: list[str]) -> dict:
        """label -> value of the asset's newest observation: numbers, text, markdown, and a
        table's records (a list of dicts)."""
        data = self.query(
            """query($k: AssetKeyInput!) { assetOrError(assetKey: $k) { ... on Asset {
                 assetObservations(limit: 1) { metadataEntries { label
                   ... on IntMetadataEntry { intValue } ... on TextMetadataEntry { text }
                   ... on MarkdownMetadataEntry { mdStr }
                   ... on TableMetadataEntry { table { records } }
                 } } } } }""",
            {"k": {"path": asset}},
        )["assetOrError"]["assetObservations"]
        assert data, f"no observation of {asset}"
        out: dict = {}
        for m in data[0]["metadataEntries"]:
            if "table" in m:
                out[m["label"]] = [json.loads(r) for r in m["table"]["records"]]
            else:
                out[m["label"]] = next(
                    (m[k] for k in ("intValue", "text", "mdStr") if k in m), None)
        return out

    # ---- checks --------------------------------------------------------------------------

    def check_evaluation(self, asset: list[str], check: str) -> dict | None:
        """The latest evaluation of a check: success, severity, description and metadata
        (label -> text, markdown or number); None when it never ran."""
        data = self.query(
            """query($k: AssetKeyInput!, $c: String!) { assetCheckExecutions(assetKey: $k,
                 checkName: $c, limit: 1) { status evaluation { success severity description
                 metadataEntries { label ... on IntMetadataEntry { intValue }
                   ... on MarkdownMetadataEntry { mdStr } ... on TextMetadataEntry { text }
                 } } } }""",
            {"k": {"path": asset}, "c": check},
        )["assetCheckExecutions"]
        if not data or data[0]["evaluation"] is None:
            return None
        ev = data[0]["evaluation"]
        meta = {}
        for m in ev["metadataEntries"]:
            meta[m["label"]] = next(
                (m[k] for k in ("intValue", "mdStr", "text") if k in m), None
            )
        return {"success": ev["success"], "severity": ev["severity"],
                "description": ev["description"] or "", "metadata": meta}

    # ---- sensors -------------------------------------------------------------------------

    def _sensor(self, name: str) -> dict:
        return self.query(
            """query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) {
                 __typename ... on Sensor { sensorState { id status ticks(limit: 20) {
                 status timestamp endTimestamp runIds skipReason error { message } } } } } }""",
            {"s": {**LOCATION, "sensorName": name}},
        )["sensorOrError"]

    def sensor_ticks(self, name: str) -> list[dict]:
        """The sensor's ticks, newest first."""
        return self._sensor(name)["sensorState"]["ticks"]

    def start_sensor(self, name: str) -> None:
        out = self.query(
            """mutation($s: SensorSelector!) { startSensor(sensorSelector: $s) {
                 __typename ... on Sensor { sensorState { status } }
                 ... on PythonError { message } } }""",
            {"s": {**LOCATION, "sensorName": name}},
        )["startSensor"]
        assert out["__typename"] == "Sensor" and out["sensorState"]["status"] == "RUNNING", out

    def stop_sensor(self, name: str) -> None:
        state_id = self._sensor(name)["sensorState"]["id"]
        out = self.query(
            """mutation($id: String) { stopSensor(id: $id) { __typename
                 ... on StopSensorMutationResult { instigationState { status } }
                 ... on PythonError { message } } }""",
            {"id": state_id},
        )["stopSensor"]
        assert out["__typename"] == "StopSensorMutationResult", out
        assert out["instigationState"]["status"] == "STOPPED", out

    # ---- partitions (the partitioned layout) -----------------------------------------------

    def asset_graph(self) -> dict[tuple[str, ...], dict]:
        """Asset key -> its upstream keys, whether it is observable, the name of the dynamic
        partitions it is partitioned by (None: unpartitioned, or not dynamic) and its checks
        (name -> the same partitions name)."""

        def dynamic(definition: dict | None) -> str | None:
            if definition is None:
                return None
            names = [d["dynamicPartitionsDefinitionName"] for d in definition["dimensionTypes"]]
            return names[0] if len(names) == 1 else None

        nodes = self.query("""{ assetNodes { assetKey { path } dependencyKeys { path }
            isObservable partitionDefinition { dimensionTypes {
              dynamicPartitionsDefinitionName } }
            assetChecksOrError { __typename ... on AssetChecks { checks { name
              partitionDefinition { dimensionTypes { dynamicPartitionsDefinitionName } }
            } } } } }""")["assetNodes"]
        out: dict[tuple[str, ...], dict] = {}
        for n in nodes:
            checks = n["assetChecksOrError"]
            assert checks["__typename"] == "AssetChecks", checks
            out[tuple(n["assetKey"]["path"])] = {
                "deps": {tuple(d["path"]) for d in n["dependencyKeys"]},
                "observable": n["isObservable"],
                "partitions": dynamic(n["partitionDefinition"]),
                "checks": {c["name"]: dynamic(c["partitionDefinition"])
                           for c in checks["checks"]},
            }
        return out

    def partition_keys(self, asset: list[str]) -> list[str]:
        """The asset's partition keys, in their order (dynamic partitions: as added)."""
        data = self.query(
            """query($k: AssetKeyInput!) { assetNodeOrError(assetKey: $k) { __typename
                 ... on AssetNode { partitionKeys } } }""",
            {"k": {"path": asset}},
        )["assetNodeOrError"]
        assert data["__typename"] == "AssetNode", data
        return data["partitionKeys"]

    def partition_statuses(self, asset: list[str]) -> dict[str, set[str]]:
        """The asset's partitions by status: materialized, failed, unmaterialized,
        materializing (the UI's partition bar; statically or dynamically partitioned)."""
        data = self.query(
            """query($k: AssetKeyInput!) { assetNodeOrError(assetKey: $k) { __typename
                 ... on AssetNode { assetPartitionStatuses { __typename
                   ... on DefaultPartitionStatuses { materializedPartitions failedPartitions
                     unmaterializedPartitions materializingPartitions } } } } }""",
            {"k": {"path": asset}},
        )["assetNodeOrError"]
        assert data["__typename"] == "AssetNode", data
        statuses = data["assetPartitionStatuses"]
        assert statuses["__typename"] == "DefaultPartitionStatuses", statuses
        return {key.removesuffix("Partitions"): set(statuses[key])
                for key in ("materializedPartitions", "failedPartitions",
                            "unmaterializedPartitions", "materializingPartitions")}

    def check_partition_statuses(self, asset: list[str], check: str) -> dict[str, set[str]]:
        """A partitioned check's partitions by the status of their latest execution:
        succeeded, failed, inProgress, skipped, executionFailed."""
        data = self.query(
            """query($k: AssetKeyInput!, $c: String!) { assetNodeOrError(assetKey: $k) {
                 __typename ... on AssetNode { assetCheckOrError(checkName: $c) {
                   __typename ... on AssetCheck { partitionStatuses { __typename
                     ... on AssetCheckDefaultPartitionStatuses { succeededPartitions
                       failedPartitions inProgressPartitions skippedPartitions
                       executionFailedPartitions } } } } } } }""",
            {"k": {"path": asset}, "c": check},
        )["assetNodeOrError"]
        assert data["__typename"] == "AssetNode", data
        found = data["assetCheckOrError"]
        assert found["__typename"] == "AssetCheck", found
        statuses = found["partitionStatuses"]
        assert statuses is not None, f"{check} on {asset} is not partitioned"
        assert statuses["__typename"] == "AssetCheckDefaultPartitionStatuses", statuses
        return {key.removesuffix("Partitions"): set(statuses[key])
                for key in ("succeededPartitions", "failedPartitions", "inProgressPartitions",
                            "skippedPartitions", "executionFailedPartitions")}

    def partition_check_evaluation(self, asset: list[str], check: str,
                                   partition: str) -> dict | None:
        """The latest evaluation of a partitioned check for one partition: as
        `check_evaluation`, plus the partition and the run id ("" when no run evaluated it:
        a sensor reported it); None when it never ran for that partition."""
        data = self.query(
            """query($k: AssetKeyInput!, $c: String!, $p: String) { assetCheckExecutions(
                 assetKey: $k, checkName: $c, partition: $p, limit: 1) { runId partition
                 evaluation { success severity description partition metadataEntries { label
                   ... on IntMetadataEntry { intValue } ... on MarkdownMetadataEntry { mdStr }
                   ... on TextMetadataEntry { text } } } } }""",
            {"k": {"path": asset}, "c": check, "p": partition},
        )["assetCheckExecutions"]
        if not data or data[0]["evaluation"] is None:
            return None
        ev = data[0]["evaluation"]
        meta = {m["label"]: next((m[k] for k in ("intValue", "mdStr", "text") if k in m), None)
                for m in ev["metadataEntries"]}
        return {"success": ev["success"], "severity": ev["severity"],
                "description": ev["description"] or "", "metadata": meta,
                "partition": ev["partition"], "runId": data[0]["runId"]}

    def partition_materialization(self, asset: list[str], partition: str) -> dict | None:
        """The newest materialization of one partition of an asset: its run id and metadata
        (label -> number, text or markdown; other kinds -> None); None when there is none."""
        data = self.query(
            """query($k: AssetKeyInput!, $p: [String!]) { assetOrError(assetKey: $k) {
                 __typename ... on Asset { assetMaterializations(partitions: $p, limit: 1) {
                   runId partition metadataEntries { label
                     ... on IntMetadataEntry { intValue } ... on TextMetadataEntry { text }
                     ... on MarkdownMetadataEntry { mdStr } ... on BoolMetadataEntry {
                       boolValue } } } } } }""",
            {"k": {"path": asset}, "p": [partition]},
        )["assetOrError"]
        if data["__typename"] != "Asset" or not data["assetMaterializations"]:
            return None
        event = data["assetMaterializations"][0]
        assert event["partition"] == partition, event
        return {"runId": event["runId"], "metadata": {
            m["label"]: next((m[k] for k in ("intValue", "text", "mdStr", "boolValue")
                              if k in m), None) for m in event["metadataEntries"]}}

    def run_details(self, run_id: str) -> dict:
        """A run's job, status, asset selection, asset check selection and run config."""
        data = self.query(
            """query($id: ID!) { runOrError(runId: $id) { __typename ... on Run { jobName
                 status assetSelection { path } assetCheckSelection { name } runConfigYaml
                 } } }""",
            {"id": run_id},
        )["runOrError"]
        assert data["__typename"] == "Run", data
        return {"job": data["jobName"], "status": data["status"],
                "assets": {tuple(k["path"]) for k in data["assetSelection"] or []},
                "checks": [c["name"] for c in data["assetCheckSelection"] or []],
                "config": yaml.safe_load(data["runConfigYaml"]) or {}}


def wait_until(what: str, timeout: float, probe, every: float = 1.0):
    """`probe()`'s first truthy result, polled every `every` seconds; fails naming `what`
    after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = probe()
        if out:
            return out
        time.sleep(every)
    raise AssertionError(f"{what}: not within {timeout} s")


def project_environment(project: Path, module: str, home: Path) -> dict[str, str]:
    """What `dagster dev` needs to run the dg project at `project` as a user does: its
    `workspace.yaml` (the module `module`, location `delta_ops`), a DAGSTER_HOME at `home`
    whose `dagster.yaml` sets one slot per table pool (docs/dagster.md), and the
    environment: the project and this repository on the path, no registry override."""
    from delta_ops.defs.tables import INSTANCE_CONCURRENCY
    from delta_ops_tests.support.corpus import REPO_ROOT

    (project / "workspace.yaml").write_text(
        "load_from:\n  - python_module:\n      module_name: "
        f"{module}\n      location_name: delta_ops\n      working_directory: .\n")
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n" + INSTANCE_CONCURRENCY)
    env = {**os.environ, "DAGSTER_HOME": str(home),
           "PYTHONPATH": os.pathsep.join([str(project), str(REPO_ROOT)])}
    env.pop("DELTA_OPS_REGISTRY", None)
    return env


@contextlib.contextmanager
def running_dagster_dev(project: Path, env: dict[str, str], log_path: Path):
    """`dagster dev` on the project's `workspace.yaml` (see `project_environment`), on a free
    port, its output in `log_path`: yields (the GraphQL client, the process); on exit stops
    its process group and fails if any of its processes is left."""
    port = free_port()
    with open(log_path, "wb") as log:
        proc = start_dagster_dev(project / "workspace.yaml", project, env, log, port)
        try:
            yield Dagit(f"http://127.0.0.1:{port}/graphql"), proc
        finally:
            stop_group(proc)
    leftover = group_members(proc.pid)
    assert not leftover, f"processes of dagster dev still running: {leftover}"


__all__ = ["FINISHED", "LOCATION", "Dagit", "free_port", "group_members", "project_environment",
           "running_dagster_dev", "start_dagster_dev", "stop_group", "wait_until"]
