"""Fixtures of the checkpoint wing's tests, which cover the checkpoint writer (classic, multi-
part, V2 with sidecars, `_last_checkpoint`). Its shared builders are
`support/checkpoint_checks.py`, `support/multipart_tables.py` and `support/typed_stats.py`. The
fixtures every wing shares (`table_copy`, `s3_server`, the Spark engines) come from the root
`conftest.py`; a fixture two modules of this wing need goes here (none does yet: each module's
fixtures are its own)."""
