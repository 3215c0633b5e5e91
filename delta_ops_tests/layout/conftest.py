"""Fixtures of the layout wing's tests (optimize, purge, statistics). The fixtures every wing
shares (`table_copy`, `s3_server`, the Spark engines) come from the root `conftest.py`."""
