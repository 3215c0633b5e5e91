"""The staged commits of a catalog-managed table, and what they reference.

Spec section: "Catalog-managed tables" ("Terminology: Commits": a staged commit is
`_delta_log/_staged_commits/<v>.<uuid>.json`, with the content of a published Delta
file; "Reading Catalog-managed Tables"; "Publishing Commits").

Which staged commits the catalog ratified, only the catalog knows; a ratified commit stays
unpublished (absent from `_delta_log/<v>.json`) until the catalog publishes it, and its
data files are already in the table's directories. A tool that reads the file system alone
cannot tell a ratified staged commit from a rejected or unfinished one, so for VACUUM every
staged commit of any version counts: each path it names (adds and removes alike, and their
deletion vector files) is protected, and a staged commit that cannot be read makes the run
refuse. `_staged_commits` is listed here only (`log/` is the one package that lists the
log).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from delta_ops.engine.threads import io_submit
from delta_ops.errors import CorruptLogError
from delta_ops.log.files.json_actions import parse_json_actions
from delta_ops.log.replay.action_replay import read_log_files
from delta_ops.log.replay.references import FileReferences, _dict_rows, reference_parts
from delta_ops.protocol.arrays import string_array
from delta_ops.protocol.filenames import LOG_DIR, STAGED_COMMITS_DIR, staged_commit_version
from delta_ops.storage import Storage

__all__ = ["STAGED_DIR", "StagedCommit", "read_staged_commits", "staged_references"]

#: The staged commits' directory, relative to the table root.
STAGED_DIR = f"{LOG_DIR}/{STAGED_COMMITS_DIR}"


@dataclass(frozen=True)
class StagedCommit:
    """One file of `_delta_log/_staged_commits`.

    Attributes:
        path: Its path relative to the table root.
        version: The version it proposes (None when its name is not `<v>.<uuid>.json`).
        data: Its bytes.
    """

    path: str
    version: int | None
    data: bytes


def read_staged_commits(storage: Storage) -> list[StagedCommit]:
    """Every file in `_delta_log/_staged_commits` (hidden names, `.` first, left out: a
    Hadoop side checksum or a writer's temporary file), sorted by path; [] when there is
    no such directory.

    A file whose name is not `<v>.<uuid>.json` is read all the same: nothing tells it is
    not a commit some catalog will publish. A subdirectory (hidden names left out) is
    refused: the spec describes none, and what it holds may be commits.

    Raises:
        StorageError: The directory cannot be listed, or a file in it cannot be read.
        CorruptLogError: `_staged_commits` holds a subdirectory (naming it).
    """
    # The files are listed beside the subdirectories (one round trip on an object store,
    # not two), but only taken once no subdirectory refused the read.
    files = io_submit(storage.list_dir, STAGED_DIR)
    subdirs = [
        d for d in storage.list_subdirs(STAGED_DIR)
        if not d.rstrip("/").rsplit("/", 1)[-1].startswith(".")
    ]
    if subdirs:
        raise CorruptLogError(
            f"{STAGED_DIR} holds a subdirectory ({subdirs[0]}), which the spec does not "
            "describe: what it holds may be staged commits",
            table=storage.root, file=subdirs[0],
        )
    infos = [i for i in files.result() if not i.path.rsplit("/", 1)[-1].startswith(".")]
    paths = [i.path for i in infos]
    blobs = read_log_files(storage, paths)
    return [
        StagedCommit(p, staged_commit_version(p.rsplit("/", 1)[-1]), b)
        for p, b in zip(paths, blobs, strict=True)
    ]


def staged_references(storage: Storage, delete_before: int) -> FileReferences:
    """What the staged commits protect, for VACUUM: every path an add or a remove of any
    staged commit names, and its deletion vector file, kept whatever its age (removes
    are not tombstones here: a remove never un-protects anything). Nothing is expired.

    Args:
        storage: The table's storage.
        delete_before: The VACUUM cut-off (ms): given to the shared reading, which keeps
            every row here anyway (all are read as adds).

    Raises:
        StorageError: `_staged_commits` cannot be listed or a file in it read.
        CorruptLogError: A staged commit is not newline-delimited JSON objects, or one of
            its file actions has no path (naming the file); `_staged_commits` holds a
            subdirectory.
    """
    root = storage.root
    rows: list[pa.Table] = []
    for commit in read_staged_commits(storage):
        actions = parse_json_actions(
            commit.data, table=root, version=commit.version, file=commit.path
        )
        named = [
            a[kind] for a in actions for kind in ("add", "remove")
            if isinstance(a.get(kind), dict)
        ]
        bad = [a for a in actions for kind in ("add", "remove")
               if kind in a and not isinstance(a[kind], dict)]
        if bad:
            raise CorruptLogError(
                f"a staged commit holds a file action that is not a JSON object: "
                f"{bad[0]!r:.200}",
                table=root, version=commit.version, file=commit.path,
            )
        rows.append(_dict_rows(named, True, root, version=commit.version, file=commit.path))
    if not rows:
        empty = string_array([])
        return FileReferences(keep=empty, expired=empty, written=empty)
    written, keep, _expired = reference_parts(pa.concat_tables(rows), delete_before, root)
    return FileReferences(keep=keep, expired=string_array([]), written=written)
