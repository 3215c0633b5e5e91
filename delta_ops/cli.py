"""`delta-ops`: the command line.

Every subcommand prints human-readable text, or one JSON object with `--json`. Errors
exit non-zero with one line on stderr that names the table, version and file; never a
traceback (with `--json`, stdout also gets `{"error": {...}}`). Exit codes: 1 for a refused
or failed operation (a delta_ops error, a Spark failure), 2 for a malformed command line.
Subcommands live in `delta_ops.commands`, one module each.

A full disk (no space left writing a scratch or table file) is exit 1 with one line naming
the temporary directory. A reader that stops early (`delta-ops snapshot --files | head -1`)
ends the command quietly with exit 141, what a filter killed by SIGPIPE reports (`cat`,
`seq`): a script under `set -o pipefail` sees that the output was cut short, as it would
for any other Unix filter, and nobody sees a BrokenPipeError traceback.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import importlib.abc
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import orjson

from delta_ops import __version__
from delta_ops.commands import COMMAND_MODULES
from delta_ops.errors import DeltaOpsError, EngineError


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (subparsers inherit the class).

    Abbreviated options are refused: `--all` must not silently mean `--all-files-threshold`,
    nor `--force` a destructive `--force-retention`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def add_subparsers(self, **kwargs: Any) -> argparse._SubParsersAction:
        kwargs.setdefault("parser_class", _SubcommandParser)
        return super().add_subparsers(**kwargs)


class _SubcommandParser(_Parser):
    """A subcommand's parser: an argument it does not know is its own error, reported
    against its own name (`delta-ops snapshot: error: unrecognized arguments: --jsn`).

    argparse hands a subparser's leftovers back to the top-level parser, whose error names
    `delta-ops` alone and points at the wrong `--help`.
    """

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras


class _VersionAction(argparse.Action):
    """`--version`: `delta-ops <version>` from the installed package's metadata (the
    package's own `__version__` when it runs from a source tree that is not installed)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: Any = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> NoReturn:
        from importlib import metadata

        try:
            version = metadata.version("delta_ops")
        except metadata.PackageNotFoundError:
            version = __version__
        sys.stdout.write(f"delta-ops {version}\n")
        parser.exit(0)


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _from_spark(exc: BaseException) -> bool:
    """Whether `exc` comes from Spark or its Java gateway (session start, a lost JVM)."""
    return type(exc).__module__.split(".")[0] in ("py4j", "pyspark")


def _error_object(exc: BaseException) -> dict[str, Any]:
    out: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, DeltaOpsError):
        out.update(reason=exc.reason, table=exc.table, version=exc.version, file=exc.file)
    return {"error": out}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The `delta-ops` parser with every subcommand; with `only` (a module of
    `COMMAND_MODULES`), with that subcommand alone, which parses its own command lines
    exactly as the whole parser does without importing the other subcommands' modules."""
    parser = _Parser(
        prog="delta-ops",
        description="Delta Lake table maintenance: inspect, checkpoint, clean up, vacuum, "
        "checksum, compact the log, backfill row tracking, optimize, purge deletion vectors, "
        "compute statistics, check and repair (fsck), show history and restore.",
    )
    parser.add_argument(
        "-V", "--version", "--version-info", action=_VersionAction,
        help="print delta-ops and its version, then exit",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES if only is None else (only,):
        importlib.import_module(f"delta_ops.commands.{name}").register(sub)
    return parser


def _command_module(argv: Sequence[str]) -> str | None:
    """The module of the subcommand a command line starts with (`row-tracking`:
    `row_tracking`), None when it starts with anything else (an option, a typo)."""
    if not argv:
        return None
    module = argv[0].replace("-", "_")
    return module if module in COMMAND_MODULES and module.replace("_", "-") == argv[0] else None


#: The commands that stream table data through Arrow's Parquet reader and writer (pyarrow's
#: pandas lookup is skipped for them: `_skip_pandas_lookup`).
DATA_COMMANDS = frozenset({"optimize", "purge"})


def _arrow_allocator() -> None:
    """Give the process Arrow's jemalloc pool, when the user chose none.

    Arrow's default pool (mimalloc) keeps freed pages; jemalloc hands them back
    (`delta_ops.engine.arrow_memory`). A rewrite frees a row group at a time: the layout
    benchmark's optimize peaked at about 240 MB against 350 MB, in the same time. A VACUUM
    dry run listing 275,000 keys on S3 peaked at 298 MB against 421 MB. Small commands
    take the same time either way. Arrow chooses its pool once, at its first allocation,
    so this runs before pyarrow is imported. A value the user set is kept.
    """
    from delta_ops.engine.arrow_memory import prefer_returning_pool_at_start

    prefer_returning_pool_at_start()


def _skip_pandas_lookup() -> None:
    """Let pyarrow record pandas as absent in a local data-rewriting process.

    pyarrow looks for pandas the first time it converts a Python object (`pa.array`,
    `pa.scalar`, a Python value given to a compute function) and imports it when it is
    installed: about 0.4 s and 35 MB, a twentieth of the layout benchmark's OPTIMIZE, for a
    process that never hands pyarrow a pandas object. So the first conversion is made here
    with `pandas` hidden (an import finder that fails it), and pyarrow
    takes Python objects as Python objects from then on. Only that lookup is skipped: an API
    that needs pandas (`Table.to_pandas`) still imports it, as pyarrow tries again for those.
    Nothing is done when pandas is already imported.
    """
    if "pandas" in sys.modules:
        return
    import pyarrow as pa

    hidden = _Hidden("pandas")
    sys.meta_path.insert(0, hidden)
    try:
        pa.array([0])
    finally:
        sys.meta_path.remove(hidden)


class _Hidden(importlib.abc.MetaPathFinder):
    """An import finder under which one top-level package cannot be imported."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname == self.name:
            raise ModuleNotFoundError(f"{fullname} is hidden", name=fullname)
        return None


def main(argv: Sequence[str] | None = None, *, console: bool = False) -> int:
    """Run one `delta-ops` command line; returns its exit status.

    `console` (the console script, `run`): a data-rewriting command on the local engine
    skips pyarrow's pandas lookup (`_skip_pandas_lookup`). Not for Spark, whose Python side
    hands pyarrow pandas objects, nor for a caller in its own process.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    # Only the subcommand named: building all of them (and importing their modules) costs a
    # start more than some commands' whole work. `--help` and errors before a subcommand
    # name get the whole parser.
    parser = build_parser(_command_module(argv))
    args = parser.parse_args(argv)
    engine = None
    try:
        if getattr(args, "uses_engine", False):
            # Built here (a Spark session starts only on first use) and closed below. A
            # master or Connect server named on the command line must answer even when
            # this run turns out to need no Spark job: a wrong URL is reported now.
            from delta_ops.commands.engine_args import engine_from_args

            engine = args.engine = engine_from_args(args)
            config = getattr(engine, "config", None)
            if config is not None:
                config.preflight()
            from delta_ops.engine.local import LocalEngine

            if console and isinstance(engine, LocalEngine) and \
                    _command_module(argv) in DATA_COMMANDS:
                _skip_pandas_lookup()
        obj, text, code = args.handler(args)
    except DeltaOpsError as exc:
        return _fail(args, exc, 1)
    except (argparse.ArgumentTypeError, ValueError) as exc:
        if _from_arrow(exc):
            # Arrow's ArrowInvalid is a ValueError, but here it comes from the table's
            # content (a field of the wrong type in the log), not from the arguments.
            return _fail(args, _undecodable(args, exc), 1)
        return _fail(args, exc, 2)
    except OSError as exc:
        if exc.errno not in _DISK_FULL:
            raise  # a bug, or a broken pipe (`run` ends quietly on that)
        return _fail(args, _disk_full(args, exc), 1)
    except Exception as exc:
        if _from_arrow(exc):  # ArrowTypeError is a TypeError
            return _fail(args, _undecodable(args, exc), 1)
        if not _from_spark(exc):
            raise  # a bug: its traceback is what a report needs
        # Spark failed outside a job (session start, a lost gateway): its message is a
        # Java stack trace; the first line says what happened.
        where = engine.config.describe() if engine is not None else "Spark"
        error = EngineError(f"Spark failed on {where}: {_first_line(exc) or type(exc).__name__}")
        return _fail(args, error, 1)
    finally:
        if engine is not None:
            _close(engine)
    if args.json:
        sys.stdout.write(_json_text(obj) + "\n")
    else:
        print(text)
    return code


def _from_arrow(exc: BaseException) -> bool:
    return type(exc).__module__.startswith("pyarrow")


def _undecodable(args: argparse.Namespace, exc: BaseException) -> DeltaOpsError:
    """Arrow could not decode what the table holds (a field of another type than the
    protocol's in the log): an error of the table, named, not a traceback."""
    return DeltaOpsError(f"the table's log or files do not decode: {exc}",
                         table=getattr(args, "table", None))


#: The errors of a full filesystem: no space, quota exceeded, file size limit.
_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def _disk_full(args: argparse.Namespace, exc: OSError) -> DeltaOpsError:
    """One line for a full filesystem: what ran out, where scratch files go, what to do."""
    import tempfile

    what = os.strerror(exc.errno) if exc.errno is not None else "no space left"
    where = f" writing {exc.filename}" if exc.filename else ""
    return DeltaOpsError(
        f"{what}{where}; spill and scratch files go to {tempfile.gettempdir()} ($TMPDIR) "
        "and a local table's new files to the table's own filesystem: free space there, or "
        "point TMPDIR at a larger filesystem",
        table=getattr(args, "table", None),
    )


def _json_text(obj: dict[str, Any]) -> str:
    """`obj` as indented JSON; an integer beyond 64 bits (which orjson refuses), e.g. a
    number a user typed and an error repeats, is written as it is by the standard
    library."""
    try:
        return orjson.dumps(obj, option=orjson.OPT_INDENT_2).decode()
    except TypeError:
        import json

        return json.dumps(obj, indent=2, default=str)


def _fail(args: argparse.Namespace, exc: BaseException, code: int) -> int:
    """Print the one-line error (and its JSON object with --json); return the exit code."""
    line = " ".join(str(exc).split("\n"))  # a multi-problem message still one line
    print(f"delta-ops {args.command}: {line}", file=sys.stderr)
    if getattr(args, "json", False):
        sys.stdout.write(_json_text(_error_object(exc)))
        sys.stdout.write("\n")
    return code


def _close(engine: Any) -> None:
    """Close the engine; a Spark session that fails to stop does not hide the result."""
    try:
        engine.close()
    except Exception as exc:
        if not _from_spark(exc):
            raise
        print(f"delta-ops: stopping Spark failed: {_first_line(exc)}", file=sys.stderr)


def run() -> int:
    """The `delta-ops` console script: `main()`, then the process ends at once.

    Once the command has returned and its output is flushed, nothing is left to do, yet a
    normal interpreter exit tears down every module and pyarrow's thread pools (tens of
    milliseconds, a large share of a command on a small table). The engine is already
    closed and every file written (operations complete before `main` returns), so the
    process ends with `os._exit`. When `main` raises (SystemExit for --help or a malformed
    command line included), stderr cannot be flushed or Spark was used (pyspark's exit
    hooks stop its gateway), the normal exit runs instead. When the reader of stdout has
    gone (`| head -1`), the command ends quietly with `EXIT_BROKEN_PIPE` (see
    `_reader_gone`).
    """
    _arrow_allocator()
    try:
        code = main(console=True)
        sys.stdout.flush()
    except BrokenPipeError:
        return _reader_gone()
    if "pyspark" in sys.modules:
        return code  # a Spark run: let pyspark's exit hooks stop its gateway as they expect
    try:
        sys.stderr.flush()
    except OSError:
        return code  # the normal exit reports it as Python always has
    os._exit(code)


#: The exit status of a command whose reader went away: 128 + SIGPIPE, what a shell
#: reports for `cat` or `seq` killed by SIGPIPE in the same place.
EXIT_BROKEN_PIPE = 141


def _reader_gone() -> int:
    """The reader of stdout closed it (`| head -1`): end quietly with `EXIT_BROKEN_PIPE`.

    stdout is pointed at /dev/null so that the interpreter's last flush at exit has
    somewhere to go instead of raising a second BrokenPipeError.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(run())
