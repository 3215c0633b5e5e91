"""Pure rules over the actions of one commit: normalized metaData/protocol, the checks a
commit must pass before it is written, and the commitInfo it carries.

Spec sections: "Requirements for Writers" (one action per reconciliation key per commit),
"Protocol Evolution" and "Table Features" (features can be added, never removed),
"Append-only Tables", "Commit Provenance Information". Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from delta_ops.errors import AppendOnlyError, InvalidCommitError
from delta_ops.protocol.actions import canonical_path, dv_unique_id

if TYPE_CHECKING:
    from delta_ops.protocol.table_configuration import TableConfiguration

__all__ = [
    "build_commit_info",
    "check_append_only",
    "check_protocol_change",
    "check_unique_actions",
    "is_true",
    "normalize_metadata",
    "normalize_protocol",
]


def _string_map(value: Any) -> dict[str, str]:
    """A map as a dict; checkpoints read through Arrow give maps as lists of pairs."""
    if not value:
        return {}
    return dict(value)


def normalize_metadata(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A `metaData` action as JSON commits hold it: maps as objects, null fields dropped
    (a checkpoint read through Arrow gives maps as pairs and absent fields as nulls)."""
    md = {k: v for k, v in raw.items() if v is not None}
    md["configuration"] = _string_map(md.get("configuration"))
    fmt = dict(md.get("format") or {"provider": "parquet"})
    fmt["options"] = _string_map(fmt.get("options"))
    md["format"] = fmt
    md["partitionColumns"] = list(md.get("partitionColumns") or [])
    return md


def normalize_protocol(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A `protocol` action without null fields (as a checkpoint read through Arrow gives)."""
    return {
        k: (list(v) if isinstance(v, (list, tuple)) else v) for k, v in raw.items() if v is not None
    }


def is_true(configuration: Mapping[str, str], key: str) -> bool:
    """Whether table property `key` is set to true (case-insensitively)."""
    value = configuration.get(key)
    return isinstance(value, str) and value.strip().lower() == "true"


def check_protocol_change(old: TableConfiguration, new: TableConfiguration) -> None:
    """Raise unless `new` keeps every feature and version of `old` (features are only added);
    the error names `new`'s table and version.

    Raises:
        InvalidCommitError: `new` drops a feature or lowers a version.
    """
    lost = (old.reader_features - new.reader_features) | (
        old.writer_features - new.writer_features
    )
    lowered = new.min_reader_version < old.min_reader_version or (
        new.min_writer_version < old.min_writer_version
    )
    if lost or lowered:
        raise InvalidCommitError(
            f"the new protocol {dict(new.protocol)} drops features or versions of "
            f"{dict(old.protocol)}: {sorted(lost)}; features can only be added",
            table=new.table,
            version=new.version,
        )


def check_append_only(config: TableConfiguration, actions: Iterable[Mapping[str, Any]]) -> None:
    """On an append-only table, only rearranging removes (dataChange=false) are allowed; the
    error names `config`'s table and version.

    Raises:
        AppendOnlyError: A remove with dataChange true (or missing) on an append-only table.
    """
    if not config.is_append_only:
        return
    table, version = config.table, config.version
    for obj in actions:
        r = obj.get("remove")
        if r is not None and r.get("dataChange", True) is not False:
            raise AppendOnlyError(
                "the table is append-only (delta.appendOnly=true): a commit may only "
                "rearrange data (remove with dataChange=false)",
                table=table,
                version=version,
                file=r.get("path"),
            )


def check_unique_actions(actions: Iterable[Mapping[str, Any]], *, table: str) -> None:
    """At most one add and one remove per (path, DV) and one txn per appId.

    Raises:
        InvalidCommitError: A duplicate, or a file action without a path.
    """
    seen: set[tuple[str, str, str | None]] = set()
    app_ids: set[str] = set()
    for obj in actions:
        kind, body = next(iter(obj.items()))
        if kind in ("add", "remove"):
            path = body.get("path")
            if not isinstance(path, str) or not path:
                raise InvalidCommitError(f"{kind} action without a path", table=table)
            key = (kind, canonical_path(path, table), dv_unique_id(body.get("deletionVector")))
            if key in seen:
                raise InvalidCommitError(
                    f"two {kind} actions for the same file and deletion vector",
                    table=table,
                    file=path,
                )
            seen.add(key)
        elif kind == "txn":
            if body["appId"] in app_ids:
                raise InvalidCommitError(
                    f"two txn actions for appId {body['appId']!r}", table=table
                )
            app_ids.add(body["appId"])


def build_commit_info(
    *,
    now: int,
    in_commit_timestamp: int | None,
    operation: str,
    operation_parameters: Mapping[str, Any],
    read_version: int | None,
    blind_append: bool,
    engine_info: str,
    txn_id: str,
    user_metadata: str | None = None,
    operation_metrics: Mapping[str, Any] | None = None,
    isolation_level: str = "Serializable",
) -> dict[str, Any]:
    """The `commitInfo` of a commit, in Spark's field order.

    `timestamp` is the in-commit timestamp when there is one (as Spark writes it), else
    `now`; `readVersion` is omitted for a table's first commit; `operationMetrics` (values
    as strings, as Spark writes them) only when given.
    """
    info: dict[str, Any] = {
        "timestamp": in_commit_timestamp if in_commit_timestamp is not None else now
    }
    if in_commit_timestamp is not None:
        info["inCommitTimestamp"] = in_commit_timestamp
    info["operation"] = operation
    info["operationParameters"] = dict(operation_parameters)
    if read_version is not None:
        info["readVersion"] = read_version
    info["isolationLevel"] = isolation_level
    info["isBlindAppend"] = blind_append
    if operation_metrics:
        info["operationMetrics"] = {k: str(v) for k, v in operation_metrics.items()}
    if user_metadata is not None:
        info["userMetadata"] = user_metadata
    info["engineInfo"] = engine_info
    info["txnId"] = txn_id
    return info
