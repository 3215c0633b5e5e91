"""`make demo`: inspect a few corpus tables and print their state.

Reads tables from the shared corpus in place (read-only). Pass table roots as arguments to
inspect your own tables instead: `python -m delta_ops.demo PATH [PATH ...]`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from delta_ops.errors import DeltaOpsError
from delta_ops.table import DeltaTable

DEMO_TABLES = (
    "dat/basic_partitioned/delta",
    "dat/deletion_vectors/delta",
    "delta/kernel-defaults__basic-dv-with-checkpoint",
    "delta/golden__v2-checkpoint-parquet",
    "delta/golden__multi-part-checkpoint",
    "delta/kernel-benchmarks__basic_catalog_managed/delta",
)


def corpus_root() -> Path:
    env = os.environ.get("DELTA_OPS_CORPUS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "shared" / "corpus"


def describe(uri: str) -> str:
    try:
        snap = DeltaTable(uri).snapshot()
    except DeltaOpsError as exc:
        return f"{uri}\n  refused: {exc}"
    unsupported = snap.unsupported_features("checkpoint")
    blocked = sorted(set(unsupported["read"]) | set(unsupported["write"]))
    return "\n".join(
        [
            f"{uri}",
            f"  version {snap.version}, checkpoint {snap.checkpoint_version}, "
            f"protocol r{snap.protocol['minReaderVersion']}/w{snap.protocol['minWriterVersion']}",
            f"  {snap.num_files} live files, {snap.size_bytes} bytes, "
            f"{snap.tombstones.num_rows} tombstones, partitions {snap.partition_columns or '-'}",
            f"  features {sorted(snap.reader_features | snap.writer_features) or '-'}",
            f"  maintainable: {'no, unsupported ' + ', '.join(blocked) if blocked else 'yes'}",
        ]
    )


def main(argv: list[str]) -> int:
    uris = argv or [str(corpus_root() / t) for t in DEMO_TABLES]
    for uri in uris:
        print(describe(uri))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
