"""The cursor of the `delta_tables_watch` sensor: what it keeps per table between ticks,
packed small.

Dagster stores a sensor's cursor with every tick, so its size is paid once a minute. Per
table the sensor needs the version it last saw (to tell a moved table from a quiet one) and
the protocol and table properties in force there (so the next tick reads only the commits
after it, `delta_ops.log.segment.log_state.read_settings`). Three things keep that small:

- of the table properties only those `delta_ops.maintenance.due` decides with are kept
  (`delta.checkpointInterval`, `delta.checkpointPolicy`, `delta.logCompactionInterval`);
  the whole configuration is kept when a known property is invalid, since the due rules then
  fall back to defaults. A later metaData action replaces the configuration as a whole, so
  the seed never needs the other keys;
- each distinct (protocol, properties) pair is stored once and tables refer to it by index
  (a fleet has a handful of distinct pairs);
- the JSON is zlib-compressed and base64-encoded.

About 8 KB at 1,000 tables whose names are 20-30 characters, against 158 KB for the
plain JSON of format 1 (which is still read, so an upgrade does not start afresh).

Besides, per table and only where it applies (side maps keyed by table): the version the
sensor last requested a run at (`requested`: not requested again at that version), what it
last reported (`reported`: the version and newest `.crc` it observed, the version
`log_readable` passed at, the last `checkpoint_fresh` result) and why the log did not read
(`error`, at most `MAX_ERROR` characters); and `extra`, the sensor's own small values (the
digest of the last fleet overview it reported).

Protocol sections: none (the sensor's own state; what it caches is "Protocol Evolution"
and the table properties of "Checkpoints" and "Log Compaction Files").
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from collections.abc import Mapping
from typing import Any

from delta_ops.log import TableSettings

#: The packed format (2); format 1 was plain JSON `{"format": 1, "tables": {...}}`.
CURSOR_PREFIX = "z2:"
LEGACY_FORMAT = 1
#: Table properties the due rules read (the last one is
#: `delta_ops.maintenance.compaction.COMPACTION_INTERVAL_PROPERTY`, not imported from there:
#: that module reads Arrow, which loading the definitions does without).
DUE_PROPERTIES = (
    "delta.checkpointInterval", "delta.checkpointPolicy", "delta.logCompactionInterval",
)


def due_settings(settings: TableSettings) -> TableSettings:
    """`settings` with only the table properties the due rules read. Each property is
    parsed on its own (an invalid one raises only when read), so the rules decide the same
    from these as from the full map, an invalid one among them included."""
    kept = {k: settings.configuration[k] for k in DUE_PROPERTIES if k in settings.configuration}
    return TableSettings(settings.version, settings.protocol, kept)


#: Side maps of the packed cursor: entry key -> map key.
_SIDE = {"requested": "r", "reported": "p", "error": "e"}
#: Longest error text kept per table.
MAX_ERROR = 300


def dump_cursor(
    tables: Mapping[str, Mapping[str, Any]], extra: Mapping[str, Any] | None = None
) -> str:
    """The packed cursor of per-table entries `{"status", "version"?, "settings"?,
    "requested"?, "crc"?, "stale"?, "error"?}` (`settings` as `TableSettings.to_json`), and
    the sensor's `extra` values."""
    palette: dict[str, int] = {}
    pairs: list[list[Any]] = []
    packed: dict[str, Any] = {}
    # Side maps refer to a table by its index among the sorted names (a list of indices
    # for a flag, of [index, value] pairs otherwise): compresses better than the names.
    order = {name: i for i, name in enumerate(sorted(tables))}
    side: dict[str, list[Any]] = {k: [] for k in _SIDE.values()}
    for name, entry in tables.items():
        for key, short in _SIDE.items():
            value = entry.get(key)
            if value is True:
                side[short].append(order[name])
            elif value is not None and value is not False:
                side[short].append(
                    [order[name], value[:MAX_ERROR] if isinstance(value, str) else value])
        status = entry.get("status", "ok")
        version, settings = entry.get("version"), entry.get("settings")
        if not isinstance(version, int) or not isinstance(settings, Mapping):
            packed[name] = status
            continue
        pair = [settings.get("protocol") or {}, settings.get("configuration") or {}]
        key = json.dumps(pair, sort_keys=True, separators=(",", ":"))
        if key not in palette:
            palette[key] = len(pairs)
            pairs.append(pair)
        item: list[Any] = [version, palette[key]]
        settings_version = settings.get("version", version)
        if status != "ok" or settings_version != version:
            item.append(status)
        if settings_version != version:
            item.append(settings_version)
        packed[name] = item
    obj: dict[str, Any] = {"s": pairs, "t": packed, **{k: v for k, v in side.items() if v}}
    if extra:
        obj["x"] = dict(extra)
    text = json.dumps(obj, separators=(",", ":"), sort_keys=True)
    return CURSOR_PREFIX + base64.urlsafe_b64encode(zlib.compress(text.encode(), 9)).decode()


def load_cursor(cursor: str | None) -> dict[str, dict[str, Any]]:
    """Per-table entries `{"status", "version"?, "settings"?}` of a packed (or format 1)
    cursor; an absent or unreadable cursor gives {} (the sensor starts afresh)."""
    return load_cursor_and_extra(cursor)[0]


def load_cursor_and_extra(
    cursor: str | None,
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """(`load_cursor`'s entries, the sensor's `extra` values)."""
    if not cursor:
        return {}, {}
    if not cursor.startswith(CURSOR_PREFIX):
        return _load_legacy(cursor), {}
    try:
        raw = zlib.decompress(base64.urlsafe_b64decode(cursor[len(CURSOR_PREFIX):]))
        obj = json.loads(raw)
        pairs, packed = obj["s"], obj["t"]
        extra = obj.get("x") or {}
        out: dict[str, dict[str, Any]] = {}
        for name, item in packed.items():
            if isinstance(item, str):
                out[name] = {"status": item}
                continue
            version, index = int(item[0]), int(item[1])
            protocol, configuration = pairs[index]
            out[name] = {
                "status": item[2] if len(item) > 2 else "ok",
                "version": version,
                "settings": {
                    "version": int(item[3]) if len(item) > 3 else version,
                    "protocol": protocol,
                    "configuration": configuration,
                },
            }
        names = sorted(packed)
        for key, short in _SIDE.items():
            for item in obj.get(short) or []:
                index, value = (item, True) if isinstance(item, int) else item
                out[names[index]][key] = value
        return out, dict(extra)
    except (binascii.Error, zlib.error, ValueError, TypeError, KeyError, IndexError,
            AttributeError):
        return {}, {}


def _load_legacy(cursor: str) -> dict[str, dict[str, Any]]:
    try:
        obj = json.loads(cursor)
    except ValueError:
        return {}
    if not isinstance(obj, dict) or obj.get("format") != LEGACY_FORMAT:
        return {}
    tables = obj.get("tables")
    return tables if isinstance(tables, dict) else {}


__all__ = [
    "CURSOR_PREFIX",
    "DUE_PROPERTIES",
    "MAX_ERROR",
    "due_settings",
    "dump_cursor",
    "load_cursor",
    "load_cursor_and_extra",
]
