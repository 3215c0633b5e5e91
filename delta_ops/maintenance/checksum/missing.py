"""Which version checksums (`N.crc`, spec "Version Checksum File") a table has and lacks,
and the writer of those: the entries the Dagster `version_checksum` asset and
`checksum_matches` check call.

From the cheap log reads (`delta_ops.log.segment.log_state`: the `.crc` files listed from the
checkpoint on): the versions after the newest checksum up to the latest, each derived from
the previous one (`write_checksums`); without any checksum there, the latest version alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from delta_ops.log import LogState
from delta_ops.maintenance.checksum.operations import checksum_versions, write_checksums
from delta_ops.storage import Storage

if TYPE_CHECKING:
    from delta_ops.engine.base import Engine
    from delta_ops.maintenance.checksum.base import ChecksumBackfillResult


def missing_range(state: LogState) -> tuple[int, int]:
    """(start, end), inclusive: the versions after the newest listed checksum up to the
    latest; the latest alone when none is listed or the newest is the latest (then the
    writer finds it there)."""
    newest = state.newest_checksum
    start = newest + 1 if newest is not None and newest < state.version else state.version
    return start, state.version


def newest_checksum(storage: Storage, state: LogState) -> int | None:
    """The newest version with a `.crc`: among the files listed from the checkpoint on,
    else in the whole log (an older one, before the checkpoint); None without any."""
    newest = state.newest_checksum
    if newest is None:
        newest = max(checksum_versions(storage), default=None)
    return newest


def write_missing_checksums(
    storage: Storage, state: LogState, *, engine: Engine | None = None
) -> ChecksumBackfillResult:
    """Write the checksums `missing_range(state)` names (see `write_checksums`)."""
    start, end = missing_range(state)
    return write_checksums(storage, start=start, end=end, engine=engine)


__all__ = ["missing_range", "newest_checksum", "write_missing_checksums"]
