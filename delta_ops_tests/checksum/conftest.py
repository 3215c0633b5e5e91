"""Fixtures of the checksum wing's tests, which cover the version-checksum (`.crc`) writer and
verifier. Its generated histories are `support/checksum_histories.py`. The fixtures every wing
shares (`table_copy`, `s3_server`, the Spark engines) come from the root `conftest.py`; this
wing's own fixtures are here."""
