"""Whole-number argument types of the command line (`positive_int`, `version_number`),
shared by `commands.common` and `commands.engine_args` (which `common` imports, so they
live apart from both)."""

from __future__ import annotations

import argparse

#: The largest table version: versions are Delta `long`s.
MAX_VERSION = 2**63 - 1


def _whole(text: str, *, what: str, least: int, most: int | None = None,
           unit: str = "") -> int:
    """`text` as a whole number from `least` to `most` (argparse's error otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{unit or 'must be'} at least {least}, got {value}")
    if most is not None and value > most:
        raise argparse.ArgumentTypeError(
            f"{unit or 'must be'} at most {most} (a Delta long), got {value}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    return _whole(text, what="an integer", least=1)


def version_number(text: str) -> int:
    """An argparse type: a table version (a whole number from 0 to 2**63 - 1)."""
    return _whole(text, what="a version number", least=0, most=MAX_VERSION,
                  unit="a version is")


__all__ = ["MAX_VERSION", "positive_int", "version_number"]
