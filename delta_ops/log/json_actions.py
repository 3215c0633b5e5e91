"""Newline-delimited JSON actions: how commits, compaction files and JSON checkpoints are
parsed, with errors that name the file and line.

Spec section: "Delta Log Entries" (each line of a commit is one action, a JSON object).
"""

from __future__ import annotations

import orjson

from delta_ops.errors import CorruptLogError


def parse_json_actions(data: bytes, *, table: str, version: int | None, file: str) -> list[dict]:
    """Parse newline-delimited JSON actions; CorruptLogError naming the file on bad lines."""
    body = data.strip()
    if not body:
        return []
    if b"\r" not in body and b"\n\n" not in body:
        # One parser call for the whole file: lines joined as the elements of one array.
        try:
            out = orjson.loads(b"[" + body.replace(b"\n", b",") + b"]")
        except orjson.JSONDecodeError:
            out = None
        if out is not None and all(isinstance(o, dict) for o in out):
            return out
    out = []
    for lineno, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
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
        out.append(obj)
    return out


__all__ = ["parse_json_actions"]
