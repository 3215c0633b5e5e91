"""Live data files outside the table root: whether they are there.

Spec section: "Add File and Remove File" (a path is a URI relative to the table root or
absolute). A shallow clone's adds name its source's files by absolute paths; when the
source's VACUUM deletes one, the clone's reads fail, and the clone's own listing never
shows it. So each directory holding such files is listed once (a storage rooted there,
with this table's storage options when the scheme is the same), and a file the listing
does not show is looked at directly before it is called missing: `missing_external_file`,
an error `--repair` does not act on (the file belongs to another location; restore it
there, or remove it from the table with the engine that wrote it). A directory that
cannot be listed (other credentials, another host) is a warning that names it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from delta_ops.engine.threads import io_map
from delta_ops.errors import DeltaOpsError
from delta_ops.maintenance.fsck.problems import ERROR, WARNING, Problem
from delta_ops.protocol.actions import canonical_path
from delta_ops.storage import Storage

__all__ = ["EXTERNAL_CHECKED", "check_external"]

#: At most this many live files outside the root are checked; the rest are counted.
EXTERNAL_CHECKED = 100_000


def check_external(storage: Storage, paths: Sequence[str], version: int) -> list[Problem]:
    """Problems with the live files `paths` (as the log names them, all outside the root).

    Args:
        storage: This table's storage (its root and options).
        paths: The files, as the log writes them.
        version: The table version checked.
    """
    by_dir: dict[str, list[tuple[str, str]]] = defaultdict(list)
    problems: list[Problem] = []
    for raw in paths:
        location = canonical_path(raw, storage.root)
        directory, slash, name = location.rpartition("/")
        if not slash or not name or ":" not in directory:
            continue  # an opaque URI: nothing to list
        by_dir[directory].append((name, raw))

    def one(directory: str) -> list[Problem]:
        entries = by_dir[directory]
        same = directory.split(":", 1)[0] == storage.scheme
        try:
            where = Storage.for_uri(directory, storage.storage_options if same else None)
            listed = {info.path for info in where.list_dir("")}
            absent = [(n, raw) for n, raw in entries
                      if n not in listed and not where.exists(n)]
        except DeltaOpsError as exc:
            return [Problem(
                "unchecked_external", WARNING, entries[0][1],
                f"{len(entries)} live file(s) in {directory} (outside the table root) were "
                f"not checked: {exc.reason}", version)]
        return [Problem(
            "missing_external_file", ERROR, raw,
            "live data file outside the table root does not exist (a shallow clone's source "
            "vacuumed, or moved); --repair keeps it", version) for _n, raw in absent]

    for found in io_map(one, sorted(by_dir)):
        problems += found
    return problems
