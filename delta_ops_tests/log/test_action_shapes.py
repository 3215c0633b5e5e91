"""An action field of the wrong JSON type is a `CorruptLogError` naming the file and the
line, for every reader, not a traceback from deep inside one (found by feeding every
command mutated logs: `add` as a list, a deletion vector as a string, partition columns as
numbers, `commitInfo` as an array, `txn` without `appId`, ...)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from delta_ops.errors import CorruptLogError
from delta_ops.log import load_snapshot, parse_json_actions
from delta_ops.storage import Storage

TABLE = "golden__commit-info-containing-arbitrary-operationParams-types"


def _first_add(actions: list[dict]) -> dict:
    return next(a for a in actions if "add" in a)["add"]


MUTATIONS = {
    "add is a list": lambda acts: acts.append({"add": [1]}),
    "partitionValues is a list": lambda acts: _first_add(acts).update(partitionValues=["a"]),
    "deletionVector is a string": lambda acts: _first_add(acts).update(deletionVector="abc"),
    "path is a number": lambda acts: _first_add(acts).update(path=123),
    "commitInfo is an array": lambda acts: acts.insert(0, {"commitInfo": [1]}),
    "txn without appId": lambda acts: acts.append({"txn": {"version": 1}}),
    "domain without name": lambda acts: acts.append(
        {"domainMetadata": {"configuration": "{}", "removed": False}}),
    "domain configuration is an object": lambda acts: acts.append(
        {"domainMetadata": {"domain": "d", "configuration": {}, "removed": False}}),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_a_field_of_the_wrong_type_names_the_file_and_line(table_copy, mutation):
    root = table_copy(TABLE)
    commit = sorted((root / "_delta_log").glob("*.json"))[-1]
    actions = [json.loads(line) for line in commit.read_text().splitlines() if line.strip()]
    actions = [a for a in actions if not (mutation.startswith("commitInfo") and "commitInfo" in a)]
    MUTATIONS[mutation](actions)
    commit.write_text("".join(json.dumps(a) + "\n" for a in actions))
    with pytest.raises(CorruptLogError, match=r"line \d+: ") as info:
        parse_json_actions(commit.read_bytes(), table=str(root), version=2, file=commit.name)
    assert info.value.file.endswith(commit.name)
    if mutation not in ("commitInfo is an array", "domain configuration is an object"):
        # The columnar reader, which snapshots of larger logs take, refuses them too.
        with pytest.raises(CorruptLogError) as info:
            load_snapshot(Storage.for_uri(str(root)))
        assert info.value.file.endswith(commit.name)
    if mutation == "add is a list":  # the command line too: exit 1, one line, no traceback
        done = subprocess.run([sys.executable, "-m", "delta_ops.cli", "snapshot", str(root)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert commit.name in done.stderr and "line" in done.stderr
