"""Logical conflict detection between our transaction and the commits that won the race.

Spec sections: "Requirements for Writers" (optimistic concurrency: a writer that loses the
race for version v+1 must check what the winners did before retrying at a later version),
"Domain Metadata" (two overlapping transactions conflict if both contain a domainMetadata
action for the same domain), "Transaction Identifiers", "Row Tracking" (a concurrent change
of the row-ID high-water mark is rebased by recomputing fresh IDs).

A winning commit conflicts with ours when it
- changes the protocol or the metadata (whatever we did, we planned on the old ones),
- removes or re-adds a file our transaction removes or re-adds (same canonical path),
- sets a transaction identifier (`txn`) for an appId we set,
- sets a domain we set (except `delta.rowTracking`, which we recompute: rebasable),
- adds data while we read the whole table (`reads_whole_table`), or adds files without row
  IDs while we rely on every file having them (`requires_row_ids`).
Blind appends of new files never conflict. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from delta_ops.commit.row_ids import (
    ROW_TRACKING_DOMAIN,
    num_records_from_stats,
    parse_high_water_mark,
)
from delta_ops.errors import CommitConflictError, MissingFileError, StorageError
from delta_ops.log import list_log
from delta_ops.protocol.actions import canonical_path
from delta_ops.protocol.filenames import LogFileKind
from delta_ops.storage import FileInfo, Storage

__all__ = [
    "Footprint", "WinningCommit", "check_winning_commit", "contiguous_commits",
    "footprint_of", "landed",
    "winning_commits",
]


@dataclass(frozen=True)
class Footprint:
    """What our transaction depends on, for conflict checks.

    Attributes:
        touched_paths: Canonical paths of files we remove or re-add (dataChange=false adds
            of files already in the table count: they rewrite those files' actions).
        app_ids: appIds of our `txn` actions.
        domains: Domains we set (never `delta.rowTracking`, which is recomputed).
        reads_whole_table: Any concurrent data change (add or remove with dataChange) is a
            conflict.
        requires_row_ids: A concurrent add without `baseRowId` is a conflict (enabling row
            tracking needs every live file to have row IDs).
    """

    touched_paths: frozenset[str] = frozenset()
    app_ids: frozenset[str] = frozenset()
    domains: frozenset[str] = frozenset()
    reads_whole_table: bool = False
    requires_row_ids: bool = False


def footprint_of(
    actions: Iterable[Mapping[str, Any]],
    *,
    root: str,
    live_paths: frozenset[str] | None = None,
    reads_whole_table: bool = False,
    requires_row_ids: bool = False,
) -> Footprint:
    """The footprint of our (wrapped) actions.

    Args:
        actions: Our actions, each {"add": ...}, {"remove": ...}, {"txn": ...}, ...
        root: Table root URI (for canonical paths).
        live_paths: Canonical paths of the read snapshot's live files; adds of those paths
            are re-adds. When None, every dataChange=false add counts as a re-add.
        reads_whole_table: See `Footprint`.
        requires_row_ids: See `Footprint`.
    """
    touched: set[str] = set()
    app_ids: set[str] = set()
    domains: set[str] = set()
    for obj in actions:
        if (r := obj.get("remove")) is not None:
            touched.add(canonical_path(r["path"], root))
        elif (a := obj.get("add")) is not None:
            path = canonical_path(a["path"], root)
            if live_paths is None:
                if a.get("dataChange") is False:
                    touched.add(path)
            elif path in live_paths:
                touched.add(path)
        elif (t := obj.get("txn")) is not None:
            app_ids.add(t["appId"])
        elif (d := obj.get("domainMetadata")) is not None:
            if d["domain"] != ROW_TRACKING_DOMAIN:
                domains.add(d["domain"])
    return Footprint(
        frozenset(touched),
        frozenset(app_ids),
        frozenset(domains),
        reads_whole_table,
        requires_row_ids,
    )


@dataclass(frozen=True)
class WinningCommit:
    """What a rebase needs from a winning commit that did not conflict.

    Attributes:
        version: Its version.
        high_water_mark: The highest row ID it recorded or used (its `delta.rowTracking`
            domain, or its adds' ranges), None when it assigned none.
        in_commit_timestamp: Its `inCommitTimestamp`, None without one.
    """

    version: int
    high_water_mark: int | None
    in_commit_timestamp: int | None


def _conflict(
    what: str, *, table: str, version: int, file: str | None = None
) -> CommitConflictError:
    return CommitConflictError(
        f"concurrent commit {version} {what}; re-read the table and plan again",
        table=table,
        version=version,
        file=file,
    )


def check_winning_commit(
    footprint: Footprint,
    actions: Iterable[Mapping[str, Any]],
    *,
    version: int,
    table: str,
) -> WinningCommit:
    """Check one winning commit against our footprint.

    Args:
        footprint: Ours.
        actions: The winning commit's actions (parsed JSON lines).
        version: The winning commit's version.
        table: Table root URI (canonical paths, messages).

    Returns:
        The facts a rebase needs.

    Raises:
        CommitConflictError: The commit conflicts logically with ours; the message names
            the version and what it changed.
    """
    hwm: int | None = None
    ict: int | None = None
    for obj in actions:
        if (a := obj.get("add")) is not None:
            path = canonical_path(a["path"], table)
            if path in footprint.touched_paths:
                raise _conflict(
                    f"re-added file {path} that this transaction also changes",
                    table=table,
                    version=version,
                    file=path,
                )
            if footprint.reads_whole_table and a.get("dataChange", True) is not False:
                raise _conflict(
                    f"added data ({path}) to a table this transaction read whole",
                    table=table,
                    version=version,
                    file=path,
                )
            base = a.get("baseRowId")
            if base is None:
                if footprint.requires_row_ids:
                    raise _conflict(
                        f"added file {path} without row IDs",
                        table=table,
                        version=version,
                        file=path,
                    )
            else:
                n = num_records_from_stats(a.get("stats"))
                top = int(base) + (n if n is not None else 1) - 1
                hwm = top if hwm is None else max(hwm, top)
        elif (r := obj.get("remove")) is not None:
            path = canonical_path(r["path"], table)
            if path in footprint.touched_paths:
                raise _conflict(
                    f"removed file {path} that this transaction also changes",
                    table=table,
                    version=version,
                    file=path,
                )
            if footprint.reads_whole_table and r.get("dataChange", True) is not False:
                raise _conflict(
                    f"removed data ({path}) from a table this transaction read whole",
                    table=table,
                    version=version,
                    file=path,
                )
        elif obj.get("protocol") is not None:
            raise _conflict("changed the protocol", table=table, version=version)
        elif obj.get("metaData") is not None:
            raise _conflict("changed the table metadata", table=table, version=version)
        elif (t := obj.get("txn")) is not None:
            if t.get("appId") in footprint.app_ids:
                raise _conflict(
                    f"set transaction identifier {t.get('appId')!r} too",
                    table=table,
                    version=version,
                )
        elif (d := obj.get("domainMetadata")) is not None:
            domain = d.get("domain")
            if domain == ROW_TRACKING_DOMAIN and not d.get("removed"):
                mark = parse_high_water_mark(d.get("configuration") or "", table=table)
                hwm = mark if hwm is None else max(hwm, mark)
            elif domain in footprint.domains:
                raise _conflict(f"set domain {domain!r} too", table=table, version=version)
        elif (c := obj.get("commitInfo")) is not None:
            value = c.get("inCommitTimestamp")
            if isinstance(value, int) and not isinstance(value, bool):
                ict = value
    return WinningCommit(version, hwm, ict)


def landed(storage: Storage, path: str, data: bytes) -> bool:
    """Whether the commit file put-if-absent refused at `path` is ours, `data` byte for byte
    (its `commitInfo.txnId` is a fresh UUID). A store may persist a put whose answer was
    lost (S3 answering 500 after the write): the client's retry is then refused, and
    without this look the commit would be taken for another writer's and made again."""
    try:
        return storage.read(path) == data
    except MissingFileError:
        return False


def contiguous_commits(storage: Storage, start: int) -> list[tuple[int, FileInfo]]:
    """The commit files from version `start` on, up to the first missing version."""
    found = sorted(
        ((lf.version, info) for lf, info in list_log(storage, start)
         if lf.kind == LogFileKind.COMMIT and lf.version >= start),
        key=lambda item: item[0],
    )
    contiguous: list[tuple[int, FileInfo]] = []
    for v, info in found:
        if v != start + len(contiguous):
            break
        contiguous.append((v, info))
    return contiguous


def winning_commits(storage: Storage, start: int, *, table: str) -> list[tuple[int, FileInfo]]:
    """The commits from `start` on (at least `start` itself, which beat us), contiguous."""
    contiguous = contiguous_commits(storage, start)
    if not contiguous:
        raise StorageError(
            f"put-if-absent refused commit {start} but no such commit is listed",
            table=table,
            version=start,
        )
    return contiguous
