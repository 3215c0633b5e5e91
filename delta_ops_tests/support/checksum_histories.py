"""Generated histories for the checksum and compaction tests: a hypothesis strategy and the writer
that lays one out as a table."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import strategies as st

from delta_ops.protocol.crc import (
    INT_MAX,
)

SCHEMA = '{"type":"struct","fields":[{"name":"x","type":"long","nullable":true,"metadata":{}}]}'
CARDINALITIES = [1, 7, 10, 150, 12_345, INT_MAX, INT_MAX + 5]


@st.composite
def histories(draw, max_commits: int = 8):
    """A valid random Delta history: a list of commits (lists of actions)."""
    dv = draw(st.booleans())
    writer = ["domainMetadata", "inCommitTimestamp"] + (["deletionVectors"] if dv else [])
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7,
                "readerFeatures": ["deletionVectors"] if dv else [], "writerFeatures": writer}
    config = {"delta.enableDeletionVectors": "true"} if dv else {}
    ict_from = draw(st.one_of(st.none(), st.integers(0, max_commits)))
    metadata = {"id": "t", "format": {"provider": "parquet", "options": {}},
                "schemaString": SCHEMA, "partitionColumns": [], "configuration": config,
                "createdTime": 0}
    live: dict[str, dict] = {}
    domains: set[str] = set()
    n = 0
    commits = []
    for v in range(draw(st.integers(1, max_commits))):
        ci = {"timestamp": 1000 + v, "operation": "WRITE", "txnId": f"txn-{v}"}
        actions: list[dict] = [{"commitInfo": ci}]
        if v == 0:
            actions.append({"protocol": protocol})
        if v == 0 or (ict_from == v):
            md = json.loads(json.dumps(metadata))
            if ict_from is not None and ict_from <= v:
                md["configuration"].update({
                    "delta.enableInCommitTimestamps": "true",
                    "delta.inCommitTimestampEnablementVersion": str(ict_from),
                    "delta.inCommitTimestampEnablementTimestamp": str(5000 + ict_from),
                })
            actions.append({"metaData": md})
        if ict_from is not None and v >= ict_from:
            ci["inCommitTimestamp"] = 5000 + v
        touched: set[str] = set()  # one file action per key and commit
        for _ in range(draw(st.integers(0, 4))):
            candidates = sorted(set(live) - touched)
            op = draw(st.sampled_from(["add", "add", "remove", "dv", "txn", "dm", "dm-rm"]))
            if op == "add":
                size = draw(st.sampled_from([0, 100, 8192, 9 * 1024**2, 200 * 1024**2]))
                card = draw(st.sampled_from([None, *CARDINALITIES])) if dv else None
                add = {"path": f"f{n}.parquet", "partitionValues": {}, "size": size,
                       "modificationTime": v, "dataChange": True, "stats": f'{{"numRecords":{n}}}'}
                if card is not None:
                    add["deletionVector"] = {"storageType": "u", "pathOrInlineDv": f"dv{n}",
                                             "offset": 1, "sizeInBytes": 10, "cardinality": card}
                n += 1
                live[add["path"]] = add
                touched.add(add["path"])
                actions.append({"add": add})
            elif op in ("remove", "dv") and candidates:
                path = draw(st.sampled_from(candidates))
                touched.add(path)
                old = live.pop(path)
                rm = {"path": path, "deletionTimestamp": v, "dataChange": True,
                      "extendedFileMetadata": True, "partitionValues": {}, "size": old["size"]}
                if "deletionVector" in old:
                    rm["deletionVector"] = old["deletionVector"]
                actions.append({"remove": rm})
                if op == "dv" and dv:
                    new = dict(old, deletionVector={
                        "storageType": "u", "pathOrInlineDv": f"dv{n}", "offset": 1,
                        "sizeInBytes": 10, "cardinality": draw(st.sampled_from(CARDINALITIES))})
                    n += 1
                    live[path] = new
                    actions.append({"add": new})
            elif op == "txn":
                app = draw(st.sampled_from(["app-a", "app-b"]))
                actions.append({"txn": {"appId": app, "version": v, "lastUpdated": 10 * v}})
            elif op == "dm":
                d = draw(st.sampled_from(["d1", "d2", "delta.rowTracking"]))
                domains.add(d)
                actions.append({"domainMetadata": {"domain": d, "configuration": f"c{v}",
                                                   "removed": False}})
            elif op == "dm-rm" and domains:
                d = draw(st.sampled_from(sorted(domains)))
                domains.discard(d)
                actions.append({"domainMetadata": {"domain": d, "configuration": "",
                                                   "removed": True}})
        # one file action per key and commit, as the protocol requires
        keys = [(k, a[k]["path"], json.dumps(a[k].get("deletionVector"))) for a in actions
                for k in ("add", "remove") if k in a]
        assert len({(p, d) for _, p, d in keys}) == len(keys)
        commits.append(actions)
    return commits


def write_history(root: Path, commits: list[list[dict]]) -> None:
    log = root / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    for v, actions in enumerate(commits):
        (log / f"{v:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")
