"""What the versions a VACUUM is asked to keep still need: their live files and DV files.

Spec sections: "Add File and Remove File" (the live adds of a version are its state),
"Deletion Vectors" (a `u` descriptor resolves to `<table>/<prefix>/deletion_vector_<uuid>.bin`),
"Checkpoints" (a version's state needs its commits, or a checkpoint at or before it and the
commits after). Like deltalake's `vacuum(keep_versions=...)`: every file a kept version
reads is protected whatever the retention.

Each kept version is read through its commits (no compaction files: the reading that does
not depend on a compaction writer's line order) with the references-only replay VACUUM
uses for the latest state (`references.reference_rows`), keeping the adds only. A version
whose log is gone (cleanup removed its commits and no checkpoint covers it) cannot be
known, so it is refused, never guessed.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.errors import CorruptLogError, VersionNotFoundError
from delta_ops.log.replay.references import FileReferences, reference_parts, reference_rows
from delta_ops.log.segment.log_segment import build_log_segment
from delta_ops.protocol.arrays import string_array
from delta_ops.storage import Storage

__all__ = ["kept_version_references"]


def kept_version_references(storage: Storage, versions: Iterable[int]) -> FileReferences:
    """Every file (data and DV) the live adds of `versions` name, as VACUUM's references:
    all in `keep` and `written`, nothing expired.

    Raises:
        VersionNotFoundError: a version is negative, newer than the table, or its log is
            gone (names the version and why).
        CorruptLogError: the log of a version cannot be read.
    """
    root = storage.root
    written_parts: list[pa.Array] = []
    keep_parts: list[pa.Array] = []
    for v in sorted(set(versions)):
        if v < 0:
            raise VersionNotFoundError(f"cannot keep version {v}: not a version", table=root)
        try:
            segment = build_log_segment(storage, v, use_compactions=False)
        except (VersionNotFoundError, CorruptLogError) as exc:
            raise VersionNotFoundError(
                f"cannot keep version {v}: {exc.reason}; which files it needs cannot be "
                "known (a version whose commits log cleanup removed, with no checkpoint "
                "covering it, cannot be kept); nothing was deleted",
                table=root, version=v, file=exc.file,
            ) from exc
        rows = reference_rows(storage, segment)
        rows = rows.filter(pc.fill_null(rows.column("is_add"), False))
        written, keep, _expired = reference_parts(rows, 0, root)
        written_parts.append(written)
        keep_parts.append(keep)
    if not written_parts:
        empty = string_array([])
        return FileReferences(keep=empty, expired=empty, written=empty)
    return FileReferences(
        keep=pc.unique(pa.concat_arrays(keep_parts)),
        expired=string_array([]),
        written=pc.unique(pa.concat_arrays(written_parts)),
    )
