"""One maintenance step reads the log, the clock and the table's size once and shares them
between its components.

A counting `Storage` (the real local storage, subclassed to record which files are read and
listed) is handed to the run; the step selects the checkpoint (not due), the version checksum
(already there) and the log compaction (off), under a policy whose engine depends on the
table's size: three components that each ask for the cheap log state, and two that ask for
the engine. Together they read `_last_checkpoint` once, list `_delta_log` once, read the
table's size once and the clock once.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest
import yaml
from dagster import AssetKey, AssetsDefinition, AssetSelection, DagsterInstance, materialize

import delta_ops.log as log_face
from delta_ops.defs import assets as defs_assets
from delta_ops.defs import build_definitions
from delta_ops.defs.registry import RegisteredTable
from delta_ops.maintenance.checkpoint import write_checkpoint
from delta_ops.maintenance.checksum import write_checksums
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import copy_corpus_table
from delta_ops_tests.support.counting_storage import CountingStorage

LAST_CHECKPOINT = "_delta_log/_last_checkpoint"
COMPONENTS = ("checkpoint", "version_checksum", "log_compaction")


@pytest.fixture(autouse=True)
def _dagster_home(tmp_path, monkeypatch):
    home = tmp_path / "dagster_home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))


def test_one_step_reads_the_log_the_clock_and_the_size_once(tmp_path, monkeypatch):
    root = copy_corpus_table("golden__checkpoint", tmp_path / "t")
    storage = Storage.for_uri(str(root))
    write_checkpoint(storage)
    write_checksums(storage, start=14, end=14)
    registry = tmp_path / "tables.yaml"
    registry.write_text(yaml.safe_dump({
        # Spark above a size the table is far below: the engine is chosen by the table's
        # size, and is local.
        "defaults": {"engine": "spark", "spark_above_files": 1_000_000},
        "tables": [{"name": "t", "uri": str(root)}],
    }))
    defs = build_definitions(registry)
    calls: Counter = Counter()
    real = RegisteredTable.storage
    monkeypatch.setattr(RegisteredTable, "storage",
                        lambda self: CountingStorage.wrap(real(self), calls))
    sizes: list[int] = []
    real_size = log_face.table_size
    monkeypatch.setattr(log_face, "table_size",
                        lambda *a, **k: sizes.append(1) or real_size(*a, **k))
    clock: list[int] = []
    real_time = time.time

    class Clock:
        """`time` as the asset module sees it, counting `time()` calls."""

        def __getattr__(self, name):
            return getattr(time, name)

        @staticmethod
        def time() -> float:
            clock.append(1)
            return real_time()

    monkeypatch.setattr(defs_assets, "time", Clock())
    assets = [a for a in defs.assets if isinstance(a, AssetsDefinition)
              and any(k.path[0] == "t" for k in a.keys)]
    result = materialize(
        assets,
        selection=AssetSelection.assets(*(AssetKey(["t", c]) for c in COMPONENTS))
        .without_checks(),
        resources=defs.resources, instance=DagsterInstance.ephemeral(),
    )
    assert result.success
    done = {m.asset_key.path[1]: {k: getattr(v, "value", v) for k, v in m.metadata.items()}
            for m in result.asset_materializations_for_node("t__maintenance")}
    assert set(done) == set(COMPONENTS)
    assert done["checkpoint"]["skipped"] is True
    assert done["log_compaction"]["skipped"] is True
    assert done["version_checksum"]["num_written"] == 0
    assert done["version_checksum"]["engine"] == "local"
    # Three components asked for the log state: one `_last_checkpoint` read, one listing.
    assert calls["read", LAST_CHECKPOINT] == 1
    assert {p: n for (m, p), n in calls.items() if m == "list_dir"} == {"_delta_log": 1}
    assert sizes == [1]  # the table's size, read once for the engine
    assert clock == [1]  # the clock, read once for the step
