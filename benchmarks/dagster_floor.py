"""Dagster's own cost for a fleet's shape, without delta_ops: N tables, each one op of K
assets (one upstream, K-1 depending on it) and C checks in a pool of its own, built with
Dagster's public decorators only (`multi_asset`, `AssetSpec`, `AssetCheckSpec`), no
component framework, no metadata beyond one entry, no automation conditions. What loading
and validating the same number of assets and checks costs at the least, to set beside
`bench_dagster`'s figures for the real code location.

`python -m benchmarks.dagster_floor [--tables 1000] [--shape 9,3 --shape 3,1 ...]
[--repeats 3]` prints, per shape (K assets, C checks per table; `K,C,p`: K assets and C
checks in all, partitioned by table instead), medians of whole processes:

- `load_s`: a fresh interpreter importing dagster, building the definitions and running
  `Definitions.validate_loadable` (what `bench_dagster`'s `load_ready_s` measures);
- `validate_s`: `dagster definitions validate -f` on them, the whole process.

Not part of `make bench` (no deltalake side: it measures Dagster alone).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFS = '''
import os
import dagster as dg
K, C, N, P = os.environ["FLOOR_SHAPE"].split(",")
K, C, N = int(K), int(C), int(N)
assets = []
if P == "p":
    # One op of K assets and C checks for the whole fleet, partitioned by table: what the
    # UI would show as K assets with N partitions each. The partitions live in the
    # instance (added by a sensor), so loading does not depend on N.
    tables = dg.DynamicPartitionsDefinition(name="tables")
    specs = [dg.AssetSpec(dg.AssetKey([f"c{k}"]), deps=[dg.AssetKey(["c0"])] if k else [],
                          group_name="g", description="d", kinds={"delta"},
                          partitions_def=tables) for k in range(K)]
    checks = [dg.AssetCheckSpec(f"check_{c}", asset=dg.AssetKey(["c0"])) for c in range(C)]

    @dg.multi_asset(specs=specs, check_specs=checks, name="fleet__m", can_subset=True)
    def _fleet(context):
        return None

    assets.append(_fleet)
    N = 0
for i in range(N):
    t = f"table_{i:04d}"
    specs = [dg.AssetSpec(dg.AssetKey([t, f"c{k}"]), deps=[dg.AssetKey([t, "c0"])] if k else [],
                          group_name="g", description="d", metadata={"uri": f"s3://b/{t}"},
                          kinds={"delta"}) for k in range(K)]
    checks = [dg.AssetCheckSpec(f"check_{c}", asset=dg.AssetKey([t, "c0"])) for c in range(C)]

    @dg.multi_asset(specs=specs, check_specs=checks, name=f"{t}__m", can_subset=True,
                    pool=f"p/{t}")
    def _m(context):
        return None

    assets.append(_m)
defs = dg.Definitions(assets=assets)
'''

LOAD = '''
import sys, time
start = time.perf_counter()
sys.path.insert(0, sys.argv[1])
import dagster as dg
from floor_defs import defs
dg.Definitions.validate_loadable(defs)
print(time.perf_counter() - start)
'''


def _seconds(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} failed:\n{proc.stderr[-2000:]}")
    return wall


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--shape", action="append", default=None,
                        help="K,C: assets and checks per table; K,C,p: K assets and C checks "
                        "partitioned by table (repeatable; default 9,3 (delta_ops' shape), "
                        "3,1 and 1,0)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    shapes = args.shape or ["9,3", "3,1", "1,0"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="dagster_floor_") as tmp:
        folder = Path(tmp)
        (folder / "floor_defs.py").write_text(DEFS)
        home = folder / "home"
        home.mkdir()
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        dagster = str(Path(sys.executable).parent / "dagster")
        for shape in shapes:
            k, c, *partitioned = shape.split(",")
            env = {**os.environ,
                   "FLOOR_SHAPE": f"{k},{c},{args.tables},{''.join(partitioned) or '-'}",
                   "DAGSTER_HOME": str(home), "PYTHONWARNINGS": "ignore"}
            load, validate = [], []
            for _ in range(args.repeats):
                out = subprocess.run([sys.executable, "-c", LOAD, tmp], env=env,
                                     capture_output=True, text=True, check=True)
                load.append(float(out.stdout.strip().splitlines()[-1]))
                validate.append(_seconds([dagster, "definitions", "validate", "-f",
                                          str(folder / "floor_defs.py")], env))
            rows.append({"tables": args.tables, "assets_per_table": int(k),
                         "checks_per_table": int(c),
                         "partitioned_by_table": bool(partitioned),
                         "load_s": round(statistics.median(load), 2),
                         "validate_s": round(statistics.median(validate), 2)})
            print(rows[-1], flush=True)
    return rows


if __name__ == "__main__":
    main()
