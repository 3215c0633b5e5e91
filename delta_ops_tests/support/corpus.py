"""The test corpus: where it lives and its tables by name. The tests import these from here;
the root `conftest.py` builds its fixtures on them.

The corpus is test data inside the repository, `delta_ops_tests/data/corpus/` (its README
indexes the tables and names their origin and licenses), so a clone needs nothing beside it.
`$DELTA_OPS_CORPUS` points the tests at another corpus (e.g. a held-out one). Standard
library only: the benchmarks use it too. Protocol sections: none (test data only).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = [
    "CORPUS",
    "CORPUS_ENV",
    "IN_REPO_CORPUS",
    "REPO_ROOT",
    "SPEC_DIR",
    "all_corpus_tables",
    "copy_corpus_table",
    "corpus_path",
    "corpus_root",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
#: The tests' data folder, `delta_ops_tests/data`.
DATA_DIR = REPO_ROOT / "delta_ops_tests" / "data"
#: The corpus committed with the tests.
IN_REPO_CORPUS = DATA_DIR / "corpus"
#: The Delta protocol specification the tests check the feature table against
#: (`PROTOCOL.txt`, the text the project started from, and `PROTOCOL-current.md`).
SPEC_DIR = DATA_DIR / "spec"
#: Environment variable naming another corpus directory; wins over the in-repo one.
CORPUS_ENV = "DELTA_OPS_CORPUS"


def corpus_root() -> Path:
    """`$DELTA_OPS_CORPUS` when set, else the in-repo corpus `delta_ops_tests/data/corpus`."""
    env = os.environ.get(CORPUS_ENV)
    return Path(env) if env else IN_REPO_CORPUS


CORPUS = corpus_root().resolve()


def corpus_path(name: str) -> Path:
    """Path of a corpus table root: `golden__checkpoint`, `spark__delta-0.1.0`,
    `kernel-benchmarks__basic_append/delta`, or a DAT table name like `basic_append`."""
    for candidate in (CORPUS / "delta" / name, CORPUS / "dat" / name / "delta"):
        if (candidate / "_delta_log").is_dir():
            return candidate
    raise LookupError(f"no corpus table named {name!r} under {CORPUS}")


def all_corpus_tables() -> list[str]:
    """Every table root in the corpus, as names accepted by `corpus_path`."""
    names: list[str] = []
    for entry in sorted((CORPUS / "delta").iterdir()):
        if (entry / "_delta_log").is_dir():
            names.append(entry.name)
        elif (entry / "delta" / "_delta_log").is_dir():
            names.append(f"{entry.name}/delta")
    for entry in sorted((CORPUS / "dat").iterdir()):
        if (entry / "delta" / "_delta_log").is_dir():
            names.append(entry.name)
    return names


def copy_corpus_table(name: str, dest: Path) -> Path:
    """Copy a corpus table to `dest` (which must not exist) and return the copy's root."""
    shutil.copytree(corpus_path(name), dest, symlinks=False)
    return dest
