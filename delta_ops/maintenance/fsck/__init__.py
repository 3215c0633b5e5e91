"""fsck: is a table whole, and repair what can be proven lost.

`fsck` (`operation.py`) checks the log (`delta_ops.log.check_log`), the latest `.crc`, the
live data files and deletion vectors of the latest version against one listing
(`data_files.py`; Parquet footers with `verify_data`) and unreferenced data files (VACUUM's
dry-run plan, `leftovers.py`); each `Problem` has a severity, `error` (missing or corrupt
data, a broken log) or `warning` (leftovers). With `repair=True, confirm=True` it commits
`remove` actions for the live files that are missing or whose deletion vector is missing or
corrupt (`repair.py`), after proving each one again directly. `delta-ops fsck` is its CLI.

`check_files_exist` (`existence.py`) is the older, narrower check: only the data files of
the latest version (`delta-ops fsck --check-files`).

    >>> from delta_ops.maintenance.fsck import fsck
    >>> fsck(storage).errors
"""

from delta_ops.maintenance.fsck.existence import ExistenceResult, check_files_exist
from delta_ops.maintenance.fsck.operation import fsck
from delta_ops.maintenance.fsck.problems import (
    ERROR,
    WARNING,
    FsckResult,
    Problem,
    RepairEntry,
    RepairResult,
)

__all__ = [
    "ERROR",
    "WARNING",
    "ExistenceResult",
    "FsckResult",
    "Problem",
    "RepairEntry",
    "RepairResult",
    "check_files_exist",
    "fsck",
]
