"""Fixtures of the cleanup wing's tests, which cover metadata (log) cleanup. Its raw histories are
`support/raw_histories.py`; multi-part checkpoint tables `support/multipart_tables.py`. The
fixtures every wing shares (`table_copy`, `s3_server`, the Spark engines) come from the root
`conftest.py`; a fixture two modules of this wing need goes here (none does yet: each module's
fixtures are its own)."""
