"""Property: random histories read at random versions equal a naive dict-based replay.

Histories hold adds (some with deletion vectors, some with absolute or percent-encoded
paths), removes, txns and domain metadata (with tombstones). Some histories get a
checkpoint written by the test itself (a Parquet file of the naive state) so replay from a
checkpoint plus commits is exercised too, and log compaction files written by the test
itself in both forms a reader meets (spec section "Log Compaction Files"): the spec's
reconciled form (one line per key, lines in a drawn order) and Databricks' (every covered
action, unreconciled, newest commit first: the first line for a key wins), with the covered
commits deleted or not, and with a spacing that makes the columnar replay step aside or not.
The naive replay reads the commits only; it shares no code with the library.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delta_ops.table import DeltaTable
from delta_ops_tests.support.replay_histories import (
    METADATA,
    PROTOCOL,
    _compactions,
    _databricks_compaction,
    _key,
    _naive,
    _norm,
    _spec_compaction,
    _to_json,
    _write_checkpoint,
    history,
)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(history=history, data=st.data())
def test_random_histories_match_naive_replay(tmp_path_factory, history, data):
    root = tmp_path_factory.mktemp("hist")
    log = root / "_delta_log"
    log.mkdir()
    commits: list[list[dict]] = [[{"protocol": PROTOCOL}, {"metaData": METADATA}]]
    for v, actions in enumerate(history, start=1):
        # One action per key per commit (file key, txn appId, domain), as writers must.
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
    table = DeltaTable(str(root))
    readable = [v for v in range(latest + 1) if v not in unreadable]
    for v in sorted(set(data.draw(st.lists(st.sampled_from(readable), min_size=1, max_size=4)))):
        snap = table.snapshot(v)
        files, tombs, txns, domains = _naive(commits, root, v)
        got = {
            (_norm(r["path"], root), json.dumps(r["deletionVector"], sort_keys=True)): r["size"]
            for r in snap.files.select(["path", "size", "deletionVector"]).to_pylist()
        }
        # Arrow fills absent DV fields (offset) with None; compare DVs by their non-null fields.
        got = {
            (
                p,
                json.dumps(
                    {k: x for k, x in json.loads(d).items() if x is not None}, sort_keys=True
                )
                if d != "null"
                else d,
            ): s
            for (p, d), s in got.items()
        }
        want = {
            (
                p,
                json.dumps(
                    {k: x for k, x in json.loads(d).items() if x is not None}, sort_keys=True
                )
                if d != "null"
                else d,
            ): a["size"]
            for (p, d), a in files.items()
        }
        assert got == want, f"version {v} (checkpoint {cp})"
        assert {a: t.version for a, t in snap.txns.items()} == txns
        assert {d: m.configuration for d, m in snap.domains.items()} == {
            d: m["configuration"] for d, m in domains.items() if not m["removed"]
        }
        assert snap.tombstones.num_rows == len(tombs)
        assert snap.checkpoint_version == (cp if cp is not None and cp <= v else None)
