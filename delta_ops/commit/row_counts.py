"""Physical row counts of data files from their Parquet footers (for fresh row IDs).

Spec section: "Row Tracking" (fresh row IDs cover every physical row of a file; `numRecords`
in stats is the count when present, else the file's footer says it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from delta_ops.errors import StorageError
from delta_ops.protocol.actions import canonical_path
from delta_ops.storage import Storage

__all__ = ["footer_row_counts"]


def footer_row_counts(
    storage: Storage, paths: Sequence[str], *, engine: Any = None
) -> dict[str, int]:
    """Row counts of data files from their Parquet footers, read through the Engine.

    Args:
        storage: The table's storage.
        paths: Paths as in add actions (relative, or absolute inside the table).
        engine: The Engine (default LocalEngine).

    Raises:
        StorageError: A file cannot be read; the message names it and why its count was
            needed.
    """
    if not paths:
        return {}
    if engine is None:
        from delta_ops.engine.local import LocalEngine

        engine = LocalEngine()
    relative = [canonical_path(p, storage.root) for p in paths]
    try:
        table = engine.parquet_row_counts(storage, relative)
    except StorageError as exc:
        raise StorageError(
            "cannot assign row IDs: a data file has no numRecords in its stats and its "
            f"Parquet footer cannot be read ({exc.reason})",
            table=storage.root,
            file=exc.file,
        ) from exc
    except (OSError, pa.ArrowInvalid) as exc:  # an unreadable or non-Parquet footer
        raise StorageError(
            "cannot assign row IDs: a data file has no numRecords in its stats and its "
            f"Parquet footer cannot be read ({exc})",
            table=storage.root, file=_unreadable(engine, storage, relative),
        ) from exc
    return {p: int(n) for p, n in zip(paths, table.column("num_records").to_pylist(), strict=True)}


def _unreadable(engine: Any, storage: Storage, paths: list[str]) -> str | None:
    """The first of `paths` whose footer does not read, found one file at a time (only
    after a batch failed)."""
    for path in paths:
        try:
            engine.parquet_row_counts(storage, [path])
        except (OSError, pa.ArrowInvalid):
            return storage.absolute_uri(path)
        except StorageError:
            continue
    return None
