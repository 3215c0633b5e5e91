"""A wrong reading rule for log compaction files, injected by tests through `monkeypatch`.

The product has one rule (`_reverses` in the log's replay module): inside a compaction file
the first line for a key wins, so its lines are read reversed. Tests that prove a wrong
rule cannot reach a published file unseen swap in the old, wrong reading (lines as written,
the last line for a key wins) for every reader of the log, columnar and action by action.
The rule is found by name among the modules of `delta_ops.log`, wherever it lives.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Callable
from functools import cache
from types import ModuleType

import pytest

import delta_ops.log

RULE = "_reverses"


def _last_line_wins(is_compaction: bool) -> bool:
    """The wrong rule: no delta's lines are reversed."""
    return False


@cache
def _right() -> Callable[[bool], bool]:
    """The product's rule. Every module of `delta_ops.log` is imported first, so no module
    binds the wrong rule for good by being imported while it is in place."""
    for info in pkgutil.walk_packages(delta_ops.log.__path__, "delta_ops.log."):
        importlib.import_module(info.name)
    homes = [
        fn for name, m in list(sys.modules.items())
        if name.startswith("delta_ops.log")
        and getattr(fn := getattr(m, RULE, None), "__module__", None) == name
    ]
    assert len(homes) == 1, f"expected one {RULE} in delta_ops.log, found {len(homes)}"
    return homes[0]


def _homes() -> list[ModuleType]:
    """Every delta_ops module holding the rule under its name (its own module and those that
    import it by name)."""
    right = _right()
    return [
        m for name, m in list(sys.modules.items())
        if name.startswith("delta_ops.") and getattr(m, RULE, None) in (right, _last_line_wins)
    ]


def last_line_wins(monkeypatch: pytest.MonkeyPatch, on: bool = True) -> None:
    """Read compaction files with the wrong rule (`on`) or the right one again, until the
    test ends (`monkeypatch` undoes it)."""
    rule = _last_line_wins if on else _right()
    for module in _homes():
        monkeypatch.setattr(module, RULE, rule)
