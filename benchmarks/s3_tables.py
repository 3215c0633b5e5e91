"""Tables for the object-store benchmark (issue 24), generated once under
benchmarks/data/s3/<name>/: the Delta log as local files, and `keys.txt`, the data files
(every file ever added, plus unreferenced ones) that exist in the store as empty objects.
`moto_store` loads both into a moto server.

Every timestamp is `T0` (November 2023): files, commits and tombstones are all older than
any retention, so VACUUM with the default retention (7 days) deletes every removed and
every unreferenced file, in both tools.

- `small(adds, commits, removed)`: unpartitioned; commits 1..k add the files, the last
  commits remove `removed` of them (the issue's 100 commits / 20,000 adds / 4,000 removed
  and 50 commits / 10,000 adds / 1,960 removed). JSON commits only.
- `large(files, partitioned)`: `files` live files, unpartitioned or in two partition
  levels (50 x 50), plus 10% unreferenced files (never committed); 100 commits, then a
  classic checkpoint at the last version (written by delta_ops, read by deltalake too).
- `long_log(commits)`: one add per commit, a checkpoint 10 commits before the end.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from benchmarks.datasets import DATA, PROTOCOL, T0

ROOT = DATA / "s3"
_SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "p", "type": "string", "nullable": True, "metadata": {}},
    {"name": "q", "type": "string", "nullable": True, "metadata": {}},
]})
_TAIL = "-4f1c-9a2b-7d3e5c6b8a90-c000.snappy.parquet"


def _metadata(partitioned: bool) -> dict:
    return {"metaData": {
        "id": "00000000-0000-0000-0000-0000000s3bench",
        "format": {"provider": "parquet", "options": {}},
        "schemaString": _SCHEMA,
        "partitionColumns": ["p", "q"] if partitioned else [],
        "configuration": {}, "createdTime": T0,
    }}


def _path(i: int, partitioned: bool, stem: str = "part") -> str:
    name = f"{stem}-{i:08d}{_TAIL}"
    if not partitioned:
        return name
    return f"p={i % 50}/q={(i // 50) % 50}/{name}"


def _pv(i: int, partitioned: bool) -> dict:
    return {"p": str(i % 50), "q": str((i // 50) % 50)} if partitioned else {}


def _add(i: int, partitioned: bool, version: int) -> str:
    return json.dumps({"add": {
        "path": _path(i, partitioned), "partitionValues": _pv(i, partitioned),
        "size": 1000, "modificationTime": T0 + version, "dataChange": True,
    }}, separators=(",", ":"))


def _remove(i: int, partitioned: bool, version: int) -> str:
    return json.dumps({"remove": {
        "path": _path(i, partitioned), "partitionValues": _pv(i, partitioned),
        "size": 1000, "deletionTimestamp": T0 + version, "dataChange": True,
        "extendedFileMetadata": True,
    }}, separators=(",", ":"))


def _info(version: int) -> str:
    return json.dumps({"commitInfo": {"timestamp": T0 + version, "operation": "WRITE"}})


def _write(
    root: Path, commits: list[list[str]], keys: list[str], checkpoint: int | None = None
) -> None:
    """The log, `keys.txt` and the checkpoint in a temporary directory, then renamed."""
    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    log = tmp / "_delta_log"
    log.mkdir(parents=True)
    for version, lines in enumerate(commits):
        (log / f"{version:020d}.json").write_text("\n".join([*lines, _info(version)]) + "\n")
    (tmp / "keys.txt").write_text("\n".join(keys) + "\n")
    if checkpoint is not None:
        _checkpoint(tmp, checkpoint)
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)


def _checkpoint(root: Path, version: int) -> None:
    from delta_ops.maintenance.checkpoint.writer import write_checkpoint

    write_checkpoint(str(root), version=version)


def small(adds: int, commits: int, removed: int) -> Path:
    """The issue's measured shapes (see the module)."""
    root = ROOT / f"small-{adds}-{commits}-{removed}"
    if (root / "keys.txt").exists():
        return root
    head = [json.dumps({"protocol": PROTOCOL}), json.dumps(_metadata(False))]
    remove_commits = max(1, commits // 5)
    add_commits = commits - remove_commits
    per_add = -(-adds // add_commits)
    log: list[list[str]] = [head]
    for c in range(add_commits):
        v = len(log)
        log.append([_add(i, False, v) for i in range(c * per_add, min(adds, (c + 1) * per_add))])
    per_remove = -(-removed // remove_commits)
    for c in range(remove_commits):
        v = len(log)
        start = c * per_remove
        log.append([_remove(i, False, v) for i in range(start, min(removed, start + per_remove))])
    _write(root, log, [_path(i, False) for i in range(adds)])
    return root


def large(files: int, partitioned: bool) -> Path:
    """`files` live files and 10% unreferenced ones (see the module)."""
    root = ROOT / f"large-{files}-{'part' if partitioned else 'flat'}"
    if (root / "keys.txt").exists():
        return root
    head = [json.dumps({"protocol": PROTOCOL}), json.dumps(_metadata(partitioned))]
    commits = 100
    per = -(-files // commits)
    log: list[list[str]] = [head]
    for c in range(commits):
        v = len(log)
        log.append([_add(i, partitioned, v) for i in range(c * per, min(files, (c + 1) * per))])
    junk = [_path(files + i, partitioned, "junk") for i in range(files // 10)]
    _write(root, log, [_path(i, partitioned) for i in range(files)] + junk, len(log) - 1)
    return root


def long_log(commits: int) -> Path:
    """`commits` commits of one add each, a checkpoint 10 commits before the end."""
    root = ROOT / f"long-{commits}"
    if (root / "keys.txt").exists():
        return root
    head = [json.dumps({"protocol": PROTOCOL}), json.dumps(_metadata(False))]
    log = [head] + [[_add(v, False, v)] for v in range(1, commits + 1)]
    _write(root, log, [_path(v, False) for v in range(1, commits + 1)], commits - 10)
    return root


def junk_count(root: Path) -> int:
    """Unreferenced or removed files: what VACUUM deletes."""
    name = root.name
    if name.startswith("small-"):
        return int(name.split("-")[3])
    if name.startswith("large-"):
        return int(name.split("-")[1]) // 10
    return 0
