"""Fixtures of the protocol wing's tests, which cover the pure protocol code: table features,
properties, schema, deletion vectors, path identity. The fixtures every wing shares
(`table_copy`, `s3_server`, the Spark engines) come from the root `conftest.py`; this wing's
own fixtures are here."""
