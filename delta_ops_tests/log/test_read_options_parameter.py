"""`read_options` is a parameter of the public operations: a value passed in chooses the
reading strategy, whatever the environment says."""

from __future__ import annotations

from delta_ops.log import ReadOptions, load_snapshot
from delta_ops.maintenance.checkpoint.writer import write_checkpoint
from delta_ops.maintenance.checksum.operations import compute_version_checksum
from delta_ops.maintenance.row_tracking import backfill_row_tracking
from delta_ops.storage import Storage
from delta_ops_tests.support import checkpoint_checks as tc
from delta_ops_tests.support.corpus import copy_corpus_table

REBUILD_ALWAYS = ReadOptions(rebuild_threshold_bytes=0, rebuild_buckets=3)
NO_CHECKPOINT = "golden__basic-with-inserts-updates"


def _copy(name: str, dest) -> Storage:
    return Storage.for_uri(str(copy_corpus_table(name, dest)))


def test_checkpoint_rebuilds_by_bucket_when_read_options_say_so(tmp_path, monkeypatch):
    monkeypatch.delenv("DELTA_OPS_REBUILD_THRESHOLD_BYTES", raising=False)
    default = _copy(NO_CHECKPOINT, tmp_path / "a")
    tuned = _copy(NO_CHECKPOINT, tmp_path / "b")

    plain = write_checkpoint(default, now_ms=tc.NOW)
    rebuilt = write_checkpoint(tuned, now_ms=tc.NOW, read_options=REBUILD_ALWAYS)

    assert plain.rebuilt_buckets == 0
    assert rebuilt.rebuilt_buckets == 3
    assert load_snapshot(tuned).files.num_rows == load_snapshot(default).files.num_rows


def test_the_environment_does_not_override_a_value_passed_in(tmp_path, monkeypatch):
    monkeypatch.setenv("DELTA_OPS_REBUILD_THRESHOLD_BYTES", "0")
    storage = _copy(NO_CHECKPOINT, tmp_path / "t")

    result = write_checkpoint(storage, now_ms=tc.NOW, read_options=ReadOptions())

    assert result.rebuilt_buckets == 0


def test_backfill_streams_when_read_options_say_so(tmp_path):
    storage = _copy("golden__basic-with-inserts-deletes-checkpoint", tmp_path / "t")

    result = backfill_row_tracking(
        storage, read_options=ReadOptions(stream_threshold_bytes=0), sleep=lambda _: None,
        confirm_protocol_upgrade=True
    )

    assert result.streamed and result.enabled


def test_checksum_takes_read_options(tmp_path):
    storage = _copy(NO_CHECKPOINT, tmp_path / "t")

    plain = compute_version_checksum(storage, method="full")
    tuned = compute_version_checksum(storage, method="full", read_options=REBUILD_ALWAYS)

    def by_path(checksum) -> dict:
        d = checksum.to_dict()
        d["allFiles"] = sorted(d.get("allFiles") or [], key=lambda f: f["path"])
        return d

    # The rebuilt state lists the files in bucket order: the option took effect, and the
    # checksum is the same one.
    tuned_paths = [f["path"] for f in tuned.checksum.to_dict()["allFiles"]]
    plain_paths = [f["path"] for f in plain.checksum.to_dict()["allFiles"]]
    assert tuned_paths != plain_paths
    assert by_path(tuned.checksum) == by_path(plain.checksum)
