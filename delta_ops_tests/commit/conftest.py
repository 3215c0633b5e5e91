"""Fixtures of the commit wing's tests, which cover optimistic commits: protocol upgrades, row
IDs, conflicts, retries, in-commit timestamps (`support/histories.py` builds the tables). The
fixtures every wing shares (`table_copy`, `s3_server`, the Spark engines) come from the root
`conftest.py`; a fixture two modules of this wing need goes here (none does yet: each module's
fixtures are its own)."""
