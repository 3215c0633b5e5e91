"""Fixtures of the row-tracking wing's tests, which cover the row-tracking backfill, loaded and
streamed, and its protocol-upgrade confirmation (`support/row_tracking_checks.py`). The
fixtures every wing shares (`table_copy`, `s3_server`, the Spark engines) come from the root
`conftest.py`; a fixture two modules of this wing need goes here (none does yet: each module's
fixtures are its own)."""
