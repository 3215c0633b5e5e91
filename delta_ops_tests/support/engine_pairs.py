"""Pairs of tables run on two engines (local threads and Spark) and what is compared between them:
a counting engine, copies, sorted files, trees and sidecar digests."""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from delta_ops.engine.base import Engine
from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
from delta_ops.maintenance.row_tracking import backfill_row_tracking
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import copy_corpus_table
from delta_ops_tests.support.histories import StepClock

#: File ages: every file is "old" at OLD_MS, and the operations run at NOW_MS.
OLD_MS = 1_800_000_000_000
NOW_MS = 1_900_000_000_000


#: (table, version to checkpoint): tables with the v2Checkpoint feature.
V2_TABLES = (
    ("kernel-defaults__kernel-pagination-v2-checkpoint-parquet", 3),
    ("kernel-defaults__kernel-pagination-v2-checkpoint-json", 3),
)


#: Tables whose add actions lack numRecords: the backfill reads their Parquet footers.
BACKFILL_TABLES = ("golden__data-reader-partition-values", "spark__delta-0.1.0")


class CountingEngine(Engine):
    """Passes every call to an engine and counts calls and items (proves the engine ran)."""

    def __init__(self, inner: Engine) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls: Counter[str] = Counter()
        self.items: Counter[str] = Counter()

    def _count(self, method: str, n: int) -> None:
        self.calls[method] += 1
        self.items[method] += n

    def list_files(self, storage, directories):
        self._count("list_files", len(directories))
        return self.inner.list_files(storage, directories)

    def find_unreferenced(self, storage, directories, keep, older_than_ms):
        self._count("find_unreferenced", len(directories))
        return self.inner.find_unreferenced(storage, directories, keep, older_than_ms)

    def delete_files(self, storage, paths):
        self._count("delete_files", len(paths))
        return self.inner.delete_files(storage, paths)

    def parquet_row_counts(self, storage, paths):
        self._count("parquet_row_counts", len(paths))
        return self.inner.parquet_row_counts(storage, paths)

    def write_parquet_files(self, storage, files):
        self._count("write_parquet_files", len(files))
        return self.inner.write_parquet_files(storage, files)

    def size_histogram(self, sizes, boundaries):
        self._count("size_histogram", len(sizes))
        return self.inner.size_histogram(sizes, boundaries)


def set_mtimes(root: Path, ms: int) -> None:
    """Give every file below `root` the modification time `ms`."""
    ns = ms * 1_000_000
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            os.utime(os.path.join(dirpath, name), ns=(ns, ns))


def tree(root: Path) -> dict[str, int]:
    """{relative path: size} of every file below `root`."""
    out = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            full = Path(dirpath) / name
            out[full.relative_to(root).as_posix()] = full.stat().st_size
    return out


def copy_pair(name: str, base: Path) -> tuple[Path, Path]:
    """Two aged copies of a corpus table: one per engine."""
    a = copy_corpus_table(name, base / "local")
    b = copy_corpus_table(name, base / "spark")
    set_mtimes(a, OLD_MS)
    set_mtimes(b, OLD_MS)
    return a, b


def without(d: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k not in keys}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sidecar_digests(root: Path) -> list[str]:
    side = root / "_delta_log" / "_sidecars"
    return sorted(sha256(p) for p in side.iterdir()) if side.is_dir() else []


def sorted_files(storage: Storage, columns: Sequence[str] | None = None) -> pa.Table:
    files = load_snapshot(storage).files.sort_by("path")
    return files.select(list(columns)) if columns else files


def _v2_result_view(result) -> dict[str, Any]:
    d = result.to_dict()
    d["files"] = sorted(f.split("/")[0] if "/" in f else "top" for f in d["files"])
    return without(d, "size_in_bytes")


def _backfill(root: Path, engine: Engine):
    return backfill_row_tracking(
        Storage.for_uri(str(root)), engine=engine, clock=StepClock(NOW_MS), sleep=lambda _s: None,
        confirm_protocol_upgrade=True
    )


ROW_ID_COLUMNS = ("path", "size", "baseRowId", "defaultRowCommitVersion")
