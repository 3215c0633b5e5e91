"""`_last_checkpoint` never moves backward when metadata cleanup and a checkpoint writer race.

Storage has no compare-and-swap, so the forward-only writer (`log.files.last_checkpoint_file`)
reads, compares and writes; a checkpoint writer that publishes a newer hint in the instant between
cleanup's read and cleanup's write is overwritten by cleanup's older hint, and the writer
that wrote last repairs it by listing after its write. These tests run the real writer in
exactly that window (cleanup's storage, the real local one, runs it just before cleanup's own
write of the file lands) and then both on threads released together, many times. After both
return, the hint names the newest complete checkpoint and both readers agree with the table.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from delta_ops.maintenance.checkpoint import write_checkpoint
from delta_ops.maintenance.cleanup import apply_cleanup, plan_cleanup
from delta_ops.protocol.last_checkpoint import build_last_checkpoint, parse_last_checkpoint
from delta_ops.storage import Storage
from delta_ops_tests.support.multipart_tables import LOG, NOW, multipart_table, ours, theirs

HINT = f"{LOG}/_last_checkpoint"


def _hint(root: Path) -> int:
    return parse_last_checkpoint((root / HINT).read_bytes()).version


def _stale_hint(root: Path, version: int = 3) -> None:
    stale = build_last_checkpoint(
        version=version, size=1, size_in_bytes=1, num_of_add_files=1, parts=2
    )
    (root / HINT).write_bytes(stale.to_json_bytes())


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    return multipart_table(tmp_path_factory.mktemp("race") / "t", with_valid_older=True,
                           with_newer=False)


def _copy(template: Path, dest: Path) -> Path:
    import shutil

    shutil.copytree(template, dest)
    return dest


def test_a_checkpoint_published_inside_cleanups_read_write_window_is_not_lost(
    template, tmp_path
):
    root = _copy(template, tmp_path / "t")
    _stale_hint(root)
    store = Storage.for_uri(str(root))
    plan = plan_cleanup(store, now_ms=NOW)
    assert plan.last_checkpoint is not None and plan.last_checkpoint.version == 6

    fired = []

    class WindowStorage(Storage):
        """The real local storage; its write of the hint first lets a checkpoint writer in."""

        __slots__ = ()

        def put_atomic(self, path: str, data: bytes) -> None:
            # Cleanup has read the hint (3) and decided to write 6: a checkpoint writer
            # publishes checkpoint 9 and its hint now, before cleanup's write lands.
            if path == HINT and not fired:
                fired.append(True)
                write_checkpoint(str(root), version=9, now_ms=NOW)
                assert _hint(root) == 9
            super().put_atomic(path, data)

    store = WindowStorage(store.root, store.scheme, store.storage_options, store._backend,
                          store._base)
    apply_cleanup(store, plan)
    assert fired, "the window was never reached: the test proves nothing"
    assert _hint(root) == 9, "_last_checkpoint moved backward"
    assert ours(root) == theirs(root)


def test_cleanup_and_a_checkpoint_writer_on_threads(template, tmp_path):
    for i in range(15):
        root = _copy(template, tmp_path / f"t{i}")
        _stale_hint(root)
        store = Storage.for_uri(str(root))
        plan = plan_cleanup(store, now_ms=NOW)
        start = threading.Barrier(2)
        errors: list[BaseException] = []

        def run(fn, errors=errors, start=start) -> None:
            try:
                start.wait()
                fn()
            except BaseException as exc:  # reported below, with the iteration
                errors.append(exc)

        threads = [
            threading.Thread(target=run, args=(lambda s=store, p=plan: apply_cleanup(s, p),)),
            threading.Thread(
                target=run, args=(lambda r=root: write_checkpoint(str(r), version=9,
                                                                   now_ms=NOW),),
            ),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, (i, errors)
        assert _hint(root) == 9, f"iteration {i}: _last_checkpoint moved backward"
        assert ours(root) == theirs(root)


@pytest.mark.parametrize("stream", [False, True], ids=["loaded", "streamed"])
def test_a_checkpoint_another_writer_lands_meanwhile_is_not_replaced(tmp_path, monkeypatch,
                                                                     stream):
    """deltalake writes its classic checkpoint in the instant between our look for one and
    our write (the look is made to miss it, as it would have a moment earlier). Before the
    fix ours replaced theirs under the same name, under their readers; now theirs stays and
    the result says it was already there."""
    import deltalake
    import pyarrow as pa

    import delta_ops.maintenance.checkpoint.writer as writer_module

    root = tmp_path / "t"
    for i in range(3):
        deltalake.write_deltalake(str(root), pa.table({"id": [i]}), mode="append")
    deltalake.DeltaTable(str(root)).create_checkpoint()
    theirs_path = root / LOG / f"{2:020}.checkpoint.parquet"
    theirs_bytes = theirs_path.read_bytes()
    looks = []
    real = writer_module.find_existing

    def first_look_misses(*args, **kwargs):
        looks.append(args)
        return None if len(looks) == 1 else real(*args, **kwargs)

    monkeypatch.setattr(writer_module, "find_existing", first_look_misses)
    threshold = 0 if stream else 10**15
    result = write_checkpoint(Storage.for_uri(str(root)), stream_threshold=threshold)
    assert result.already_existed and len(looks) == 2
    assert theirs_path.read_bytes() == theirs_bytes
    assert deltalake.DeltaTable(str(root)).version() == 2
