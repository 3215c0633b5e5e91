"""Arguments and helpers shared by the subcommands."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from delta_ops.table import DeltaTable


def parse_option_pairs(pairs: Sequence[str] | None, *, flag: str) -> dict[str, str]:
    """`KEY=VALUE` arguments of a repeatable flag as a dict.

    Raises:
        argparse.ArgumentTypeError: an argument without `=` or with an empty key. The
            message names the flag and which occurrence, never the text given: a value
            may be a secret, and a mistyped separator (`secret:VALUE`) leaves it anywhere.
    """
    out: dict[str, str] = {}
    for i, pair in enumerate(pairs or (), 1):
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(
                f"{flag} takes KEY=VALUE (the key, '=', then the value): occurrence {i} of "
                f"{flag} has {'no' if not sep else 'an empty key before the'} '=' "
                "(its text is not shown: it may hold a secret)"
            )
        out[key] = value
    return out


def parse_storage_options(pairs: Sequence[str] | None) -> dict[str, str]:
    """`--storage-option KEY=VALUE` arguments as a dict (see `parse_option_pairs`)."""
    return parse_option_pairs(pairs, flag="--storage-option")


def parse_timestamp(text: str) -> datetime:
    try:
        ts = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 timestamp: {text!r}") from exc
    return ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)


def add_table_arguments(p: argparse.ArgumentParser, *, engine: bool = False) -> None:
    """TABLE, --json and --storage-option, which every subcommand takes; with `engine`,
    also --engine/--spark-master/--spark-remote/--spark-conf (the CLI then builds the
    Engine before the handler runs and closes it afterwards, as `args.engine`)."""
    p.add_argument("table", metavar="TABLE", help="table root: path, file://, s3://, memory://")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--storage-option",
        action="append",
        metavar="KEY=VALUE",
        help="fsspec storage option (repeatable), e.g. endpoint_url=http://127.0.0.1:9000",
    )
    if engine:
        from delta_ops.commands.engine_args import add_engine_arguments

        add_engine_arguments(p)
        p.set_defaults(uses_engine=True)


def open_table(args: argparse.Namespace) -> DeltaTable:
    from delta_ops.table import DeltaTable  # the handler's import, not the parser's

    return DeltaTable(args.table, storage_options=parse_storage_options(args.storage_option))
