"""`delta-ops`: the command line.

Every subcommand prints human-readable text, or one JSON object with `--json`. Errors
exit non-zero with one line on stderr that names the table, version and file; never a
traceback. Subcommands live in `delta_ops.commands`, one module each.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

import orjson

from delta_ops import __version__
from delta_ops.commands import COMMAND_MODULES
from delta_ops.engine.session import engine_from_args
from delta_ops.errors import DeltaOpsError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="delta-ops",
        description="Delta Lake table maintenance: inspect, checkpoint, clean up, vacuum, "
        "checksum, compact and backfill row tracking.",
    )
    parser.add_argument(
        "-V", "--version-info", action="version", version=f"delta-ops {__version__}"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"delta_ops.commands.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    engine = None
    try:
        if getattr(args, "uses_engine", False):
            # Built here (a Spark session starts only on first use) and closed below.
            engine = args.engine = engine_from_args(args)
        obj, text, code = args.handler(args)
    except DeltaOpsError as exc:
        print(f"delta-ops {args.command}: {exc}", file=sys.stderr)
        return 1
    except (argparse.ArgumentTypeError, ValueError) as exc:
        print(f"delta-ops {args.command}: {exc}", file=sys.stderr)
        return 2
    finally:
        if engine is not None:
            engine.close()
    if args.json:
        sys.stdout.write(orjson.dumps(obj, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(text)
    return code


if __name__ == "__main__":
    sys.exit(main())
