"""The cyclic garbage collector and the definitions of a large code location.

Building the Dagster definitions of 1,000 tables makes some 250,000 long-lived objects, and
Dagster makes as many again over them (the repository, the jobs, the asset graphs, the
snapshots a code server sends the UI). Each full collection traverses every tracked object,
and a full collection runs each time the objects surviving since the last one reach a
quarter of those it left: during a load, over and over as the heap grows, then several
times more at interpreter exit. At 1,000 tables that was about 1 s of the load and 1-2 s
of the exit.

- `gc_paused`: no collection while the definitions are built (they are all kept: there is
  nothing to collect, as a full collection after the build confirms);
- `keep_for_the_process`: for a code location of `FREEZE_FROM_TABLES` tables or more, the
  objects built so far go to the collector's permanent generation (`gc.freeze`), which no
  collection traverses; so do the survivors of the next `FREEZE_FULL_COLLECTIONS` full
  collections (what Dagster builds over the definitions on start: each collection first
  frees the garbage, then what is left is kept), and everything at interpreter exit.

A frozen object is still freed as soon as its last reference goes; only a reference cycle
among frozen objects that becomes unreachable later is not collected before the process
ends. Exit handlers registered before the one here still run after it.
"""

from __future__ import annotations

import atexit
import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: From this many tables on, a code location's definitions are frozen; below, the
#: collections over them cost little.
FREEZE_FROM_TABLES = 100
#: Full collections after the build whose survivors are frozen too (`dagster definitions
#: validate` of 1,000 tables runs about a dozen after the build: the repository, the jobs,
#: the snapshots).
FREEZE_FULL_COLLECTIONS = 15

_state = {"survivors_to_freeze": 0, "hooked": False}


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off while building many long-lived definitions (it would
    traverse them again and again as they pile up: a third of the build at 1,000 tables),
    back to its previous state afterwards."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def keep_for_the_process() -> None:
    """The definitions just built stay until the process ends (a code server, `dg check
    defs`): freeze every object tracked so far, the survivors of the next
    `FREEZE_FULL_COLLECTIONS` full collections, and everything at exit."""
    gc.freeze()
    _state["survivors_to_freeze"] = FREEZE_FULL_COLLECTIONS
    if not _state["hooked"]:
        gc.callbacks.append(_freeze_survivors)
        atexit.register(gc.freeze)
        _state["hooked"] = True


def _freeze_survivors(phase: str, info: dict[str, Any]) -> None:
    # Called by the collector before and after each collection; it stays registered (a
    # callback removed while the collector walks its list would make it skip the next one)
    # and does nothing once its count is spent.
    if phase == "stop" and info["generation"] == 2 and _state["survivors_to_freeze"] > 0:
        _state["survivors_to_freeze"] -= 1
        gc.freeze()


__all__ = [
    "FREEZE_FROM_TABLES",
    "FREEZE_FULL_COLLECTIONS",
    "gc_paused",
    "keep_for_the_process",
]
