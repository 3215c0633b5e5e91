"""`DeltaTable`: the user-facing handle on one table.

Maintenance is a verb on the table (`table.snapshot()`, and the operations in
`delta_ops.maintenance`). A DeltaTable holds only the location and storage options; every
call reads the log afresh, so a long-lived handle never acts on stale state.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from delta_ops.log import Snapshot, load_snapshot
from delta_ops.storage import Storage


class DeltaTable:
    """A Delta table at a URI (local path, `file://`, `s3://`, `memory://`).

    Args:
        uri: where the table root is.
        storage_options: fsspec options for the scheme (e.g. S3 endpoint and keys). They
            are passed to storage only and never logged.
        storage: an existing Storage to use instead of building one from `uri`.
    """

    def __init__(
        self,
        uri: str | None = None,
        *,
        storage_options: Mapping[str, str] | None = None,
        storage: Storage | None = None,
    ) -> None:
        if storage is None:
            if uri is None:
                raise ValueError("DeltaTable needs a uri or a storage")
            storage = Storage.for_uri(uri, dict(storage_options or {}))
        self.storage = storage

    @property
    def uri(self) -> str:
        return self.storage.root

    def __repr__(self) -> str:
        return f"DeltaTable({self.uri!r})"

    def snapshot(
        self, version: int | None = None, *, timestamp: datetime | int | None = None
    ) -> Snapshot:
        """The table at `version` (latest when None) or as of `timestamp`."""
        return load_snapshot(self.storage, version, timestamp=timestamp)
