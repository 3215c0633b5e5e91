"""Where the `DeltaMaintenanceComponent` finds its tables: a registry file, tables listed in
`defs.yaml`, and tables discovered under a prefix. No dagster here.

A discovery spec names a directory (`prefix`: a local path, `file://` or `s3://` URI) that
is scanned, up to `max_depth` levels, for directories holding a `_delta_log`; `include`
and `exclude` are glob patterns (`fnmatch`) on a table's path relative to the prefix
(`sales/orders`), and `policies` give policy overrides per pattern (the first matching
pattern wins, over the spec's and the registry's defaults). A discovered table is named
from that path (`sales/orders` -> `sales__orders`, after `name_prefix`).

Scanning happens only in `refresh_discovery` (the discovery sensor, or a call): it writes
the relative paths found per prefix to a small JSON cache file. Assembling the registry
(`assemble_registry`, at definition load and at the start of each run) reads that cache,
never the bucket; the include/exclude patterns and policies are applied at assembly, so
changing them needs no rescan. Entries are validated one by one: an invalid one (bad policy,
bad URI, a name used twice) still becomes a `RegisteredTable`, carrying its `problems`, so
that only its assets fail.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import fnmatch
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import yaml
from pydantic import Field, ValidationError, field_validator

from delta_ops.defs.policy import Policy, PolicyOverride, StrictModel
from delta_ops.defs.registry import (
    NAME_RE,
    Ownership,
    RegisteredTable,
    Registry,
    SparkSettings,
    TableEntry,
    entry_problems,
    load_registry,
    registered_table,
    uri_problem,
)
from delta_ops.defs.secrets import (
    EnvRef,
    RedactedOptions,
    RedactedReprMixin,
    redact_storage_options,
    reject_literal_secrets,
)
from delta_ops.errors import EmptyPrefixError, RegistryError
from delta_ops.protocol.filenames import LOG_DIR

CACHE_FORMAT = 1
#: Where the discovery cache lives, relative to the project root, unless configured.
DEFAULT_CACHE = ".delta_ops/discovered_tables.json"
#: How often the discovery sensor rescans the prefixes, unless configured.
DEFAULT_DISCOVERY_INTERVAL_S = 600
#: Directory names a scan never enters (the log itself, hidden and underscore folders).
_SKIP_PREFIXES = (".", "_")


class PatternPolicy(PolicyOverride, Ownership):
    """Policy overrides (and owners, tags) for the discovered tables whose relative path
    matches `match`; its tags add to the spec's."""

    match: str
    group: str | None = None


class DiscoverySpec(RedactedReprMixin, Ownership):
    """Tables found under a prefix (see the module docstring); `owners` and `tags` go on
    every table found. Its storage options follow the registry's rules for secrets
    (`delta_ops.defs.secrets`): a credential only as `{env: NAME}`, no value in its repr."""

    redacted_fields: ClassVar[dict[str, Any]] = {"storage_options": redact_storage_options}

    prefix: str
    include: list[str] = Field(default_factory=lambda: ["*"])
    exclude: list[str] = Field(default_factory=list)
    max_depth: int = Field(default=3, ge=1, le=10)
    name_prefix: str = ""
    group: str | None = None
    storage_options: dict[str, str | int | float | bool | EnvRef] = Field(default_factory=dict)
    policies: list[PatternPolicy] = Field(default_factory=list)

    @field_validator("storage_options")
    @classmethod
    def _no_literal_secrets(cls, v: dict[str, Any]) -> dict[str, Any]:
        return reject_literal_secrets(v)

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        problem = uri_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    def scan_key(self, base_dir: str) -> str:
        """What a scan depends on: the resolved prefix and the depth (not the patterns)."""
        return json.dumps([resolve_location(self.prefix, base_dir), self.max_depth])

    def selects(self, path: str) -> bool:
        return any(fnmatch.fnmatchcase(path, p) for p in self.include) and not any(
            fnmatch.fnmatchcase(path, p) for p in self.exclude
        )


def _redacted_entries(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Table entries as written, their storage options shown redacted."""
    return [
        {**e, "storage_options": RedactedOptions(e["storage_options"])}
        if isinstance(e, Mapping) and isinstance(e.get("storage_options"), Mapping) else e
        for e in entries
    ]


class RegistrySource(RedactedReprMixin, StrictModel):
    """Everything the component's `defs.yaml` says about tables, with the directory its
    relative paths are resolved against (the project root). Its repr shows no storage
    option value but the harmless ones."""

    redacted_fields: ClassVar[dict[str, Any]] = {"tables": _redacted_entries}

    base_dir: str
    origin: str = "defs.yaml"
    registry_file: str | None = None
    defaults: PolicyOverride | None = None
    spark: SparkSettings | None = None
    tables: list[dict[str, Any]] = Field(default_factory=list)
    discover: list[DiscoverySpec] = Field(default_factory=list)
    discovery_cache: str = DEFAULT_CACHE
    discovery_interval_seconds: int = Field(default=DEFAULT_DISCOVERY_INTERVAL_S, ge=1)

    @property
    def cache_path(self) -> Path:
        return Path(resolve_location(self.discovery_cache, self.base_dir))


def resolve_location(location: str, base_dir: str) -> str:
    """A local path relative to `base_dir` made absolute; URIs with a scheme unchanged."""
    if re.match(r"^[A-Za-z][A-Za-z0-9+.\-]+:", location):
        return location
    path = Path(location).expanduser()
    return str(path if path.is_absolute() else (Path(base_dir) / path).resolve())


def discovered_name(spec: DiscoverySpec, relative: str) -> str:
    """The registry name of the table at `relative` under the spec's prefix."""
    name = spec.name_prefix + re.sub(r"[^A-Za-z0-9_]", "_", relative.strip("/").replace("/", "__"))
    return name if NAME_RE.match(name) else f"t_{name}"


# ---- scanning (only refresh_discovery lists anything) -------------------------------------


def scan_prefix(spec: DiscoverySpec, base_dir: str) -> list[str]:
    """Paths, relative to the prefix, of the directories holding a `_delta_log` (breadth
    first, at most `max_depth` levels down; a table's own subdirectories are not entered).

    Symbolic links to directories are not followed (a table reached through one would
    be found again under another name).

    Raises:
        StorageError: the listing failed; MissingSecretError: a storage option's variable
            is not set; EmptyPrefixError: the prefix holds no directory at all (a vanished
            or mistyped prefix looks like this on an object store).
    """
    from delta_ops.storage import Storage

    storage = Storage.for_uri(
        resolve_location(spec.prefix, base_dir), resolved_options(spec.storage_options)
    )
    found: list[str] = []
    level = [""]
    for depth in range(spec.max_depth + 1):
        below: list[str] = []
        for directory in level:
            # Symbolic links are not followed: a table reached through one would get a
            # second name and be maintained under both at once.
            subdirs = storage.list_subdirs(directory, follow_symlinks=False)
            if depth == 0 and not subdirs:
                raise EmptyPrefixError(
                    f"{spec.prefix} lists nothing: it is missing, mistyped or empty"
                )
            if any(s.rsplit("/", 1)[-1] == LOG_DIR for s in subdirs):
                if directory:
                    found.append(directory)
                continue
            if depth < spec.max_depth:
                below.extend(
                    s for s in subdirs if not s.rsplit("/", 1)[-1].startswith(_SKIP_PREFIXES)
                )
        level = below
    return sorted(found)


def resolved_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Storage options with environment references replaced by their values.

    Raises:
        MissingSecretError: a referenced variable is not set (named, never a value).
    """
    from delta_ops.defs.secrets import MissingSecretError

    out: dict[str, Any] = RedactedOptions()  # a traceback's locals show no value
    for key, value in options.items():
        if isinstance(value, EnvRef):
            if value.env not in os.environ:
                raise MissingSecretError(
                    f"storage option {key!r} refers to environment variable {value.env}, "
                    "which is not set"
                )
            out[key] = os.environ[value.env]
        else:
            out[key] = value
    return out


def read_cache(path: Path) -> dict[str, Any]:
    """The discovery cache: {scan key: {"paths": [...], "refreshed_at": iso}}; {} when absent
    or unreadable (the next refresh rewrites it)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT:
        return {}
    scans = data.get("scans")
    return scans if isinstance(scans, dict) else {}


def refresh_discovery(source: RegistrySource) -> dict[str, Any]:
    """Scan every discovery prefix and rewrite the cache (atomically: temporary file, then
    rename). A prefix that cannot be listed keeps its previous cached paths, and so does
    a prefix that lists nothing at all (vanished or mistyped: on an object store the two
    look the same as an emptied prefix); each is reported in `errors`.

    Returns:
        {"found": n tables, "added": [names], "removed": [names], "errors": [lines]}.
    """
    before = {t.name for t in discovered_tables(source)}
    scans = read_cache(source.cache_path)
    errors: list[str] = []
    for i, spec in enumerate(source.discover):
        key = spec.scan_key(source.base_dir)
        try:
            paths = scan_prefix(spec, source.base_dir)
        except EmptyPrefixError as exc:
            had = len((scans.get(key) or {}).get("paths") or [])
            errors.append(
                f"discover[{i}] {exc}" + (
                    f"; keeping the {had} tables it had (remove the discover entry to drop "
                    "them)" if had else "; no table found there"
                )
            )
            continue
        except Exception as exc:  # noqa: BLE001 - one prefix's failure is reported, not raised
            errors.append(f"discover[{i}] {spec.prefix}: {type(exc).__name__}: {exc}")
            continue
        scans[key] = {
            "paths": paths,
            "refreshed_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        }
    path = source.cache_path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"format": CACHE_FORMAT, "scans": scans}, indent=1, sort_keys=True))
    os.replace(tmp, path)
    after = {t.name for t in discovered_tables(source)}
    return {
        "found": len(after), "added": sorted(after - before), "removed": sorted(before - after),
        "errors": errors,
    }


# ---- assembling the registry (reads the file and the cache, lists nothing) ------------------


def _entry(
    data: Any, where: str, defaults: Policy, base: Path, origin: str
) -> RegisteredTable:
    try:
        entry = TableEntry.model_validate(data)
    except ValidationError as exc:
        return broken_table(data, where, entry_problems(exc, where), defaults, origin)
    return dataclasses.replace(registered_table(entry, defaults, base), origin=origin)


def broken_table(
    data: Any, where: str, problems: Sequence[str], defaults: Policy,
    origin: str | None = None,
) -> RegisteredTable:
    """A placeholder for an invalid entry, named by its name if usable, else by `where`;
    `origin` is the file the entry was written in."""
    raw = data.get("name") if isinstance(data, Mapping) else None
    name = raw if isinstance(raw, str) and NAME_RE.match(raw) else (
        "invalid_" + re.sub(r"[^A-Za-z0-9]+", "_", where).strip("_")
    )
    uri = data.get("uri") if isinstance(data, Mapping) else None
    return RegisteredTable(
        name=name, uri=uri if isinstance(uri, str) else "", group=name, policy=defaults,
        storage_options={}, description=f"invalid registry entry {where}",
        problems=tuple(problems), origin=origin,
    )


def discovered_tables(source: RegistrySource, defaults: Policy | None = None) -> list[
    RegisteredTable
]:
    """The tables the cache holds for the current discovery specs, patterns and policies
    applied."""
    defaults = defaults or Policy()
    scans = read_cache(source.cache_path)
    out: list[RegisteredTable] = []
    for i, spec in enumerate(source.discover):
        cached = scans.get(spec.scan_key(source.base_dir)) or {}
        prefix = resolve_location(spec.prefix, source.base_dir).rstrip("/")
        for relative in cached.get("paths", []):
            if not spec.selects(relative):
                continue
            rule = next(
                (p for p in spec.policies if fnmatch.fnmatchcase(relative, p.match)), None
            )
            data: dict[str, Any] = {
                "name": discovered_name(spec, relative),
                "uri": f"{prefix}/{relative}",
                "storage_options": spec.storage_options,
            }
            group = (rule.group if rule else None) or spec.group
            if group:
                data["group"] = group
            if spec.owners:
                data["owners"] = list(spec.owners)
            if spec.tags:
                data["tags"] = dict(spec.tags)
            if rule is not None:
                data.update(rule.model_dump(exclude_unset=True, exclude={"match", "group"}))
                if "tags" in rule.model_fields_set:
                    data["tags"] = {**spec.tags, **rule.tags}
            out.append(_entry(data, f"discover[{i}]:{relative}", defaults,
                              Path(source.base_dir), source.origin))
    return out


def assemble_registry(source: RegistrySource) -> Registry:
    """The registry the component describes: the registry file's tables (if any), then the
    listed ones, then the discovered ones. A name given twice marks every entry of that
    name invalid.

    Raises:
        RegistryError: the registry file is missing or is not a valid document (entries of
            a valid document are checked one by one, like the listed tables).
    """
    path = source.origin
    file_tables: list[Any] = []
    defaults = Policy()
    spark = SparkSettings()
    file_base = Path(source.base_dir)
    if source.registry_file:
        file_path = Path(resolve_location(source.registry_file, source.base_dir))
        path = str(file_path)
        file_base = file_path.resolve().parent
        shell = load_registry_shell(file_path)
        defaults, spark, file_tables = shell
    if source.defaults is not None:
        defaults = defaults.merged(source.defaults)
    if source.spark is not None:
        spark = source.spark
    tables = [
        _entry(t, f"tables[{i}]", defaults, file_base, path) for i, t in enumerate(file_tables)
    ]
    tables += [
        _entry(t, f"defs.yaml tables[{i}]", defaults, Path(source.base_dir), source.origin)
        for i, t in enumerate(source.tables)
    ]
    tables += discovered_tables(source, defaults)
    counts: dict[str, int] = {}
    for t in tables:
        counts[t.name] = counts.get(t.name, 0) + 1
    unique: dict[str, RegisteredTable] = {}
    for t in tables:
        if counts[t.name] > 1 and t.name not in unique:
            t = dataclasses.replace(
                t, problems=(*t.problems, f"table name {t.name!r} is given {counts[t.name]} "
                             "times (registry file, defs.yaml tables, discovery)"),
            )
        unique.setdefault(t.name, t)
    return Registry(path=path, defaults=defaults, tables=tuple(unique.values()), spark=spark)


def load_registry_shell(path: Path) -> tuple[Policy, SparkSettings, list[Any]]:
    """A registry file's `defaults` and `spark` (validated: an error there is every table's)
    and its raw table entries (validated one by one by the caller)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RegistryError([f"no registry file at {path}"], file=str(path)) from None
    except (OSError, yaml.YAMLError):
        load_registry(path)  # raises the one-line error the strict loader gives
        raise
    data = data or {}
    if not isinstance(data, Mapping):
        load_registry(path)
    unknown = sorted(set(data) - {"defaults", "spark", "tables"})
    if unknown:
        raise RegistryError([f"unknown key {unknown[0]!r}"], file=str(path))
    try:
        defaults = Policy.model_validate(data.get("defaults") or {})
        spark = SparkSettings.model_validate(data.get("spark") or {})
    except ValidationError as exc:
        raise RegistryError(entry_problems(exc, "defaults/spark"), file=str(path)) from None
    tables = data.get("tables") or []
    if not isinstance(tables, list):
        raise RegistryError(["tables: a list of table entries"], file=str(path))
    return defaults, spark, tables


__all__ = [
    "DEFAULT_CACHE",
    "DEFAULT_DISCOVERY_INTERVAL_S",
    "DiscoverySpec",
    "EmptyPrefixError",
    "PatternPolicy",
    "RegistrySource",
    "assemble_registry",
    "discovered_name",
    "discovered_tables",
    "read_cache",
    "refresh_discovery",
    "resolve_location",
    "scan_prefix",
]
