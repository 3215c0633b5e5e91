"""Choosing an engine by name: `make_engine("local" | "spark", ...)`.

Nothing here imports pyspark: building a Spark engine starts no session (the session is
started by `delta_ops.engine.spark.SparkEngine` on first use, from a `SparkSessionConfig`,
see `delta_ops.engine.config`). The command line's engine flags live in
`delta_ops.commands.engine_args`: the engine layer knows nothing of argparse. Protocol
sections: none (execution only); the operations that use an engine name theirs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from delta_ops.engine.config import DEFAULT_MASTER, SparkSessionConfig
from delta_ops.errors import EngineError

if TYPE_CHECKING:
    from delta_ops.engine.base import Engine

__all__ = [
    "DEFAULT_MASTER",
    "ENGINE_NAMES",
    "EngineError",  # re-exported: callers of make_engine catch it from here
    "SparkSessionConfig",  # re-exported from delta_ops.engine.config
    "make_engine",
]

ENGINE_NAMES = ("local", "spark")


def make_engine(
    name: str = "local",
    *,
    spark_master: str | None = None,
    spark_remote: str | None = None,
    spark_conf: Mapping[str, str] | None = None,
    spark_config: SparkSessionConfig | None = None,
    max_workers: int | None = None,
    max_requests: int | None = None,
) -> Engine:
    """Build an engine by name. Building a Spark engine starts no session.

    Args:
        name: "local" (threads in this process) or "spark".
        spark_master: Spark master URL (spark only; default `local[*]`).
        spark_remote: Spark Connect URL `sc://host:port` (spark only).
        spark_conf: Extra Spark configuration (spark only).
        spark_config: A whole session config (spark only; app name, executors' Python,
            bind address...), instead of `spark_master`, `spark_remote` and `spark_conf`.
        max_workers: Threads of the local engine (local only).
        max_requests: Most object-store requests in flight at once for the local engine's
            listing and deleting (local only; default `RequestPolicy().concurrency`). The
            limit still halves itself on SlowDown answers.

    Returns:
        The engine.

    Raises:
        ValueError: Unknown name, Spark options given for the local engine, or a
            `spark_config` together with `spark_master`, `spark_remote` or `spark_conf`.

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
                ("spark_config", spark_config),
            )
            if value
        ]
        if given:
            raise ValueError(f"{', '.join(given)} only apply to the spark engine")
        from delta_ops.engine.local import LocalEngine
        from delta_ops.storage.parallel import RequestPolicy

        policy = None if max_requests is None else RequestPolicy(concurrency=max_requests)
        return LocalEngine(max_workers=max_workers, policy=policy)
    if name == "spark":
        for flag, value in (("max_workers", max_workers), ("max_requests", max_requests)):
            if value is not None:
                raise ValueError(f"{flag} only applies to the local engine")
        from delta_ops.engine.spark import SparkEngine

        if spark_config is not None:
            if spark_master or spark_remote or spark_conf:
                raise ValueError(
                    "give make_engine a spark_config or spark_master/spark_remote/spark_conf, "
                    "not both"
                )
            return SparkEngine(spark_config)
        config = SparkSessionConfig(
            master=spark_master, remote=spark_remote, conf=dict(spark_conf or {})
        )
        return SparkEngine(config)
    raise ValueError(f"unknown engine {name!r}; choose one of {', '.join(ENGINE_NAMES)}")
