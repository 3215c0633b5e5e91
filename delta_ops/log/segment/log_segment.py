"""Which log files make version v of a table.

Spec sections: "Delta Log Entries", "Checkpoints", "Last Checkpoint File", "Log Compaction
Files", "Requirements for Readers". The log segment of version v is the newest complete
checkpoint at or below v plus the contiguous commits (or compaction files covering them)
after it. `_last_checkpoint` is a hint: when it is missing, unreadable, fails its checksum,
points past v or at a checkpoint that is not there, the segment is found by listing.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass, replace

from delta_ops.errors import CorruptLogError, NotATableError, VersionNotFoundError
from delta_ops.log.files.last_checkpoint_file import read_last_checkpoint
from delta_ops.log.files.log_listing import CheckpointFiles, complete_checkpoints, list_log
from delta_ops.protocol import filenames
from delta_ops.protocol.filenames import LOG_DIR, LogFile, LogFileKind
from delta_ops.protocol.last_checkpoint import LastCheckpoint
from delta_ops.storage import FileInfo, Storage


@dataclass(frozen=True)
class Delta:
    """A commit (start == end) or a compaction file covering commits start..end."""

    start: int
    end: int
    file: FileInfo

    @property
    def is_compaction(self) -> bool:
        return self.start != self.end or self.file.path.endswith(".compacted.json")


@dataclass(frozen=True)
class LogSegment:
    """The files that make one version of a table.

    Attributes:
        table: table root URI, for messages.
        version: the version this segment reconstructs.
        checkpoint: the checkpoint replay starts from, or None (replay from version 0).
        deltas: commits and compactions after the checkpoint, oldest first, contiguous.
        commits: every commit file listed after the checkpoint up to `version` (those a
            compaction replaces included), for commit timestamps.
        last_checkpoint: the `_last_checkpoint` content when it was usable as a hint.
        last_checkpoint_problem: why `_last_checkpoint` was not used, when it was not.
        listing: the sorted, parsed `_delta_log` listing the segment was chosen from: from
            the checkpoint `_last_checkpoint` names on, or the whole log (no usable hint, or
            a stale one), or the listing the caller passed. Compaction files are in it even
            when the segment was built without them. Cheap readers (the sensor, `due`)
            use it instead of listing again.
    """

    table: str
    version: int
    checkpoint: CheckpointFiles | None
    deltas: tuple[Delta, ...]
    commits: tuple[FileInfo, ...]
    last_checkpoint: LastCheckpoint | None = None
    last_checkpoint_problem: str | None = None
    listing: tuple[tuple[LogFile, FileInfo], ...] = ()

    @property
    def checkpoint_version(self) -> int | None:
        return self.checkpoint.version if self.checkpoint else None


def build_log_segment(
    storage: Storage,
    version: int | None = None,
    *,
    exclude_checkpoints: frozenset[str] = frozenset(),
    listing: list[tuple[LogFile, FileInfo]] | None = None,
    use_compactions: bool = True,
) -> LogSegment:
    """Find the log segment for `version` (latest when None).

    Args:
        storage: the table's storage.
        version: the version to reconstruct; None for the latest.
        exclude_checkpoints: identities (first file name) of checkpoints found unusable
            (e.g. a V2 checkpoint whose sidecars are missing), to skip.
        listing: a full listing of the log already made by the caller, to reuse.
        use_compactions: False to cover the versions after the checkpoint with commit
            files only (the independent path publishing operations cross-check against);
            raises CorruptLogError when a commit is missing.

    Raises:
        NotATableError: no Delta log at the location.
        VersionNotFoundError: `version` is not in the log.
        CorruptLogError: versions are not contiguous or the log starts without a checkpoint.
    """
    table = storage.root
    hint, problem = (None, None) if listing is not None else read_last_checkpoint(storage)
    read_hint = hint
    if hint is not None and version is not None and hint.version > version:
        hint = None
    if listing is None:
        listing = list_log(storage, hint.version if hint else None)
    segment = _segment_from_listing(
        table, _usable(listing, use_compactions), version, exclude_checkpoints, hint, problem,
        from_hint=hint is not None,
    )
    if segment is None:
        # The hint pointed at a checkpoint that is not there, or at one that is not
        # complete: list the whole log instead.
        if hint is not None:
            problem = problem or (
                f"_last_checkpoint points to version {hint.version}, which has no complete "
                "checkpoint; found the log segment by listing instead"
            )
        listing = list_log(storage, None)
        segment = _segment_from_listing(
            table, _usable(listing, use_compactions), version, exclude_checkpoints, None,
            problem, from_hint=False,
        )
    assert segment is not None
    if version is None:
        _refuse_newer_evidence(table, segment.version, listing, read_hint)
    return replace(segment, listing=tuple(listing))


def _refuse_newer_evidence(
    table: str, latest: int, listing: list[tuple[LogFile, FileInfo]],
    hint: LastCheckpoint | None,
) -> None:
    """Raise CorruptLogError when something in the log shows a version newer than `latest`,
    the newest version its commits and complete checkpoints reach: `_last_checkpoint`, a
    checkpoint file (a part of an incomplete one too), a checksum or a compaction file. A
    writer writes commit v before any of those of version v, so the log is then missing its
    newest files (lost, half restored, or not yet listed), and its "latest" state would be
    an older version's: VACUUM would delete the files the missing commits added."""
    newer = [(lf.version, info.path) for lf, info in listing if lf.version > latest]
    if hint is not None and hint.version > latest:
        newer.append((hint.version, f"{LOG_DIR}/{filenames.LAST_CHECKPOINT}"))
    if not newer:
        return
    version, path = max(newer)
    missing = f"version {version}" if version == latest + 1 else \
        f"versions {latest + 1} to {version}"
    raise CorruptLogError(
        f"the newest commit or checkpoint the log holds is version {latest}, but {path} "
        f"shows version {version}: the files of {missing} are missing from the log (lost, "
        f"partly restored, or not listed yet); refusing to take version {latest} as the "
        "latest",
        table=table, version=version, file=path,
    )


def _usable(
    listing: list[tuple[LogFile, FileInfo]], use_compactions: bool
) -> list[tuple[LogFile, FileInfo]]:
    """The listing the segment may be built from (no compaction files when not allowed)."""
    if use_compactions:
        return listing
    return [(lf, i) for lf, i in listing if lf.kind != LogFileKind.COMPACTION]


def _segment_from_listing(
    table: str,
    listing: list[tuple[LogFile, FileInfo]],
    version: int | None,
    exclude: frozenset[str],
    hint: LastCheckpoint | None,
    problem: str | None,
    *,
    from_hint: bool,
) -> LogSegment | None:
    commits: dict[int, FileInfo] = {}
    compactions: list[tuple[LogFile, FileInfo]] = []
    for lf, info in listing:
        if lf.kind == LogFileKind.COMMIT:
            commits[lf.version] = info
        elif lf.kind == LogFileKind.COMPACTION:
            compactions.append((lf, info))
    # An empty compaction is what a range of commitInfo-only commits reconciles to
    # (deltalake's VACUUM START/END), and a lost write would look the same: while its
    # commits are there, they are read instead; without them it is refused below.
    compactions = [
        (lf, info) for lf, info in compactions
        if info.size or not all(v in commits for v in range(lf.start_version, lf.version + 1))
    ]
    checkpoints = [c for c in complete_checkpoints(listing, None) if c.identity not in exclude]

    newest = max(
        [*commits, *(c.version for c in checkpoints), *(lf.version for lf, _ in compactions)],
        default=None,
    )
    if newest is None:
        if from_hint:
            return None
        if not listing:
            raise NotATableError("no Delta log found (no commits or checkpoints)", table=table)
        raise NotATableError("the Delta log holds no commits or checkpoints", table=table)
    if version is None:
        target = newest
    else:
        if version < 0:
            raise VersionNotFoundError(f"version {version} is negative", table=table)
        if version > newest:
            if from_hint:
                return None
            raise VersionNotFoundError(
                f"version {version} does not exist; the latest version is {newest}",
                table=table,
                version=version,
            )
        target = version

    checkpoint = next((c for c in checkpoints if c.version <= target), None)
    if from_hint and (checkpoint is None or hint is None or checkpoint.version < hint.version):
        return None

    start = checkpoint.version + 1 if checkpoint else 0
    if (
        checkpoint is None
        and start not in commits
        and not any(lf.start_version == 0 for lf, _ in compactions)
    ):
        if from_hint:
            return None
        oldest = min(commits, default=None)
        if version is not None and oldest is not None and version < oldest:
            raise VersionNotFoundError(
                f"version {version} cannot be reconstructed: the log starts at version "
                f"{oldest} and there is no checkpoint at or below {version}",
                table=table,
                version=version,
            )
        raise CorruptLogError(
            f"the log starts at version {oldest} with no checkpoint to start from "
            "(version 0 is missing)",
            table=table,
            version=oldest,
            file=f"{LOG_DIR}/{filenames.commit_name(0)}",
        )

    deltas = _cover(table, start, target, commits, compactions)
    for d in deltas:
        if d.file.size == 0:
            # No writer publishes a commit without actions: an empty one is a write that
            # lost its content, and read as "no change" it would drop the version's files
            # from the state (VACUUM would then delete them). An empty compaction whose
            # commits are gone may be either: refused too.
            raise CorruptLogError(
                "the log file is empty (0 bytes): a commit always holds actions, so its "
                "content was lost" if d.start == d.end else
                "the compaction file is empty (0 bytes) and the commits it covers are gone: "
                "nothing tells whether its range held no actions or its content was lost",
                table=table, version=d.end, file=d.file.path,
            )

    listed_commits = tuple(commits[v] for v in sorted(commits) if start <= v <= target)
    return LogSegment(
        table=table,
        version=target,
        checkpoint=checkpoint,
        deltas=tuple(deltas),
        commits=listed_commits,
        last_checkpoint=hint,
        last_checkpoint_problem=problem,
    )


def _cover(
    table: str,
    start: int,
    target: int,
    commits: dict[int, FileInfo],
    compactions: list[tuple[LogFile, FileInfo]],
) -> list[Delta]:
    """The fewest commits and compactions that cover versions start..target exactly.

    A shortest path over positions start..target+1: commit v is an edge v -> v+1, and the
    compaction x.y an edge x -> y+1. Positions only grow, so visiting the reachable
    positions in increasing order is enough. On ties a commit is preferred to a compaction
    (commits come first and only a strictly shorter path replaces a found one). Unlike
    picking the longest compaction at each position, this finds a cover whenever one exists
    (e.g. 0-4 + 5-15 when commits are gone and 0-10 would strand version 11) and never
    reads more files than needed.

    Only positions that files start or end at are visited, never the numbers in between:
    the work is proportional to the number of files, so a far version (a valid name such
    as `09223372036854775807.json` after version 13) is reported as a gap at once.
    """
    edges: dict[int, list[tuple[int, Delta]]] = defaultdict(list)
    for v in sorted(commits):
        if start <= v <= target:
            edges[v].append((v + 1, Delta(v, v, commits[v])))
    for lf, info in compactions:
        if start <= lf.start_version and lf.version <= target:
            delta = Delta(lf.start_version, lf.version, info)
            edges[lf.start_version].append((lf.version + 1, delta))
    best: dict[int, tuple[int, int, Delta | None]] = {start: (0, -1, None)}
    frontier = [start]
    while frontier:
        pos = heapq.heappop(frontier)
        hops = best[pos][0] + 1
        for nxt, delta in edges.get(pos, ()):
            if nxt not in best:
                heapq.heappush(frontier, nxt)
                best[nxt] = (hops, pos, delta)
            elif hops < best[nxt][0]:
                best[nxt] = (hops, pos, delta)
    if target + 1 not in best:
        # The furthest reachable position has no commit (else the next one would be reachable).
        missing = max(p for p in best if p <= target)
        after = min((p for p in edges if p > missing), default=None)
        resumes = ""
        if after is not None:
            resumes = f"; the log resumes at version {after} ({edges[after][0][1].file.path})"
        raise CorruptLogError(
            f"versions are not contiguous: commit {missing} is missing between "
            f"{missing - 1 if missing else 'the start'} and {target}{resumes}",
            table=table, version=missing, file=f"{LOG_DIR}/{filenames.commit_name(missing)}",
        )
    out: list[Delta] = []
    pos = target + 1
    while pos != start:
        _, prev, delta = best[pos]
        assert delta is not None
        out.append(delta)
        pos = prev
    out.reverse()
    return out
