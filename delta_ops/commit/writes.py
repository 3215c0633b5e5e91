"""Conveniences on top of `Transaction`: create a table, append files.

Spec sections: "Creation of New Log Entries", "Table Features" (the protocol of a new table
supports what its properties activate), "Row Tracking" (materialized column names when it
is enabled at creation; fresh row IDs for appended files).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson
import pyarrow as pa

from delta_ops.commit.actions import is_true
from delta_ops.commit.row_ids import ENABLE_ROW_TRACKING, column_names, materialized_column_names
from delta_ops.commit.transaction import (
    DEFAULT_MAX_RETRIES,
    Clock,
    CommitResult,
    Transaction,
    system_clock,
)
from delta_ops.errors import InvalidCommitError
from delta_ops.protocol import features
from delta_ops.protocol.upgrade import protocol_with_features
from delta_ops.storage import TableLike

__all__ = ["append_files", "create_table"]


def _features_for_configuration(configuration: Mapping[str, str]) -> list[str]:
    """Features the table properties activate (so the protocol must support them)."""
    out = []
    for f in features.FEATURES:
        if f.enabling_property is None:
            continue
        value = configuration.get(f.enabling_property)
        if isinstance(value, str) and value.strip().lower() in f.enabled_values:
            out.append(f.name)
    return out


def create_table(
    table: TableLike,
    schema: Any,
    partition_columns: Sequence[str] = (),
    configuration: Mapping[str, str] | None = None,
    protocol: Mapping[str, Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    table_id: str | None = None,
    adds: Iterable[Mapping[str, Any]] = (),
    clock: Clock | None = None,
    engine: Any = None,
    storage_options: Mapping[str, Any] | None = None,
    accept_non_atomic: bool = False,
) -> CommitResult:
    """Create a Delta table (version 0), optionally with its first files.

    Args:
        table: A `Storage`, `DeltaTable` or URI of an empty location.
        schema: A `pyarrow.Schema`, a Delta `StructType`, or a schemaString (JSON text).
        partition_columns: Partition column names.
        configuration: Table properties. Properties that activate a table feature
            (delta.enableRowTracking, delta.enableInCommitTimestamps, delta.appendOnly,
            delta.enableDeletionVectors, delta.columnMapping.mode...) add it to the protocol;
            enabling row tracking also assigns the materialized column names.
        protocol: The starting protocol (default reader 1, writer 2).
        name: Table name.
        description: Table description.
        table_id: Metadata id (default: a fresh UUID).
        adds: `add` action bodies to commit with the table (row IDs assigned when the
            protocol supports row tracking).
        clock: Milliseconds since the epoch.
        engine: Reads footers for row counts stats lack.
        storage_options: For a URI `table`.
        accept_non_atomic: See `Transaction`.

    Returns:
        The commit result (version 0).

    Raises:
        TableExistsError: A table is already there.
    """
    from delta_ops.protocol.schema import StructType, from_arrow, parse_schema

    if isinstance(schema, pa.Schema):
        struct = from_arrow(schema)
    elif isinstance(schema, StructType):
        struct = schema
    elif isinstance(schema, str):
        struct = parse_schema(schema)
    else:
        raise TypeError(f"schema must be a pyarrow.Schema, StructType or JSON, got {type(schema)}")
    names = set(struct.names)
    for col in partition_columns:
        if col not in names:
            raise InvalidCommitError(f"partition column {col!r} is not in the schema")
    clock = clock or system_clock
    config = dict(configuration or {})
    proto: dict[str, Any] = dict(protocol or {"minReaderVersion": 1, "minWriterVersion": 2})
    needed = _features_for_configuration(config)
    if needed:
        proto = protocol_with_features(proto, needed) or proto
    if is_true(config, ENABLE_ROW_TRACKING):
        config.update(
            materialized_column_names(config, column_names(struct), token=str(uuid.uuid4()))
        )
    metadata: dict[str, Any] = {
        "id": table_id or str(uuid.uuid4()),
        "name": name,
        "description": description,
        "format": {"provider": "parquet", "options": {}},
        "schemaString": struct.to_json(),
        "partitionColumns": list(partition_columns),
        "configuration": config,
        "createdTime": int(clock()),
    }
    metadata = {k: v for k, v in metadata.items() if v is not None}
    txn = Transaction(
        table,
        create=True,
        operation="CREATE TABLE",
        operation_parameters={
            "partitionBy": orjson.dumps(list(partition_columns)).decode(),
            "description": description,
            "properties": orjson.dumps(config).decode(),
            "isManaged": "false",
        },
        clock=clock,
        engine=engine,
        storage_options=storage_options,
        accept_non_atomic=accept_non_atomic,
    )
    txn.set_protocol(proto).set_metadata(metadata).add_files(
        {**a, "dataChange": a.get("dataChange", True)} for a in adds
    )
    return txn.commit()


def append_files(
    table: TableLike,
    adds: Iterable[Mapping[str, Any]],
    *,
    txn: tuple[str, int] | None = None,
    operation: str = "WRITE",
    operation_parameters: Mapping[str, Any] | None = None,
    read_version: int | None = None,
    max_retries: int = DEFAULT_MAX_RETRIES,
    clock: Clock | None = None,
    sleep: Callable[[float], None] | None = None,
    engine: Any = None,
    storage_options: Mapping[str, Any] | None = None,
) -> CommitResult:
    """Append new data files (a blind append), assigning fresh row IDs when the table
    supports row tracking (and recording the new high-water mark).

    Args:
        table: A `Storage`, `DeltaTable` or URI.
        adds: `add` action bodies of new files (dataChange defaults to true).
        txn: An (appId, version) transaction identifier to record with the files.
        operation: commitInfo operation.
        operation_parameters: commitInfo operationParameters (default mode Append).
        read_version: Plan on this version (latest when None).
        max_retries: See `Transaction`.
        clock: Milliseconds since the epoch.
        sleep: Waits between attempts.
        engine: Reads footers for row counts stats lack.
        storage_options: For a URI `table`.

    Returns:
        The commit result.
    """
    t = Transaction(
        table,
        read_version=read_version,
        operation=operation,
        operation_parameters=operation_parameters or {"mode": "Append", "partitionBy": "[]"},
        max_retries=max_retries,
        clock=clock,
        sleep=sleep,
        engine=engine,
        storage_options=storage_options,
    )
    t.add_files({**a, "dataChange": a.get("dataChange", True)} for a in adds)
    if txn is not None:
        t.set_txn(txn[0], txn[1], last_updated=int(t.clock()))
    return t.commit()
