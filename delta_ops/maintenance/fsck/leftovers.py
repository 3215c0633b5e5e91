"""Unreferenced data bytes: what VACUUM would delete, found by VACUUM's own plan in dry run
(`maintenance.vacuum.plan_vacuum`: its listing, hidden-name rules, retention and proof).
Nothing here decides what is unreferenced; nothing is deleted.

Spec section: "Add File and Remove File" (a file no live add and no unexpired remove names
is no longer part of the table). The table's own retention applies
(`delta.deletedFileRetentionDuration`), so files younger than it (in-flight writes, recent
removes) are not leftovers.

Memory: the plan is asked to spill its references from `KEYS_PER_BUCKET` live files on, in
one bucket per `KEYS_PER_BUCKET` live files (the data check's group size), instead of
VACUUM's own sizing (spill from an estimated 500,000 file actions, one bucket per 500,000,
so 250,000 to 500,000 estimated actions per bucket, varying with the table): the listing
is anti-joined a bucket at a time, and a bucket's keys and hash set then stay the same
size whatever the table's. The plan, and so the findings, do not depend on the buckets
(VACUUM's tests hold the spilled plan to the in-memory one;
`fsck/test_fsck_leftovers_buckets.py` holds these findings to VACUUM's dry run).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from delta_ops.clock import Clock, system_clock
from delta_ops.errors import DeltaOpsError, StorageError
from delta_ops.maintenance.fsck.problems import WARNING, Problem
from delta_ops.storage import Storage

if TYPE_CHECKING:
    from delta_ops.engine.base import Engine

#: Live files per bucket of the plan's spilled references (as the data check's groups).
KEYS_PER_BUCKET = 100_000
#: Most buckets (open spill files); beyond, buckets grow instead.
MAX_BUCKETS = 256


def unreferenced_files(
    storage: Storage, engine: Engine, *, clock: Clock | None = None,
    live_files: int | None = None,
) -> tuple[list[Problem], str | None]:
    """One `unreferenced_file` warning per file VACUUM would delete now, and a note when
    VACUUM's plan cannot be made (the reason; e.g. a table feature VACUUM refuses).

    `live_files`: the live files of the latest version (the data check counted them);
    from `KEYS_PER_BUCKET` on, the plan's references are spilled in one bucket per
    `KEYS_PER_BUCKET` of them (None: VACUUM's own sizing).

    Raises:
        StorageError: the listing failed.
    """
    from delta_ops.maintenance.vacuum.plan import plan_vacuum

    now = (clock or system_clock)()
    try:
        plan = plan_vacuum(storage, now_ms=now, engine=engine, **_spill_sizing(live_files))
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


def _spill_sizing(live_files: int | None) -> dict[str, int]:
    """`plan_vacuum`'s `partition_files` and `buckets` for `live_files` live files."""
    if live_files is None or live_files < KEYS_PER_BUCKET:
        return {}
    return {
        "partition_files": 0,
        "buckets": min(MAX_BUCKETS, math.ceil(live_files / KEYS_PER_BUCKET)),
    }


__all__ = ["KEYS_PER_BUCKET", "unreferenced_files"]
