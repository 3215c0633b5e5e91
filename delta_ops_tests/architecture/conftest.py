"""Fixtures of the architecture wing's tests, which cover the house's shape (layers, imports,
module and test-file sizes, the corpus), the cost of starting `delta_ops`, the built wheel, and
`make demo`. The fixtures every wing shares (`table_copy`, `s3_server`, the Spark engines) come
from the root `conftest.py`; a fixture two modules of this wing need goes here (none does yet:
each module's fixtures are its own)."""
