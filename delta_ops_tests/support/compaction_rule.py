"""A wrong reading rule for log compaction files, injected by tests through `monkeypatch`.

The product has one rule (`delta_ops.log.replay._reverses`): inside a compaction file the
first line for a key wins, so its lines are read reversed. Tests that prove a wrong rule
cannot reach a published file unseen swap in the old, wrong reading (lines as written, the
last line for a key wins) for every reader of the log, columnar and action by action.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import pytest

import delta_ops.log
from delta_ops.log import replay

#: The product's rule, kept to put it back.
_RIGHT = replay._reverses


def _last_line_wins(is_compaction: bool) -> bool:
    """The wrong rule: no delta's lines are reversed."""
    return False


def _homes() -> list:
    """Every delta_ops module that holds the rule under its name (`replay` and the modules
    that import it by name). All of `delta_ops.log` is imported first, so no module binds
    the wrong rule for good by being imported while it is in place."""
    for info in pkgutil.walk_packages(delta_ops.log.__path__, "delta_ops.log."):
        importlib.import_module(info.name)
    return [
        m for name, m in list(sys.modules.items())
        if name.startswith("delta_ops.") and getattr(m, "_reverses", None) in (_RIGHT,
                                                                              _last_line_wins)
    ]


def last_line_wins(monkeypatch: pytest.MonkeyPatch, on: bool = True) -> None:
    """Read compaction files with the wrong rule (`on`) or the right one again, until the
    test ends (`monkeypatch` undoes it)."""
    rule = _last_line_wins if on else _RIGHT
    for module in _homes():
        monkeypatch.setattr(module, "_reverses", rule)
