"""`--max-requests`: the command line sets how many object-store requests the local engine
keeps in flight, refuses it for Spark and for values under 1, and a run under the tightest
limit plans exactly what the default plans."""

from __future__ import annotations

import argparse
import json

import pytest

from delta_ops.cli import main
from delta_ops.commands.engine_args import add_engine_arguments, engine_from_args
from delta_ops.engine.session import make_engine


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_engine_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_flag_sets_the_local_engines_request_limit():
    engine = engine_from_args(_parse("--max-requests", "3"))
    assert engine.name == "local"
    assert engine.policy.concurrency == 3
    assert engine_from_args(_parse()).policy.concurrency == 64


@pytest.mark.parametrize("value", ["0", "-2", "many"])
def test_the_flag_refuses_what_is_not_a_positive_whole_number(value, capsys):
    with pytest.raises(SystemExit):
        _parse("--max-requests", value)
    assert "--max-requests" in capsys.readouterr().err


def test_the_flag_is_refused_for_spark():
    with pytest.raises(argparse.ArgumentTypeError, match="local engine"):
        engine_from_args(_parse("--engine", "spark", "--max-requests", "4"))
    with pytest.raises(ValueError, match="max_requests only applies to the local engine"):
        make_engine("spark", max_requests=4)


def test_a_dry_run_under_one_request_at_a_time_plans_what_the_default_plans(table_copy,
                                                                            capsys):
    root = table_copy("basic_append")
    (root / "part-orphan.parquet").write_bytes(b"x")
    plans = []
    for extra in ([], ["--max-requests", "1"]):
        code = main(["vacuum", str(root), "--dry-run", "--retention-hours", "0",
                     "--force-retention", "--json", *extra])
        out, err = capsys.readouterr()
        assert code == 0, err
        plans.append(json.loads(out))
    assert plans[0] == plans[1]
    assert plans[0]["files"] == ["part-orphan.parquet"] and plans[0]["dry_run"] is True
