"""Random histories for the replay tests (adds with and without deletion vectors, removes,
compactions in both forms, checkpoints) and the naive dict-based replay they are checked
against."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import strategies as st

from delta_ops.protocol.actions import ADD_TYPE, REMOVE_TYPE

PROTOCOL = {
    "minReaderVersion": 3,
    "minWriterVersion": 7,
    "readerFeatures": ["deletionVectors"],
    "writerFeatures": ["deletionVectors", "domainMetadata"],
}


METADATA = {
    "id": "tbl",
    "format": {"provider": "parquet", "options": {}},
    "schemaString": (
        '{"type":"struct","fields":[{"name":"x","type":"long","nullable":true,"metadata":{}}]}'
    ),
    "partitionColumns": [],
    "configuration": {},
    "createdTime": 0,
}


FILES = [f"part-{i:03d}.parquet" for i in range(12)] + ["dir%20a/part-x.parquet"]
DVS = [
    None,
    None,
    {
        "storageType": "u",
        "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
        "offset": 1,
        "sizeInBytes": 36,
        "cardinality": 2,
    },
    {
        "storageType": "i",
        "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
        "sizeInBytes": 40,
        "cardinality": 6,
    },
]


action = st.one_of(
    st.tuples(
        st.just("add"),
        st.sampled_from(FILES),
        st.sampled_from(range(len(DVS))),
        st.integers(1, 10_000),
        st.booleans(),
    ),
    st.tuples(st.just("remove"), st.sampled_from(FILES), st.sampled_from(range(len(DVS)))),
    st.tuples(st.just("txn"), st.sampled_from(["app-a", "app-b"]), st.integers(0, 50)),
    st.tuples(st.just("domain"), st.sampled_from(["d1", "d2"]), st.booleans()),
)


history = st.lists(st.lists(action, min_size=1, max_size=6), min_size=1, max_size=12)


def _to_json(a, root: Path, version: int) -> dict:
    kind = a[0]
    if kind == "add":
        _, f, dv, size, absolute = a
        path = f"file://{root}/{f}" if absolute else f
        return {
            "add": {
                "path": path,
                "partitionValues": {},
                "size": size,
                "modificationTime": version,
                "dataChange": True,
                "deletionVector": DVS[dv],
            }
        }
    if kind == "remove":
        _, f, dv = a
        return {
            "remove": {
                "path": f,
                "deletionTimestamp": version,
                "dataChange": True,
                "deletionVector": DVS[dv],
            }
        }
    if kind == "txn":
        return {"txn": {"appId": a[1], "version": a[2]}}
    return {"domainMetadata": {"domain": a[1], "configuration": f"c{version}", "removed": a[2]}}


def _norm(path: str, root: Path) -> str:
    from urllib.parse import unquote

    prefix = f"file://{root}/"
    return unquote(path[len(prefix) :] if path.startswith(prefix) else path)


def _naive(commits: list[list[dict]], root: Path, upto: int):
    files, tombs, txns, domains = {}, {}, {}, {}
    for v in range(upto + 1):
        for obj in commits[v]:
            if "add" in obj:
                a = obj["add"]
                k = (_norm(a["path"], root), json.dumps(a["deletionVector"], sort_keys=True))
                files[k] = a
                tombs.pop(k, None)
            elif "remove" in obj:
                r = obj["remove"]
                k = (_norm(r["path"], root), json.dumps(r["deletionVector"], sort_keys=True))
                files.pop(k, None)
                tombs[k] = r
            elif "txn" in obj:
                txns[obj["txn"]["appId"]] = obj["txn"]["version"]
            elif "domainMetadata" in obj:
                d = obj["domainMetadata"]
                domains[d["domain"]] = d
    return files, tombs, txns, domains


def _write_checkpoint(root: Path, version: int, state) -> None:
    files, tombs, txns, domains = state
    rows = [{"protocol": PROTOCOL}, {"metaData": {**METADATA, "format": METADATA["format"]}}]
    rows += [{"add": a} for a in files.values()]
    rows += [{"remove": r} for r in tombs.values()]
    rows += [{"txn": {"appId": k, "version": v}} for k, v in txns.items()]
    rows += [{"domainMetadata": d} for d in domains.values()]
    fmt = pa.struct([("provider", pa.string()), ("options", pa.map_(pa.string(), pa.string()))])
    schema = pa.schema(
        [
            (
                "protocol",
                pa.struct(
                    [
                        ("minReaderVersion", pa.int32()),
                        ("minWriterVersion", pa.int32()),
                        ("readerFeatures", pa.list_(pa.string())),
                        ("writerFeatures", pa.list_(pa.string())),
                    ]
                ),
            ),
            (
                "metaData",
                pa.struct(
                    [
                        ("id", pa.string()),
                        ("format", fmt),
                        ("schemaString", pa.string()),
                        ("partitionColumns", pa.list_(pa.string())),
                        ("configuration", pa.map_(pa.string(), pa.string())),
                        ("createdTime", pa.int64()),
                    ]
                ),
            ),
            ("add", ADD_TYPE),
            ("remove", REMOVE_TYPE),
            ("txn", pa.struct([("appId", pa.string()), ("version", pa.int64())])),
            (
                "domainMetadata",
                pa.struct(
                    [
                        ("domain", pa.string()),
                        ("configuration", pa.string()),
                        ("removed", pa.bool_()),
                    ]
                ),
            ),
        ]
    )
    table = pa.Table.from_pylist([{k: r.get(k) for k in schema.names} for r in rows], schema=schema)
    pq.write_table(table, root / "_delta_log" / f"{version:020d}.checkpoint.parquet")


def _key(obj: dict, root: Path) -> tuple:
    """Reconciliation key of an action (file key: path + DV; txn: appId; domain: domain)."""
    kind = next(iter(obj))
    body = obj[kind]
    if kind in ("add", "remove"):
        dv = json.dumps(body["deletionVector"], sort_keys=True)
        return ("file", _norm(body["path"], root), dv)
    if kind == "txn":
        return (kind, body["appId"])
    if kind == "domainMetadata":
        return (kind, body["domain"])
    return (kind,)


def _spec_compaction(commits: list[list[dict]], start: int, end: int, root: Path) -> list[dict]:
    """The spec's form: the newest action per key over commits start..end, one line each."""
    latest: dict[tuple, dict] = {}
    for v in range(start, end + 1):
        for obj in commits[v]:
            latest[_key(obj, root)] = obj
    return list(latest.values())


def _databricks_compaction(commits: list[list[dict]], start: int, end: int) -> list[dict]:
    """Databricks' form: every action of commits start..end, newest commit first."""
    return [obj for v in range(end, start - 1, -1) for obj in commits[v]]


@st.composite
def _compactions(draw, n: int, cp: int | None):
    """Non-overlapping (start, end, form, delete_commits) windows over versions 0..n-1; the
    covered commits are only deleted where the segment can still use the compaction (not
    across the checkpoint, which makes readers start after it)."""
    out, pos = [], 0
    while pos < n - 1:
        length = draw(st.integers(1, 5))
        if draw(st.booleans()) and pos + length < n:
            end = pos + length
            across = cp is not None and pos <= cp < end
            delete = draw(st.booleans()) and not across
            out.append((pos, end, draw(st.sampled_from(["spec", "databricks"])), delete))
        pos += length + 1
    return out


def write_history(
    root: Path, history, data
) -> tuple[list[list[dict]], int | None, set[int]]:
    """Write a drawn `history` as a log under `root`: the commits (one action per key per
    commit, as writers must), a checkpoint at a drawn version or none, and drawn compactions
    of both forms, the covered commits deleted or not. Returns (the commits' actions by
    version, the checkpoint's version or None, the versions no longer readable: inside a
    window whose commits were deleted)."""
    log = root / "_delta_log"
    log.mkdir()
    commits: list[list[dict]] = [[{"protocol": PROTOCOL}, {"metaData": METADATA}]]
    for v, actions in enumerate(history, start=1):
        seen, objs = set(), []
        for a in actions:
            obj = _to_json(a, root, v)
            k = _key(obj, root)
            if k in seen:
                continue
            seen.add(k)
            objs.append(obj)
        commits.append(objs)
    for v, objs in enumerate(commits):
        (log / f"{v:020d}.json").write_text("\n".join(json.dumps(o) for o in objs) + "\n")
    latest = len(commits) - 1
    cp = data.draw(st.one_of(st.none(), st.integers(0, latest)), label="checkpoint")
    if cp is not None:
        _write_checkpoint(root, cp, _naive(commits, root, cp))
    unreadable: set[int] = set()
    for start, end, form, delete in data.draw(_compactions(latest + 1, cp), label="compactions"):
        if form == "spec":
            lines = data.draw(st.permutations(_spec_compaction(commits, start, end, root)))
        else:
            lines = _databricks_compaction(commits, start, end)
        text = "".join(json.dumps(o) + "\n" for o in lines)
        if data.draw(st.booleans(), label="spacing the columnar replay steps aside for"):
            text = text.replace('{"add":', '{ "add":').replace('{"remove":', '{ "remove":')
        (log / f"{start:020d}.{end:020d}.compacted.json").write_text(text)
        if delete:
            for v in range(start, end + 1):
                (log / f"{v:020d}.json").unlink()
            # Inside the window only the commits could rebuild a version (the checkpoint is
            # not inside it: it is before the window or after it).
            unreadable |= set(range(start, end))
    return commits, cp, unreadable
