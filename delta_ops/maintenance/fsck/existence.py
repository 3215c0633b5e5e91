"""Do the data files of a version exist? (spec "Add File and Remove File": a live `add`
names a data file readers must find.)

Plan from the snapshot: the listing key of every live file (`protocol.path_identity`), and
the directories that hold them. Apply on the engine: `Engine.list_files` lists those
directories (in parallel threads locally, on executors with Spark), and the keys not listed
are missing. Files outside the table root (absolute paths elsewhere) are counted, not
checked. Nothing is written: the Result is the answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from delta_ops.protocol.path_identity import relative_key
from delta_ops.storage import Storage

if TYPE_CHECKING:
    from delta_ops.engine.base import Engine


@dataclass(frozen=True)
class ExistenceResult:
    """What `check_files_exist` found.

    Attributes:
        table: the table root.
        version: the version whose live files were checked.
        num_files: live files of that version.
        num_checked: live files inside the table root (the ones looked for).
        num_outside_table: live files outside the table root (not checked).
        missing: listing keys of the checked files that are not there, sorted.
    """

    table: str
    version: int
    num_files: int
    num_checked: int
    num_outside_table: int
    missing: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.missing

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["missing"] = list(self.missing)
        out["ok"] = self.ok
        return out


def _directory(key: str) -> str:
    """The directory `Engine.list_files` lists to find `key`: its top-level directory
    (listed recursively), or "" (the root's own files) for a file at the root."""
    head, sep, _ = key.partition("/")
    return head if sep else ""


def check_files_exist(
    table_or_storage: Any,
    *,
    engine: Engine | None = None,
    snapshot: Any = None,
    storage_options: Mapping[str, Any] | None = None,
) -> ExistenceResult:
    """Whether every live data file of the latest version (or of `snapshot`) exists.

    Args:
        table_or_storage: a DeltaTable, Storage or table URI (opened with
            `storage_options`).
        engine: where the listing runs (default: a local engine, closed afterwards).
        snapshot: the snapshot to check, when the caller has it (default: the latest).

    Raises:
        NotATableError: there is no Delta log at the table root.
        DeltaOpsError: the log cannot be read.
    """
    from delta_ops.engine.local import LocalEngine
    from delta_ops.log import load_snapshot

    storage = Storage.of(table_or_storage, storage_options)
    snap = snapshot if snapshot is not None else load_snapshot(storage)
    root = storage.root
    keys: list[str] = []
    outside = 0
    for path in snap.files.column("path").to_pylist() if snap.num_files else []:
        key = relative_key(path, root)
        if key is None:
            outside += 1
        else:
            keys.append(key)
    own = engine is None
    run_on = engine if engine is not None else LocalEngine()
    try:
        directories = sorted({_directory(k) for k in keys})
        listed = set(run_on.list_files(storage, directories).column("path").to_pylist()) \
            if directories else set()
    finally:
        if own:
            run_on.close()
    return ExistenceResult(
        table=root,
        version=snap.version,
        num_files=snap.num_files,
        num_checked=len(keys),
        num_outside_table=outside,
        missing=tuple(sorted(k for k in keys if k not in listed)),
    )


__all__ = ["ExistenceResult", "check_files_exist"]
