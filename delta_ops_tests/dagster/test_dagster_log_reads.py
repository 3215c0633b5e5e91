"""One Dagster checkpoint materialization reads the log once.

A counting `Storage` (the real local storage, subclassed to record which files are read,
tested for and listed) is handed to the run; the table's checkpoint is already current, so
deciding needs one `_last_checkpoint` read, one listing of `_delta_log` and the protocol and
metaData columns of that checkpoint: no commit is read and nothing is replayed.
"""

from __future__ import annotations

from collections import Counter

import pytest
import yaml
from dagster import AssetKey, AssetsDefinition, AssetSelection, DagsterInstance, materialize

from delta_ops.defs import build_definitions
from delta_ops.defs.assets import CheckpointConfig
from delta_ops.defs.registry import RegisteredTable
from delta_ops.maintenance.checkpoint import write_checkpoint
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import copy_corpus_table
from delta_ops_tests.support.counting_storage import CountingStorage

LAST_CHECKPOINT = "_delta_log/_last_checkpoint"


def _materialize_checkpoint(tmp_path, monkeypatch, corpus_table: str, *, force: bool):
    """Copy `corpus_table`, checkpoint its latest version with the library, then run the
    Dagster checkpoint asset once through a counting storage: (metadata, calls, written)."""
    root = copy_corpus_table(corpus_table, tmp_path / "t")
    written = write_checkpoint(Storage.for_uri(str(root)))
    registry = tmp_path / "tables.yaml"
    registry.write_text(yaml.safe_dump({"defaults": {"engine": "local"},
                                        "tables": [{"name": "t", "uri": str(root)}]}))
    defs = build_definitions(registry)
    calls: Counter = Counter()
    real = RegisteredTable.storage
    monkeypatch.setattr(RegisteredTable, "storage",
                        lambda self: CountingStorage.wrap(real(self), calls))
    assets = [a for a in defs.assets if isinstance(a, AssetsDefinition)
              and any(k.path[0] == "t" for k in a.keys)]
    result = materialize(
        assets, selection=AssetSelection.assets(AssetKey(["t", "checkpoint"])).without_checks(),
        resources=defs.resources,
        instance=DagsterInstance.ephemeral(),
        run_config={"ops": {"t__maintenance": {
            "config": {"checkpoint": CheckpointConfig(force=force).model_dump()}}}},
    )
    # A checkpoint not due is a materialization marked skipped (issue 23).
    (mat,) = result.asset_materializations_for_node("t__maintenance")
    metadata = {k: getattr(v, "value", v) for k, v in mat.metadata.items()}
    return metadata, calls, written


def _log_reads(calls: Counter, suffix: str) -> int:
    return sum(n for (method, path), n in calls.items()
               if method in ("read", "open_input") and path.endswith(suffix))


@pytest.mark.parametrize("force", [False, True], ids=["scheduled", "forced"])
def test_checkpoint_materialization_reads_the_log_once(tmp_path, monkeypatch, force):
    metadata, calls, written = _materialize_checkpoint(
        tmp_path, monkeypatch, "golden__checkpoint", force=force)
    assert written.version == 14
    assert calls["read", LAST_CHECKPOINT] == 1
    # Read without asking first whether it exists: "not found" is the read's own answer.
    assert calls["exists", LAST_CHECKPOINT] == 0
    listings = {path: n for (method, path), n in calls.items() if method == "list_dir"}
    assert listings == {"_delta_log": 1}
    # No commit read, the checkpoint opened once (its protocol/metaData columns), nothing
    # written or verified.
    assert _log_reads(calls, ".json") == 0
    assert _log_reads(calls, ".checkpoint.parquet") == 1
    assert calls["read", "_delta_log/00000000000000000014.checkpoint.parquet"] == 0
    if force:
        assert "skipped" not in metadata and metadata["already_existed"] is True
        assert metadata["last_checkpoint_updated"] is False
        # What the writer reported when it wrote the checkpoint, from `_last_checkpoint`.
        assert (metadata["version"], metadata["kind"]) == (14, "classic")
        assert metadata["num_add_files"] == written.num_add_files
        assert metadata["num_actions"] == written.num_actions
        assert metadata["size_in_bytes"] == written.size_in_bytes
        assert metadata["files"] == "- `00000000000000000014.checkpoint.parquet`"
    else:
        assert metadata["skipped"] is True
        assert metadata["reason"].startswith("not due: version 14 already has a checkpoint")


def test_forced_checkpoint_of_a_current_v2_table_reports_its_sidecars(tmp_path, monkeypatch):
    metadata, calls, written = _materialize_checkpoint(
        tmp_path, monkeypatch, "golden__v2-checkpoint-parquet", force=True)
    assert written.already_existed  # the corpus table's own V2 checkpoint at version 2
    assert calls["read", LAST_CHECKPOINT] == 1
    assert sum(n for (m, _), n in calls.items() if m == "list_dir") == 1
    assert _log_reads(calls, ".json") == 0
    assert (metadata["already_existed"], metadata["kind"]) == (True, "v2-uuid")
    assert metadata["num_add_files"] == written.num_add_files
    assert metadata["num_actions"] == written.num_actions
    assert metadata["files"] == "\n".join(f"- `{name}`" for name in written.files)
