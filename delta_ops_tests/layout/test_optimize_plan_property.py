"""Properties of the pure plan over random file lists: every chosen file is in exactly one
bin of its own partition; a bin exceeds the bin cap only when it holds one file; OPTIMIZE
chooses exactly the small files of partitions with enough of them plus the files past the
deleted-rows ratio; PURGE chooses exactly the files with deletion vectors; a predicate
keeps other partitions out."""

from __future__ import annotations

import json

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from delta_ops.layout.plan import parse_where, plan_layout
from delta_ops_tests.support.dv_writer import inline_descriptor

TARGET = 1000
files_strategy = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(1, 3 * TARGET),
              st.integers(1, 50), st.integers(0, 10)),
    max_size=40,
)


def _table(files) -> pa.Table:
    rows = []
    for i, (part, size, n, deleted) in enumerate(files):
        deleted = min(deleted, n)
        rows.append({
            "path": f"p={part}/f{i}.parquet",
            "partitionValues": [("p", part)],
            "size": size,
            "stats": json.dumps({"numRecords": n}),
            "deletionVector": inline_descriptor(range(deleted)).to_dict() if deleted else None,
            "baseRowId": None,
            "defaultRowCommitVersion": None,
            "tags": None,
        })
    return pa.Table.from_pylist(rows)


@settings(max_examples=200, deadline=None)
@given(files=files_strategy, min_files=st.integers(1, 4),
       ratio=st.sampled_from([0.0, 0.05, 0.5, 1.0]), cap=st.integers(TARGET, 5 * TARGET),
       where=st.sampled_from([None, "p = 'a'", "p IN ('b', 'c')"]))
def test_the_plan_rules(files, min_files, ratio, cap, where):
    table = _table(files)
    predicate = None if where is None else parse_where(where, ["p"])
    for operation in ("optimize", "purge"):
        plan = plan_layout(table, root="file:///t", version=1, operation=operation,
                           partition_columns={"p": "p"}, target_size=TARGET,
                           min_files=min_files, max_deleted_rows_ratio=ratio,
                           max_bin_bytes=cap, where=predicate)
        chosen = [f.path for b in plan.bins for f in b.files]
        assert len(chosen) == len(set(chosen))
        for b in plan.bins:
            assert {f.partition_values["p"] for f in b.files} == {b.partition_values["p"]}
            assert len(b.files) == 1 or b.input_bytes <= cap
            assert b.directory == f"p={b.partition_values['p']}"
        expected = set()
        for part in ("a", "b", "c"):
            if predicate is not None and not predicate.matches({"p": part}):
                continue
            mine = [(i, f) for i, f in enumerate(files) if f[0] == part]
            with_dv = {i for i, f in mine if min(f[3], f[2])}
            if operation == "purge":
                expected |= with_dv
                continue
            must = {i for i, f in mine if i in with_dv and min(f[3], f[2]) / f[2] > ratio}
            small = {i for i, f in mine if f[1] < TARGET} - must
            if must or len(small) >= max(min_files, 2):
                expected |= must | small
        assert set(chosen) == {f"p={files[i][0]}/f{i}.parquet" for i in expected}
