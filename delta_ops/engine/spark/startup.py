"""Spark engine start-up: starting (or joining) the session a `SparkSessionConfig` names.

Classic sessions (embedded `local[*]`, `local-cluster`, standalone `spark://`, ...) and
Spark Connect clients (`sc://`) are built from their own classes, so both kinds coexist in
one process; a master or Connect server that accepts no connection fails before any JVM
starts. A classic session needs Java 17 or 21: without it (no `JAVA_HOME`, no `java` on
`PATH`, or another version) the start fails before the JVM is launched, in one line that
says how to get one (`java_problem`). pyspark is imported only inside these functions.
Protocol sections: none (execution only).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from typing import TYPE_CHECKING

from delta_ops.engine.arrow_memory import POOL_ENV, executor_pool
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


#: The Java feature releases Spark 4 runs on.
JAVA_VERSIONS = (17, 21)
#: How to get one, for the message (generic: the package names of Debian and Ubuntu, and
#: the fallback that works anywhere).
JAVA_HOWTO = (
    "install one (Debian/Ubuntu: apt-get install openjdk-17-jre-headless; elsewhere your "
    "platform's OpenJDK 17 or 21 package, or a build from adoptium.net) and put its java on "
    "PATH or set JAVA_HOME to its directory"
)
_JAVA_VERSION_RE = re.compile(r'version "(\d+)(?:\.(\d+))?')


def _java_major(text: str) -> int | None:
    """The feature release in `java -version` output ("17.0.15": 17, "1.8.0_292": 8)."""
    match = _JAVA_VERSION_RE.search(text)
    if match is None:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def java_problem(environ: Mapping[str, str] | None = None) -> str | None:
    """Why a classic Spark session cannot start its JVM here, or None when the Java it
    would run (`$JAVA_HOME/bin/java`, else `java` on `PATH`, as `spark-class` picks it) is
    one of `JAVA_VERSIONS`. Runs `java -version` once; starts no Spark.

    Args:
        environ: The environment the JVM would start in (default: this process's).
    """
    env = os.environ if environ is None else environ
    home = env.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        if not os.access(java, os.X_OK):
            return f"JAVA_HOME is {home}, which has no bin/java"
    else:
        found = shutil.which("java", path=env.get("PATH", os.defpath))
        if found is None:
            return "no java on PATH and JAVA_HOME is not set"
        java = found
    try:
        proc = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, env=dict(env)
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{java} -version failed ({exc})"
    major = _java_major(proc.stderr + proc.stdout)
    if major is None:
        return f"{java} -version printed no version"
    if major not in JAVA_VERSIONS:
        return f"{java} is Java {major}"
    return None


def _require_java() -> None:
    problem = java_problem()
    if problem is not None:
        raise EngineError(
            f"Spark needs Java {' or '.join(map(str, JAVA_VERSIONS))}: {problem}; {JAVA_HOWTO}"
        )


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
        # The whole (often Java) trace goes to the debug log and stays chained as the
        # cause; the error stays one line. (At warning level, a process that configured no
        # logging, such as the command line, would print it to stderr: Python's last
        # resort handler.)
        logger.debug("Spark did not start on %s", config.describe(), exc_info=exc)
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

    _require_java()  # before the JVM: without it, three chained tracebacks
    settings = {"spark.ui.showConsoleProgress": "false"}
    pool = executor_pool()  # Python workers that hand freed Arrow memory back
    if pool is not None:
        settings[f"spark.executorEnv.{POOL_ENV}"] = pool
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
