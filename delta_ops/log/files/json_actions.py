"""Newline-delimited JSON actions: how commits, compaction files and JSON checkpoints are
parsed, with errors that name the file and line.

Spec section: "Delta Log Entries" (each line of a commit is one action, a JSON object).
"""

from __future__ import annotations

from itertools import repeat

import orjson

from delta_ops.errors import CorruptLogError

#: What `bytes.strip` removes around a file's actions.
_BLANK = frozenset(b" \t\n\r\x0b\x0c")


def parse_json_actions(
    data: bytes, *, table: str, version: int | None, file: str, first_line: int = 1
) -> list[dict]:
    """Parse newline-delimited JSON actions; CorruptLogError naming the file on bad lines.

    `first_line` is the number of the first line of `data` in `file` (a piece of a large
    commit read in chunks, `log.replay.delta_chunks`, starts further down)."""
    end = len(data)
    while end and data[end - 1] in _BLANK:
        end -= 1
    if not end:
        return []
    start = 0
    while data[start] in _BLANK:
        start += 1
    # One parser call for the whole file: the lines joined as the elements of one array,
    # copied twice in all (a log holds tens of MB). A blank line leaves an empty element
    # and a lone CR separator no comma: orjson refuses both, and the lines are read one by
    # one below; CR LF endings leave a CR before each comma, which JSON takes as space.
    joined = data.replace(b"\n", b",")
    try:
        out = orjson.loads(b"".join((b"[", memoryview(joined)[start:end], b"]")))
    except orjson.JSONDecodeError:
        out = None
    del joined
    if out is not None and all(map(isinstance, out, repeat(dict))) and not any(
            map(shape_problem, out)):
        return out
    out = []
    for lineno, line in enumerate(data.splitlines(), first_line):
        if not line.strip():
            continue
        out.append(parse_json_line(line, lineno, table=table, version=version, file=file))
    return out


def parse_json_line(
    line: bytes, lineno: int, *, table: str | None, version: int | None, file: str | None
) -> dict:
    """One line of a commit as a JSON object, or `CorruptLogError` naming the line."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise CorruptLogError(
            f"line {lineno} is not valid JSON: {exc}", table=table, version=version, file=file
        ) from exc
    if not isinstance(obj, dict):
        raise CorruptLogError(
            f"line {lineno} is not a JSON object", table=table, version=version, file=file
        )
    problem = shape_problem(obj)
    if problem:
        raise CorruptLogError(
            f"line {lineno}: {problem}", table=table, version=version, file=file
        )
    return obj


#: Actions whose value must be a JSON object, and fields whose JSON type is fixed (spec
#: "Actions": the field tables). Only what a reader would otherwise trip over.
_OBJECT_ACTIONS = frozenset({
    "add", "remove", "metaData", "protocol", "txn", "commitInfo", "domainMetadata", "cdc",
    "checkpointMetadata", "sidecar",
})
_FIELDS: dict[str, tuple[tuple[str, type | tuple[type, ...]], ...]] = {
    "metaData": (("format", (dict, type(None))), ("partitionColumns", (list, type(None))),
                 ("configuration", (dict, type(None)))),
    "txn": (("appId", str),),
    "domainMetadata": (("domain", str), ("configuration", str)),
}
def shape_problem(obj: dict) -> str | None:
    """What is of the wrong JSON type in one action (spec "Actions"), None when nothing.
    File actions, a million in a large commit, take the short path."""
    for key, body in obj.items():
        if key == "add" or key == "remove":
            if type(body) is not dict:
                return f"the {key} action is {type(body).__name__}, not an object"
            if type(body.get("path")) is not str:
                return f"{key}.path is {type(body.get('path')).__name__}, not a string"
            pv, dv, tags = body.get("partitionValues"), body.get("deletionVector"), body.get("tags")
            if (pv is not None and type(pv) is not dict) or (
                    dv is not None and type(dv) is not dict) or (
                    tags is not None and type(tags) is not dict):
                bad, value = next((f, v) for f, v in (
                    ("partitionValues", pv), ("deletionVector", dv), ("tags", tags))
                    if v is not None and type(v) is not dict)
                return f"{key}.{bad} is {type(value).__name__}, not an object"
        elif key in _OBJECT_ACTIONS:
            problem = _other_shape(key, body)
            if problem:
                return problem
    return None


def _other_shape(key: str, body: object) -> str | None:
    if type(body) is not dict:
        return f"the {key} action is {type(body).__name__}, not an object"
    for field, kind in _FIELDS.get(key, ()):
        value = body.get(field)
        if not isinstance(value, kind):
            return (f"{key}.{field} is {type(value).__name__}, which the protocol does "
                    "not allow there")
    if key == "metaData" and not all(
            isinstance(c, str) for c in body.get("partitionColumns") or ()):
        return "metaData.partitionColumns holds something other than column names"
    return None


__all__ = ["parse_json_actions", "parse_json_line", "shape_problem"]
