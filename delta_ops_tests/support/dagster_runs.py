"""Helpers of the Dagster tests: a registry file written from a dict, files aged, a table's data
files, and the plain metadata of an event."""

from __future__ import annotations

import os
import time
from pathlib import Path

import yaml


def write_registry(directory: Path, data: dict) -> Path:
    path = directory / "tables.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def age_files(root: Path, seconds_ago: float, *, log: bool = False) -> None:
    """Set modification times `seconds_ago` back: data files, or (log=True) commit files."""
    when = time.time() - seconds_ago
    for path in root.rglob("*"):
        if not path.is_file():
            continue
        in_log = "_delta_log" in path.parts
        if (log and in_log and path.name.endswith(".json")) or (not log and not in_log):
            os.utime(path, (when, when))


def data_files(root: Path, *, side_files: bool = True) -> set[str]:
    """Files outside `_delta_log`; `side_files=False` leaves out Hadoop `.x.crc` files."""
    return {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and "_delta_log" not in p.parts
        and (side_files or not p.name.startswith("."))
    }


def md(event) -> dict:
    """Plain metadata of a materialization/observation event."""
    data = event.event_specific_data
    mat = getattr(data, "materialization", None) or getattr(data, "asset_observation", None)
    return {k: getattr(v, "value", v) for k, v in mat.metadata.items()}
