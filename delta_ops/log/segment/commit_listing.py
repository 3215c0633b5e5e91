"""Which commits and checkpoints the log still holds, from one listing: what history reads.

Spec sections: "Delta Log Entries" (one commit file per version), "Checkpoints" (a complete
checkpoint reconstructs its version without the commits before it), "Metadata Cleanup"
(commits older than the log retention may be deleted once a checkpoint covers them). A
version below the earliest commit file still present was removed by log cleanup; its
state (not its `commitInfo`) survives in the oldest complete checkpoint at or after it.
"""

from __future__ import annotations

from dataclasses import dataclass

from delta_ops.log.files.log_listing import complete_checkpoints, list_log
from delta_ops.protocol.filenames import LogFile, LogFileKind
from delta_ops.storage import FileInfo, Storage

__all__ = ["CommitListing", "commit_listing"]


@dataclass(frozen=True)
class CommitListing:
    """The commit files and complete checkpoints of one `_delta_log` listing.

    Attributes:
        commits: (version, file) of every commit file, oldest first.
        checkpoints: versions that have a complete checkpoint, oldest first.
        listing: the whole parsed listing (to build a log segment without listing again).
    """

    commits: tuple[tuple[int, FileInfo], ...]
    checkpoints: tuple[int, ...]
    listing: tuple[tuple[LogFile, FileInfo], ...]

    @property
    def earliest_commit(self) -> int | None:
        """The oldest commit file still present (None: no commit file at all)."""
        return self.commits[0][0] if self.commits else None

    @property
    def latest_version(self) -> int | None:
        """The newest version any commit or complete checkpoint names (None: neither)."""
        found = [v for v, _ in self.commits[-1:]] + list(self.checkpoints[-1:])
        return max(found) if found else None

    def removed_before(self) -> int:
        """How many versions from 0 on have no commit file any more (0: none removed):
        versions below the earliest commit (or every version up to the newest checkpoint
        when no commit file is left)."""
        if self.commits:
            return self.commits[0][0]
        return self.checkpoints[-1] + 1 if self.checkpoints else 0

    def covering_checkpoint(self) -> int | None:
        """The checkpoint that stands for the removed versions: the oldest complete one at
        or after the last removed version (None when none is)."""
        last_removed = self.removed_before() - 1
        if last_removed < 0:
            return None
        return next((c for c in self.checkpoints if c >= last_removed), None)


def commit_listing(storage: Storage) -> CommitListing:
    """List `_delta_log` once and sort out its commits and complete checkpoints.

    Raises:
        StorageError: the log cannot be listed.
    """
    listing = tuple(list_log(storage))
    commits = tuple(
        (lf.version, info) for lf, info in listing if lf.kind == LogFileKind.COMMIT
    )
    checkpoints = tuple(sorted({c.version for c in complete_checkpoints(listing, None)}))
    return CommitListing(commits, checkpoints, listing)
