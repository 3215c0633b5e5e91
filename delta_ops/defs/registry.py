"""The table registry: which tables the Dagster code location maintains, and how.

A YAML file (path from `DELTA_OPS_REGISTRY`, default `tables.yaml` beside `workspace.yaml`)
lists tables and a `defaults` maintenance policy that each table may override section by
section:

```yaml
defaults:
  engine: spark                  # spark | local: where heavy work runs in jobs
  spark_above_files: 100000      # engine spark: Spark only above this many live files
  spark_above_bytes: null        # ... or above this many bytes (null: no such threshold)
  checkpoint: {interval: null}   # commits between checkpoints; null: delta.checkpointInterval (10)
  checksum: {enabled: true}      # write N.crc files
  compaction: {interval: null}   # commits per compaction file; null: delta.logCompactionInterval
                                 # (off when the table does not set it either)
  vacuum: {cron: "0 3 * * 0", retention: null, dry_run: false, lite: false,
           force_retention: false, allow_catalog_managed: false,
           in_materialize_all: false,   # also in runs over other components (Materialize all)
           keep_versions: []}           # versions whose files VACUUM keeps
  cleanup: {cron: "0 4 * * *", retention: null, force_retention: false,
            allow_catalog_managed: false, in_materialize_all: false}
  row_tracking: {backfill: false, batch_size: 20000, enable: true}
  optimize: {cron: "0 2 * * *", dry_run: false, target_size: null, min_files: 2,
             max_deleted_rows_ratio: 0.05, small_file_bytes: 33554432,
             small_file_share: 0.2, deletion_vector_share: 0.1}   # runs only when due
  stats: {cron: "0 1 * * 0", dry_run: false, recompute_all: false, batch_size: 1000}
  automation: {tables_per_run: 250, runs_per_tick: 4, max_runs_in_flight: 4,
               own_run: null}       # the watch sensor's runs (caps: from defaults only)
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
value (nor a mapping or list that may hold one). Values are shown (Dagster metadata, the
`repr` of `Registry`, `RegisteredTable`, `TableEntry` and `SparkSettings`, so tracebacks
too) only for the keys of `PUBLIC_STORAGE_OPTIONS` and `PUBLIC_SPARK_CONF`; every other
value is `<redacted>`. A key whose name looks like a credential (`secret`, `secretkey`,
`x-api-key`, `password2`, ...: `is_secret_option`) takes only `{env: NAME}`. Relative
local URIs are resolved against the registry file's directory. A registered table that
does not exist yet is not an error here: its assets report it when they run.

The policy sections are `delta_ops.defs.policy`; environment references and redaction are
`delta_ops.defs.secrets`. This module validates and loads the file. None of them imports
dagster; `delta_ops.defs.resources` wraps the registry in a resource.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from delta_ops.defs.policy import (
    FLEET_CAPS,
    AutomationPolicy,
    Policy,
    PolicyOverride,
    StrictModel,
    cron_problem,
)
from delta_ops.defs.secrets import (
    EnvRef,
    MissingSecretError,
    RedactedOptions,
    RedactedReprMixin,
    is_secret_option,
    redact_spark_conf,
    redact_storage_options,
    reject_literal_secrets,
)
from delta_ops.errors import RegistryError

REGISTRY_ENV = "DELTA_OPS_REGISTRY"
DEFAULT_REGISTRY_NAME = "tables.yaml"

#: Names become Dagster asset key parts, op names and partition keys.
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Schemes `delta_ops.storage.Storage` reaches (a URI without a scheme is a local path).
SUPPORTED_SCHEMES = ("file", "s3", "s3a", "s3n", "memory")
_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")





#: What Dagster accepts as an asset owner's email, and as a tag key and value (checked
#: here so that a bad one makes its entry invalid instead of failing the code location).
_EMAIL_RE = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,7}")
_TAG_KEY_RE = re.compile(r"^([A-Za-z0-9_.-]{1,63}/)?[A-Za-z0-9_.-]{1,63}$")
_TAG_VALUE_RE = re.compile(r"^[A-Za-z0-9_.-]{0,63}$")


def owner_problem(owner: str) -> str | None:
    """Why Dagster would refuse `owner` for an asset, or None."""
    if _EMAIL_RE.fullmatch(owner) or (owner.startswith("team:") and len(owner) > 5):
        return None
    return f"owner {owner!r} is neither an email address nor a team name ('team:data-eng')"


def tag_problem(key: str, value: str) -> str | None:
    """Why Dagster would refuse the asset tag `key: value`, or None."""
    if not _TAG_KEY_RE.match(key):
        return (f"tag key {key!r}: use letters, digits, '_', '-', '.', at most 63 characters, "
                "with an optional 'namespace/' in front")
    if not _TAG_VALUE_RE.match(value):
        return (f"tag {key!r}: value {value!r} may use letters, digits, '_', '-', '.' and at "
                "most 63 characters")
    return None


class Ownership(StrictModel):
    """`owners` (emails or `team:` names) and `tags` put on every asset of a table."""

    owners: list[str] = Field(default_factory=list)
    tags: dict[str, str] = Field(default_factory=dict)

    @field_validator("owners")
    @classmethod
    def _owners(cls, v: list[str]) -> list[str]:
        problems = [p for p in map(owner_problem, v) if p]
        if problems:
            raise ValueError("; ".join(problems))
        return v

    @field_validator("tags")
    @classmethod
    def _tags(cls, v: dict[str, str]) -> dict[str, str]:
        problems = [p for p in (tag_problem(k, t) for k, t in v.items()) if p]
        if problems:
            raise ValueError("; ".join(problems))
        return v


class TableEntry(RedactedReprMixin, PolicyOverride, Ownership):
    """One registered table as written in the YAML file (its `repr` redacts the storage
    options, see `delta_ops.defs.secrets`)."""

    redacted_fields: ClassVar[dict[str, Any]] = {"storage_options": redact_storage_options}

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
        return reject_literal_secrets(v)

    @field_validator("automation")
    @classmethod
    def _fleet_caps_in_defaults(cls, v: AutomationPolicy | None) -> AutomationPolicy | None:
        fleet = sorted(v.model_fields_set & FLEET_CAPS) if v is not None else []
        if fleet:
            raise ValueError(
                f"{', '.join(fleet)} bound the whole fleet and are read from "
                "defaults.automation only; a table's automation sets only own_run"
            )
        return v


class SparkSettings(RedactedReprMixin, StrictModel):
    """Where the `spark` engine runs (the registry's optional `spark` section): an embedded
    `local[*]` session by default, a master URL, or a Spark Connect URL. `conf` values that
    hold secrets come from environment variables, like storage options (and its `repr`
    redacts them)."""

    redacted_fields: ClassVar[dict[str, Any]] = {"conf": redact_spark_conf}

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


class RegistryFile(StrictModel):
    defaults: Policy = Policy()
    spark: SparkSettings = SparkSettings()
    tables: list[TableEntry] = Field(default_factory=list)



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
        storage_options: as written: plain values and `EnvRef`s (never resolved here), in
            a `RedactedOptions` whose repr shows only public values.
        problems: why the entry is invalid (empty for a valid one). An invalid entry of a
            registry the `DeltaMaintenanceComponent` assembles still gets its assets, and
            they fail naming these problems; the other tables are unaffected.
        owners, tags: the entry's `owners` (emails or `team:` names) and `tags`, put on
            every asset of the table.
        origin: the file the entry was written in, when that is not the registry's own
            (a table listed or discovered in a component's `defs.yaml`): errors name it.
    """

    name: str
    uri: str
    group: str
    policy: Policy
    storage_options: Mapping[str, Any]
    description: str | None = None
    problems: tuple[str, ...] = ()
    owners: tuple[str, ...] = ()
    tags: Mapping[str, str] = field(default_factory=dict)
    origin: str | None = None

    def __post_init__(self) -> None:
        # Shown only through `redact_storage_options`: the dataclass's repr (and so a
        # Registry's) prints this mapping's own repr.
        object.__setattr__(self, "storage_options", RedactedOptions(self.storage_options))

    def resolved_storage_options(self) -> dict[str, Any]:
        """Storage options with environment references replaced by their values.

        Raises:
            MissingSecretError: a referenced environment variable is not set (the message
                names the variable, never a value).
        """
        out: dict[str, Any] = RedactedOptions()  # a traceback's locals show no value
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

    @property
    def partitioned(self) -> bool:
        """Whether the Dagster assets are in the partitioned layout (the defaults'
        `automation.asset_layout`: `delta_ops.defs.fleet`)."""
        return self.defaults.automation.asset_layout == "partitioned"

    def table(self, name: str) -> RegisteredTable:
        """The table `name`, valid.

        Raises:
            RegistryError: no such table, or its entry is invalid (naming its problems).
        """
        try:
            table = self.by_name[name]
        except KeyError:
            raise RegistryError(
                [f"no table named {name!r} is registered (registered: "
                 f"{', '.join(self.names) or 'none'})"],
                file=self.path,
            ) from None
        if table.problems:
            raise RegistryError(list(table.problems), file=table.origin or self.path)
        return table


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
                msg += f" (got {_shown_input(err.get('input'))})"
        if msg not in problems:
            problems.append(msg)
    return problems


def _shown_input(value: Any) -> str:
    """A failed input as a problem quotes it: a scalar as written, a mapping or a list by
    its kind only (it may hold a table's storage options or a Spark conf)."""
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return repr(value)


def entry_problems(exc: ValidationError, where: str) -> list[str]:
    """One line per problem of a `ValidationError`, located under `where` (`tables[2]`)."""
    return [f"{where}{'' if p.startswith((':', '[')) else '.'}{p}" for p in _problems(exc)]


def registered_table(
    entry: TableEntry, defaults: Policy, base: Path, *, problems: Sequence[str] = ()
) -> RegisteredTable:
    """A validated entry with its effective policy (relative local URIs resolved on `base`)."""
    return RegisteredTable(
        name=entry.name,
        uri=_resolve_uri(entry.uri, base),
        group=entry.group or entry.name,
        policy=defaults.merged(entry),
        storage_options=dict(entry.storage_options),
        description=entry.description,
        problems=tuple(problems),
        owners=tuple(entry.owners),
        tags=dict(entry.tags),
    )


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
    tables = [registered_table(entry, parsed.defaults, base) for entry in parsed.tables]
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
    "EnvRef",
    "MissingSecretError",
    "Ownership",
    "RegisteredTable",
    "Registry",
    "RegistryError",
    "SparkSettings",
    "cron_problem",
    "default_registry_path",
    "entry_problems",
    "load_registry",
    "owner_problem",
    "parse_registry",
    "registered_table",
    "tag_problem",
    "uri_problem",
]
