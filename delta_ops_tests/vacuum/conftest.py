"""Fixtures of the vacuum wing's tests, which cover VACUUM: the plan and its proofs, partitioned
and in-memory paths, awkward paths, staged commits and aliases, sources, LITE and the history
record (`support/vacuum_checks.py`, `support/vacuum_tables.py`, `support/awkward_paths.py`,
`support/staged_tables.py`). The fixtures every wing shares (`table_copy`, `s3_server`, the
Spark engines) come from the root `conftest.py`; a fixture two modules of this wing need goes
here (none does yet: each module's fixtures are its own)."""
