"""Unreferenced data bytes: what VACUUM would delete, found by VACUUM's own plan in dry run
(`maintenance.vacuum.plan_vacuum`: its listing, hidden-name rules, retention and proof).
Nothing here decides what is unreferenced; nothing is deleted.

Spec section: "Add File and Remove File" (a file no live add and no unexpired remove names
is no longer part of the table). The table's own retention applies
(`delta.deletedFileRetentionDuration`), so files younger than it (in-flight writes, recent
removes) are not leftovers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from delta_ops.clock import Clock, system_clock
from delta_ops.errors import DeltaOpsError, StorageError
from delta_ops.maintenance.fsck.problems import WARNING, Problem
from delta_ops.storage import Storage

if TYPE_CHECKING:
    from delta_ops.engine.base import Engine


def unreferenced_files(
    storage: Storage, engine: Engine, *, clock: Clock | None = None
) -> tuple[list[Problem], str | None]:
    """One `unreferenced_file` warning per file VACUUM would delete now, and a note when
    VACUUM's plan cannot be made (the reason; e.g. a table feature VACUUM refuses).

    Raises:
        StorageError: the listing failed.
    """
    from delta_ops.maintenance.vacuum.plan import plan_vacuum

    now = (clock or system_clock)()
    try:
        plan = plan_vacuum(storage, now_ms=now, engine=engine)
    except StorageError:
        raise
    except DeltaOpsError as exc:
        return [], f"unreferenced data files not checked: VACUUM cannot plan ({exc.reason})"
    hours = plan.retention_ms / 3_600_000
    problems = [
        Problem(
            "unreferenced_file", WARNING, path,
            f"{size} bytes no version within the retention ({hours:g} hours) references; "
            "VACUUM would delete it", plan.version,
        )
        for path, size in zip(plan.files, plan.sizes, strict=True)
    ]
    return problems, None


__all__ = ["unreferenced_files"]
