"""Fixtures of the engine wing's tests, which cover the engines: Spark gives the local engine's
results (`support/engine_pairs.py`), Spark deployments, streamed paths on Spark, scratch
directories. The fixtures every wing shares (`table_copy`, `s3_server`, the Spark engines) come
from the root `conftest.py`; a fixture two modules of this wing need goes here (none does yet:
each module's fixtures are its own)."""
