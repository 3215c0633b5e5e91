"""The command line's engine flags: `--engine`, `--spark-master`, `--spark-remote`,
`--spark-conf`, `--max-requests`, and the engine they ask for (built by
`delta_ops.engine.session.make_engine`, no session started).

Kept out of `delta_ops.engine` so the engine layer knows nothing of argparse. Protocol
sections: none (command line only).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from delta_ops.commands.argtypes import positive_int
from delta_ops.engine.config import DEFAULT_MASTER, master_problem
from delta_ops.engine.session import ENGINE_NAMES, make_engine

if TYPE_CHECKING:
    from delta_ops.engine.base import Engine

__all__ = ["add_engine_arguments", "engine_from_args"]


def _parse_conf(pairs: Sequence[str] | None) -> dict[str, str]:
    """`--spark-conf KEY=VALUE` arguments; a malformed one is named by its position, never
    by its text (a value may be a secret)."""
    out: dict[str, str] = {}
    for i, pair in enumerate(pairs or (), 1):
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(
                f"--spark-conf takes KEY=VALUE (the key, '=', then the value): occurrence {i} "
                f"of --spark-conf has {'no' if not sep else 'an empty key before the'} '=' "
                "(its text is not shown: it may hold a secret)"
            )
        out[key] = value
    return out


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """Add `--engine`, `--spark-master`, `--spark-remote`, `--spark-conf` and
    `--max-requests` to a subcommand.

    Args:
        parser: The subcommand's parser.
    """
    group = parser.add_argument_group("execution engine")
    group.add_argument(
        "--engine",
        choices=ENGINE_NAMES,
        default=None,
        help="where heavy work runs: local threads (default) or Spark; "
        "--spark-master, --spark-remote and --spark-conf imply spark",
    )
    group.add_argument(
        "--spark-master",
        metavar="URL",
        help=f"Spark master (default {DEFAULT_MASTER}), e.g. spark://host:7077",
    )
    group.add_argument(
        "--spark-remote", metavar="sc://HOST:PORT", help="Spark Connect server to use"
    )
    group.add_argument(
        "--spark-conf",
        action="append",
        metavar="KEY=VALUE",
        help="extra Spark configuration (repeatable)",
    )
    group.add_argument(
        "--max-requests",
        type=positive_int,
        metavar="N",
        help="local engine: most object-store requests (listing pages, DeleteObjects "
        "batches) in flight at once (default 64); halved automatically on SlowDown",
    )


def engine_from_args(args: argparse.Namespace) -> Engine:
    """The engine the parsed `add_engine_arguments` flags ask for (no session started).

    Args:
        args: Parsed arguments.

    Returns:
        The engine; the caller closes it.

    Raises:
        argparse.ArgumentTypeError: Contradictory or malformed flags.
    """
    master = getattr(args, "spark_master", None)
    remote = getattr(args, "spark_remote", None)
    conf = _parse_conf(getattr(args, "spark_conf", None))
    name = getattr(args, "engine", None)
    max_requests = getattr(args, "max_requests", None)
    spark_flags = [
        flag
        for flag, value in (
            ("--spark-master", master),
            ("--spark-remote", remote),
            ("--spark-conf", conf),
        )
        if value
    ]
    if name is None:
        name = "spark" if spark_flags else "local"
    if name == "spark" and max_requests is not None:
        raise argparse.ArgumentTypeError(
            "--max-requests applies to the local engine (on Spark, the executors' tasks "
            "list and delete; size them with --spark-conf)"
        )
    if name == "local" and spark_flags:
        raise argparse.ArgumentTypeError(
            f"{' and '.join(spark_flags)} {'needs' if len(spark_flags) == 1 else 'need'} "
            "--engine spark (got --engine local)"
        )
    if master and remote:
        raise argparse.ArgumentTypeError("give --spark-master or --spark-remote, not both")
    problem = master_problem(master) if master else None
    if problem is not None:
        raise argparse.ArgumentTypeError(f"--spark-master {problem}")
    try:
        return make_engine(
            name, spark_master=master, spark_remote=remote, spark_conf=conf,
            max_requests=max_requests,
        )
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
