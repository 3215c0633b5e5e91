"""Spark engine start-up: starting (or joining) the session a `SparkSessionConfig` names.

Classic sessions (embedded `local[*]`, `local-cluster`, standalone `spark://`, ...) and
Spark Connect clients (`sc://`) are built from their own classes, so both kinds coexist in
one process; a master or Connect server that accepts no connection fails before any JVM
starts. pyspark is imported only inside these functions. Protocol sections: none
(execution only).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from delta_ops.engine.config import SparkSessionConfig
from delta_ops.errors import EngineError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger("delta_ops.engine.spark")


def spark_home() -> str:
    """The Spark distribution pyspark runs: `SPARK_HOME`, else the pyspark package itself.

    The pip package holds `bin/spark-class`, `bin/spark-submit` and the jars (Spark
    Connect's included), enough to start a standalone master and workers or a Connect
    server (it has no `sbin` start scripts for masters and workers).
    """
    if os.environ.get("SPARK_HOME"):
        return os.environ["SPARK_HOME"]
    from pyspark.find_spark_home import _find_spark_home

    return _find_spark_home()


def _prepare_environment(config: SparkSessionConfig) -> None:
    """Environment a classic session's JVM and Python workers read when they start.

    `PYSPARK_PYTHON` (executors' interpreter) defaults to the running one; `SPARK_HOME`
    defaults to the pyspark package (the pip package is a Spark distribution: workers of
    `local-cluster` and standalone masters launch executors from it); `SPARK_LOCAL_IP`
    is set when the config names an address.
    """
    if config.python is not None or "PYSPARK_PYTHON" not in os.environ:
        os.environ["PYSPARK_PYTHON"] = config.executor_python
    if not os.environ.get("SPARK_HOME"):
        os.environ["SPARK_HOME"] = spark_home()
    if config.local_ip is not None:
        os.environ["SPARK_LOCAL_IP"] = config.local_ip


#: Modules a Spark Connect client needs, by the pip package that provides them.
_CONNECT_MODULES = {
    "pandas": "pandas",
    "numpy": "numpy",
    "grpc": "grpcio",
    "grpc_status": "grpcio-status",
    "google.rpc": "googleapis-common-protos",
    "zstandard": "zstandard",
}


def _require_connect_packages(remote: str) -> None:
    import importlib.util

    missing = []
    for module, package in _CONNECT_MODULES.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # a missing parent package (google)
            found = False
        if not found:
            missing.append(package)
    if missing:
        raise EngineError(
            f"Spark Connect ({remote}) needs the pyspark[connect] packages; missing: "
            f"{', '.join(missing)} (pip install 'pyspark[connect]')"
        )


def _start_session(config: SparkSessionConfig) -> tuple[SparkSession, bool]:
    """Start (or join) the session `config` describes; (session, whether we own it).

    Sessions are built from their own classes rather than `SparkSession.builder`, whose
    `getOrCreate` switches the whole process to Spark Connect once any Connect session
    exists (it sets `SPARK_CONNECT_MODE_ENABLED`): classic and Connect engines coexist.

    A `spark://` master or Connect server that accepts no connection fails first, in one
    line, before any JVM starts (`SparkSessionConfig.preflight`); a session that fails to
    start for another reason is one EngineError naming where, with Spark's first line.
    """
    config.preflight()
    try:
        return _create_session(config)
    except EngineError:
        raise
    except Exception as exc:  # py4j, PySparkRuntimeError, gRPC: one line, cause chained
        first = next(
            (line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__
        )
        # The whole (often Java) trace goes to the log; the error stays one line.
        logger.warning("Spark did not start on %s", config.describe(), exc_info=exc)
        raise EngineError(
            f"could not start a Spark session on {config.describe()}: {first}"
        ) from exc


def _create_session(config: SparkSessionConfig) -> tuple[SparkSession, bool]:
    """`_start_session` without the checks around it."""
    if config.remote is not None:
        _require_connect_packages(config.remote)
        from pyspark.sql.connect.session import SparkSession as ConnectSession

        builder = ConnectSession.builder.remote(config.remote)
        for key, value in config.conf.items():
            builder = builder.config(key, value)
        logger.info("connecting to %s", config.describe())
        return builder.create(), True

    _prepare_environment(config)
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    with SparkContext._lock:
        active = SparkContext._active_spark_context
    if active is not None:
        # One SparkContext per process: join it, unless the caller asked for another.
        if config.master is not None and active.master != config.master:
            raise EngineError(
                f"a Spark session with master {active.master} is already running in this "
                f"process; stop it before starting one on {config.master}"
            )
        return SparkSession(active), False

    settings = {"spark.ui.showConsoleProgress": "false"}
    if config.local_ip is not None:
        settings["spark.driver.host"] = config.local_ip
        settings["spark.driver.bindAddress"] = config.local_ip
    settings.update(config.conf)
    conf = SparkConf().setMaster(config.effective_master).setAppName(config.app_name)
    for key, value in settings.items():
        conf.set(key, value)
    logger.info("starting a Spark session on %s", config.describe())
    context = SparkContext(conf=conf)
    context.setLogLevel(config.log_level)
    return SparkSession(context), True
