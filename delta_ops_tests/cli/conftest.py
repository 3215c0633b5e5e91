"""Fixtures of the cli wing's tests, which cover the `delta-ops` command line: its output, its
errors on bad input, adversarial tables, `delta-ops due`, and processes killed mid-operation
(`support/kill_tables.py`). The fixtures every wing shares (`table_copy`, `s3_server`, the
Spark engines) come from the root `conftest.py`; a fixture two modules of this wing need goes
here (none does yet: each module's fixtures are its own)."""
