"""The table registry: which tables the Dagster code location maintains, and how.

A YAML file (path from `DELTA_OPS_REGISTRY`, default `tables.yaml` beside `workspace.yaml`)
lists tables and a `defaults` maintenance policy that each table may override section by
section:

```yaml
defaults:
  engine: spark                  # spark | local: where heavy work runs in jobs
  checkpoint: {interval: null}   # commits between checkpoints; null: delta.checkpointInterval (10)
  checksum: {enabled: true}      # write N.crc files
  compaction: {interval: null}   # commits per compaction file; null: delta.logCompactionInterval
                                 # (off when the table does not set it either)
  vacuum: {cron: "0 3 * * 0", retention: null, dry_run: false, lite: false,
           force_retention: false, allow_catalog_managed: false}
  cleanup: {cron: "0 4 * * *", retention: null, force_retention: false,
            allow_catalog_managed: false}
  row_tracking: {backfill: false, batch_size: 20000, enable: true}
spark:                           # optional: where the spark engine runs (default local[*])
  master: spark://spark-master:7077          # or remote: sc://connect-host:15002
  conf: {spark.executor.memory: 4g}
tables:
  - name: events
    uri: s3://bucket/warehouse/events
    group: sales
    storage_options:
      endpoint_url: https://s3.example.com
      key: {env: AWS_ACCESS_KEY_ID}          # secrets: environment variable references only
      secret: {env: AWS_SECRET_ACCESS_KEY}
    checkpoint: {interval: 50}
    vacuum: {retention: 14 days}
```

Validation (pydantic) happens when the registry is loaded, before any table is touched:
unknown keys, duplicate names, bad URIs, bad cron expressions, unknown engines, literal
secrets and malformed retentions each give one line of one `RegistryError`, naming where
the problem is (`tables[1].vacuum.cron`) and never quoting a storage option's or Spark conf
value. Values are shown (Dagster metadata) only for the keys of `PUBLIC_STORAGE_OPTIONS`
and `PUBLIC_SPARK_CONF`; every other value is `<redacted>`. Relative local URIs are resolved
against the registry file's directory. A registered table that does not exist yet is not an
error here: its assets report it when they run.

This module does not import dagster; `delta_ops.defs.resources` wraps it in a resource.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from delta_ops.errors import DeltaOpsError
from delta_ops.protocol.properties import parse_interval

REGISTRY_ENV = "DELTA_OPS_REGISTRY"
DEFAULT_REGISTRY_NAME = "tables.yaml"

#: Names become Dagster asset key parts, op names and partition keys.
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Schemes `delta_ops.storage.Storage` reaches (a URI without a scheme is a local path).
SUPPORTED_SCHEMES = ("file", "s3", "s3a", "s3n", "memory")
_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
#: Storage option names that hold secrets: they may only come from environment variables.
_SECRET_OPTION_RE = re.compile(
    r"(^|_)(key|secret|token|password|passwd|credentials?|sas|signature)($|_)", re.IGNORECASE
)
#: Option names that contain "key" but hold no secret.
_NOT_SECRET_OPTIONS = frozenset({"key_prefix", "sse_kms_key_id", "kms_key_id"})

#: Storage options whose values are shown (UI metadata, logs); every other value is
#: redacted, whatever its name. Only where the store is and how it is reached: an operator
#: needs them to diagnose a failure, and none of them grants access (user information in
#: an endpoint URL is redacted all the same).
PUBLIC_STORAGE_OPTIONS = frozenset({
    "endpoint_url", "endpoint", "aws_endpoint_url", "aws_endpoint",
    "region", "region_name", "aws_region", "anon", "use_ssl", "allow_http",
})
#: Spark conf keys whose values are shown: sizing, parallelism and the S3A endpoint and
#: region. Everything else (credentials providers, tokens, arbitrary `spark.hadoop.*`) is
#: redacted.
PUBLIC_SPARK_CONF = frozenset({
    "spark.executor.memory", "spark.executor.cores", "spark.executor.instances",
    "spark.driver.memory", "spark.driver.cores", "spark.default.parallelism",
    "spark.sql.shuffle.partitions", "spark.hadoop.fs.s3a.endpoint",
    "spark.hadoop.fs.s3a.endpoint.region",
})
REDACTED = "<redacted>"
_USERINFO_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*://)[^/@]*@")


class RegistryError(DeltaOpsError):
    """The registry file is missing, unreadable or invalid (one line per problem)."""

    def __init__(self, problems: list[str], *, file: str) -> None:
        self.problems = list(problems)
        if len(problems) == 1:
            message = f"invalid table registry: {problems[0]}"
        else:
            message = "invalid table registry:\n  " + "\n  ".join(problems)
        super().__init__(message, file=file)

    def _render(self) -> str:
        return f"{self.file}: {self.reason}" if self.file else self.reason


class MissingSecretError(DeltaOpsError):
    """A storage option refers to an environment variable that is not set."""


# ---- cron -----------------------------------------------------------------------------------

_MONTHS = {m: i for i, m in enumerate(
    ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], 1)}
_DAYS = {d: i for i, d in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])}
_CRON_FIELDS = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)


def cron_problem(expr: str) -> str | None:
    """Why `expr` is not a five-field cron expression Dagster schedules accept, or None."""
    parts = expr.split()
    if len(parts) != 5:
        return f"{expr!r} is not a cron expression: expected 5 fields, got {len(parts)}"
    values: list[set[int]] = []
    for text, (name, lo, hi, names) in zip(parts, _CRON_FIELDS, strict=True):
        found: set[int] = set()
        for item in text.split(","):
            rng, slash, step_text = item.partition("/")
            if slash and (not step_text.isdigit() or int(step_text) == 0):
                return f"{expr!r}: bad step {step_text!r} in the {name} field"

            def value(token: str, name: str = name, lo: int = lo, hi: int = hi,
                      names: dict = names) -> int | None:
                v = names.get(token.lower()) if not token.isdigit() else int(token)
                return v if v is not None and lo <= v <= hi else None

            if rng == "*":
                first, last = lo, hi
            else:
                a, dash, b = rng.partition("-")
                first = value(a)
                last = value(b) if dash else first
                if first is None or last is None:
                    return f"{expr!r}: {item!r} is out of range in the {name} field ({lo}-{hi})"
                if dash and last < first:
                    return f"{expr!r}: range {rng!r} runs backwards in the {name} field"
                if slash and not dash:
                    last = hi
            found.update(range(first, last + 1, int(step_text) if slash else 1))
        values.append(found)
    if values[3] == {2} and values[2] <= {30, 31}:
        return f"{expr!r} never fires: February has no day {sorted(values[2])[0]}"
    return None


# ---- policy models ---------------------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _retention(value: str | None) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError("give the retention as text with a unit, e.g. '7 days' or '168 hours'")
    try:
        delta = parse_interval(value)
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a retention such as '7 days' ({exc})") from None
    if delta.total_seconds() < 0:
        raise ValueError(f"retention {value!r} is negative")
    return value


class CheckpointPolicy(_Model):
    """interval: commits between checkpoints (None: the table's delta.checkpointInterval)."""

    interval: int | None = Field(default=None, ge=1)


class ChecksumPolicy(_Model):
    """enabled: write a version checksum (`N.crc`) for new versions."""

    enabled: bool = True


class CompactionPolicy(_Model):
    """interval: commits per compaction file (None: delta.logCompactionInterval, else off;
    0: off)."""

    interval: int | None = Field(default=None, ge=0)

    @field_validator("interval")
    @classmethod
    def _at_least_two(cls, v: int | None) -> int | None:
        if v == 1:
            raise ValueError("a compaction covers at least 2 commits; use 0 to switch it off")
        return v


def _check_cron(v: str | None) -> str | None:
    if v is not None:
        problem = cron_problem(v)
        if problem:
            raise ValueError(problem)
    return v


class _ScheduledPolicy(_Model):
    """A policy run on a cron schedule with an optional retention override."""

    cron: str | None = None
    retention: str | None = None

    @field_validator("cron")
    @classmethod
    def _cron(cls, v: str | None) -> str | None:
        return _check_cron(v)

    @field_validator("retention", mode="before")
    @classmethod
    def _ret(cls, v: Any) -> str | None:
        return _retention(v)


class VacuumPolicy(_ScheduledPolicy):
    """cron: when the schedule runs (None: no schedule); retention: instead of the table's
    delta.deletedFileRetentionDuration (shorter is refused unless force_retention); dry_run:
    only report; allow_catalog_managed: vacuum a catalog-managed table."""

    cron: str | None = "0 3 * * 0"
    dry_run: bool = False
    lite: bool = False
    force_retention: bool = Field(
        default=False,
        description="Allow a retention shorter than the table's "
        "delta.deletedFileRetentionDuration. Files a reader of an older version, a running "
        "query or a streaming job still needs can then be deleted: time travel to those "
        "versions and such readers fail. Only when nothing else uses the table.",
    )
    allow_catalog_managed: bool = Field(
        default=False,
        description="Vacuum a catalog-managed table (catalogManaged feature). The catalog owns "
        "such a table: set this only with the catalog's permission.",
    )

    @property
    def retention_hours(self) -> float | None:
        if self.retention is None:
            return None
        return parse_interval(self.retention).total_seconds() / 3600


class CleanupPolicy(_ScheduledPolicy):
    """cron: when the schedule runs (None: no schedule); retention: instead of the table's
    delta.logRetentionDuration (shorter is refused unless force_retention);
    ensure_checkpoint: write a checkpoint at the cutoff first; allow_catalog_managed: clean
    up the log of a catalog-managed table."""

    cron: str | None = "0 4 * * *"
    ensure_checkpoint: bool = False
    force_retention: bool = Field(
        default=False,
        description="Allow a log retention shorter than the table's "
        "delta.logRetentionDuration. The log of older versions is deleted sooner: time "
        "travel to them, and readers or streams still behind, fail.",
    )
    allow_catalog_managed: bool = Field(
        default=False,
        description="Clean up the log of a catalog-managed table (catalogManaged feature). "
        "The catalog owns its log: set this only with the catalog's permission.",
    )

    @property
    def retention_delta(self) -> dt.timedelta | None:
        return None if self.retention is None else parse_interval(self.retention)


class RowTrackingPolicy(_Model):
    """backfill: the `maintenance` job backfills row IDs (otherwise it only reports what is
    missing; the `row_tracking_backfill` job always backfills); batch_size: files per
    commit; enable: set delta.enableRowTracking=true at the end."""

    backfill: bool = False
    batch_size: int = Field(default=20_000, ge=1)
    enable: bool = True


Engine = Literal["spark", "local"]

_SECTIONS: dict[str, type[_Model]] = {
    "checkpoint": CheckpointPolicy,
    "checksum": ChecksumPolicy,
    "compaction": CompactionPolicy,
    "vacuum": VacuumPolicy,
    "cleanup": CleanupPolicy,
    "row_tracking": RowTrackingPolicy,
}


class Policy(_Model):
    """A complete maintenance policy (the registry's `defaults`, or a table's effective one)."""

    engine: Engine = "spark"
    checkpoint: CheckpointPolicy = CheckpointPolicy()
    checksum: ChecksumPolicy = ChecksumPolicy()
    compaction: CompactionPolicy = CompactionPolicy()
    vacuum: VacuumPolicy = VacuumPolicy()
    cleanup: CleanupPolicy = CleanupPolicy()
    row_tracking: RowTrackingPolicy = RowTrackingPolicy()

    def merged(self, override: PolicyOverride) -> Policy:
        """This policy with the fields `override` sets (section by section, field by field)."""
        update: dict[str, Any] = {}
        if "engine" in override.model_fields_set and override.engine is not None:
            update["engine"] = override.engine
        for name in _SECTIONS:
            section = getattr(override, name)
            if section is not None and name in override.model_fields_set:
                base = getattr(self, name)
                update[name] = base.model_copy(
                    update={f: getattr(section, f) for f in section.model_fields_set}
                )
        return self.model_copy(update=update)


class PolicyOverride(_Model):
    engine: Engine | None = None
    checkpoint: CheckpointPolicy | None = None
    checksum: ChecksumPolicy | None = None
    compaction: CompactionPolicy | None = None
    vacuum: VacuumPolicy | None = None
    cleanup: CleanupPolicy | None = None
    row_tracking: RowTrackingPolicy | None = None


class EnvRef(_Model):
    """A storage option read from an environment variable when a run needs it."""

    env: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")


class TableEntry(PolicyOverride):
    """One registered table as written in the YAML file."""

    name: str
    uri: str
    group: str | None = None
    description: str | None = None
    storage_options: dict[str, str | int | float | bool | EnvRef] = Field(default_factory=dict)

    @field_validator("name", "group")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and not NAME_RE.match(v):
            raise ValueError(
                f"{v!r} is not a valid name: use letters, digits and underscores, not "
                "starting with a digit (it becomes a Dagster asset key)"
            )
        return v

    @field_validator("uri")
    @classmethod
    def _uri(cls, v: str) -> str:
        problem = uri_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("storage_options")
    @classmethod
    def _no_literal_secrets(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key, value in v.items():
            if not isinstance(value, EnvRef) and is_secret_option(key):
                raise ValueError(
                    f"storage option {key!r} holds a secret: give it as an environment "
                    f"variable reference, {key}: {{env: VARIABLE_NAME}}, never literally"
                )
        return v


class SparkSettings(_Model):
    """Where the `spark` engine runs (the registry's optional `spark` section): an embedded
    `local[*]` session by default, a master URL, or a Spark Connect URL. `conf` values that
    hold secrets come from environment variables, like storage options."""

    master: str | None = None
    remote: str | None = None
    app_name: str = "delta-ops"
    conf: dict[str, str | int | float | bool | EnvRef] = Field(default_factory=dict)
    python: str | None = None
    local_ip: str | None = None

    @field_validator("remote")
    @classmethod
    def _connect_url(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("sc://"):
            raise ValueError(f"a Spark Connect URL starts with sc://, got {v!r}")
        return v

    @field_validator("conf")
    @classmethod
    def _no_literal_secrets(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key, value in v.items():
            if not isinstance(value, EnvRef) and is_secret_option(key.rsplit(".", 1)[-1]):
                raise ValueError(
                    f"Spark conf {key!r} holds a secret: give it as an environment variable "
                    f"reference, {key}: {{env: VARIABLE_NAME}}, never literally"
                )
        return v

    @model_validator(mode="after")
    def _one_target(self) -> SparkSettings:
        if self.master is not None and self.remote is not None:
            raise ValueError(
                f"give a Spark master ({self.master!r}) or a Spark Connect remote "
                f"({self.remote!r}), not both"
            )
        return self


class RegistryFile(_Model):
    defaults: Policy = Policy()
    spark: SparkSettings = SparkSettings()
    tables: list[TableEntry] = Field(default_factory=list)



def _shown(value: Any, public: bool) -> str:
    if isinstance(value, EnvRef):
        return f"${value.env}"  # the variable's name, never its value
    if not public:
        return REDACTED
    return _USERINFO_RE.sub(rf"\1{REDACTED}@", str(value))


def redact_storage_options(options: Mapping[str, Any]) -> dict[str, str]:
    """Storage options safe to show: environment references as `$NAME`, values of
    `PUBLIC_STORAGE_OPTIONS` as written, every other value `<redacted>`."""
    return {k: _shown(v, k.lower() in PUBLIC_STORAGE_OPTIONS) for k, v in options.items()}


def redact_spark_conf(conf: Mapping[str, Any]) -> dict[str, str]:
    """Spark conf safe to show: environment references as `$NAME`, values of
    `PUBLIC_SPARK_CONF` as written, every other value `<redacted>`."""
    return {k: _shown(v, k in PUBLIC_SPARK_CONF) for k, v in conf.items()}


def is_secret_option(key: str) -> bool:
    """Whether a storage option name holds a secret (key, secret, token, password...)."""
    return key.lower() not in _NOT_SECRET_OPTIONS and bool(_SECRET_OPTION_RE.search(key))


def uri_problem(uri: str) -> str | None:
    """Why `uri` cannot be a table location, or None."""
    if not uri or not uri.strip() or uri != uri.strip():
        return f"{uri!r} is not a table URI (empty, or surrounded by spaces)"
    match = _SCHEME_RE.match(uri)
    if match and len(match.group(1)) > 1:
        scheme = match.group(1).lower()
        if scheme not in SUPPORTED_SCHEMES:
            return (
                f"{uri!r} has an unsupported scheme {scheme!r}; use a local path, file://, "
                "s3:// or memory://"
            )
        rest = uri[match.end():]
        if scheme.startswith("s3") and (not rest.startswith("//") or not rest[2:].split("/")[0]):
            return f"{uri!r} is not an S3 URI of the form s3://bucket/prefix"
        if scheme == "file" and not rest.lstrip("/").strip():
            return f"{uri!r} names no path"
    return None


# ---- loaded registry -------------------------------------------------------------------------


@dataclass(frozen=True)
class RegisteredTable:
    """A registered table with its effective policy.

    Attributes:
        name: registry name (asset key prefix, partition key).
        uri: the location, relative local paths resolved against the registry's directory.
        group: Dagster asset group.
        policy: defaults merged with the table's overrides.
        storage_options: as written: plain values and `EnvRef`s (never resolved here).
    """

    name: str
    uri: str
    group: str
    policy: Policy
    storage_options: Mapping[str, Any]
    description: str | None = None

    def resolved_storage_options(self) -> dict[str, Any]:
        """Storage options with environment references replaced by their values.

        Raises:
            MissingSecretError: a referenced environment variable is not set (the message
                names the variable, never a value).
        """
        out: dict[str, Any] = {}
        for key, value in self.storage_options.items():
            if isinstance(value, EnvRef):
                if value.env not in os.environ:
                    raise MissingSecretError(
                        f"storage option {key!r} refers to environment variable {value.env}, "
                        "which is not set",
                        table=self.name,
                    )
                out[key] = os.environ[value.env]
            else:
                out[key] = value
        return out

    def redacted_storage_options(self) -> dict[str, str]:
        """Storage options safe to show (see `redact_storage_options`)."""
        return redact_storage_options(self.storage_options)

    def storage(self):
        """The table's `Storage` (resolves secrets; builds no client until first use)."""
        from delta_ops.storage import Storage

        return Storage.for_uri(self.uri, self.resolved_storage_options())


@dataclass(frozen=True)
class Registry:
    """A validated registry file."""

    path: str
    defaults: Policy
    tables: tuple[RegisteredTable, ...]
    spark: SparkSettings = SparkSettings()

    @cached_property
    def by_name(self) -> dict[str, RegisteredTable]:
        return {t.name: t for t in self.tables}

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tables]

    def table(self, name: str) -> RegisteredTable:
        try:
            return self.by_name[name]
        except KeyError:
            raise RegistryError(
                [f"no table named {name!r} is registered (registered: "
                 f"{', '.join(self.names) or 'none'})"],
                file=self.path,
            ) from None


def default_registry_path() -> Path:
    """`$DELTA_OPS_REGISTRY`, else `tables.yaml` beside `workspace.yaml`.

    `workspace.yaml` makes its own directory the working directory of the code location,
    so that is the current directory under `dagster dev`; outside it (tests, `python -m`),
    the repository root this package was installed from (editable installs) is used when
    the current directory has no registry.
    """
    env = os.environ.get(REGISTRY_ENV)
    if env:
        return Path(env).expanduser()
    here = Path.cwd() / DEFAULT_REGISTRY_NAME
    if here.exists():
        return here
    repo = Path(__file__).resolve().parents[2]
    if (repo / "workspace.yaml").exists():
        return repo / DEFAULT_REGISTRY_NAME
    return here


_UNION_LABELS = ("str", "int", "float", "bool", "EnvRef")


def _location(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in _UNION_LABELS or str(part).startswith("function-"):
            continue  # labels pydantic adds for union members and validators
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def _duplicate_names(data: Mapping[str, Any]) -> list[str]:
    tables = data.get("tables")
    if not isinstance(tables, list):
        return []
    seen: dict[str, int] = {}
    problems = []
    for i, entry in enumerate(tables):
        name = entry.get("name") if isinstance(entry, Mapping) else None
        if not isinstance(name, str):
            continue
        if name in seen:
            problems.append(
                f"tables[{i}].name: table name {name!r} is already registered by "
                f"tables[{seen[name]}]"
            )
        else:
            seen[name] = i
    return problems


#: Mappings whose values are options (storage options, Spark conf): their values may be
#: secrets, so no problem ever quotes one, whatever its key.
_OPTION_MAPS = {"storage_options": "a storage option", "conf": "a Spark conf value"}


def _problems(exc: ValidationError) -> list[str]:
    """One line per problem, located like `tables[1].vacuum.cron`.

    Under `storage_options` and `spark.conf` a problem names the option, never its value:
    pydantic quotes the input of a failed union member, which may be a secret.
    """
    problems: list[str] = []
    for err in exc.errors(include_url=False):
        loc = list(err["loc"])
        option_map = next((name for name in _OPTION_MAPS if name in loc), None)
        if option_map is not None and len(loc) > loc.index(option_map) + 1:
            # A value that is neither plain nor {env: ...}: pydantic reports one error per
            # union member; report the option once, and never its value (it may be secret).
            where = _location(loc[: loc.index(option_map) + 2])
            msg = (f"{where}: {_OPTION_MAPS[option_map]} is text, a number, a boolean or an "
                   "environment variable reference {env: VARIABLE_NAME}")
        elif err["type"] == "extra_forbidden":
            msg = f"{_location(loc)}: unknown key {loc[-1]!r}"
        elif err["type"] == "missing":
            msg = f"{_location(loc)}: required key is missing"
        else:
            text = err["msg"].removeprefix("Value error, ")
            msg = f"{_location(loc)}: {text}"
            if not err["type"].startswith("value_error") and option_map is None:
                msg += f" (got {err.get('input')!r})"
        if msg not in problems:
            problems.append(msg)
    return problems


def parse_registry(
    data: Any, *, path: str = "<registry>", base_dir: Path | None = None
) -> Registry:
    """Validate already-parsed YAML content.

    Args:
        data: the YAML document (a mapping).
        path: named in errors.
        base_dir: directory relative local URIs are resolved against (default: cwd).

    Raises:
        RegistryError: every problem, one line each.
    """
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise RegistryError(
            [f"the registry must be a mapping with 'defaults' and 'tables', got "
             f"{type(data).__name__}"],
            file=path,
        )
    problems = _duplicate_names(data)
    try:
        parsed = RegistryFile.model_validate(data)
    except ValidationError as exc:
        problems = _problems(exc) + problems
    if problems:
        raise RegistryError(problems, file=path)
    base = base_dir or Path.cwd()
    tables = []
    for entry in parsed.tables:
        policy = parsed.defaults.merged(entry)
        tables.append(
            RegisteredTable(
                name=entry.name,
                uri=_resolve_uri(entry.uri, base),
                group=entry.group or entry.name,
                policy=policy,
                storage_options=dict(entry.storage_options),
                description=entry.description,
            )
        )
    return Registry(
        path=path, defaults=parsed.defaults, tables=tuple(tables), spark=parsed.spark
    )


def _resolve_uri(uri: str, base: Path) -> str:
    match = _SCHEME_RE.match(uri)
    if match and len(match.group(1)) > 1:
        return uri
    path = Path(uri).expanduser()
    return str(path if path.is_absolute() else (base / path).resolve())


def load_registry(path: str | os.PathLike[str] | None = None) -> Registry:
    """Load and validate the registry file (default: `default_registry_path()`).

    Raises:
        RegistryError: the file is missing, is not YAML, or is invalid.
    """
    p = Path(path) if path is not None else default_registry_path()
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RegistryError(
            [f"no registry file at {p}; create one or point {REGISTRY_ENV} at it"], file=str(p)
        ) from None
    except OSError as exc:
        raise RegistryError([f"cannot read the registry: {exc.strerror}"], file=str(p)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise RegistryError([f"{where}not valid YAML ({problem})"], file=str(p)) from None
    return parse_registry(data, path=str(p), base_dir=p.resolve().parent)


__all__ = [
    "DEFAULT_REGISTRY_NAME",
    "REGISTRY_ENV",
    "CheckpointPolicy",
    "ChecksumPolicy",
    "CleanupPolicy",
    "CompactionPolicy",
    "EnvRef",
    "MissingSecretError",
    "Policy",
    "RegisteredTable",
    "Registry",
    "RegistryError",
    "PUBLIC_SPARK_CONF",
    "PUBLIC_STORAGE_OPTIONS",
    "REDACTED",
    "RowTrackingPolicy",
    "SparkSettings",
    "VacuumPolicy",
    "cron_problem",
    "default_registry_path",
    "is_secret_option",
    "load_registry",
    "parse_registry",
    "redact_spark_conf",
    "redact_storage_options",
    "uri_problem",
]
