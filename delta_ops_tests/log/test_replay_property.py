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
    _naive,
    _norm,
    history,
    write_history,
)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(history=history, data=st.data())
def test_random_histories_match_naive_replay(tmp_path_factory, history, data):
    root = tmp_path_factory.mktemp("hist")
    commits, cp, unreadable = write_history(root, history, data)
    latest = len(commits) - 1
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
