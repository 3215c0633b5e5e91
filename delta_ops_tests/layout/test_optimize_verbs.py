"""The public face of the layout operations: `delta_ops.optimize` / `delta_ops.purge`, their
Results, and the `DeltaTable.optimize` / `DeltaTable.purge` verbs, which take the same
keyword arguments (with the same defaults: dry runs) and give the same Result."""

from __future__ import annotations

import inspect
import json

import pytest

import delta_ops
from delta_ops.layout.optimize import optimize
from delta_ops.layout.purge import purge
from delta_ops.storage import Storage
from delta_ops_tests.support.layout_tables import LayoutSpec, build_layout_table

SPEC = LayoutSpec(partitioned=True, row_tracking=True,
                  appends=(((3, 0), (4, 0), (5, 1), (2, 1)),), deletes=((0, (0,)),))
FUNCTIONS = {"optimize": optimize, "purge": purge}


def _shape(params) -> list[tuple]:
    return [(p.name, p.kind, p.default, p.annotation) for p in params]


@pytest.mark.parametrize("verb", sorted(FUNCTIONS))
def test_the_verb_takes_the_arguments_of_its_operation_and_defaults_to_a_dry_run(verb):
    method = list(inspect.signature(getattr(delta_ops.DeltaTable, verb)).parameters.values())
    function = list(inspect.signature(FUNCTIONS[verb]).parameters.values())
    assert function[0].annotation == "TableLike"
    assert _shape(method[1:]) == _shape(p for p in function[1:] if p.name != "storage_options")
    assert inspect.signature(getattr(delta_ops, verb)).parameters["dry_run"].default is True
    assert getattr(delta_ops, verb) is FUNCTIONS[verb]
    assert {"OptimizeResult", "PurgeResult", "InvalidPredicateError", "RewriteError"} <= set(
        delta_ops.__all__)


@pytest.mark.parametrize("verb", sorted(FUNCTIONS))
@pytest.mark.parametrize("dry_run", [True, False])
def test_the_verb_gives_the_result_of_its_operation(tmp_path, verb, dry_run):
    roots = []
    for side in ("a", "b"):
        root = tmp_path / side
        root.mkdir()
        build_layout_table(Storage.of(str(root)), SPEC)
        roots.append(root)
    got = getattr(delta_ops.DeltaTable(str(roots[0])), verb)(dry_run=dry_run, clock=lambda: 5)
    want = FUNCTIONS[verb](str(roots[1]), dry_run=dry_run, clock=lambda: 5)
    assert type(got) is type(want)
    a, b = got.to_dict(), want.to_dict()
    for d in (a, b):
        d.pop("seconds")
        d["table"] = "<root>"
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert a["dry_run"] is dry_run and (a["versions"] == []) is dry_run
