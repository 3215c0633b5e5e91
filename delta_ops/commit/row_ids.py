"""Row IDs: the high-water mark, fresh ID assignment and the checks a backfill must pass.

Spec section: "Row Tracking" (Row IDs, Row Commit Versions, the `delta.rowTracking` domain,
enablement). Pure: no I/O. Every function takes the facts (actions, domains, counts) and
returns new values; `Transaction` and the row-tracking backfill call them.

The spec's prose names the domain key `highWaterMark`; Delta on Spark, Databricks and Delta
Kernel write `{"rowIdHighWaterMark": N}`. Both are read; `rowIdHighWaterMark` is written.
The high-water mark is the highest row ID assigned so far, -1 when none was (as in Spark),
so the next fresh ID is always `high_water_mark + 1`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.errors import CorruptLogError, InvalidCommitError
from delta_ops.protocol.actions import DomainMetadata, Metadata, canonical_path
from delta_ops.protocol.arrays import from_numpy, from_pylist, int_values, string_array

ROW_TRACKING_DOMAIN = "delta.rowTracking"
HIGH_WATER_MARK_KEY = "rowIdHighWaterMark"
SPEC_HIGH_WATER_MARK_KEY = "highWaterMark"
#: The high-water mark of a table where no row ID was ever assigned.
NO_ROW_IDS = -1

ENABLE_ROW_TRACKING = "delta.enableRowTracking"
#: Spec "Row Tracking": while true, writers assign no fresh row IDs, and row tracking may
#: not be enabled.
ROW_TRACKING_SUSPENDED = "delta.rowTrackingSuspended"
MATERIALIZED_ROW_ID_COLUMN = "delta.rowTracking.materializedRowIdColumnName"
MATERIALIZED_ROW_COMMIT_VERSION_COLUMN = "delta.rowTracking.materializedRowCommitVersionColumnName"

__all__ = [
    "ENABLE_ROW_TRACKING",
    "HIGH_WATER_MARK_KEY",
    "MATERIALIZED_ROW_COMMIT_VERSION_COLUMN",
    "MATERIALIZED_ROW_ID_COLUMN",
    "NO_ROW_IDS",
    "ROW_TRACKING_DOMAIN",
    "ROW_TRACKING_SUSPENDED",
    "RowIdAssignment",
    "assign_row_ids",
    "carry_over_row_ids",
    "check_enablement",
    "column_names",
    "enablement_problems",
    "high_water_mark",
    "high_water_mark_domain",
    "materialized_column_names",
    "max_assigned_row_id",
    "names_clash",
    "num_records_from_stats",
    "parse_high_water_mark",
    "row_id_findings",
    "row_id_mark",
    "row_id_problems",
]


def parse_high_water_mark(configuration: str, *, table: str | None = None) -> int:
    """The high-water mark stored in a `delta.rowTracking` domain configuration.

    Args:
        configuration: The domain's configuration string (JSON).
        table: For error messages.

    Returns:
        The value of `rowIdHighWaterMark` (or the spec's `highWaterMark`).

    Raises:
        CorruptLogError: Not a JSON object holding an integer under either key.
    """
    try:
        obj = orjson.loads(configuration)
    except orjson.JSONDecodeError as exc:
        raise CorruptLogError(
            f"the {ROW_TRACKING_DOMAIN} domain configuration is not JSON: {configuration!r:.200}",
            table=table,
        ) from exc
    if isinstance(obj, dict):
        for key in (HIGH_WATER_MARK_KEY, SPEC_HIGH_WATER_MARK_KEY):
            value = obj.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    raise CorruptLogError(
        f"the {ROW_TRACKING_DOMAIN} domain configuration holds no integer "
        f"{HIGH_WATER_MARK_KEY}: {configuration!r:.200}",
        table=table,
    )


def high_water_mark(domains: Mapping[str, DomainMetadata], *, table: str | None = None) -> int:
    """The table's row ID high-water mark from its live domains; NO_ROW_IDS (-1) when none."""
    dm = domains.get(ROW_TRACKING_DOMAIN)
    if dm is None or dm.removed:
        return NO_ROW_IDS
    return parse_high_water_mark(dm.configuration, table=table)


def high_water_mark_domain(value: int) -> DomainMetadata:
    """The `delta.rowTracking` domain action recording `value`, as Spark writes it."""
    return DomainMetadata(
        ROW_TRACKING_DOMAIN, orjson.dumps({HIGH_WATER_MARK_KEY: int(value)}).decode(), False
    )


def num_records_from_stats(stats: str | None) -> int | None:
    """`numRecords` of a file from its JSON statistics; None when absent or unparsable."""
    if not stats:
        return None
    try:
        obj = orjson.loads(stats)
    except orjson.JSONDecodeError:
        return None
    value = obj.get("numRecords") if isinstance(obj, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def stats_with_num_records(stats: str | None, num_records: int) -> str:
    """`stats` (an add's JSON statistics) carrying `numRecords`, every other field untouched.

    For an add whose statistics lack a usable `numRecords` (the count came from the Parquet
    footer): the count is written first, as Spark orders it, and the rest of the text is
    kept byte for byte; statistics that are absent, empty or not a JSON object become
    `{"numRecords": n}` (a reader can use nothing else of them anyway). Statistics that
    already hold this count are returned as they are.
    """
    n = int(num_records)
    try:
        obj = orjson.loads(stats) if stats else None
    except orjson.JSONDecodeError:
        obj = None
    if not isinstance(obj, dict):
        return orjson.dumps({"numRecords": n}).decode()
    if "numRecords" in obj:
        if num_records_from_stats(stats) == n:
            return stats  # type: ignore[return-value]
        obj = {"numRecords": n, **{k: v for k, v in obj.items() if k != "numRecords"}}
        return orjson.dumps(obj).decode()
    body = stats.strip()[1:]  # type: ignore[union-attr]
    rest = body.lstrip()
    separator = "" if rest.startswith("}") else ","
    return f'{{"numRecords":{n}{separator}{body}'


@dataclass(frozen=True)
class RowIdAssignment:
    """Result of `assign_row_ids`.

    Attributes:
        adds: The add actions (new dicts), each with `baseRowId` and
            `defaultRowCommitVersion` set.
        high_water_mark: The high-water mark after the assignment.
        assigned: How many adds received a fresh `baseRowId`.
    """

    adds: list[dict[str, Any]]
    high_water_mark: int
    assigned: int


def assign_row_ids(
    adds: Sequence[Mapping[str, Any]],
    *,
    high_water_mark: int,
    version: int,
    num_records: Callable[[Mapping[str, Any]], int | None],
) -> RowIdAssignment:
    """Give every add that lacks one a fresh `baseRowId` above the high-water mark.

    Adds that already carry a `baseRowId` keep it (a recommit preserves the last committed
    value); the high-water mark still rises to cover their range when their row count is
    known, so a mark read from a careless writer's table never lags behind its IDs. Adds
    without `defaultRowCommitVersion` get `version` (the commit that carries them).

    Args:
        adds: `add` action bodies (not wrapped in {"add": ...}), in commit order.
        high_water_mark: The current mark (NO_ROW_IDS when no ID was assigned yet).
        version: The version of the commit these adds go into.
        num_records: Physical row count of an add (stats or Parquet footer); None when
            unknown, which is an error for adds that need fresh IDs.

    Returns:
        The new adds, the new mark, and how many adds got fresh IDs.

    Raises:
        ValueError: An add that needs a fresh ID has no known row count.
    """
    out: list[dict[str, Any]] = []
    mark = high_water_mark
    assigned = 0
    for add in adds:
        new = dict(add)
        n = num_records(add)
        if new.get("baseRowId") is None:
            if n is None:
                raise ValueError(
                    f"cannot assign row IDs to {add.get('path')!r}: its row count is unknown "
                    "(no numRecords in stats and no footer count given)"
                )
            new["baseRowId"] = mark + 1
            mark += n
            assigned += 1
        elif n is not None:
            mark = max(mark, int(new["baseRowId"]) + n - 1)
        if new.get("defaultRowCommitVersion") is None:
            new["defaultRowCommitVersion"] = version
        out.append(new)
    return RowIdAssignment(out, mark, assigned)


def carry_over_row_ids(
    actions: Sequence[Mapping[str, Any]], files: pa.Table
) -> list[dict[str, Any]]:
    """Fill `baseRowId`/`defaultRowCommitVersion` of adds and removes that lack them from
    the live add with the same path in `files` (the spec: recommitted adds and removes carry
    the last committed add's values).

    Args:
        actions: Wrapped actions ({"add": ...}, {"remove": ...}, ...).
        files: The read snapshot's live adds (ADD_SCHEMA).

    Returns:
        The actions, with copied bodies where a value was filled in.
    """
    wanted = {
        body["path"]
        for obj in actions
        for kind, body in obj.items()
        if kind in ("add", "remove") and body.get("baseRowId") is None
    }
    if not wanted or not files.num_rows:
        return [dict(obj) for obj in actions]
    mask = pc.and_(
        pc.is_in(files.column("path"), value_set=string_array(sorted(wanted))),
        pc.is_valid(files.column("baseRowId")),
    )
    found = files.filter(mask)
    known = dict(
        zip(
            found.column("path").to_pylist(),
            zip(
                found.column("baseRowId").to_pylist(),
                found.column("defaultRowCommitVersion").to_pylist(),
                strict=True,
            ),
            strict=True,
        )
    )
    out: list[dict[str, Any]] = []
    for obj in actions:
        kind, body = next(iter(obj.items()))
        hit = known.get(body.get("path")) if kind in ("add", "remove") else None
        if hit is None or body.get("baseRowId") is not None:
            out.append(dict(obj))
            continue
        new = dict(body)
        new["baseRowId"] = hit[0]
        if new.get("defaultRowCommitVersion") is None and hit[1] is not None:
            new["defaultRowCommitVersion"] = hit[1]
        out.append({kind: new})
    return out


def _records(files: pa.Table, counts: pa.Array | None) -> pa.Array:
    if counts is not None:
        return counts
    stats = files.column("stats").to_pylist()
    return from_pylist([num_records_from_stats(s) for s in stats], pa.int64())


#: Spark's statistics start with `numRecords`: read in Arrow; other orders fall back to JSON.
_LEADING_NUM_RECORDS = r'^\{\s*"numRecords"\s*:\s*(?P<n>[0-9]{1,18})\s*[,}]'


def _fast_records(files: pa.Table, rows: np.ndarray) -> pa.Array:
    """`numRecords` of `files` (null where unknown), parsed as JSON only for the `rows`
    (a mask) whose statistics do not start with it."""
    stats = files.column("stats")
    stats = stats.combine_chunks() if isinstance(stats, pa.ChunkedArray) else stats
    lead = pc.struct_field(pc.extract_regex(stats, _LEADING_NUM_RECORDS), "n").cast(pa.int64())
    known = int_values(lead)[1].copy()
    rest = np.flatnonzero(rows & ~known)
    if not len(rest):
        return lead
    values = lead.fill_null(0).to_numpy().copy()
    for i in rest.tolist():
        got = num_records_from_stats(stats[i].as_py())
        values[i], known[i] = (0, False) if got is None else (got, True)
    return from_pylist([int(v) if k else None for v, k in zip(values.tolist(), known.tolist(),
                                                              strict=True)], pa.int64())


def max_assigned_row_id(files: Any, *, counts: pa.Array | None = None) -> int:
    """Highest row ID `[baseRowId, baseRowId + numRecords)` any of `files` covers; -1 if none.

    Args:
        files: Add or remove actions (ADD_SCHEMA, REMOVE_SCHEMA: `baseRowId` and `stats`),
            as a table or a streamed state (`tables(columns)`).
        counts: Row counts aligned with `files`; numRecords from stats when None.
    """
    if not isinstance(files, pa.Table):  # a streamed state: a row group at a time
        return max((max_assigned_row_id(t) for t in files.tables(["baseRowId", "stats"])),
                   default=NO_ROW_IDS)
    if not files.num_rows:
        return NO_ROW_IDS
    base, has_base = int_values(files.column("baseRowId"))
    if not has_base.any():
        return NO_ROW_IDS
    if counts is None and not has_base.all():
        # Only files holding IDs have statistics worth reading (a table being backfilled
        # is mostly without: each batch's commit reads the few that have them).
        files = files.select(["baseRowId", "stats"]).filter(from_numpy(has_base))
        base, has_base = int_values(files.column("baseRowId"))
    n, has_n = int_values(counts if counts is not None else _fast_records(files, has_base))
    # A file without a count covers one row at least; without a base row ID, none.
    last = (base + np.where(has_n, n, 1) - 1)[has_base]
    return int(last.max()) if len(last) else NO_ROW_IDS


def row_id_mark(
    domains: Mapping[str, DomainMetadata],
    *file_sets: Any,
    floor: int = NO_ROW_IDS,
    table: str | None = None,
) -> int:
    """The mark fresh row IDs start above: the `delta.rowTracking` domain's, raised to the
    highest ID any of `file_sets` (live adds, tombstones: tables or streamed states) holds,
    and to `floor`. A writer that let its recorded mark lag behind its files (the spec
    forbids it) must not make us hand out their IDs again: "Writers must never commit
    duplicate Row IDs in the table in any version"."""
    return max(high_water_mark(domains, table=table), floor,
               *(max_assigned_row_id(f) for f in file_sets))


def row_id_problems(
    files: pa.Table,
    *,
    high_water_mark: int,
    counts: pa.Array | None = None,
    limit: int = 10,
) -> list[str]:
    """What violates the row-tracking invariants among live `files` (empty list: valid).

    Checks that every file has `baseRowId` and `defaultRowCommitVersion`, that the ranges
    `[baseRowId, baseRowId + numRecords)` are pairwise disjoint, and that the high-water
    mark is at least the highest ID. Files without a known row count are reported.

    Args:
        files: Live add actions (ADD_SCHEMA).
        high_water_mark: The table's mark.
        counts: Row counts aligned with `files`; numRecords from stats when None.
        limit: At most this many messages.
    """
    found = row_id_findings(files, high_water_mark=high_water_mark, counts=counts)
    return [finding_line(path, why) for path, _kind, why in found[:limit]]


def finding_line(path: str, why: str) -> str:
    """One finding of `row_id_findings` as a line: `path: why`, or `path [a, b) overlaps
    ...` for a range."""
    return f"{path}{' ' if why.startswith('[') else ': '}{why}"


def row_id_findings(
    files: pa.Table, *, high_water_mark: int, counts: pa.Array | None = None
) -> list[tuple[str, str, str]]:
    """`row_id_problems` as (path, kind, reason): kind `missing` (no `baseRowId` or
    `defaultRowCommitVersion`), `unknown` (no row count), `invalid` (a negative ID, IDs
    above the mark, ranges that overlap)."""
    out: list[tuple[str, str, str]] = []
    if not files.num_rows:
        return out
    paths = files.column("path").to_pylist()
    base = files.column("baseRowId").to_pylist()
    commit_versions = files.column("defaultRowCommitVersion").to_pylist()
    n = _records(files, counts).to_pylist()
    ranges: list[tuple[int, int, str]] = []
    for path, b, cv, k in zip(paths, base, commit_versions, n, strict=True):
        if b is None:
            out.append((path, "missing", "no baseRowId"))
            continue
        if cv is None:
            out.append((path, "missing", "no defaultRowCommitVersion"))
        if k is None:
            out.append((path, "unknown", "row count unknown"))
            continue
        if b < 0:
            out.append((path, "invalid", f"negative baseRowId {b}"))
        if k and b + k - 1 > high_water_mark:
            out.append((path, "invalid", f"row IDs up to {b + k - 1} exceed the high-water "
                                         f"mark {high_water_mark}"))
        if k:
            ranges.append((b, b + k, path))
    ranges.sort()
    for (b1, e1, p1), (b2, _e2, p2) in zip(ranges, ranges[1:], strict=False):
        if b2 < e1:
            out.append((p1, "invalid", f"[{b1}, {e1}) overlaps {p2} starting at {b2}"))
    return out


def column_names(schema: Any) -> set[str]:
    """Every column name of a Delta schema (`StructType`): display and physical names, at
    every nesting level (struct fields inside structs, arrays and maps)."""
    from delta_ops.protocol.schema import ArrayType, MapType, StructType

    names: set[str] = set()

    def walk(t: Any) -> None:
        if isinstance(t, StructType):
            for f in t.fields:
                names.add(f.name)
                names.add(f.physical_name)
                walk(f.type)
        elif isinstance(t, ArrayType):
            walk(t.element_type)
        elif isinstance(t, MapType):
            walk(t.key_type)
            walk(t.value_type)

    if schema is not None:
        walk(schema)
    return names


def names_clash(candidates: Sequence[str], taken: Iterable[str]) -> bool:
    """Whether `candidates` repeat themselves or equal a `taken` name (case-insensitively,
    as Spark compares column names)."""
    cands = [c.lower() for c in candidates]
    return len(set(cands)) != len(cands) or bool(set(cands) & {t.lower() for t in taken})


def materialized_column_names(
    configuration: Mapping[str, str], taken: Iterable[str], *, token: str
) -> dict[str, str]:
    """The materialized row ID / row commit version column names to add to `configuration`.

    Names already in `configuration` are kept (they must stay stable for the table's life);
    missing ones are made as Spark makes them, `_row-id-col-<token>` and
    `_row-commit-version-col-<token>`, where `token` is a fresh UUID from the caller.

    Returns:
        The configuration entries to add (empty when both names are present).

    Raises:
        ValueError: The resulting names are not unique or clash with a column name.
    """
    out: dict[str, str] = {}
    if not configuration.get(MATERIALIZED_ROW_ID_COLUMN):
        out[MATERIALIZED_ROW_ID_COLUMN] = f"_row-id-col-{token}"
    if not configuration.get(MATERIALIZED_ROW_COMMIT_VERSION_COLUMN):
        out[MATERIALIZED_ROW_COMMIT_VERSION_COLUMN] = f"_row-commit-version-col-{token}"
    names = [
        out.get(k) or configuration[k]
        for k in (MATERIALIZED_ROW_ID_COLUMN, MATERIALIZED_ROW_COMMIT_VERSION_COLUMN)
    ]
    if names_clash(names, taken):
        raise ValueError(
            f"materialized row tracking column names {names} are not unique or clash with a "
            "column of the table"
        )
    return out


def enablement_problems(
    *,
    row_tracking_supported: bool,
    configuration: Mapping[str, str],
    taken_names: Iterable[str],
    files_without_row_ids: int,
    invalid_row_ids: Sequence[str] = (),
) -> list[str]:
    """Why `delta.enableRowTracking=true` may not be committed (empty list: it may).

    Args:
        row_tracking_supported: The protocol of the enabling commit supports rowTracking.
        configuration: The metadata configuration being committed.
        taken_names: Column names (display and physical) of the schema being committed.
        files_without_row_ids: Live files of the resulting version lacking baseRowId or
            defaultRowCommitVersion.
        invalid_row_ids: What is wrong with the row IDs live files already hold (ranges
            that overlap, negative IDs), one message each.
    """
    problems = []
    if not row_tracking_supported:
        problems.append("the protocol does not support the rowTracking writer feature")
    if str(configuration.get(ROW_TRACKING_SUSPENDED, "")).lower() == "true":
        problems.append(f"{ROW_TRACKING_SUSPENDED} is true (the spec forbids both at once)")
    if invalid_row_ids:
        more = f" and {len(invalid_row_ids) - 3} more" if len(invalid_row_ids) > 3 else ""
        problems.append("live files already hold invalid row IDs: "
                        + "; ".join(invalid_row_ids[:3]) + more)
    names = [
        configuration.get(MATERIALIZED_ROW_ID_COLUMN),
        configuration.get(MATERIALIZED_ROW_COMMIT_VERSION_COLUMN),
    ]
    if not all(names):
        problems.append("the materialized row ID and row commit version column names are not set")
    elif names_clash([n for n in names if n], taken_names):
        problems.append(
            f"the materialized column names {names} are not unique or clash with a column"
        )
    if files_without_row_ids:
        problems.append(
            f"{files_without_row_ids} live files lack baseRowId/defaultRowCommitVersion"
        )
    return problems


def check_enablement(
    files: pa.Table | None,
    actions: Sequence[Mapping[str, Any]],
    metadata: Mapping[str, Any],
    *,
    row_tracking: bool,
    table: str,
    version: int | None,
) -> None:
    """Refuse a commit that enables `delta.enableRowTracking` too early.

    Args:
        files: Live files of the read version (None when creating the table).
        actions: The commit's actions; a file it removes or re-adds is not counted as
            lacking row IDs.
        metadata: The metadata being committed.
        row_tracking: The protocol being committed supports rowTracking.
        table: The table root, for the message.
        version: The read version, for the message.

    Raises:
        InvalidCommitError: naming every problem `enablement_problems` finds.
    """
    removed = {canonical_path(obj["remove"]["path"], table) for obj in actions if "remove" in obj}
    readded = {canonical_path(obj["add"]["path"], table) for obj in actions if "add" in obj}
    lacking = 0
    invalid: list[str] = []
    if files is not None and files.num_rows:
        changed = removed | readded
        kept = files.filter(from_numpy(np.array(
            [canonical_path(p, table) not in changed
             for p in files.column("path").to_pylist()], dtype=bool)))
        top = max_assigned_row_id(kept)  # IDs above the mark: the commit raises it
        invalid = [finding_line(path, why) for path, kind, why
                   in row_id_findings(kept, high_water_mark=top) if kind == "invalid"]
        mask = pc.or_(
            pc.is_null(files.column("baseRowId")),
            pc.is_null(files.column("defaultRowCommitVersion")),
        )
        for p in files.column("path").filter(mask).to_pylist():
            key = canonical_path(p, table)
            if key not in removed and key not in readded:
                lacking += 1
    schema_names: set[str] = set()
    schema_string = metadata.get("schemaString")
    if schema_string:
        schema_names = column_names(Metadata(metadata).schema)
    problems = enablement_problems(
        row_tracking_supported=row_tracking,
        configuration=metadata.get("configuration") or {},
        taken_names=schema_names,
        files_without_row_ids=lacking,
        invalid_row_ids=invalid,
    )
    if problems:
        raise InvalidCommitError(
            "cannot enable row tracking: " + "; ".join(problems), table=table, version=version
        )
