"""Whether a table's log reads, checked cheaply from what a cheap look at it already has.

Spec sections: "Last Checkpoint File", "Checkpoints" (a multi-part checkpoint is complete
only with every part), "Delta Log Entries" (each line of a commit is one JSON action).

`log_problem` is what the Dagster watch sensor asks of every table whose log it looked at
(`delta_ops.log.segment.log_state.inspect_log`): the `_last_checkpoint` problem the log segment met
(unreadable, invalid JSON, or naming a checkpoint that is missing or incomplete), a
multi-part checkpoint in the listing with parts missing, and the commits it has not seen
yet, each parsed line by line (at most `MAX_COMMITS` of the newest). The first problem found
is returned, naming the file; None when the log reads. A reader may still recover from the
first two (it lists the log and uses an older checkpoint), but they mean something broke
the table's log and the answer is to look at the file.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from delta_ops.errors import CorruptLogError
from delta_ops.log.files.json_actions import parse_json_actions
from delta_ops.log.segment.log_state import LogState
from delta_ops.protocol.filenames import LOG_DIR, LogFileKind
from delta_ops.storage import Storage

#: Most commits read per look (the newest ones not seen before).
MAX_COMMITS = 100


@dataclass(frozen=True)
class LogProblem:
    """Why a table's log does not read as it should.

    Attributes:
        file: the file, relative to the table root (`_delta_log/00000000000000000005.json`).
        reason: what is wrong with it, one line.
        version: the version the file belongs to, when it has one.
    """

    file: str
    reason: str
    version: int | None = None

    def __str__(self) -> str:
        at = f" (version {self.version})" if self.version is not None else ""
        return f"{self.file}{at}: {self.reason}"


def log_problem(
    storage: Storage, state: LogState, seen_version: int | None = None,
    blobs: dict[str, bytes] | None = None,
) -> LogProblem | None:
    """The first problem of the log `state` describes, or None.

    Args:
        storage: the table's storage.
        state: a cheap look at the log (`inspect_log`).
        seen_version: commits up to this version were checked before and are not read
            again; None: every commit after the checkpoint (at most `MAX_COMMITS`).
        blobs: the commits read are added here, by path (e.g. for
            `delta_ops.log.segment.log_state.read_settings`, which then does not read them again).

    Raises:
        StorageError: a commit could not be read.
    """
    segment = state.segment
    if segment.last_checkpoint_problem:
        return LogProblem(f"{LOG_DIR}/_last_checkpoint", segment.last_checkpoint_problem)
    parts: dict[tuple[int, int], set[int]] = defaultdict(set)
    for lf, _info in state.listing:
        if lf.kind == LogFileKind.CHECKPOINT_MULTIPART and lf.num_parts:
            parts[(lf.version, lf.num_parts)].add(lf.part or 0)
    for (version, total), have in sorted(parts.items()):
        missing = sorted(set(range(1, total + 1)) - have)
        if missing and (state.checkpoint_version is None or version > state.checkpoint_version):
            name = f"{version:020d}.checkpoint.{missing[0]:010d}.{total:010d}.parquet"
            return LogProblem(
                f"{LOG_DIR}/{name}",
                f"part {missing[0]} of the {total}-part checkpoint of version {version} is "
                f"missing ({len(missing)} of {total} parts missing)",
                version,
            )
    start = seen_version if seen_version is not None else (
        state.checkpoint_version if state.checkpoint_version is not None else -1)
    commits = sorted(
        (lf.version, info) for lf, info in state.listing
        if lf.kind == LogFileKind.COMMIT and start < lf.version <= state.version
    )[-MAX_COMMITS:]
    for version, info in commits:
        data = storage.read(info.path)
        if blobs is not None:
            blobs[info.path] = data
        try:
            parse_json_actions(data, table=storage.root, version=version, file=info.path)
        except CorruptLogError as exc:
            return LogProblem(info.path, exc.reason, version)
    return None


__all__ = ["MAX_COMMITS", "LogProblem", "log_problem"]
