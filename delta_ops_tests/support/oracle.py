"""An independent, deliberately naive replay used as the test oracle.

It shares no code with delta_ops: plain `json`, dicts, and `pyarrow.parquet` for
checkpoints, replaying from the newest checkpoint Spark-style (or version 0) to a version.
Paths are keyed by their decoded absolute location so `/a/b`, `file:/a/b`, `file:///a/b` and
a relative `b` inside `/a` are one file.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow.parquet as pq


@dataclass
class OracleState:
    version: int
    protocol: dict | None = None
    metadata: dict | None = None
    files: dict = field(default_factory=dict)  # key -> add dict
    tombstones: dict = field(default_factory=dict)
    txns: dict = field(default_factory=dict)  # appId -> version
    domains: dict = field(default_factory=dict)  # domain -> configuration (live only)


def _abs_key(path: str, root: Path) -> str:
    parsed = urlparse(path)
    if parsed.scheme and len(parsed.scheme) > 1:
        p = unquote(parsed.path)
    elif path.startswith("/"):
        p = unquote(path)
    else:
        p = os.path.join(str(root), unquote(path))
    return os.path.normpath(p)


def _dv(d: dict | None) -> str:
    if not d:
        return ""
    s = d["storageType"] + d["pathOrInlineDv"]
    return s + (f"@{d['offset']}" if d.get("offset") is not None else "")


def _json_shape(v):
    # Parquet gives null for a field the JSON log would leave out.
    if isinstance(v, dict):
        return {k: _json_shape(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [_json_shape(x) for x in v]
    return v


def _checkpoint_rows(log: Path, version: int) -> list[dict] | None:
    files = sorted(log.glob(f"{version:020d}.checkpoint*.parquet")) + sorted(
        log.glob(f"{version:020d}.checkpoint.*.json")
    )
    if not files:
        return None
    first = files[0].name
    if re.match(r"^\d{20}\.checkpoint\.\d{10}\.\d{10}\.parquet$", first):
        n = int(first.split(".")[3])
        files = [
            f
            for f in files
            if re.match(rf"^\d{{20}}\.checkpoint\.\d{{10}}\.{n:010d}\.parquet$", f.name)
        ]
        if len(files) != n:
            return None
    else:
        files = files[:1]
    rows: list[dict] = []
    for f in files:
        if f.suffix == ".json":
            rows += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        else:
            t = pq.read_table(f)
            for r in t.to_pylist(maps_as_pydicts="strict"):
                rows += [{k: _json_shape(v) if k not in ("add", "remove") else v}
                         for k, v in r.items() if v is not None]
    for r in list(rows):
        if "sidecar" in r:
            rows += [
                {k: v}
                for rr in pq.read_table(log / "_sidecars" / r["sidecar"]["path"]).to_pylist(
                    maps_as_pydicts="strict"
                )
                for k, v in rr.items()
                if v is not None
            ]
    return rows


def oracle_replay(root: Path, version: int | None = None) -> OracleState:
    """Replay `root`'s log to `version` (latest commit when None)."""
    log = root / "_delta_log"
    commits = sorted(int(p.name[:20]) for p in log.iterdir() if re.match(r"^\d{20}\.json$", p.name))
    target = commits[-1] if version is None else version
    start_rows: list[dict] = []
    start = 0
    cp_versions = sorted(
        {
            int(p.name[:20])
            for p in log.iterdir()
            if ".checkpoint." in p.name and p.name[0].isdigit()
        },
        reverse=True,
    )
    for cv in cp_versions:
        if cv <= target:
            rows = _checkpoint_rows(log, cv)
            if rows is not None:
                start_rows, start = rows, cv + 1
                break
    state = OracleState(target)

    def apply(action: dict) -> None:
        if "add" in action:
            a = action["add"]
            k = (_abs_key(a["path"], root), _dv(a.get("deletionVector")))
            state.files[k] = a
            state.tombstones.pop(k, None)
        elif "remove" in action:
            r = action["remove"]
            k = (_abs_key(r["path"], root), _dv(r.get("deletionVector")))
            state.files.pop(k, None)
            state.tombstones[k] = r
        elif "metaData" in action:
            state.metadata = action["metaData"]
        elif "protocol" in action:
            state.protocol = action["protocol"]
        elif "txn" in action:
            state.txns[action["txn"]["appId"]] = action["txn"]["version"]
        elif "domainMetadata" in action:
            d = action["domainMetadata"]
            if d.get("removed"):
                state.domains.pop(d["domain"], None)
            else:
                state.domains[d["domain"]] = d["configuration"]

    for a in start_rows:
        apply(a)
    for v in range(start, target + 1):
        with open(log / f"{v:020d}.json") as fh:
            for line in fh:
                if line.strip():
                    apply(json.loads(line))
    return state
