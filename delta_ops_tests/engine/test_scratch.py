"""Scratch directories (`delta_ops.engine.scratch`): what a killed process leaves is swept
by the next one, and nothing a live process or another program owns is ever touched.

The owners here are real processes: one killed with SIGKILL while it holds a spill and a
streamed checkpoint's scratch directory (no cleanup runs), one still running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from delta_ops.engine.scratch import PREFIX, ScratchDir, sweep
from delta_ops.engine.spill import BucketSpill

_HOLDER = textwrap.dedent(
    """
    import sys, tempfile, time
    tempfile.tempdir = sys.argv[1]
    import pyarrow as pa
    from delta_ops.engine.scratch import ScratchDir
    from delta_ops.engine.spill import BucketSpill
    spill = BucketSpill(pa.schema([("k", pa.string())]), "k", 4, name="vacuum-listing")
    spill.append(pa.table({"k": [f"f{i}" for i in range(100)]}))
    scratch = ScratchDir("checkpoint")
    open(scratch.path + "/00000000000000000010.checkpoint.parquet", "wb").write(b"x" * 4096)
    print("ready", flush=True)
    time.sleep(600)
    """
)


@pytest.fixture()
def tmpdir_(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


def _holder(tmp: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(tmp)], stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _ours(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith(PREFIX))


def test_a_killed_owners_directories_are_swept_a_live_owners_are_not(tmpdir_):
    live = _holder(tmpdir_)
    killed = _holder(tmpdir_)
    try:
        assert len(_ours(tmpdir_)) == 4
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait()
        # Another program's directory with our prefix but no lock file, and a file.
        foreign = tmpdir_ / f"{PREFIX}someone-else"
        foreign.mkdir()
        (foreign / "data").write_bytes(b"keep")
        (tmpdir_ / f"{PREFIX}a-file").write_bytes(b"keep")
        before = set(_ours(tmpdir_))
        removed = sweep()
        assert len(removed) == 2  # the killed process's spill and checkpoint scratch
        after = set(_ours(tmpdir_))
        assert before - after == {Path(p).name for p in removed}
        assert (foreign / "data").read_bytes() == b"keep"
        assert (tmpdir_ / f"{PREFIX}a-file").read_bytes() == b"keep"
        # The live holder's two directories are still whole.
        spill_dirs = [tmpdir_ / n for n in after if n.startswith(f"{PREFIX}vacuum-listing-")]
        checkpoint_dirs = [tmpdir_ / n for n in after if n.startswith(f"{PREFIX}checkpoint-")]
        assert len(spill_dirs) == len(checkpoint_dirs) == 1
        assert (spill_dirs[0] / ".owner").exists()
        assert len(list(spill_dirs[0].glob("*.arrows"))) == 4
        written = checkpoint_dirs[0] / "00000000000000000010.checkpoint.parquet"
        assert written.read_bytes() == b"x" * 4096
        assert sweep() == []  # nothing more to take while the holder lives
    finally:
        live.kill()
        live.wait()
        killed.kill()
        killed.wait()
    # Now the other owner is gone too: the next scratch directory made sweeps its two.
    with ScratchDir("checkpoint") as path:
        assert set(_ours(tmpdir_)) == {f"{PREFIX}someone-else", f"{PREFIX}a-file",
                                       Path(path).name}
    assert set(_ours(tmpdir_)) == {f"{PREFIX}someone-else", f"{PREFIX}a-file"}


def test_a_directory_in_use_in_this_process_is_never_swept(tmpdir_):
    with BucketSpill(pa.schema([("k", pa.string())]), "k", 2) as spill:
        spill.append(pa.table({"k": ["a", "b", "c"]}))
        with ScratchDir("checkpoint") as path:
            assert sweep() == []
            assert os.path.isdir(path)
            assert sorted(spill.bucket(0).column("k").to_pylist()
                          + spill.bucket(1).column("k").to_pylist()) == ["a", "b", "c"]
    assert _ours(tmpdir_) == []


def test_an_unlocked_owner_file_is_taken_only_by_the_sweep(tmpdir_):
    # A directory whose lock file exists but is held by nobody: what a killed process
    # leaves, made here by hand.
    d = tmpdir_ / f"{PREFIX}vacuum-dead"
    d.mkdir()
    (d / ".owner").write_bytes(b"")
    (d / "00000.arrows").write_bytes(b"spilled")
    assert sweep() == [str(d)]
    assert not d.exists()


_KILLED_REWRITE = textwrap.dedent(
    """
    import os, signal, sys
    import pyarrow as pa, pyarrow.parquet as pq
    from delta_ops.commit import create_table
    from delta_ops.layout.run import run_layout
    from delta_ops.storage import Storage

    storage = Storage.for_uri("memory://killed-rewrite")
    adds = []
    for i in range(3):
        key = f"part-{i}.parquet"
        sink = pa.BufferOutputStream()
        pq.write_table(pa.table({"id": pa.array(range(i * 10, i * 10 + 10), pa.int64())}),
                       sink)
        storage.put_atomic(key, sink.getvalue().to_pybytes())
        adds.append({"path": key, "partitionValues": {}, "size": storage.info(key).size,
                     "modificationTime": 1_700_000_000_000, "dataChange": True})
    create_table(storage, pa.schema([("id", pa.int64())]), [], adds=adds,
                 clock=lambda: 1_700_000_000_000)

    def killed(self, key, path):  # the new file is complete in scratch, not yet uploaded
        os.kill(os.getpid(), signal.SIGKILL)

    type(storage).put_atomic = killed
    run_layout(storage, "optimize", target_size="1gb", dry_run=False,
               scratch_dir=sys.argv[1])
    """
)


def test_a_rewrite_killed_before_its_upload_leaves_scratch_the_next_one_sweeps(tmp_path):
    # OPTIMIZE of an object-store table writes each new file in a scratch directory, then
    # uploads it; a process killed in between (SIGKILL: no cleanup) used to leave the
    # directory and its file behind for good.
    parent = tmp_path / "scratch"
    parent.mkdir()
    proc = subprocess.run([sys.executable, "-c", _KILLED_REWRITE, str(parent)],
                          capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    (left,) = [p for p in parent.iterdir() if p.name.startswith(f"{PREFIX}layout-")]
    assert (left / ".owner").exists()
    assert [p.name for p in left.glob("part-*.parquet")] == ["part-00000.parquet"]
    with ScratchDir("layout", str(parent)) as path:
        assert [p.name for p in parent.iterdir()] == [Path(path).name]
    assert list(parent.iterdir()) == []
