"""Rough edges of `delta-ops` (issue 22, item 5): every failure is one line, never a
traceback, and the command line's own mistakes are named against the subcommand.

Each test runs the real command line in a subprocess (the console script's path through
`delta_ops.cli.run`), on a copy of a corpus table or a table written here.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

TABLE = "golden__basic-with-inserts-deletes-checkpoint"


def _cli(*argv: str, timeout: float = 60, env: dict | None = None,
         whole_env: dict | None = None, **kwargs):
    """Run `delta-ops` in a subprocess (`env` added to this process's environment, or
    `whole_env` alone); a spin fails the test through the timeout."""
    return subprocess.run(
        [sys.executable, "-m", "delta_ops.cli", *argv],
        capture_output=True, text=True, timeout=timeout,
        env=whole_env if whole_env is not None else {**os.environ, **(env or {})},
        **kwargs,
    )


def _one_line(proc: subprocess.CompletedProcess, code: int) -> str:
    """stderr of a failed run: exactly one line, no traceback; the exit code `code`."""
    assert proc.returncode == code, (proc.returncode, proc.stderr[-3000:])
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    return lines[0]


def _write_wide_table(root: Path, files: int) -> Path:
    """A table of one commit adding `files` files (the log only: nothing here reads data)."""
    log = root / "_delta_log"
    log.mkdir(parents=True)
    schema = json.dumps({"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}}]})
    lines = [
        json.dumps({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}),
        json.dumps({"metaData": {
            "id": "wide", "format": {"provider": "parquet", "options": {}},
            "schemaString": schema, "partitionColumns": [], "configuration": {},
            "createdTime": 1}}),
    ]
    for i in range(files):
        stats = json.dumps({"numRecords": 10, "minValues": {"id": i},
                            "maxValues": {"id": i + 9}, "nullCount": {"id": 0}})
        lines.append(json.dumps({"add": {
            "path": f"part-{i:06d}-c000-{'a' * 32}.snappy.parquet", "partitionValues": {},
            "size": 1000 + i, "modificationTime": 1, "dataChange": True, "stats": stats}}))
    (log / f"{0:020d}.json").write_text("\n".join(lines) + "\n")
    return root


# ---- --version and misspelt options --------------------------------------------------------


def test_version_prints_the_package_version():
    proc = _cli("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"delta-ops {metadata.version('delta_ops')}\n"


@pytest.mark.parametrize(
    ("argv", "prog"),
    [
        (["snapshot", "{root}", "--jsn"], "delta-ops snapshot"),
        (["vacuum", "{root}", "--dryrun"], "delta-ops vacuum"),
        (["row-tracking", "backfill", "{root}", "--batchsize", "3"],
         "delta-ops row-tracking backfill"),
        (["crc", "verify", "{root}", "--al"], "delta-ops crc verify"),
    ],
)
def test_a_misspelt_option_is_reported_against_the_subcommand(table_copy, argv, prog):
    root = table_copy(TABLE)
    proc = _cli(*[a.replace("{root}", str(root)) for a in argv])
    line = _one_line(proc, 2)
    wrong = argv[-2] if argv[-1] == "3" else argv[-1]
    assert line.startswith(f"{prog}: error: unrecognized arguments: {wrong}"), line
    assert f"(see {prog} --help)" in line


# ---- a closed pipe -------------------------------------------------------------------------


def test_a_reader_that_stops_early_ends_the_command_quietly(tmp_path):
    """`delta-ops snapshot --files | head -1`: no BrokenPipeError traceback; exit 141, what
    a shell reports for `cat` or `seq` killed by SIGPIPE in the same place."""
    root = _write_wide_table(tmp_path / "wide", 4000)  # output far beyond a pipe's buffer
    proc = subprocess.Popen(
        [sys.executable, "-m", "delta_ops.cli", "snapshot", str(root), "--files"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # what `head -1` does after its line
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=60)
    assert first.startswith(b"table")
    assert err == ""
    assert code == 141


# ---- bounds on numbers ---------------------------------------------------------------------


@pytest.mark.parametrize("interval", ["0", "-3"])
def test_compact_interval_must_be_positive(table_copy, interval):
    root = table_copy(TABLE)
    proc = _cli("compact", str(root), f"--interval={interval}")
    line = _one_line(proc, 2)
    assert line.startswith("delta-ops compact: error: argument --interval"), line
    assert "at least 1" in line
    assert not list((root / "_delta_log").glob("*.compacted.json"))


@pytest.mark.parametrize(
    ("argv", "flag", "bound"),
    [
        (["--parts", "1000000"], "--parts", "10,000"),
        (["--parts", "10001"], "--parts", "10,000"),
        (["--rebuild", "--buckets", "100000000"], "--buckets", "1,024"),
        (["--rebuild", "--buckets", "1025"], "--buckets", "1,024"),
    ],
)
def test_parts_and_buckets_are_bounded(table_copy, argv, flag, bound):
    root = table_copy(TABLE)
    before = sorted(p.name for p in (root / "_delta_log").iterdir())
    started = time.monotonic()
    proc = _cli("checkpoint", str(root), *argv, timeout=30)
    line = _one_line(proc, 2)
    assert line.startswith(f"delta-ops checkpoint: error: argument {flag}"), line
    assert f"at most {bound}" in line
    assert time.monotonic() - started < 30
    assert sorted(p.name for p in (root / "_delta_log").iterdir()) == before


def test_the_bounds_are_the_ones_the_library_uses():
    from delta_ops.commands.checkpoint import MAX_PARTS
    from delta_ops.log.snapshot import rebuild

    assert rebuild.MAX_BUCKETS == 1024  # the help text and the message say 1,024
    assert MAX_PARTS == 10_000


def test_the_largest_bounds_are_accepted(table_copy):
    root = table_copy(TABLE)
    proc = _cli("checkpoint", str(root), "--rebuild", "--buckets", "1024", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["rebuilt_buckets"] == 1024


_HUGE = str(2**80)


@pytest.mark.parametrize(
    "argv",
    [
        ["snapshot", "{t}", "--version", _HUGE, "--json"],
        ["checkpoint", "{t}", "--version", _HUGE, "--json"],
        ["restore", "{t}", "--version", _HUGE, "--dry-run", "--json"],
        ["crc", "write", "{t}", "--from", "0", "--to", _HUGE, "--json"],
        ["compact", "{t}", "--start", "0", "--end", _HUGE],
        ["vacuum", "{t}", "--keep-versions", f"1,{_HUGE}", "--dry-run"],
    ],
)
def test_a_version_beyond_a_delta_long_is_a_bad_argument_not_a_traceback(table_copy, argv):
    # It reached the JSON error writer, which cannot write integers beyond 64 bits.
    root = table_copy(TABLE)
    before = sorted(p.name for p in (root / "_delta_log").iterdir())
    proc = _cli(*[a.format(t=root) for a in argv])
    line = _one_line(proc, 2)
    assert f"a version is at most {2**63 - 1} (a Delta long), got {_HUGE}" in line
    assert proc.stdout == ""
    assert sorted(p.name for p in (root / "_delta_log").iterdir()) == before


def test_the_largest_version_is_accepted_and_refused_by_the_table(table_copy):
    root = table_copy(TABLE)
    proc = _cli("restore", str(root), "--version", str(2**63 - 1), "--dry-run", "--json")
    line = _one_line(proc, 1)
    assert str(root.name) in line
    assert json.loads(proc.stdout)["error"]["version"] == 2**63 - 1


# ---- storage options -----------------------------------------------------------------------


@pytest.mark.parametrize("key", ["config_kwargs", "client_kwargs", "s3_additional_kwargs"])
def test_a_mapping_storage_option_given_as_text_is_one_line(key):
    secret = "Sup3rS3cret-not-json"
    proc = _cli(
        "snapshot", "s3://bucket/table", "--storage-option", "endpoint_url=http://127.0.0.1:9",
        "--storage-option", f"{key}={secret}",
    )
    line = _one_line(proc, 1)
    assert f"storage option {key!r} takes a mapping" in line, line
    assert secret not in proc.stderr + proc.stdout


def test_a_mapping_storage_option_as_json_reaches_s3(tmp_path, s3_server, table_copy):
    root = table_copy(TABLE)
    uri = s3_server.fresh_uri("cfg")
    bucket, prefix = uri[len("s3://"):].split("/", 1)
    client = s3_server.client()
    for path in root.rglob("*"):
        if path.is_file():
            client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(root)}")
    opts = s3_server.storage_options
    proc = _cli(
        "snapshot", uri, "--json",
        "--storage-option", f"endpoint_url={opts['endpoint_url']}",
        "--storage-option", f"key={opts['key']}",
        "--storage-option", f"secret={opts['secret']}",
        "--storage-option", "region=us-east-1",
        "--storage-option", 'config_kwargs={"connect_timeout": 5, "retries": {"max_attempts": 2}}',
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["version"] == 13


# ---- Spark: a bad master, no Java ----------------------------------------------------------


@pytest.mark.parametrize("master", ["garbage://x", "local[two]", "spark", "mesos://h:5050", "k8s://"])
def test_a_bad_spark_master_is_refused_before_any_jvm(table_copy, master):
    root = table_copy(TABLE)
    started = time.monotonic()
    proc = _cli("vacuum", str(root), "--dry-run", "--spark-master", master)
    line = _one_line(proc, 2)
    assert proc.stdout == ""
    assert line.startswith(f"delta-ops vacuum: --spark-master {master!r} is not a Spark "
                           "master URL: use local, local[N]"), line
    assert time.monotonic() - started < 10  # no JVM was started


@pytest.mark.parametrize("master", ["local[0]", "local[0,4]", "local-cluster[0,1,1024]",
                                    "local-cluster[2,0,1024]", "local-cluster[2,1,0]"])
def test_a_master_asking_for_zero_is_refused_before_any_jvm(table_copy, master):
    # local[0] passed the form check, started a JVM and ended in 28 lines of Java stack
    # trace whose last line hid Spark's reason ("Asked to run locally with 0 threads").
    root = table_copy(TABLE)
    started = time.monotonic()
    proc = _cli("vacuum", str(root), "--dry-run", "--spark-master", master)
    line = _one_line(proc, 2)
    assert f"{master!r} asks for 0 threads, workers, cores or MB; each is at least 1" in line
    assert time.monotonic() - started < 10  # no JVM was started


@pytest.mark.parametrize(
    "master",
    ["local", "local[2]", "local[*]", "local[4, 2]", "local-cluster[2,1,1024]",
     "spark://h1:7077,h2:7077", "yarn", "k8s://https://h:6443"],
)
def test_the_spark_master_forms_spark_accepts_pass(master):
    from delta_ops.engine.config import master_problem

    assert master_problem(master) is None


def _path_without_java(tmp_path: Path) -> str:
    """A PATH with every program of this machine's /usr/bin and /bin except `java`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for source in ("/usr/local/bin", "/usr/bin", "/bin"):
        if not os.path.isdir(source):
            continue
        for entry in os.scandir(source):
            target = bin_dir / entry.name
            if entry.name.startswith("java") or target.exists() or target.is_symlink():
                continue
            target.symlink_to(os.path.realpath(entry.path))
    assert shutil.which("java", path=str(bin_dir)) is None
    return str(bin_dir)


def test_spark_without_java_says_which_java_is_needed(tmp_path, table_copy):
    root = table_copy(TABLE)
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = _path_without_java(tmp_path)
    proc = _cli("vacuum", str(root), "--dry-run", "--engine", "spark", whole_env=env)
    line = _one_line(proc, 1)
    assert proc.stdout == ""
    assert "Spark needs Java 17 or 21: no java on PATH and JAVA_HOME is not set" in line, line
    assert "apt-get install openjdk-17-jre-headless" in line


def test_spark_with_another_java_names_its_version(tmp_path, table_copy):
    """A JAVA_HOME whose java is Java 8 (a script printing what Java 8 prints)."""
    root = table_copy(TABLE)
    home = tmp_path / "jdk8"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text('#!/bin/sh\necho \'openjdk version "1.8.0_392"\' >&2\n')
    java.chmod(0o755)
    proc = _cli("vacuum", str(root), "--dry-run", "--engine", "spark",
                env={"JAVA_HOME": str(home)})
    line = _one_line(proc, 1)
    assert f"Spark needs Java 17 or 21: {java} is Java 8" in line, line


# ---- a full TMPDIR -------------------------------------------------------------------------


@contextlib.contextmanager
def _full_filesystem(where: Path, *, size: str, inodes: int | None) -> Iterator[dict]:
    """A real small filesystem at `where` (tmpfs of `size` bytes and at most `inodes`
    inodes); yields the subprocess keyword arguments to run a command against it.

    Without the right to mount (not root), the same directory gets a file size limit
    instead (RLIMIT_FSIZE: writes past it fail with EFBIG, as a full disk fails them with
    ENOSPC), which the command line reports the same way.
    """
    where.mkdir()
    opts = f"size={size}" + (f",nr_inodes={inodes}" if inodes else "")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)], capture_output=True
    ).returncode == 0
    try:
        if mounted:
            yield {}
        else:
            limit = 2 * 1024 * 1024

            def cap() -> None:
                resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

            yield {"preexec_fn": cap}
    finally:
        if mounted:
            subprocess.run(["umount", str(where)], check=True)


@pytest.mark.parametrize(
    ("size", "inodes"),
    [("2m", None), ("1m", 3)],  # bytes run out while spilling; names run out first
    ids=["no-space", "no-inodes"],
)
def test_a_full_tmpdir_during_rebuild_is_one_line_and_leaves_nothing(tmp_path, size, inodes):
    root = _write_wide_table(tmp_path / "wide", 30_000)  # 8 MB of commits: spills ~3 MB
    before = sorted(p.name for p in (root / "_delta_log").iterdir())
    scratch = tmp_path / "scratch"
    with _full_filesystem(scratch, size=size, inodes=inodes) as kwargs:
        proc = _cli("checkpoint", str(root), "--rebuild",
                    env={"TMPDIR": str(scratch)}, **kwargs)
        line = _one_line(proc, 1)
        left = sorted(p.name for p in scratch.iterdir())
    assert line.startswith("delta-ops checkpoint: "), line
    assert any(w in line for w in ("No space left on device", "File too large")), line
    assert f"spill and scratch files go to {scratch} ($TMPDIR)" in line
    assert line.endswith(f"(table {root})")
    assert left == []  # every scratch directory of the run was removed
    assert sorted(p.name for p in (root / "_delta_log").iterdir()) == before


def test_optimize_on_a_full_table_filesystem_leaves_no_partial_file(tmp_path):
    # The new file is written in place, on the table's filesystem: when it fills, the
    # file being written was left behind (zero bytes: its close failed too), and the
    # message named only $TMPDIR.
    import numpy as np
    import pyarrow as pa
    from deltalake import write_deltalake

    disk = tmp_path / "disk"
    with _full_filesystem(disk, size="4m", inodes=None) as kwargs:
        root = disk / "t"
        rng = np.random.default_rng(7)
        for _ in range(3):  # ~0.9 MB each, incompressible: the output is ~2.7 MB
            blob = pa.array([rng.bytes(900_000)], pa.binary())
            write_deltalake(str(root), pa.table({"b": blob}), mode="append")
        before = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
        proc = _cli("optimize", str(root), **kwargs)
        line = _one_line(proc, 1)
        after = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
        assert any(w in line for w in ("No space left on device", "File too large")), line
        assert "a local table's new files to the table's own filesystem" in line
        assert after == before
        if not kwargs:  # a real filesystem: full to the last byte, the file cannot open
            with contextlib.suppress(OSError), open(disk / "filler", "wb") as filler:
                while True:
                    filler.write(b"\0" * 65536)
                    filler.flush()
            proc = _cli("optimize", str(root))
            _one_line(proc, 1)
            assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == before


def test_a_log_field_of_the_wrong_type_is_an_error_of_the_table_not_of_the_arguments(
    table_copy, capsys
):
    """`add.size` as a string: Arrow's ArrowInvalid is a ValueError, which the CLI took
    for bad arguments (exit 2, naming nothing). Now exit 1, naming the table."""
    from delta_ops.cli import main

    root = table_copy("golden__data-reader-primitives")
    commit = sorted((root / "_delta_log").glob("*.json"))[-1]
    lines = commit.read_text().splitlines()
    for i, line in enumerate(lines):
        obj = json.loads(line)
        if "add" in obj:
            obj["add"]["size"] = str(obj["add"]["size"])
            lines[i] = json.dumps(obj)
            break
    else:
        pytest.fail("no add in the last commit")
    commit.write_text("\n".join(lines) + "\n")
    code = main(["snapshot", str(root)])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "do not decode" in err and str(root) in err
