"""The layout wing: maintenance of a table's data files (OPTIMIZE, PURGE, statistics).

Spec sections: "Add File and Remove File", "Deletion Vectors", "Column Mapping", "Row
Tracking", "Change Data Feed", "Per-file Statistics", "Commit Provenance Information".

Each operation is plan (pure, from the snapshot) -> rewrite (an Engine job per bin) ->
commit (`delta_ops.commit.Transaction`). Modules:

- `plan`: which files are rewritten, in which bins (pure).
- `rewrite`: one bin streamed row group by row group into new files (`rewrite_bin`, an
  Engine task); `in_place`: a new file written under its final name on a local table
  (the name claimed, the writeback started early, fsynced before it is reported).
- `commit`: the feature gate, and the batch commits (`dataChange=false`, Spark's
  commitInfo, the isolation rules).
- `run`: one run of OPTIMIZE or PURGE, batch by batch, and its `LayoutResult`.
- `optimize`, `purge`: the operations' modules. The functions are
  `delta_ops.optimize` and `delta_ops.purge` (here they would share a name with their
  module, and a submodule's import replaces a package attribute of its name).
- `statistics`, `file_stats` and `stats`: per-file statistics from
  data (`StatsCollector`, used by `rewrite` for the new files) and the statistics
  operation (`compute_stats`, see docs/layout_stats.md).

Names load lazily (PEP 562), so importing the package loads no pyarrow.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "OptimizeResult": "delta_ops.layout.optimize",
    "PurgeResult": "delta_ops.layout.purge",
    "LayoutResult": "delta_ops.layout.run",
    "LayoutPlan": "delta_ops.layout.plan",
    "InvalidPredicateError": "delta_ops.layout.plan",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'delta_ops.layout' has no attribute {name!r}")
