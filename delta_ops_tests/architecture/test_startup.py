"""No fixed cost a command does not need (issue 15): each check runs in a fresh interpreter
and looks at `sys.modules` afterwards.

`import delta_ops` and building the whole `delta-ops` parser (every subcommand and its
`--help`) import no pyarrow; `delta-ops snapshot` of a small table without a checkpoint
reconciles its commits in Python (`log.snapshot.small_snapshot`) and imports none of pyarrow, NumPy,
the Arrow log reader, pyspark, dagster, pandas, pydantic, the maintenance operations, the
commit layer, the engines, nor the other subcommands.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

import pytest

from delta_ops.cli import _command_module, build_parser
from delta_ops.commands import COMMAND_MODULES
from delta_ops_tests.support.corpus import REPO_ROOT, corpus_path
from delta_ops_tests.support.fresh_interpreter import (
    _run,
)

#: Never imported by the command line's light paths (top-level package names).
THIRD_PARTY = ("pyspark", "py4j", "dagster", "pandas", "pydantic", "yaml", "fsspec")
#: delta_ops modules `snapshot` has no use for: the operations, commits, engines, Dagster.
NOT_FOR_SNAPSHOT = (
    "delta_ops.maintenance.checkpoint",
    "delta_ops.maintenance.checksum",
    "delta_ops.maintenance.cleanup",
    "delta_ops.maintenance.compaction",
    "delta_ops.maintenance.due",
    "delta_ops.maintenance.row_tracking",
    "delta_ops.maintenance.vacuum",
    "delta_ops.commit",
    "delta_ops.engine.base",
    "delta_ops.engine.local",
    "delta_ops.engine.spark",
    "delta_ops.engine.config",
    "delta_ops.engine.session",
    "delta_ops.defs",
    "delta_ops.definitions",
    # A small log without a checkpoint is reconciled in Python: no Arrow at all.
    "pyarrow",
    "numpy",
    "delta_ops.log.replay.full_replay",
    "delta_ops.log.replay.columnar_commits",
    "delta_ops.log.files.checkpoint_reader",
    "delta_ops.log.snapshot.loaded_snapshot",
    "delta_ops.protocol.file_actions",
    "delta_ops.protocol.arrays",
    "delta_ops.table",
    # Only the subcommand named is registered.
    "delta_ops.commands.checkpoint",
    "delta_ops.commands.cleanup",
    "delta_ops.commands.vacuum",
    "delta_ops.commands.crc",
    "delta_ops.commands.compact",
    "delta_ops.commands.row_tracking",
    "delta_ops.commands.due",
    "delta_ops.commands.engine_args",
)


def test_import_delta_ops_imports_no_pyarrow():
    out = _run(
        "import delta_ops, delta_ops.engine, delta_ops.engine.session\n"
        "print(loaded(('pyarrow', 'numpy', 'orjson', *sys.argv[1:])))\n",
        *THIRD_PARTY,
    )
    assert out[-1] == "[]"


def test_the_engine_package_still_exports_its_names():
    """`delta_ops.engine` resolves its names on first use (and only then imports them)."""
    out = _run(
        "import delta_ops.engine as e\n"
        "print('pyarrow' in sys.modules)\n"
        "from delta_ops.engine.base import Engine\n"
        "from delta_ops.engine.local import LocalEngine\n"
        "from delta_ops.engine.session import SparkSessionConfig, make_engine\n"
        "print(e.Engine is Engine and e.LocalEngine is LocalEngine"
        " and e.SparkSessionConfig is SparkSessionConfig and e.make_engine is make_engine)\n"
        "print(sorted(e.__all__) == sorted(n for n in dir(e) if n in e.__all__))\n"
        "try:\n"
        "    e.no_such_name\n"
        "except AttributeError as exc:\n"
        "    print('AttributeError', exc)\n"
    )
    assert out[0] == "False"
    assert out[1] == "True" and out[2] == "True"
    assert out[3].startswith("AttributeError") and "no_such_name" in out[3]


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["--help"], ["snapshot", "checkpoint", "cleanup", "vacuum", "crc", "compact",
                      "row-tracking", "due"]),
        (["checkpoint", "--help"], ["--kind", "classic,multi-part,v2-classic,v2-uuid",
                                    "--spark-master", "--engine {local,spark}"]),
        (["crc", "compute", "--help"], ["--histogram-field", "histogramOpt,fileSizeHistogram",
                                        "--all-files-threshold"]),
        (["row-tracking", "backfill", "--help"], ["--batch-size", "default 20000"]),
        (["vacuum", "--help"], ["--retention-hours", "--lite", "--dry-run"]),
    ],
)
def test_help_is_complete_without_importing_the_library(argv, needles):
    """Building the parser imports no pyarrow, numpy or operation, and still shows every
    option with the defaults and choices the library defines."""
    out = _run(
        "import contextlib, io\n"
        "from delta_ops.cli import main\n"
        "buf = io.StringIO()\n"
        "try:\n"
        "    with contextlib.redirect_stdout(buf):\n"
        "        main(sys.argv[1:])\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0, exc.code\n"
        "print(buf.getvalue())\n"
        "print(loaded(('pyarrow', 'numpy', 'delta_ops.maintenance.checkpoint',"
        " 'delta_ops.maintenance.checksum', 'delta_ops.maintenance.row_tracking',"
        " 'delta_ops.log', 'delta_ops.engine.base', 'pyspark', 'dagster')))\n",
        *argv,
    )
    text = "\n".join(out[:-1])
    for needle in needles:
        assert needle in text, needle
    assert out[-1] == "[]"


def test_snapshot_of_a_small_table_imports_only_what_it_reads():
    root = corpus_path("golden__hive__deltatbl-map-types-correctly")
    out = _run(
        "import contextlib, io\n"
        "from delta_ops.cli import main\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    code = main(['snapshot', sys.argv[1]])\n"
        "print(code, buf.getvalue().count('files       1 ('))\n"
        "print('delta_ops.log.snapshot.small_snapshot' in sys.modules)\n"
        "print(loaded(sys.argv[2:]))\n",
        str(root),
        *THIRD_PARTY,
        *NOT_FOR_SNAPSHOT,
    )
    assert out[0] == "0 1"  # the command ran and read the table (so the check means something)
    assert out[1] == "True"  # through the small-log path
    assert out[2] == "[]"


def test_checksum_of_a_small_table_imports_no_pandas():
    """The file-size histogram reads sizes from Arrow buffers: pyarrow imports pandas (a
    third of a second) on its first conversion of a Python value."""
    root = corpus_path("basic_append")
    out = _run(
        "import contextlib, io, json\n"
        "from delta_ops.cli import main\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    code = main(['crc', 'compute', sys.argv[1], '--json'])\n"
        "hist = json.loads(buf.getvalue())['histogramOpt']\n"
        "print(code, sum(hist['fileCounts']), sum(hist['totalBytes']))\n"
        "print(loaded(('pandas', 'pyspark', 'dagster')))\n",
        str(root),
    )
    code, files, size = out[0].split()
    assert code == "0" and int(files) > 0 and int(size) > 0  # a histogram was computed
    assert out[1] == "[]"


@pytest.mark.parametrize("name", ["golden__hive__deltatbl-map-types-correctly",
                                  "kernel-defaults__basic-with-checkpoint"])
def test_the_console_script_prints_everything_before_it_ends(name, capsys):
    """`delta-ops` (`cli.run`) ends the process without the interpreter's teardown once its
    output is flushed: a pipe still gets every byte, and the exit code is main's."""
    from delta_ops.cli import main

    root = str(corpus_path(name))
    assert main(["snapshot", root, "--json", "--files"]) == 0
    expected = capsys.readouterr().out
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", "import sys\nfrom delta_ops.cli import run\nsys.exit(run())",
         "snapshot", root, "--json", "--files"],
        capture_output=True, text=True, cwd=REPO_ROOT, env=env,
    )
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout == expected and len(expected) > 200
    missing = subprocess.run(
        [sys.executable, "-m", "delta_ops.cli", "snapshot", root + "-missing", "--json"],
        capture_output=True, text=True, cwd=REPO_ROOT, env=env,
    )
    assert missing.returncode == 1
    assert '"error"' in missing.stdout and len(missing.stderr.strip().splitlines()) == 1


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(
        a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)
    )


def _helps(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, str]:
    """The help text of every subcommand (nested ones too), by its full name."""
    out: dict[str, str] = {}
    for name, sub in _subcommands(parser).items():
        out[prefix + name] = sub.format_help()
        if any(isinstance(a, argparse._SubParsersAction) for a in sub._actions):
            out.update(_helps(sub, f"{prefix}{name} "))
    return out


@pytest.mark.parametrize("module", COMMAND_MODULES)
def test_a_parser_with_one_subcommand_parses_as_the_whole_one(module, capsys):
    """`delta-ops NAME ...` builds the parser with NAME alone: the same subcommand (help,
    nested subcommands, errors) as in the whole parser."""
    name = module.replace("_", "-")
    assert _command_module([name, "x"]) == module
    alone, whole = build_parser(module), build_parser()
    assert list(_subcommands(alone)) == [name]
    mine = _helps(alone)
    assert mine == {k: v for k, v in _helps(whole).items() if k.split(" ")[0] == name}
    errors = []
    for parser in (alone, whole):
        with pytest.raises(SystemExit) as exc:
            parser.parse_args([name, "--no-such-flag"])
        errors.append((exc.value.code, capsys.readouterr().err))
    assert errors[0] == errors[1] and errors[0][0] == 2
    assert errors[0][1].startswith(f"delta-ops {name}: error: ")


def test_what_is_not_a_subcommand_gets_the_whole_parser():
    assert _command_module([]) is None
    assert _command_module(["--help"]) is None
    assert _command_module(["row_tracking"]) is None  # the module's name is not the command's
    assert _command_module(["snapshots"]) is None
    assert _command_module(["row-tracking", "backfill"]) == "row_tracking"


@pytest.mark.parametrize("name", ["basic_append", "golden__data-reader-primitives"])
def test_row_tracking_backfill_imports_no_pandas(name, tmp_path):
    """Row counts from stats, or from Parquet footers where the adds have none (the second
    table): the arrays are built from buffers, no Python scalar reaches a compute call."""
    root = tmp_path / "t"
    shutil.copytree(corpus_path(name), root)
    for p in [root, *root.rglob("*")]:
        p.chmod(p.stat().st_mode | 0o200)
    out = _run(
        "import contextlib, io, json\n"
        "from delta_ops.cli import main\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    code = main(['row-tracking', 'backfill', sys.argv[1], '--json', '--quiet',\n"
        "                 '--confirm-protocol-upgrade'])\n"
        "obj = json.loads(buf.getvalue())\n"
        "print(code, obj['files_backfilled'], obj['enabled'], obj['high_water_mark'])\n"
        "print(loaded(('pandas', 'pyspark', 'dagster')))\n",
        str(root),
    )
    code, files, enabled, mark = out[0].split()
    assert (code, enabled) == ("0", "True") and int(files) > 0 and int(mark) >= 0
    assert out[1] == "[]"


@pytest.mark.parametrize("name", ["golden__dv-partitioned-with-checkpoint",
                                  "kernel-defaults__basic-with-checkpoint"])
def test_a_streamed_checkpoint_imports_no_pandas(name, tmp_path):
    """The streamed writer's read-back digest takes integer columns (sizes, deletion-vector
    offsets and cardinalities, nulls filled) through their buffers: `Array.to_numpy` and a
    Python fill value would import pandas (0.4 s a process)."""
    root = tmp_path / "t"
    shutil.copytree(corpus_path(name), root)
    for p in [root, *root.rglob("*")]:
        p.chmod(p.stat().st_mode | 0o200)
    out = _run(
        "import contextlib, io, json, os\n"
        "os.environ['DELTA_OPS_STREAM_THRESHOLD_BYTES'] = '0'\n"
        "from delta_ops.cli import main\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    code = main(['checkpoint', sys.argv[1], '--json'])\n"
        "obj = json.loads(buf.getvalue())\n"
        "print(code, obj['already_existed'], obj['num_add_files'])\n"
        "print(loaded(('pandas', 'pyspark', 'dagster')))\n",
        str(root),
    )
    code, existed, adds = out[0].split()
    assert (code, existed) == ("0", "False") and int(adds) > 0  # a checkpoint was written
    assert out[1] == "[]"


@pytest.mark.parametrize("command", ["optimize", "purge"])
def test_a_local_rewrite_from_the_console_script_imports_no_pandas(command, tmp_path):
    """`delta-ops optimize` / `purge` on the local engine skip pyarrow's pandas lookup
    (`cli._skip_pandas_lookup`); the same command called as a library function does not,
    and pandas stays importable for what needs it (`Table.to_pandas`) afterwards."""
    root = tmp_path / "t"
    shutil.copytree(corpus_path("golden__dv-partitioned-with-checkpoint"), root)
    for p in [root, *root.rglob("*")]:
        p.chmod(p.stat().st_mode | 0o200)
    script = (
        "import contextlib, io, json\n"
        "from delta_ops.cli import main\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    code = main([sys.argv[2], sys.argv[1], '--json', '--target-size', '1gb'][\n"
        "                :None if sys.argv[2] == 'optimize' else 3], console=CONSOLE)\n"
        "obj = json.loads(buf.getvalue())\n"
        "print(code, obj['files_removed'], obj['rows_rewritten'])\n"
        "print(loaded(('pandas',)) == [])\n"
        "import pyarrow as pa\n"
        "print(type(pa.table({'a': [1]}).to_pandas()).__name__)\n"
    )
    out = _run(script.replace("CONSOLE", "True"), str(root), command)
    code, removed, rows = out[0].split()
    assert code == "0" and int(removed) > 0 and int(rows) > 0  # the command rewrote files
    assert out[1:] == ["True", "DataFrame"]
    shutil.rmtree(root)
    shutil.copytree(corpus_path("golden__dv-partitioned-with-checkpoint"), root)
    for p in [root, *root.rglob("*")]:
        p.chmod(p.stat().st_mode | 0o200)
    assert _run(script.replace("CONSOLE", "False"), str(root), command)[1] == "False"
