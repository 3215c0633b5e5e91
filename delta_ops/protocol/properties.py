"""Table properties (`metaData.configuration`): typed values with the protocol's defaults.

Spec sections: the properties each feature defines - "Checkpoints" (delta.checkpointInterval,
delta.checkpoint.writeStatsAsJson / writeStatsAsStruct), "V2 Checkpoint Table Feature"
(delta.checkpointPolicy), "Metadata Cleanup" (delta.logRetentionDuration,
delta.enableExpiredLogCleanup), "Column Mapping" (delta.columnMapping.mode / maxColumnId),
"Deletion Vectors", "Row Tracking" (delta.enableRowTracking, the materialized column names),
"In-Commit Timestamps" (delta.enableInCommitTimestamps and the enablement version/timestamp),
"Append-only Tables", "Change Data Feed", "Transaction Identifiers"
(delta.setTransactionRetentionDuration), "Per-file Statistics"
(delta.dataSkippingNumIndexedCols / dataSkippingStatsColumns), and VACUUM's
delta.deletedFileRetentionDuration.

Durations use Spark's CalendarInterval text as Delta writes it ("interval 30 days",
"interval 1 weeks"); `parse_interval` reads it. Months and years are refused, as Delta refuses
them for these properties: they have no fixed length.

Every property is one `PropertySpec` row in `PROPERTIES` (key, attribute, default, parser), so
the typed accessors, defaults and validation all come from one table. Pure: no I/O.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from decimal import Decimal, InvalidOperation
from typing import Any

from delta_ops.errors import InvalidTablePropertyError

# --------------------------------------------------------------------------------------------
# Intervals

_UNIT_MICROS: dict[str, int] = {
    "microsecond": 1,
    "millisecond": 1_000,
    "second": 1_000_000,
    "minute": 60_000_000,
    "hour": 3_600_000_000,
    "day": 86_400_000_000,
    "week": 7 * 86_400_000_000,
}
_VARIABLE_UNITS = ("month", "year")
_PAIR_RE = re.compile(r"([+-]?\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*")


def parse_interval(text: str) -> dt.timedelta:
    """Parse a Spark CalendarInterval string of fixed-length units into a timedelta.

    Accepts an optional leading `interval` keyword and one or more `<number> <unit>` pairs,
    case-insensitive, units microsecond(s), millisecond(s), second(s), minute(s), hour(s),
    day(s), week(s): "interval 30 days", "1 week", "interval 1 day 2 hours". Numbers are
    integers with an optional sign; seconds may have a fraction ("1.5 seconds"), as in Spark.

    Raises:
        ValueError: The text is not such an interval, or uses months or years (not a fixed
            length; Delta refuses them for retention properties). The message names the text.
    """
    if not isinstance(text, str):
        raise ValueError(f"interval must be a string, got {text!r}")
    body = text.strip()
    if body.lower().startswith("interval"):
        body = body[len("interval") :]
        if body and not body[0].isspace():
            raise ValueError(f"invalid interval {text!r}")
        body = body.strip()
    if not body:
        raise ValueError(f"invalid interval {text!r}: no value and unit")
    total = 0
    pos = 0
    while pos < len(body):
        match = _PAIR_RE.match(body, pos)
        if match is None:
            raise ValueError(f"invalid interval {text!r}: expected '<number> <unit>' at {pos}")
        number, unit = match.group(1), match.group(2).lower()
        singular = unit[:-1] if unit.endswith("s") else unit
        if singular in _VARIABLE_UNITS:
            raise ValueError(
                f"invalid interval {text!r}: {singular}s have no fixed length; "
                "use days or weeks (e.g. '365 days')"
            )
        if singular not in _UNIT_MICROS:
            raise ValueError(f"invalid interval {text!r}: unknown unit {match.group(2)!r}")
        if "." in number:
            if singular != "second":
                raise ValueError(
                    f"invalid interval {text!r}: only seconds may have a fraction ({number})"
                )
            try:
                micros = Decimal(number) * _UNIT_MICROS["second"]
            except InvalidOperation as exc:  # pragma: no cover - the regex admits only numbers
                raise ValueError(f"invalid interval {text!r}") from exc
            if micros != micros.to_integral_value():
                raise ValueError(f"invalid interval {text!r}: finer than a microsecond")
            total += int(micros)
        else:
            total += int(number) * _UNIT_MICROS[singular]
        pos = match.end()
    try:
        return dt.timedelta(microseconds=total)
    except OverflowError as exc:
        raise ValueError(f"invalid interval {text!r}: out of range") from exc


def format_interval(delta: dt.timedelta) -> str:
    """Format a timedelta as Delta writes durations, e.g. "interval 1 week", "interval 2 days
    3 hours"; the inverse of `parse_interval`."""
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if micros == 0:
        return "interval 0 seconds"
    sign = "-" if micros < 0 else ""
    remaining = abs(micros)
    units = ("day", "hour", "minute", "second", "millisecond", "microsecond")
    if remaining % _UNIT_MICROS["week"] == 0:
        units = ("week",)
    parts = []
    for unit in units:
        count, remaining = divmod(remaining, _UNIT_MICROS[unit])
        if count:
            parts.append(f"{sign}{count} {unit}{'' if count == 1 else 's'}")
    return "interval " + " ".join(parts)


# --------------------------------------------------------------------------------------------
# Value parsers (raise ValueError with a reason; the caller adds key and value)


def _boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    raise ValueError("expected true or false")


def _integer(minimum: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ValueError("expected an integer") from None
        if minimum is not None and value < minimum:
            raise ValueError(f"must be >= {minimum}")
        return value

    return parse


def _duration(text: str) -> dt.timedelta:
    value = parse_interval(text)
    if value < dt.timedelta(0):
        raise ValueError("a duration must not be negative")
    return value


def _choice(*options: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        lowered = text.strip().lower()
        if lowered not in options:
            raise ValueError(f"expected one of {', '.join(options)}")
        return lowered

    return parse


def _string(text: str) -> str:
    return text


def _column_list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


@dataclass(frozen=True)
class PropertySpec:
    """One table property: its key, `TableProperties` attribute, default text and parser."""

    key: str
    attribute: str
    default: str | None
    parse: Callable[[str], Any]
    description: str


PROPERTIES: tuple[PropertySpec, ...] = (
    PropertySpec(
        "delta.checkpointInterval",
        "checkpoint_interval",
        "10",
        _integer(minimum=1),
        "Write a checkpoint every N commits.",
    ),
    PropertySpec(
        "delta.logRetentionDuration",
        "log_retention",
        "interval 30 days",
        _duration,
        "How long log entries are kept before metadata cleanup may delete them.",
    ),
    PropertySpec(
        "delta.deletedFileRetentionDuration",
        "deleted_file_retention",
        "interval 1 week",
        _duration,
        "How long removed data files are kept before VACUUM may delete them.",
    ),
    PropertySpec(
        "delta.enableExpiredLogCleanup",
        "enable_expired_log_cleanup",
        "true",
        _boolean,
        "Whether metadata cleanup runs after checkpoints.",
    ),
    PropertySpec(
        "delta.checkpoint.writeStatsAsJson",
        "checkpoint_write_stats_as_json",
        "true",
        _boolean,
        "Write `add.stats` (JSON text) into checkpoints.",
    ),
    PropertySpec(
        "delta.checkpoint.writeStatsAsStruct",
        "checkpoint_write_stats_as_struct",
        "false",
        _boolean,
        "Write `add.stats_parsed` and `partitionValues_parsed` into checkpoints.",
    ),
    PropertySpec(
        "delta.checkpointPolicy",
        "checkpoint_policy",
        "classic",
        _choice("classic", "v2"),
        "classic or v2 checkpoints (v2 needs the v2Checkpoint feature).",
    ),
    PropertySpec(
        "delta.enableDeletionVectors",
        "enable_deletion_vectors",
        "false",
        _boolean,
        "Writers may write new deletion vectors.",
    ),
    PropertySpec(
        "delta.enableRowTracking",
        "enable_row_tracking",
        "false",
        _boolean,
        "Row tracking is enabled (every file has baseRowId and defaultRowCommitVersion).",
    ),
    PropertySpec(
        "delta.rowTracking.materializedRowIdColumnName",
        "materialized_row_id_column",
        None,
        _string,
        "Hidden data column holding materialized row ids.",
    ),
    PropertySpec(
        "delta.rowTracking.materializedRowCommitVersionColumnName",
        "materialized_row_commit_version_column",
        None,
        _string,
        "Hidden data column holding materialized row commit versions.",
    ),
    PropertySpec(
        "delta.enableInCommitTimestamps",
        "enable_in_commit_timestamps",
        "false",
        _boolean,
        "Commits carry commitInfo.inCommitTimestamp.",
    ),
    PropertySpec(
        "delta.inCommitTimestampEnablementVersion",
        "ict_enablement_version",
        None,
        _integer(minimum=0),
        "First version with in-commit timestamps.",
    ),
    PropertySpec(
        "delta.inCommitTimestampEnablementTimestamp",
        "ict_enablement_timestamp",
        None,
        _integer(),
        "inCommitTimestamp (ms) of the commit that enabled in-commit timestamps.",
    ),
    PropertySpec(
        "delta.columnMapping.mode",
        "column_mapping_mode",
        "none",
        _choice("none", "id", "name"),
        "Column mapping mode: none, id or name.",
    ),
    PropertySpec(
        "delta.columnMapping.maxColumnId",
        "column_mapping_max_column_id",
        None,
        _integer(minimum=0),
        "Highest column id assigned so far.",
    ),
    PropertySpec(
        "delta.appendOnly",
        "append_only",
        "false",
        _boolean,
        "New commits must not change or remove data.",
    ),
    PropertySpec(
        "delta.enableChangeDataFeed",
        "enable_change_data_feed",
        "false",
        _boolean,
        "Writers record change data files.",
    ),
    PropertySpec(
        "delta.setTransactionRetentionDuration",
        "set_transaction_retention",
        None,
        _duration,
        "How long txn (application transaction) entries are kept; none means forever.",
    ),
    PropertySpec(
        "delta.dataSkippingNumIndexedCols",
        "data_skipping_num_indexed_cols",
        "32",
        _integer(minimum=-1),
        "Collect statistics for the first N leaf columns (-1: all).",
    ),
    PropertySpec(
        "delta.dataSkippingStatsColumns",
        "data_skipping_stats_columns",
        None,
        _column_list,
        "Comma-separated columns to collect statistics for (overrides the count).",
    ),
)
PROPERTIES_BY_KEY: dict[str, PropertySpec] = {spec.key: spec for spec in PROPERTIES}


def _parse(spec: PropertySpec, text: Any, **context: Any) -> Any:
    if not isinstance(text, str):
        raise InvalidTablePropertyError(spec.key, repr(text), "values must be strings", **context)
    try:
        return spec.parse(text)
    except ValueError as exc:
        raise InvalidTablePropertyError(spec.key, text, str(exc), **context) from exc


def parse_property(key: str, text: Any, *, table: str | None = None,
                   version: int | None = None) -> Any:
    """The typed value of known property `key` written as `text`.

    Raises:
        KeyError: `key` is not a property of `PROPERTIES`.
        InvalidTablePropertyError: an invalid value (names key, value, table and version).
    """
    return _parse(PROPERTIES_BY_KEY[key], text, table=table, version=version)


@dataclass(frozen=True)
class TableProperties:
    """The typed table properties of one metadata action, with the protocol's defaults.

    A table's are `TableConfiguration.properties` (built with `from_configuration`).
    `configuration` keeps the raw map, unknown keys included (e.g. `delta.constraints.*`).
    Built with `strict=False`, a property whose value is invalid raises its
    `InvalidTablePropertyError` when it is read, not before, as delta-spark reads each
    property when it needs it: a checkpoint does not need `delta.logRetentionDuration`.
    """

    checkpoint_interval: int = 10
    log_retention: dt.timedelta = dt.timedelta(days=30)
    deleted_file_retention: dt.timedelta = dt.timedelta(weeks=1)
    enable_expired_log_cleanup: bool = True
    checkpoint_write_stats_as_json: bool = True
    checkpoint_write_stats_as_struct: bool = False
    checkpoint_policy: str = "classic"
    enable_deletion_vectors: bool = False
    enable_row_tracking: bool = False
    materialized_row_id_column: str | None = None
    materialized_row_commit_version_column: str | None = None
    enable_in_commit_timestamps: bool = False
    ict_enablement_version: int | None = None
    ict_enablement_timestamp: int | None = None
    column_mapping_mode: str = "none"
    column_mapping_max_column_id: int | None = None
    append_only: bool = False
    enable_change_data_feed: bool = False
    set_transaction_retention: dt.timedelta | None = None
    data_skipping_num_indexed_cols: int = 32
    data_skipping_stats_columns: tuple[str, ...] | None = None
    configuration: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    #: The properties whose values are invalid, by attribute: reading one raises its error.
    invalid: Mapping[str, InvalidTablePropertyError] = field(
        default_factory=dict, compare=False, repr=False)

    def __getattribute__(self, name: str) -> Any:
        if name in _ATTRIBUTES:
            error = object.__getattribute__(self, "invalid").get(name)
            if error is not None:
                raise error
        return object.__getattribute__(self, name)

    @classmethod
    def from_configuration(
        cls,
        configuration: Mapping[str, str] | None,
        *,
        table: str | None = None,
        version: int | None = None,
        strict: bool = True,
    ) -> TableProperties:
        """Parse a `metaData.configuration` map.

        Args:
            configuration: The map (None is treated as empty).
            table: Named in errors.
            version: Named in errors.
            strict: Raise at once on an invalid property; with False, only when that
                property is read (`invalid` holds the errors).

        Raises:
            InvalidTablePropertyError: A known property has an invalid value (strict).
        """
        cfg = dict(configuration or {})
        values: dict[str, Any] = {}
        invalid: dict[str, InvalidTablePropertyError] = {}
        for spec in PROPERTIES:
            if spec.key in cfg and cfg[spec.key] is not None:
                try:
                    values[spec.attribute] = _parse(
                        spec, cfg[spec.key], table=table, version=version)
                except InvalidTablePropertyError as exc:
                    if strict:
                        raise
                    invalid[spec.attribute] = exc
        return cls(configuration=cfg, invalid=invalid, **values)

    def ensure_valid(self) -> TableProperties:
        """Self, when every known property is valid.

        Raises:
            InvalidTablePropertyError: the first invalid property (in `PROPERTIES` order).
        """
        for error in self.invalid.values():
            raise error
        return self

    @property
    def checkpoint_v2(self) -> bool:
        """Whether `delta.checkpointPolicy` asks for V2 checkpoints."""
        return self.checkpoint_policy == "v2"

    def as_dict_with_defaults(self) -> dict[str, str]:
        """The configuration with every known property filled in.

        Configured keys keep their text (unknown keys included); known properties that are
        not configured get their default as text. Properties without a default
        (e.g. delta.setTransactionRetentionDuration, the row-tracking column names) appear only
        when configured.
        """
        out = {k: v for k, v in self.configuration.items() if v is not None}
        for spec in PROPERTIES:
            if spec.key not in out and spec.default is not None:
                out[spec.key] = spec.default
        return out


def _check_defaults() -> None:
    """The dataclass defaults and the PROPERTIES defaults must agree (checked at import)."""
    by_attribute = {f.name: f for f in fields(TableProperties)}
    for spec in PROPERTIES:
        declared = by_attribute[spec.attribute].default
        expected = None if spec.default is None else spec.parse(spec.default)
        if declared != expected:  # pragma: no cover - a programming error
            raise AssertionError(f"default of {spec.key} disagrees: {declared!r} vs {expected!r}")


_check_defaults()
#: The typed attributes (those `TableProperties.invalid` may hold).
_ATTRIBUTES = frozenset(spec.attribute for spec in PROPERTIES)

__all__ = [
    "InvalidTablePropertyError",
    "PROPERTIES",
    "PROPERTIES_BY_KEY",
    "PropertySpec",
    "TableProperties",
    "format_interval",
    "parse_property",
    "parse_interval",
]
