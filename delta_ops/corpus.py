"""Where the Delta test-table corpus lives, for the demo and the tests alike.

The corpus (`../shared/corpus/README.md` indexes it) sits beside the checkout. This module
finds it from `$DELTA_OPS_CORPUS`, else `../shared/corpus` beside this checkout, else beside
the checkout this one was made from: a `git clone` of a local path (its `origin`, read from
`.git/config`), or a `git worktree` (its main checkout). Standard library only, imports no
other module of delta_ops, so tests use it without importing the demo. Protocol sections:
none (test data only).
"""

from __future__ import annotations

import configparser
import os
from pathlib import Path

__all__ = ["CORPUS_ENV", "REPO_ROOT", "corpus_root"]

#: Environment variable naming the corpus directory; wins over every other candidate.
CORPUS_ENV = "DELTA_OPS_CORPUS"
#: The checkout holding this package.
REPO_ROOT = Path(__file__).resolve().parents[1]


def corpus_root(checkout: Path | None = None) -> Path:
    """The Delta table corpus directory.

    Args:
        checkout: The checkout to look beside (default: the one holding this package).

    Returns:
        `$DELTA_OPS_CORPUS` when set; else the first existing of `shared/corpus` beside
        `checkout`, beside the checkout it was made from (a local clone's origin, a
        worktree's main checkout); else the first candidate (so a message can name it).
    """
    env = os.environ.get(CORPUS_ENV)
    if env:
        return Path(env)
    checkout = (checkout or REPO_ROOT).resolve()
    candidates = [checkout.parent / "shared" / "corpus"]
    for source in _source_checkouts(checkout):
        candidate = source.parent / "shared" / "corpus"
        if candidate not in candidates:
            candidates.append(candidate)
    return next((c for c in candidates if c.is_dir()), candidates[0])


def _source_checkouts(checkout: Path) -> list[Path]:
    """The checkouts `checkout` was made from: a worktree's main checkout, and the local
    directory its `origin` remote points to (a clone of a local path)."""
    git_dir = _git_dir(checkout)
    if git_dir is None:
        return []
    sources = []
    if git_dir.parent != checkout:  # a worktree: the main checkout holds the common .git
        sources.append(git_dir.parent)
    origin = _local_origin(git_dir / "config")
    if origin is not None:
        sources.append(origin)
    return sources


def _git_dir(checkout: Path) -> Path | None:
    """The repository directory shared by `checkout`: its `.git` directory, or for a
    worktree (whose `.git` is a file `gitdir: ...`) the common directory it names."""
    dot_git = checkout / ".git"
    if dot_git.is_dir():
        return dot_git
    try:
        text = dot_git.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    if not text.startswith("gitdir:"):
        return None
    worktree_git = (checkout / text[len("gitdir:") :].strip()).resolve()
    try:
        common = (worktree_git / "commondir").read_text(encoding="utf-8").strip()
    except OSError:
        return worktree_git
    return (worktree_git / common).resolve()


def _local_origin(config_path: Path) -> Path | None:
    """The directory `origin` points to when the repository was cloned from a local path."""
    config = configparser.ConfigParser(strict=False, interpolation=None)
    try:
        config.read(config_path, encoding="utf-8")
        url = config.get('remote "origin"', "url", fallback="")
    except configparser.Error:
        return None
    if url.startswith("file://"):
        url = url[len("file://") :]
    path = Path(url)
    return path.resolve() if path.is_absolute() and path.is_dir() else None
