"""Bad input gets one clear line: never a spin, a traceback or a leaked secret (issue 12,
items 5, 6, 7 and the CLI/registry/Spark errors of item 9).

Versions in log file names: the spec pads them to 20 digits, and every writer stores them
as a Java long, so a 20-digit name above 2^63-1 is a stray file (deltalake ignores it too)
while a valid name far beyond the next version is a gap, reported at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import deltalake
import pytest

from delta_ops.protocol import filenames
from delta_ops.table import DeltaTable

#: golden__basic-with-inserts-deletes-checkpoint: commits 0..13, classic checkpoint at 10.
TABLE = "golden__basic-with-inserts-deletes-checkpoint"
LAST = 13
COMMANDS = [["snapshot"], ["vacuum", "--dry-run"], ["cleanup", "--dry-run"]]


def _cli(*argv: str, timeout: float = 20, env: dict | None = None):
    """Run `delta-ops` in a subprocess; a spin fails the test through the timeout."""
    return subprocess.run(
        [sys.executable, "-m", "delta_ops.cli", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def _one_line_error(proc: subprocess.CompletedProcess, command: str) -> str:
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"delta-ops {command}: "), lines[0]
    return lines[0]


# ---- item 5: huge version numbers --------------------------------------------------------

FAR = 2**63 - 1  # 09223372036854775807: a valid name (a Java long), far beyond version 13


def test_parse_ignores_versions_no_writer_can_produce():
    assert filenames.parse("99999999999999999999.json") is None
    assert filenames.parse("00000000000000000000.99999999999999999999.compacted.json") is None
    assert filenames.parse("99999999999999999999.checkpoint.parquet") is None
    assert filenames.parse("09223372036854775808.crc") is None
    far = filenames.parse(f"{FAR:020d}.json")
    assert far is not None and far.version == FAR
    compaction = filenames.parse(f"{0:020d}.{FAR:020d}.compacted.json")
    assert compaction is not None and (compaction.start_version, compaction.version) == (0, FAR)


@pytest.mark.parametrize(
    "stray",
    ["99999999999999999999.json", "00000000000000000000.99999999999999999999.compacted.json"],
)
@pytest.mark.parametrize("command", COMMANDS)
def test_stray_file_with_impossible_version_is_ignored(table_copy, stray, command):
    root = table_copy(TABLE)
    (root / "_delta_log" / stray).write_text("{}\n")
    (root / "_delta_log" / "_last_checkpoint").unlink()  # list the whole log
    proc = _cli(*command, str(root), "--json")
    assert proc.returncode == 0, proc.stderr
    if command[0] == "snapshot":
        assert json.loads(proc.stdout)["version"] == LAST
        assert deltalake.DeltaTable(str(root)).version() == LAST  # the same reading


@pytest.mark.parametrize(
    "far",
    [f"{FAR:020d}.json", f"{0:020d}.{FAR:020d}.compacted.json", f"{LAST + 10**15:020d}.json"],
)
@pytest.mark.parametrize("command", COMMANDS)
def test_far_version_is_a_gap_reported_at_once(table_copy, far, command):
    root = table_copy(TABLE)
    (root / "_delta_log" / far).write_text("{}\n")
    (root / "_delta_log" / "_last_checkpoint").unlink()
    line = _one_line_error(_cli(*command, str(root)), command[0])
    assert "not contiguous" in line
    assert f"version {LAST + 1}" in line and filenames.commit_name(LAST + 1) in line
    assert str(root.name) in line


_SEGMENT_ERROR = """
import json, sys
from delta_ops.errors import CorruptLogError
from delta_ops.log.segment.log_segment import build_log_segment
from delta_ops.storage import Storage
try:
    build_log_segment(Storage.for_uri(sys.argv[1]))
except CorruptLogError as exc:
    print(json.dumps({"message": str(exc), "version": exc.version, "file": exc.file}))
"""


def test_far_gap_names_where_the_log_resumes(table_copy):
    root = table_copy(TABLE)
    (root / "_delta_log" / f"{FAR:020d}.json").write_text("{}\n")
    # In a subprocess: a reader that walks the numbers in between never returns.
    proc = subprocess.run(
        [sys.executable, "-c", _SEGMENT_ERROR, str(root)],
        capture_output=True, text=True, timeout=20, check=True,
    )
    error = json.loads(proc.stdout)
    assert f"resumes at version {FAR}" in error["message"]
    assert error["version"] == LAST + 1
    assert error["file"] == f"_delta_log/{filenames.commit_name(LAST + 1)}"
    with pytest.raises(Exception, match="gap"):
        deltalake.DeltaTable(str(root))
    # Versions before the gap stay readable.
    assert DeltaTable(str(root)).snapshot(LAST).version == LAST


# ---- item 6: a bad _last_checkpoint only means "list instead" ------------------------------

BAD_HINTS = [
    {"version": -1, "size": 3},
    {"version": -10},
    {"version": "10"},
    {"version": 10.5},
    {"version": True},
    {"version": None},
    {"size": 3},
    {"version": 10, "size": -5},
    {"version": 10, "parts": 0},
    {"version": 10, "parts": -2},
    {"version": 10, "parts": "2"},
    {"version": 10, "sizeInBytes": -1},
    {"version": 10, "numOfAddFiles": [1]},
    {"version": 10, "checkpointSchema": "x"},
    {"version": 10, "v2Checkpoint": [1]},
    [10],
    "10",
]


@pytest.mark.parametrize("hint", BAD_HINTS, ids=[json.dumps(h) for h in BAD_HINTS])
def test_invalid_last_checkpoint_is_a_problem_not_an_error(table_copy, hint):
    root = table_copy(TABLE)
    (root / "_delta_log" / "_last_checkpoint").write_text(json.dumps(hint))
    snap = DeltaTable(str(root)).snapshot()
    assert (snap.version, snap.checkpoint_version) == (LAST, 10)
    assert snap.num_files == len(deltalake.DeltaTable(str(root)).file_uris())
    assert "_last_checkpoint is unusable" in snap.segment.last_checkpoint_problem
    assert DeltaTable(str(root)).snapshot(11).version == 11


@pytest.mark.parametrize(
    "text", ['{"version": 99999999999999999999}', '{"version": 1e400}', "{", ""]
)
def test_last_checkpoint_that_is_not_json_with_a_long_version(table_copy, text):
    root = table_copy(TABLE)
    (root / "_delta_log" / "_last_checkpoint").write_text(text)
    snap = DeltaTable(str(root)).snapshot()
    assert snap.version == LAST
    assert snap.segment.last_checkpoint_problem


@pytest.mark.parametrize("hint", [{"version": -1}, {"version": 10, "parts": 0}])
@pytest.mark.parametrize("command", COMMANDS)
def test_cli_reads_past_a_bad_last_checkpoint(table_copy, capsys, hint, command):
    from delta_ops.cli import main

    root = table_copy(TABLE)
    (root / "_delta_log" / "_last_checkpoint").write_text(json.dumps(hint))
    code = main([*command, str(root), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    if command[0] == "snapshot":
        assert json.loads(out)["version"] == LAST


def test_a_last_checkpoint_beyond_the_log_is_refused_naming_it(table_copy):
    """A well-formed `_last_checkpoint` naming a version beyond every commit and checkpoint
    listed: either it is wrong, or the log's newest files are missing (a partial copy, a
    listing that lags), and then "the latest version" read from the listing is an older
    one, whose VACUUM deletes the files the missing commits add. So it is refused, as
    deltalake refuses it, naming the file (this test used to expect the listing's version;
    a malformed or negative hint above still only means "list instead")."""
    from delta_ops.errors import CorruptLogError

    root = table_copy(TABLE)
    (root / "_delta_log" / "_last_checkpoint").write_text(json.dumps({"version": FAR}))
    with pytest.raises(CorruptLogError, match=f"_last_checkpoint shows version {FAR}") as err:
        DeltaTable(str(root)).snapshot()
    assert err.value.file == "_delta_log/_last_checkpoint"
    assert DeltaTable(str(root)).snapshot(LAST).version == LAST  # a given version reads


# ---- item 7: secrets are never echoed ------------------------------------------------------

SECRET = "Sup3rS3cretValue-4a8f"


@pytest.mark.parametrize(
    "argv",
    [
        ["snapshot", "{root}", "--storage-option", f"secret:{SECRET}"],
        ["snapshot", "{root}", "--storage-option", f"secret {SECRET}"],
        ["snapshot", "{root}", "--storage-option", "endpoint_url=http://127.0.0.1:1",
         "--storage-option", f"{SECRET}"],
        ["snapshot", "{root}", "--storage-option", f"={SECRET}"],
        ["vacuum", "{root}", "--dry-run", "--spark-conf", f"spark.hadoop.key:{SECRET}"],
        ["vacuum", "{root}", "--dry-run", "--spark-conf", f"={SECRET}"],
    ],
)
def test_malformed_option_is_refused_without_its_text(table_copy, capsys, argv):
    from delta_ops.cli import main

    root = table_copy(TABLE)
    argv = [a.replace("{root}", str(root)) for a in argv]
    code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 2
    assert SECRET not in out and SECRET not in err
    assert SECRET[:6] not in err  # not even a prefix of what followed the separator
    flag = "--spark-conf" if "--spark-conf" in argv else "--storage-option"
    (line,) = err.strip().splitlines()
    assert f"{flag} takes KEY=VALUE" in line
    assert json.loads(out)["error"]["type"] == "ArgumentTypeError"


def _registry_error(tmp_path, text: str) -> str:
    from delta_ops.defs.registry import RegistryError, load_registry

    path = tmp_path / "tables.yaml"
    path.write_text(text)
    with pytest.raises(RegistryError) as info:
        load_registry(path)
    return str(info.value)


@pytest.mark.parametrize(
    "conf_value",
    [
        f"{{env: S3_SECRET, extra: {SECRET}}}",  # an environment reference with an extra key
        f"[{SECRET}]",  # a list
        f"{{value: {SECRET}}}",  # a mapping that is no reference
        f"[{{env: X}}, {SECRET}]",
    ],
)
@pytest.mark.parametrize("where", ["spark", "storage"])
def test_registry_errors_never_contain_option_values(tmp_path, conf_value, where):
    if where == "spark":
        text = f"spark:\n  conf:\n    spark.hadoop.fs.s3a.secret.key: {conf_value}\n"
        located = "spark.conf.spark.hadoop.fs.s3a.secret.key"
    else:
        text = (
            "tables:\n  - name: t\n    uri: x\n    storage_options:\n"
            f"      secret: {conf_value}\n"
        )
        located = "tables[0].storage_options.secret"
    message = _registry_error(tmp_path, text)
    assert SECRET not in message
    assert located in message


def test_literal_spark_secret_is_refused_by_name_only(tmp_path):
    message = _registry_error(
        tmp_path, f"spark:\n  conf:\n    spark.hadoop.fs.s3a.secret.key: {SECRET}\n"
    )
    assert SECRET not in message and "environment variable reference" in message


def test_redaction_shows_only_allowlisted_values():
    from delta_ops.defs.secrets import EnvRef, redact_spark_conf, redact_storage_options

    options = {
        "endpoint_url": f"https://user:{SECRET}@s3.example.com",
        "region": "eu-west-1",
        "client_kwargs": f"{{'aws_session_token': '{SECRET}'}}",
        "profile": SECRET,  # no secret-looking name: redacted all the same
        "secret": EnvRef(env="AWS_SECRET_ACCESS_KEY"),
    }
    shown = redact_storage_options(options)
    assert SECRET not in json.dumps(shown)
    assert shown["region"] == "eu-west-1"
    assert shown["endpoint_url"] == "https://<redacted>@s3.example.com"
    assert shown["profile"] == shown["client_kwargs"] == "<redacted>"
    assert shown["secret"] == "$AWS_SECRET_ACCESS_KEY"
    conf = redact_spark_conf({
        "spark.executor.memory": "4g",
        "spark.hadoop.fs.s3a.aws.credentials.provider": SECRET,
        "spark.hadoop.fs.s3a.secret.key": EnvRef(env="S3_SECRET"),
    })
    assert conf == {
        "spark.executor.memory": "4g",
        "spark.hadoop.fs.s3a.aws.credentials.provider": "<redacted>",
        "spark.hadoop.fs.s3a.secret.key": "$S3_SECRET",
    }


def test_dagster_metadata_redacts_plain_storage_option_values(tmp_path):
    from delta_ops.defs import build_definitions

    reg = tmp_path / "tables.yaml"
    reg.write_text(
        "tables:\n  - name: t\n    uri: t\n    storage_options:\n"
        f"      profile: {SECRET}\n      region: eu-west-1\n"
    )
    defs = build_definitions(reg)
    shown = []
    for assets_def in defs.assets:
        for spec in getattr(assets_def, "specs", ()):
            shown.append(json.dumps({k: str(v) for k, v in (spec.metadata or {}).items()}))
    text = "\n".join(shown)
    assert "eu-west-1" in text
    assert SECRET not in text


# ---- item 9: one clear line for bad CLI input -------------------------------------------------


@pytest.mark.parametrize("hours", ["inf", "-inf", "1e12", "-1", "nan", "1e400", "ten"])
def test_vacuum_retention_hours_is_validated_by_the_parser(table_copy, hours):
    root = table_copy(TABLE)
    proc = _cli("vacuum", str(root), "--dry-run", f"--retention-hours={hours}")
    line = _one_line_error(proc, "vacuum")
    assert proc.returncode == 2
    assert "--retention-hours" in line and repr(hours) in line


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_dead_spark_master_fails_fast_in_one_line(table_copy):
    root = table_copy(TABLE)
    master = f"spark://127.0.0.1:{_closed_port()}"
    for extra in ([], ["--json"]):
        proc = _cli("vacuum", str(root), "--dry-run", "--spark-master", master, *extra, timeout=30)
        line = _one_line_error(proc, "vacuum")
        assert proc.returncode == 1
        assert master in line and "refused" in line.lower()
        if extra:
            assert json.loads(proc.stdout)["error"]["type"] == "EngineError"


def test_dead_spark_connect_server_fails_fast(table_copy):
    root = table_copy(TABLE)
    remote = f"sc://127.0.0.1:{_closed_port()}"
    line = _one_line_error(
        _cli("crc", "verify", str(root), "--spark-remote", remote, timeout=30), "crc"
    )
    assert remote in line


@pytest.mark.parametrize(
    "master,problem",
    [("spark://", "no host"), ("spark://host", "no port"), ("spark://host:99999", "bad port")],
)
def test_malformed_spark_master_is_refused(master, problem):
    from delta_ops.engine.session import EngineError, SparkSessionConfig

    with pytest.raises(EngineError, match=problem):
        SparkSessionConfig(master=master).preflight()


def test_preflight_passes_a_listening_master_and_any_of_a_ha_list():
    import socket

    from delta_ops.engine.session import SparkSessionConfig

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        SparkSessionConfig(master=f"spark://127.0.0.1:{port}").preflight()
        ha = f"spark://127.0.0.1:{_closed_port()},127.0.0.1:{port}"
        SparkSessionConfig(master=ha).preflight()
    SparkSessionConfig(master="local[1]").preflight()  # nothing to reach


def test_engine_built_from_flags_connects_only_when_the_session_starts():
    """Building the engine (argument parsing) never connects; the first use does, in one line."""
    from delta_ops.engine.session import EngineError, make_engine

    master = f"spark://127.0.0.1:{_closed_port()}"
    engine = make_engine("spark", spark_master=master)
    assert not engine.started
    with pytest.raises(EngineError, match="cannot reach Spark master") as info:
        engine.session  # noqa: B018 - starting the session is the point
    assert master in str(info.value) and "\n" not in str(info.value)
    assert not engine.started


def test_a_session_that_fails_to_start_is_one_engine_error(tmp_path):
    """A master URL Spark itself rejects: one EngineError line naming the master (a fresh
    process, so no session of this test run is joined instead)."""
    code = (
        "from delta_ops.engine.session import SparkSessionConfig, EngineError\n"
        "from delta_ops.engine.spark import SparkEngine\n"
        "try:\n"
        "    SparkEngine(SparkSessionConfig(master='bogus://nowhere')).session\n"
        "except EngineError as exc:\n"
        "    print('ERR', exc)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=180, cwd=tmp_path
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("ERR")]
    assert len(lines) == 1, proc.stdout + proc.stderr[-2000:]
    assert "could not start a Spark session on Spark master bogus://nowhere" in lines[0]
    assert "Traceback" not in proc.stdout


def test_spark_resource_refuses_a_dead_master_before_any_jvm():
    from delta_ops.defs.resources import SparkResource
    from delta_ops.engine.session import EngineError

    resource = SparkResource(master=f"spark://127.0.0.1:{_closed_port()}")
    with pytest.raises(EngineError, match="cannot reach Spark master"):
        resource.engine("spark")
    assert "pyspark" not in sys.modules or not _jvm_running()


def _jvm_running() -> bool:
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


def test_argparse_errors_are_one_line(capsys):
    from delta_ops.cli import main

    with pytest.raises(SystemExit) as info:
        main(["crc", "write", "x", "--all"])
    assert info.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "unrecognized arguments: --all" in line


def test_an_invalid_property_stops_only_what_needs_it(table_copy):
    # As delta-spark reads a property when it needs it: an invalid log retention does
    # not stop a checkpoint or a checksum; metadata cleanup, which needs it, refuses.
    root = table_copy(TABLE)
    log = root / "_delta_log"
    last = max(int(p.name[:20]) for p in log.glob("*.json"))
    metadata = json.loads(next(
        line for line in (log / filenames.commit_name(0)).read_text().splitlines()
        if line.startswith('{"metaData"')))["metaData"]
    metadata["configuration"] = {"delta.logRetentionDuration": "thirty days"}
    version = last + 1
    (log / filenames.commit_name(version)).write_text(json.dumps({"metaData": metadata}) + "\n")

    proc = _cli("checkpoint", str(root), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["version"] == version
    written = log / filenames.classic_checkpoint_name(version)
    assert deltalake.DeltaTable(str(root)).metadata().configuration == {
        "delta.logRetentionDuration": "thirty days"}
    assert written.exists()
    proc = _cli("crc", "write", str(root), "--json")
    assert proc.returncode == 0, proc.stderr
    assert (log / filenames.checksum_name(version)).exists()

    before = sorted(p.name for p in log.iterdir())
    line = _one_line_error(_cli("cleanup", str(root)), "cleanup")
    assert "delta.logRetentionDuration='thirty days' is invalid" in line
    assert f"version {version}" in line
    assert sorted(p.name for p in log.iterdir()) == before
