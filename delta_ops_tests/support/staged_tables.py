"""Tables with staged commits (catalog-managed) and aliased directory spellings, for the VACUUM
staged-commit and alias tests."""

from __future__ import annotations

import json
import os
from pathlib import Path

from delta_ops_tests.support.spark_fixtures import spark_engine  # noqa: F401  (the fixture)

DAY_MS = 86_400_000
OLD_MS = 1_700_000_000_000
NOW_MS = OLD_MS + 30 * DAY_MS
SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": "x", "type": "long", "nullable": True, "metadata": {}}]})


CATALOG_PROTOCOL = {"protocol": {
    "minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["catalogManaged"],
    "writerFeatures": ["catalogManaged", "inCommitTimestamp"]}}


PLAIN_PROTOCOL = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}


def _age(root: Path, ms: int = OLD_MS) -> None:
    """Every file below `root` (links not followed) modified at `ms`."""
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            if not p.is_symlink():
                os.utime(p, ns=(ms * 1_000_000,) * 2)


def _files(root: Path) -> set[str]:
    out = set()
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            out.add((Path(dirpath) / f).relative_to(root).as_posix())
    return out


def _add(path: str) -> dict:
    return {"add": {"path": path, "partitionValues": {}, "size": 4,
                    "modificationTime": OLD_MS, "dataChange": True}}


def _remove(path: str) -> dict:
    return {"remove": {"path": path, "deletionTimestamp": OLD_MS, "dataChange": True}}


def _write(path: Path, actions: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(a) + "\n" for a in actions))


def _table(root: Path, adds: list[str], *, protocol: dict = PLAIN_PROTOCOL) -> None:
    """A table whose version 0 adds `adds`."""
    meta = {"metaData": {"id": "t", "format": {"provider": "parquet", "options": {}},
                         "schemaString": SCHEMA, "partitionColumns": [], "configuration": {},
                         "createdTime": OLD_MS}}
    info = {"commitInfo": {"inCommitTimestamp": OLD_MS, "timestamp": OLD_MS, "txnId": "t0"}}
    _write(root / "_delta_log" / f"{0:020}.json",
           [info, protocol, meta, *(_add(a) for a in adds)])


def _data(root: Path, *rels: str) -> None:
    for rel in rels:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"data")


def _staged(root: Path, version: int, actions: list[dict], uuid: str = "0f7") -> Path:
    path = root / "_delta_log" / "_staged_commits" / f"{version:020}.{uuid}.json"
    _write(path, actions)
    return path


def _aliased_table(tmp_path: Path, spelling: str) -> tuple[Path, Path]:
    """A table at `base/real` whose live file `d/live.parquet` is added through
    `spelling`; (root, base). Links: `base/link -> real`, `base/up -> base`,
    `base/deep -> real/d`, `real/inner -> real/d`, `real/down -> real/d/sub`."""
    base = tmp_path / "base"
    root = base / "real"
    _data(root, "d/live.parquet", "d/orphan.parquet")
    (root / "d" / "sub").mkdir()
    (base / "link").symlink_to(root, target_is_directory=True)
    (base / "up").symlink_to(base, target_is_directory=True)
    (base / "deep").symlink_to(root / "d", target_is_directory=True)
    (root / "inner").symlink_to(root / "d", target_is_directory=True)
    (root / "down").symlink_to(root / "d" / "sub", target_is_directory=True)
    add = spelling.format(base=base, root=root)
    _table(root, [add])
    _age(root)
    return root, base
