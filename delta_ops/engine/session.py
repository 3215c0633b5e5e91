"""Choosing an engine: the Spark session config, `make_engine`, and the CLI's engine flags.

Nothing here imports pyspark: a `SparkSessionConfig` is plain data, and the session it
describes is started by `delta_ops.engine.spark.SparkEngine` on first use. Protocol sections:
none (execution only); the operations that use an engine name theirs.

A config names either a master (an embedded `local[*]` by default, `local[N]`,
`local-cluster[...]`, `spark://host:7077`, ...) or a Spark Connect URL (`sc://host:port`).
Executors run the same Python as the driver (`PYSPARK_PYTHON` defaults to the running
interpreter) because they import `delta_ops` to reach storage.
"""

from __future__ import annotations

import argparse
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from delta_ops.errors import EngineError

if TYPE_CHECKING:
    from delta_ops.engine.base import Engine

__all__ = [
    "DEFAULT_MASTER",
    "ENGINE_NAMES",
    "EngineError",  # re-exported: delta_ops.engine.spark raises it
    "SparkSessionConfig",
    "add_engine_arguments",
    "engine_from_args",
    "make_engine",
]

DEFAULT_MASTER = "local[*]"
ENGINE_NAMES = ("local", "spark")
#: Seconds `SparkSessionConfig.preflight` waits for a standalone master or a Spark Connect
#: server to accept a connection. A live one answers in milliseconds; a dead one would
#: otherwise cost Spark's registration retries (three tries of 20 s, then a Java
#: traceback) before the first job fails.
PREFLIGHT_TIMEOUT_S = 3.0
SPARK_CONNECT_DEFAULT_PORT = 15002

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
        """Fail fast when no standalone master or Spark Connect server is listening.

        Opens (and closes) one TCP connection per endpoint with a short timeout; passes
        when any master of a high-availability list answers. Starts no JVM.

        Raises:
            EngineError: one line naming the master URL and the cause.
        """
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


def make_engine(
    name: str = "local",
    *,
    spark_master: str | None = None,
    spark_remote: str | None = None,
    spark_conf: Mapping[str, str] | None = None,
    max_workers: int | None = None,
) -> Engine:
    """Build an engine by name. Building a Spark engine starts no session.

    Args:
        name: "local" (threads in this process) or "spark".
        spark_master: Spark master URL (spark only; default `local[*]`).
        spark_remote: Spark Connect URL `sc://host:port` (spark only).
        spark_conf: Extra Spark configuration (spark only).
        max_workers: Threads of the local engine (local only).

    Returns:
        The engine.

    Raises:
        ValueError: Unknown name, or Spark options given for the local engine.

    A `spark://` master or Spark Connect server that accepts no connection fails when the
    session starts, before any JVM (see `SparkSessionConfig.preflight`).
    """
    if name == "local":
        given = [
            flag
            for flag, value in (
                ("spark_master", spark_master),
                ("spark_remote", spark_remote),
                ("spark_conf", spark_conf),
            )
            if value
        ]
        if given:
            raise ValueError(f"{', '.join(given)} only apply to the spark engine")
        from delta_ops.engine.local import LocalEngine

        return LocalEngine(max_workers=max_workers)
    if name == "spark":
        if max_workers is not None:
            raise ValueError("max_workers only applies to the local engine")
        from delta_ops.engine.spark import SparkEngine

        config = SparkSessionConfig(
            master=spark_master, remote=spark_remote, conf=dict(spark_conf or {})
        )
        return SparkEngine(config)
    raise ValueError(f"unknown engine {name!r}; choose one of {', '.join(ENGINE_NAMES)}")


def _parse_conf(pairs: Sequence[str] | None) -> dict[str, str]:
    """`--spark-conf KEY=VALUE` arguments; a malformed one is named by its position, never
    by its text (a value may be a secret)."""
    out: dict[str, str] = {}
    for i, pair in enumerate(pairs or (), 1):
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(
                f"--spark-conf takes KEY=VALUE (the key, '=', then the value): occurrence {i} "
                f"of --spark-conf has {'no' if not sep else 'an empty key before the'} '=' "
                "(its text is not shown: it may hold a secret)"
            )
        out[key] = value
    return out


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """Add `--engine`, `--spark-master`, `--spark-remote` and `--spark-conf` to a subcommand.

    Args:
        parser: The subcommand's parser.
    """
    group = parser.add_argument_group("execution engine")
    group.add_argument(
        "--engine",
        choices=ENGINE_NAMES,
        default=None,
        help="where heavy work runs: local threads (default) or Spark; "
        "--spark-master/--spark-remote imply spark",
    )
    group.add_argument(
        "--spark-master",
        metavar="URL",
        help=f"Spark master (default {DEFAULT_MASTER}), e.g. spark://host:7077",
    )
    group.add_argument(
        "--spark-remote", metavar="sc://HOST:PORT", help="Spark Connect server to use"
    )
    group.add_argument(
        "--spark-conf",
        action="append",
        metavar="KEY=VALUE",
        help="extra Spark configuration (repeatable)",
    )


def engine_from_args(args: argparse.Namespace) -> Engine:
    """The engine the parsed `add_engine_arguments` flags ask for (no session started).

    Args:
        args: Parsed arguments.

    Returns:
        The engine; the caller closes it.

    Raises:
        argparse.ArgumentTypeError: Contradictory or malformed flags.
    """
    master = getattr(args, "spark_master", None)
    remote = getattr(args, "spark_remote", None)
    conf = _parse_conf(getattr(args, "spark_conf", None))
    name = getattr(args, "engine", None)
    spark_flags = [
        flag
        for flag, value in (
            ("--spark-master", master),
            ("--spark-remote", remote),
            ("--spark-conf", conf),
        )
        if value
    ]
    if name is None:
        name = "spark" if spark_flags else "local"
    if name == "local" and spark_flags:
        raise argparse.ArgumentTypeError(
            f"{', '.join(spark_flags)} need --engine spark (got --engine local)"
        )
    if master and remote:
        raise argparse.ArgumentTypeError("give --spark-master or --spark-remote, not both")
    try:
        return make_engine(name, spark_master=master, spark_remote=remote, spark_conf=conf)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
