"""Spark for tests: shared engines (one session per test module) and Spark processes.

The root `conftest.py` makes the fixtures visible to every test module::

    @pytest.mark.spark
    def test_something(spark_engine):
        vacuum(storage, engine=spark_engine, ...)

Fixtures:

- `spark_engine` (module scope): a `SparkEngine` on `local[2]`, started on first use and
  stopped when the module's tests are done (so the next module may use another master).
- `spark_engine_each` (module scope, parametrized): the same on `local[2]` and on
  `local-cluster[2,1,1024]` (two executor JVMs of their own: what a task needs must be
  pickled and rebuilt there). Tests using it run once per master.
- `standalone_cluster` (module scope): a Spark standalone master and one worker on
  127.0.0.1, started with `bin/spark-class` from the pip package and stopped by PID.
- `connect_server` (module scope): a Spark Connect server (`local[2]`) on 127.0.0.1,
  started with `bin/spark-submit` and stopped by PID.

Sessions bind to 127.0.0.1 (`SPARK_LOCAL_IP`), executors run this interpreter
(`PYSPARK_PYTHON`), and JVMs start with the C1 JIT and the serial GC: most of what they run
is start-up code, and on a small machine that halves the time to a first result.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from delta_ops.engine.session import SparkSessionConfig
from delta_ops.engine.spark import SparkEngine, spark_home

LOCAL_IP = "127.0.0.1"
SPARK_MASTERS = ("local[2]", "local-cluster[2,1,1024]")
#: JVM options for quick start-up (tests run short jobs; peak JIT speed does not matter).
FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
TEST_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.driver.extraJavaOptions": FAST_JVM,
    "spark.executor.extraJavaOptions": FAST_JVM,
    "spark.executor.memory": "768m",
    # A failing task (an expected StorageError) is not worth four attempts.
    "spark.task.maxFailures": "2",
}
#: Seconds a Spark process may take to come up on a small, busy machine.
START_TIMEOUT = 180


def spark_test_config(master: str = "local[2]", **overrides: object) -> SparkSessionConfig:
    """The session config tests use (127.0.0.1, this interpreter, quick JVMs)."""
    conf = dict(TEST_CONF)
    conf.update(overrides.pop("conf", {}) or {})  # type: ignore[arg-type]
    return SparkSessionConfig(
        master=master,
        app_name="delta-ops-tests",
        conf=conf,
        python=sys.executable,
        local_ip=LOCAL_IP,
        threads_per_task=4,
        **overrides,  # type: ignore[arg-type]
    )


def _engine(config: SparkSessionConfig) -> Iterator[SparkEngine]:
    engine = SparkEngine(config)
    try:
        yield engine
    finally:
        engine.close()


@pytest.fixture(scope="module")
def spark_engine() -> Iterator[SparkEngine]:
    """A SparkEngine on `local[2]`, shared by the module's tests."""
    yield from _engine(spark_test_config("local[2]"))


@pytest.fixture(scope="module", params=SPARK_MASTERS)
def spark_engine_each(request: pytest.FixtureRequest) -> Iterator[SparkEngine]:
    """A SparkEngine on each of `SPARK_MASTERS` in turn (one session at a time)."""
    yield from _engine(spark_test_config(request.param))


# ---- Spark processes ------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOCAL_IP, 0))
        return int(s.getsockname()[1])


def spark_process_env(log_dir: Path) -> dict[str, str]:
    """Environment for Spark daemons: 127.0.0.1, this interpreter, quick JVMs."""
    env = dict(os.environ)
    env.update(
        {
            "SPARK_HOME": spark_home(),
            "SPARK_LOCAL_IP": LOCAL_IP,
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_DAEMON_JAVA_OPTS": FAST_JVM,
            "SPARK_LOG_DIR": str(log_dir),
        }
    )
    return env


@dataclass
class SparkProcess:
    """A Spark JVM this test session started."""

    name: str
    process: subprocess.Popen
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_for(self, marker: str, timeout: float = START_TIMEOUT) -> None:
        """Wait until `marker` appears in the log; fail with the log's tail otherwise."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if marker in self.log_text():
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(
            f"{self.name} (pid {self.pid}) did not log {marker!r} within {timeout:.0f}s; "
            f"log tail:\n{self.log_text()[-3000:]}"
        )

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM this process (its shutdown hooks end the executors it launched); SIGKILL
        it if it is still there after `timeout` seconds."""
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout)


def start_spark_process(name: str, argv: list[str], log_dir: Path) -> SparkProcess:
    """Start `argv` (a Spark launcher script; it execs the JVM, so the PID is the JVM's)."""
    log = log_dir / f"{name}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=spark_process_env(log_dir),
            cwd=log_dir,
        )
    return SparkProcess(name, process, log)


@dataclass
class StandaloneCluster:
    """A standalone master and worker on 127.0.0.1."""

    master_url: str
    master: SparkProcess
    worker: SparkProcess


@pytest.fixture(scope="module")
def standalone_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """Master + one worker (2 cores, 2 GiB) from `bin/spark-class`; stopped by PID."""
    home = Path(spark_home())
    work = tmp_path_factory.mktemp("spark-standalone")
    port = free_port()
    url = f"spark://{LOCAL_IP}:{port}"
    spark_class = str(home / "bin" / "spark-class")
    master = start_spark_process(
        "master",
        [
            spark_class, "org.apache.spark.deploy.master.Master",
            "--host", LOCAL_IP, "--port", str(port), "--webui-port", str(free_port()),
        ],
        work,
    )
    worker: SparkProcess | None = None
    try:
        master.wait_for(f"Starting Spark master at {url}")
        worker = start_spark_process(
            "worker",
            [
                spark_class, "org.apache.spark.deploy.worker.Worker", url,
                "--host", LOCAL_IP, "--cores", "2", "--memory", "2g",
                "--webui-port", str(free_port()), "--work-dir", str(work / "work"),
            ],
            work,
        )
        worker.wait_for("Successfully registered with master")
        yield StandaloneCluster(url, master, worker)
    finally:
        if worker is not None:
            worker.stop()
        master.stop()


@dataclass
class ConnectServer:
    """A Spark Connect server on 127.0.0.1."""

    url: str
    server: SparkProcess


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """`SparkConnectServer` on local[2] from `bin/spark-submit`; stopped by PID."""
    home = Path(spark_home())
    work = tmp_path_factory.mktemp("spark-connect")
    port = free_port()
    conf = {
        "spark.connect.grpc.binding.address": LOCAL_IP,
        "spark.connect.grpc.binding.port": str(port),
        "spark.ui.enabled": "false",
        "spark.driver.host": LOCAL_IP,
        "spark.driver.bindAddress": LOCAL_IP,
        "spark.driver.extraJavaOptions": FAST_JVM,
        "spark.sql.shuffle.partitions": "4",
    }
    argv = [
        str(home / "bin" / "spark-submit"),
        "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master", "local[2]",
        "--name", "delta-ops-tests-connect",
    ]
    for key, value in conf.items():
        argv += ["--conf", f"{key}={value}"]
    server = start_spark_process("connect", argv, work)
    try:
        server.wait_for("Spark Connect server started at")
        yield ConnectServer(f"sc://{LOCAL_IP}:{port}", server)
    finally:
        server.stop()
