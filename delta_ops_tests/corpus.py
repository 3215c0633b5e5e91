"""The test corpus: where it lives (`delta_ops.corpus.corpus_root`, never the demo) and
its tables by name; `conftest.py` re-exports these for the tests that import them there."""

from __future__ import annotations

import shutil
from pathlib import Path

from delta_ops.corpus import corpus_root

__all__ = ["CORPUS", "REPO_ROOT", "all_corpus_tables", "copy_corpus_table", "corpus_path"]

REPO_ROOT = Path(__file__).resolve().parents[1]
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
