"""The Dagster code location at scale: loading the definitions of many tables, discovering
them, and one tick of the watch sensor (first and cursored).

`python -m benchmarks.bench_dagster [--tables 1000]` writes small hand-made Delta tables
(12 commits each, no checkpoint, so every table is due for a checkpoint and checksums)
under `benchmarks/data/dagster_tables/`, then reports wall-clock seconds for:

- `discover_s`: `refresh_discovery` listing the prefix (what the discovery sensor does);
- `load_listed_s` / `load_discovered_s`: `Definitions` built from the component's sources
  (tables listed in YAML / read from the discovery cache) and `validate_loadable`;
- `tick_first_s` / `tick_cursored_s`: one watch-sensor tick without, then with, the cursor;
- `cursor_bytes`: the size of the watch sensor's cursor after the first tick;
- `requests`: run requests of the first tick (one per table).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
import warnings
from pathlib import Path

COMMITS = 12


def write_tables(root: Path, count: int) -> list[Path]:
    """`count` tables of COMMITS commits each (protocol 1/2, one add per commit)."""
    schema = json.dumps({"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}}]})
    tables = []
    for i in range(count):
        table = root / f"group_{i % 10}" / f"table_{i:05d}"
        log = table / "_delta_log"
        log.mkdir(parents=True, exist_ok=True)
        for v in range(COMMITS):
            actions = [{"commitInfo": {"timestamp": 1_700_000_000_000 + v, "operation": "WRITE"}}]
            if v == 0:
                actions.append({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}})
                actions.append({"metaData": {
                    "id": f"bench-{i}", "format": {"provider": "parquet", "options": {}},
                    "schemaString": schema, "partitionColumns": [], "configuration": {},
                    "createdTime": 1_700_000_000_000}})
            actions.append({"add": {
                "path": f"part-{v:05d}.parquet", "partitionValues": {}, "size": 100 + v,
                "modificationTime": 1_700_000_000_000 + v, "dataChange": True}})
            (log / f"{v:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")
        tables.append(table)
    return tables


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, round(time.perf_counter() - start, 3)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=1000)
    args = parser.parse_args(argv if argv is not None else [])
    warnings.filterwarnings("ignore", category=Warning, module="dagster")

    from dagster import Definitions

    from delta_ops.defs import definitions_kwargs
    from delta_ops.defs.sensors import watch_tick
    from delta_ops.defs.sources import RegistrySource, assemble_registry, refresh_discovery

    base = Path(__file__).resolve().parent / "data" / "dagster_tables"
    shutil.rmtree(base, ignore_errors=True)
    lake = base / "lake"
    tables, write_s = _timed(lambda: write_tables(lake, args.tables))

    listed = RegistrySource(
        base_dir=str(base), defaults={"engine": "local"},
        tables=[{"name": t.name, "uri": str(t)} for t in tables],
    )
    _, load_listed_s = _timed(
        lambda: Definitions.validate_loadable(Definitions(**definitions_kwargs(source=listed)))
    )
    discovering = RegistrySource(
        base_dir=str(base), defaults={"engine": "local"},
        discover=[{"prefix": str(lake), "max_depth": 2}], discovery_cache="cache.json",
    )
    found, discover_s = _timed(lambda: refresh_discovery(discovering))
    _, load_discovered_s = _timed(
        lambda: Definitions.validate_loadable(
            Definitions(**definitions_kwargs(source=discovering)))
    )
    registry = assemble_registry(listed)
    first, tick_first_s = _timed(lambda: watch_tick(registry, None, lambda _line: None))
    _, tick_cursored_s = _timed(lambda: watch_tick(registry, first.cursor, lambda _line: None))
    result = {
        "tables": args.tables,
        "write_tables_s": write_s,
        "discovered": found["found"],
        "discover_s": discover_s,
        "load_listed_s": load_listed_s,
        "load_discovered_s": load_discovered_s,
        "tick_first_s": tick_first_s,
        "tick_cursored_s": tick_cursored_s,
        "cursor_bytes": len(first.cursor.encode()),
        "requests": len(first.requests),
        "observations": len(first.observations),
    }
    for key, value in result.items():
        print(f"{key:>18}: {value}")
    shutil.rmtree(base, ignore_errors=True)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
