"""fsck: is a table whole? Checks that compare what the log references with what storage
holds (spec "Add File and Remove File": every live `add` names a data file that must exist).

Today one check: `check_files_exist` (`existence.py`), the data files of the latest version
against a listing made on the engine. `delta-ops fsck --check-files` and the Dagster check
`files_exist` both call it.

    >>> from delta_ops.maintenance.fsck import check_files_exist
    >>> check_files_exist(storage, engine=engine).missing
"""

from delta_ops.maintenance.fsck.existence import ExistenceResult, check_files_exist

__all__ = ["ExistenceResult", "check_files_exist"]
