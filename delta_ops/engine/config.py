"""The Spark session config: where the `spark` engine runs, as plain data.

Building a `SparkSessionConfig` starts nothing and imports no pyspark; the session it
describes is started by `delta_ops.engine.spark.SparkEngine` on first use. `preflight`
checks (one TCP connection, no JVM) that a standalone master or Spark Connect server is
listening. Protocol sections: none (execution only).

A config names either a master (an embedded `local[*]` by default, `local[N]`,
`local-cluster[...]`, `spark://host:7077`, ...) or a Spark Connect URL (`sc://host:port`).
Executors run the same Python as the driver (`PYSPARK_PYTHON` defaults to the running
interpreter) because they import `delta_ops` to reach storage.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from delta_ops.errors import EngineError

__all__ = [
    "DEFAULT_MASTER",
    "MASTER_FORMS",
    "PREFLIGHT_TIMEOUT_S",
    "SPARK_CONNECT_DEFAULT_PORT",
    "SparkSessionConfig",
    "master_problem",
]

DEFAULT_MASTER = "local[*]"
#: Seconds `SparkSessionConfig.preflight` waits for a standalone master or a Spark Connect
#: server to accept a connection. A live one answers in milliseconds; a dead one would
#: otherwise cost Spark's registration retries (three tries of 20 s, then a Java
#: traceback) before the first job fails.
PREFLIGHT_TIMEOUT_S = 3.0
SPARK_CONNECT_DEFAULT_PORT = 15002

#: The master URLs Spark 4 starts a session on, as its own parsers read them
#: (`SparkSubmit`: "Master must either be yarn or start with spark, k8s, or local";
#: `SparkContext.createTaskScheduler`: the `local[...]` and `local-cluster[...]` forms).
#: Mesos is gone since Spark 4.0.
_MASTER_RES = (
    re.compile(r"local"),
    re.compile(r"local\[([0-9]+|\*)\]"),
    re.compile(r"local\[([0-9]+|\*)\s*,\s*([0-9]+)\]"),
    re.compile(r"local-cluster\[\s*([0-9]+)\s*,\s*([0-9]+)\s*,\s*([0-9]+)\s*\]"),
    re.compile(r"spark://.*"),  # host and port: checked by `endpoints`
    re.compile(r"yarn"),
    re.compile(r"k8s://.+"),  # a host: Spark's Kubernetes client fails at length without
)
#: The forms of `_MASTER_RES`, for messages.
MASTER_FORMS = (
    "local, local[N], local[*], local[N,F], local-cluster[N,C,M], spark://HOST:PORT, yarn "
    "or k8s://HOST:PORT"
)


def master_problem(master: str) -> str | None:
    """Why Spark would refuse `master` as a master URL, or None. Checked before a JVM
    starts: Spark's own refusal comes after it, as a Java stack trace."""
    match = next((m for r in _MASTER_RES if (m := r.fullmatch(master))), None)
    if match is None:
        return f"{master!r} is not a Spark master URL: use {MASTER_FORMS}"
    # Spark refuses 0 threads ("Asked to run locally with 0 threads") after its JVM
    # started; a local cluster of 0 workers, cores or MB cannot run a task.
    counts = match.groups() if master.startswith("local-cluster") else match.groups()[:1]
    if any(g is not None and g != "*" and int(g) < 1 for g in counts):
        return (f"{master!r} asks for 0 threads, workers, cores or MB; each is at least 1 "
                f"(forms: {MASTER_FORMS})")
    return None


@dataclass(frozen=True)
class SparkSessionConfig:
    """How to reach Spark. Plain data: building one starts nothing.

    Attributes:
        master: Spark master URL (`local[*]`, `local[2]`, `local-cluster[2,1,1024]`,
            `spark://host:7077`, ...). None means `local[*]` unless `remote` is set.
        remote: Spark Connect URL (`sc://host:port`); exclusive with `master`.
        app_name: Application name shown by Spark.
        conf: Extra Spark configuration (`spark.*` keys). Values are never logged.
        python: Interpreter for executors (`PYSPARK_PYTHON`); None: an already set
            `PYSPARK_PYTHON`, else the running interpreter.
        local_ip: Address Spark binds to and advertises (`SPARK_LOCAL_IP`,
            `spark.driver.host`); None leaves Spark's default. Tests use 127.0.0.1.
        log_level: Spark log level set once the session is up (classic sessions).
        threads_per_task: Storage threads each Spark task uses (listing, deletes, footer
            reads, writes): object-store calls are network round trips, so a task keeps
            several in flight.
        max_partitions: Upper bound on the partitions (tasks) of one engine job; None
            means 4 x the default parallelism.
    """

    master: str | None = None
    remote: str | None = None
    app_name: str = "delta-ops"
    conf: Mapping[str, str] = field(default_factory=dict)
    python: str | None = None
    local_ip: str | None = None
    log_level: str = "WARN"
    threads_per_task: int = 8
    max_partitions: int | None = None

    def __post_init__(self) -> None:
        if self.master is not None and self.remote is not None:
            raise ValueError(
                f"a Spark session has either a master ({self.master!r}) or a Spark Connect "
                f"remote ({self.remote!r}), not both"
            )
        if self.master is not None and not self.master.strip():
            raise ValueError("the Spark master must not be empty (e.g. 'local[*]')")
        if self.remote is not None and not self.remote.startswith("sc://"):
            raise ValueError(f"a Spark Connect URL starts with 'sc://', got {self.remote!r}")
        if self.threads_per_task < 1:
            raise ValueError(f"threads_per_task must be >= 1, got {self.threads_per_task}")
        if self.max_partitions is not None and self.max_partitions < 1:
            raise ValueError(f"max_partitions must be >= 1, got {self.max_partitions}")
        object.__setattr__(self, "conf", {str(k): str(v) for k, v in dict(self.conf).items()})

    @property
    def is_connect(self) -> bool:
        """Whether this config reaches Spark over Spark Connect."""
        return self.remote is not None

    @property
    def effective_master(self) -> str | None:
        """The master a classic session uses (None for Spark Connect)."""
        if self.remote is not None:
            return None
        return self.master or DEFAULT_MASTER

    @property
    def executor_python(self) -> str:
        """The interpreter executors run (`python`, else the running interpreter)."""
        return self.python or sys.executable

    def describe(self) -> str:
        """Where the session runs, for messages (no conf values: they may hold secrets)."""
        if self.remote is not None:
            return f"Spark Connect {self.remote}"
        return f"Spark master {self.effective_master}"

    def endpoints(self) -> list[tuple[str, int]]:
        """The (host, port) pairs a session must reach before it starts: every master of a
        `spark://h1:p1,h2:p2` URL, or the Spark Connect server; none for `local`, `k8s`,
        `yarn` (their clients report their own failures).

        Raises:
            EngineError: a `spark://` or `sc://` URL without a host or with a bad port.
        """
        if self.remote is not None:
            hostport = self.remote[len("sc://"):].split("/", 1)[0].split(";", 1)[0]
            return [_host_port(hostport, self.remote, SPARK_CONNECT_DEFAULT_PORT)]
        master = self.effective_master or ""
        if not master.startswith("spark://"):
            return []
        return [_host_port(hp, master, None) for hp in master[len("spark://"):].split(",")]

    def preflight(self, timeout_s: float = PREFLIGHT_TIMEOUT_S) -> None:
        """Fail fast on a master URL Spark would refuse (`master_problem`), or when no
        standalone master or Spark Connect server is listening.

        Opens (and closes) one TCP connection per endpoint with a short timeout; passes
        when any master of a high-availability list answers. Starts no JVM.

        Raises:
            EngineError: one line naming the master URL and the cause.
        """
        import socket  # here: the command line loads this module to build its parser

        master = self.effective_master
        problem = None if master is None else master_problem(master)
        if problem is not None:
            raise EngineError(f"could not start a Spark session on {self.describe()}: {problem}")
        endpoints = self.endpoints()
        causes = []
        for host, port in endpoints:
            try:
                with socket.create_connection((host, port), timeout=timeout_s):
                    return
            except OSError as exc:
                cause = exc.strerror or type(exc).__name__
                if isinstance(exc, TimeoutError | socket.timeout):
                    cause = f"no answer within {timeout_s:g} s"
                causes.append(f"{host}:{port}: {cause}")
        if causes:
            raise EngineError(
                f"cannot reach {self.describe()} ({'; '.join(causes)}); is it running, and "
                "is the URL right?"
            )


def _host_port(text: str, url: str, default_port: int | None) -> tuple[str, int]:
    """`host:port` (IPv6 as `[::1]:7077`) of a Spark URL; EngineError when malformed."""
    host, port = text, None
    if text.startswith("["):
        end = text.find("]")
        host, rest = text[1:end], text[end + 1:] if end > 0 else ""
        if end < 0 or (rest and not rest.startswith(":")):
            raise EngineError(f"{url!r} is not a valid Spark URL: bad address {text!r}")
        port = rest[1:] if rest else None
    elif ":" in text:
        host, port = text.rsplit(":", 1)
    if not host:
        raise EngineError(f"{url!r} is not a valid Spark URL: no host")
    if port is None:
        if default_port is None:
            raise EngineError(
                f"{url!r} is not a valid Spark master URL: no port (spark://host:7077)"
            )
        return host, default_port
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise EngineError(f"{url!r} is not a valid Spark URL: bad port {port!r}")
    return host, int(port)
