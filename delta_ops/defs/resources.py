"""Dagster resources: the table registry and the Spark session behind the `spark` engine.

Resources own configuration and build clients lazily. `SparkResource` holds only plain
config at definition load: the `SparkEngine` it hands out starts its session on first use,
inside a run, and the resource closes whatever it started when the run's step ends. Nothing
here imports pyspark (`delta_ops.engine.spark` is imported only when a run asks for the
`spark` engine), so loading the code location never starts a JVM.

Protocol sections: none (configuration and execution only).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dagster import ConfigurableResource, InitResourceContext
from pydantic import Field, PrivateAttr

from delta_ops.defs.registry import (
    EnvRef,
    MissingSecretError,
    RegisteredTable,
    Registry,
    SparkSettings,
    load_registry,
)
from delta_ops.errors import EngineError, RegistryError

if TYPE_CHECKING:
    from delta_ops.engine.base import Engine
    from delta_ops.engine.session import SparkSessionConfig


#: The table sources of the `DeltaMaintenanceComponent`s loaded in this process, by their
#: `defs.yaml` (what `RegistryResource.component` names). Every process that runs the code
#: location's code (code server, run worker) loads its definitions first, which registers
#: them here.
_COMPONENT_SOURCES: dict[str, Any] = {}


def register_component_source(source: Any) -> str:
    """Keep a component's `RegistrySource` for `RegistryResource(component=...)`; returns
    the key: its `defs.yaml`, relative to the project root when inside it."""
    origin = Path(source.origin)
    try:
        key = str(origin.relative_to(source.base_dir))
    except ValueError:
        key = str(origin)
    _COMPONENT_SOURCES[key] = source
    return key


class RegistryResource(ConfigurableResource):
    """The table registry, re-read at the start of each run: a registry file (`path`), or
    what a `DeltaMaintenanceComponent` describes (`component`: its `defs.yaml`, relative to
    the project root, which is all the launchpad shows; `source`: its attributes as JSON,
    for code that builds the resource itself). The registry file it names, its listed
    tables and the discovery cache are read again; no prefix is listed.

    Policies (retentions, intervals, dry run) are read when a run starts, so editing them
    takes effect without reloading the code location; adding or removing tables needs a
    reload, since every table has its own assets.
    """

    path: str | None = Field(default=None, description="Path of the registry YAML file.")
    component: str | None = Field(
        default=None,
        description="The defs.yaml of the DeltaMaintenanceComponent whose tables these are "
        "(relative to the project root), instead of path.",
    )
    source: str | None = Field(
        default=None,
        description="The DeltaMaintenanceComponent's table sources (JSON), instead of path.",
    )

    _registry: Registry | None = PrivateAttr(default=None)

    def load(self) -> Registry:
        """The registry (loaded once per resource instance).

        Raises:
            RegistryError: the file is missing or invalid (with `source`, an invalid entry
                fails only when that table is asked for, see `Registry.table`).
        """
        if self._registry is None:
            source = self.registry_source()
            if source is not None:
                from delta_ops.defs.sources import assemble_registry

                self._registry = assemble_registry(source)
            else:
                self._registry = load_registry(self.path)
        return self._registry

    def registry_source(self) -> Any:
        """The component's `RegistrySource` (None for a registry file).

        Raises:
            RegistryError: `component` names no component loaded in this process.
        """
        if self.component is not None:
            found = _COMPONENT_SOURCES.get(self.component)
            if found is None:
                raise RegistryError(
                    [f"no DeltaMaintenanceComponent from {self.component} is loaded in this "
                     f"process (loaded: {', '.join(sorted(_COMPONENT_SOURCES)) or 'none'})"],
                    file=self.component,
                )
            return found
        if self.source is not None:
            from delta_ops.defs.sources import RegistrySource

            return RegistrySource.model_validate_json(self.source)
        return None

    def table(self, name: str) -> RegisteredTable:
        """One registered table (RegistryError naming the registered ones when unknown)."""
        return self.load().table(name)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        self._registry = None  # each run (and sensor tick) reads the file afresh


class SparkResource(ConfigurableResource):
    """Where the `spark` engine runs: embedded local Spark by default, a cluster or Spark
    Connect by config.

    Configure it in the registry's `spark` section (the deployment's default), or per run
    in the launchpad::

        resources:
          spark:
            config:
              master: spark://spark-master:7077      # or remote: sc://connect-host:15002
              conf: {spark.executor.memory: 4g}

    The session is created lazily: on the first engine call of a run that selected the
    `spark` engine, never at definition load. Executors import `delta_ops` to reach storage,
    so they need the same Python environment (`python` names the interpreter).
    """

    master: str | None = Field(
        default=None,
        description="Spark master URL: local[*] (default), local[N], spark://host:7077, "
        "k8s://..., yarn.",
    )
    remote: str | None = Field(
        default=None, description="Spark Connect URL sc://host:port (instead of a master)."
    )
    app_name: str = Field(default="delta-ops", description="Spark application name.")
    conf: dict[str, str] = Field(
        default_factory=dict, description="Extra Spark configuration (spark.* keys)."
    )
    conf_from_env: dict[str, str] = Field(
        default_factory=dict,
        description="Spark configuration read from environment variables when the session "
        "starts: conf key -> variable name (for secrets: the UI shows only the name).",
    )
    python: str | None = Field(
        default=None, description="Interpreter executors run (PYSPARK_PYTHON); default: ours."
    )
    local_ip: str | None = Field(
        default=None, description="Address the driver binds to and advertises (e.g. 127.0.0.1)."
    )

    _engines: dict[str, Any] = PrivateAttr(default_factory=dict)
    _failures: dict[str, EngineError] = PrivateAttr(default_factory=dict)

    @classmethod
    def from_settings(cls, settings: SparkSettings) -> SparkResource:
        """The resource a registry's `spark` section describes."""
        plain = {k: str(v) for k, v in settings.conf.items() if not isinstance(v, EnvRef)}
        from_env = {k: v.env for k, v in settings.conf.items() if isinstance(v, EnvRef)}
        return cls(
            master=settings.master, remote=settings.remote, app_name=settings.app_name,
            conf=plain, conf_from_env=from_env, python=settings.python,
            local_ip=settings.local_ip,
        )

    def session_config(self) -> SparkSessionConfig:
        """The plain session config (building it starts nothing).

        Raises:
            MissingSecretError: a `conf_from_env` variable is not set.
        """
        from delta_ops.engine.session import SparkSessionConfig

        conf = dict(self.conf)
        for key, variable in self.conf_from_env.items():
            if variable not in os.environ:
                raise MissingSecretError(
                    f"Spark conf {key!r} refers to environment variable {variable}, which is "
                    "not set"
                )
            conf[key] = os.environ[variable]
        return SparkSessionConfig(
            master=self.master,
            remote=self.remote,
            app_name=self.app_name,
            conf=conf,
            python=self.python,
            local_ip=self.local_ip,
        )

    def describe(self) -> str:
        """Where Spark runs, for logs (no conf values: they may hold secrets)."""
        return f"Spark Connect {self.remote}" if self.remote else (
            f"Spark master {self.master or 'local[*]'}"
        )

    def engine(self, name: str = "spark") -> Engine:
        """The engine named by a table's policy: "spark" (this resource's session, started
        on first use) or "local" (threads in the run's process). One instance per name and
        run, so every asset of a run shares one Spark session. Built by
        `delta_ops.engine.session.make_engine`, like the CLI's engines: building one starts
        no session.

        Raises:
            EngineError: the `spark://` master or Spark Connect server does not accept a
                connection (checked before any JVM starts; remembered for the rest of the
                run, so later components fail at once), or the master or remote URL is
                malformed.
            MissingSecretError: a `conf_from_env` variable is not set.
            ValueError: an engine name other than "spark" or "local".
        """
        engine = self._engines.get(name)
        if engine is None:
            from delta_ops.engine.session import make_engine

            if name == "spark":
                failed = self._failures.get(name)
                if failed is not None:
                    raise failed  # once per run: the other components fail at once too
                try:
                    config = self.session_config()
                except ValueError as exc:  # a malformed master or remote URL
                    failed = EngineError(f"invalid Spark settings: {exc}")
                else:
                    try:
                        config.preflight()  # a dead master fails now, in one line
                    except EngineError as exc:
                        failed = exc
                if failed is not None:
                    self._failures[name] = failed
                    raise failed
                engine = make_engine("spark", spark_config=config)
            else:
                engine = make_engine(name)  # "local"; ValueError naming the choices otherwise
            self._engines[name] = engine
        return engine

    def setup_for_execution(self, context: InitResourceContext) -> None:
        self._engines = {}
        self._failures = {}

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        engines, self._engines = self._engines, {}
        for engine in engines.values():
            engine.close()


__all__ = ["RegistryResource", "SparkResource"]
