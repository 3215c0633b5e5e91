"""Fixtures of the log wing's tests, which cover reading a table's log: files, segments, light and
full replays, references, streamed and rebuilt states, snapshots of every corpus table against
the independent oracle (`support/oracle.py`, `support/replay_histories.py`). The fixtures every
wing shares (`table_copy`, `s3_server`, the Spark engines) come from the root `conftest.py`; a
fixture two modules of this wing need goes here (none does yet: each module's fixtures are its
own)."""
