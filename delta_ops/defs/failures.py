"""delta_ops errors as `dagster.Failure`s: a refused or failed operation fails its asset only,
and the UI shows the table, version, file, reason and (for a refused retention) how the
registry policy opts in. An engine that does not start (a Spark master or Spark Connect
server that cannot be reached, a session that fails) is one line naming where and why.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from dagster import Failure, MetadataValue

from delta_ops.defs.keys import METADATA_CLEANUP, VACUUM
from delta_ops.errors import DeltaOpsError, EngineError, NotATableError, RetentionError

#: What a refusal of a shorter retention means in Dagster, where there is no command
#: line flag: the registry policy opts in.
_RETENTION_HINTS = {
    VACUUM: "In Dagster, set `vacuum: {force_retention: true}` in this table's registry "
    "policy to force it (only if nothing reads older versions of the table).",
    METADATA_CLEANUP: "In Dagster, set `cleanup: {force_retention: true}` in this table's "
    "registry policy to force it (only if nothing reads older versions of the table).",
}


def as_failure(exc: DeltaOpsError, *, table: str, component: str) -> Failure:
    """A `dagster.Failure` for a refused or failed operation (shown in the UI with metadata)."""
    metadata: dict[str, Any] = {
        "table": table,
        "component": component,
        "reason": exc.reason,
        "error": type(exc).__name__,
        "version": exc.version if exc.version is not None else MetadataValue.null(),
    }
    if exc.file is not None:
        metadata["file"] = exc.file
    features = getattr(exc, "features", None)
    if features:
        metadata["features"] = MetadataValue.json(list(features))
    if isinstance(exc, NotATableError):
        description = f"{table}: the table does not exist yet ({exc})"
    else:
        description = f"{table} {component}: {exc}"
    hint = _RETENTION_HINTS.get(component) if isinstance(exc, RetentionError) else None
    if hint:
        description = f"{description}. {hint}"
        metadata["how_to_force"] = hint
    return Failure(description=description, metadata=metadata, allow_retries=False)


@contextmanager
def refusals(table: str, component: str) -> Iterator[None]:
    """Turn delta_ops errors raised inside into `dagster.Failure`s."""
    try:
        yield
    except EngineError as exc:
        # One line naming where Spark runs and why it did not start: not the Py4J/gRPC
        # traceback chained below it (logged by the engine when the session failed).
        raise as_failure(exc, table=table, component=component) from None
    except DeltaOpsError as exc:
        raise as_failure(exc, table=table, component=component) from exc


def registered_partition(name: str, registered: Sequence[str]) -> str:
    """`name`, a partition key of a per-table job, when it names a registered table; else a
    Failure saying so (a partition left over from a table removed from the registry)."""
    if name not in registered:
        raise Failure(
            description=f"partition {name!r} is not a registered table (registered: "
            f"{', '.join(registered) or 'none'}); reload the code location",
            metadata={"table": name, "reason": "not registered"},
            allow_retries=False,
        )
    return name


__all__ = ["as_failure", "refusals", "registered_partition"]
