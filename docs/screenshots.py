"""Screenshots of the Dagster UI for docs/dagster.md, taken by a headless browser.

    python docs/screenshots.py [--out docs] [--workdir DIR]

Builds the demo tables (`delta_ops.demo`, local Spark) in a temporary directory, with a copy
of `tables.yaml` beside them, deletes one data file of `orders_dv` (so that its
`fsck` check has something to report), starts `dagster dev -w workspace.yaml` (the
repository's code location) on 127.0.0.1 against that copy, runs every asset and then
two more rounds of appends to `events` and maintenance of its assets (so that its
metadata plots have several points), and saves PNGs of:

- `lineage.png`: the lineage of the `events` group;
- `asset_metadata.png`: the `events` delta_log asset, its metadata plotted;
- `asset_checks.png`: the checks of `orders_dv`'s delta_log, `fsck` failing;
- `backfill_launchpad.png`: the launchpad of `row_tracking_backfill`, one table and the
  op's config with `confirm_protocol_upgrade`.

Needs what the tests do (`pip install -e '.[test]'`) plus, for the docs only, the
`playwright` Python package (`pip install -e '.[docs]'`, or `pip install playwright`) and a
Chromium the system provides (`apt-get install chromium`; `--chromium` names another
binary). It never downloads a browser (`playwright install` is not needed). About five
minutes on two cores, most of it the three maintenance runs on local Spark.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from delta_ops_tests.support.dagster_dev import (  # noqa: E402 - after the path set-up
    Dagit,
    free_port,
    start_dagster_dev,
    stop_group,
)

CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
VIEWPORT = {"width": 1440, "height": 900}
#: Rounds of appends + maintenance of `events` after the first maintenance run.
EXTRA_ROUNDS = 2


# ---- the tables and the runs -----------------------------------------------------------------


def prepare(workdir: Path) -> Path:
    """Demo tables under `workdir/demo_tables`, the registry beside them; returns the
    registry's path."""
    from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
    from delta_ops.storage import Storage

    tables = workdir / "demo_tables"
    # In a child process, so that the Spark session building them ends with it.
    subprocess.run(
        [sys.executable, "-c", "import sys; from pathlib import Path; "
         "from delta_ops.demo import build_demo_tables; "
         "[print(f'  {k}: {v}') for k, v in build_demo_tables(Path(sys.argv[1])).items()]",
         str(tables)],
        check=True, cwd=REPO_ROOT,
    )
    registry = workdir / "tables.yaml"
    shutil.copy(REPO_ROOT / "tables.yaml", registry)
    dv = tables / "orders_dv"
    snap = load_snapshot(Storage.for_uri(str(dv)))
    victim = sorted(snap.files.column("path").to_pylist())[0]
    (dv / victim).unlink()
    print(f"  orders_dv: deleted {victim} (for fsck)", flush=True)
    return registry


def append_day(root: Path, day: date, rows: int = 300) -> int:
    """One more day of events in `events` (a pyarrow-written file, committed by delta_ops);
    returns the new version."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from delta_ops.commit import append_files
    from delta_ops.demo import _add

    folder = root / f"event_date={day.isoformat()}"
    folder.mkdir(exist_ok=True)
    path = folder / f"part-{day.isoformat()}-docs.parquet"
    ids = list(range(rows))
    pq.write_table(pa.table({
        "event_id": pa.array([10_000_000 + day.toordinal() * 1000 + i for i in ids], pa.int64()),
        "user_id": pa.array([(i * 7919) % 1000 for i in ids], pa.int64()),
        "kind": pa.array([("view", "click", "buy")[i % 3] for i in ids]),
        "amount": pa.array([round((i % 97) * 1.25, 2) for i in ids], pa.float64()),
    }), path)
    add = _add(root, path, {"event_date": day.isoformat()}, int(time.time() * 1000))
    return append_files(str(root), [add]).version


def launch_assets(dagit: Dagit, keys: list[list[str]]) -> str:
    """A run of the implicit asset job for the given assets (as "Materialize selected" does)."""
    data = dagit.query(
        """mutation($p: ExecutionParams!) { launchRun(executionParams: $p) {
             __typename ... on LaunchRunSuccess { run { runId } }
             ... on PythonError { message } } }""",
        {"p": {"selector": {"repositoryLocationName": "delta_ops",
                            "repositoryName": "__repository__", "jobName": "__ASSET_JOB",
                            "assetSelection": [{"path": k} for k in keys]},
               "runConfigData": {}}},
    )["launchRun"]
    assert data["__typename"] == "LaunchRunSuccess", data
    return data["run"]["runId"]


def populate(dagit: Dagit, tables: Path) -> None:
    """Every asset of every table (the implicit asset job), then rounds of appends to
    `events` and maintenance of its assets."""
    started = time.monotonic()
    run_id = dagit.launch("__ASSET_JOB")
    status = dagit.wait(run_id, timeout=600)
    print(f"  maintenance: {status} ({time.monotonic() - started:.0f} s)", flush=True)
    events = tables / "events"
    components = ("delta_log", "checkpoint", "version_checksum", "log_compaction",
                  "metadata_cleanup", "vacuum", "row_tracking")
    for round_ in range(EXTRA_ROUNDS):
        for k in range(6):
            version = append_day(events, date.today() + timedelta(days=1 + round_ * 6 + k))
        started = time.monotonic()
        run_id = launch_assets(dagit, [["events", c] for c in components])
        status = dagit.wait(run_id, timeout=600)
        print(f"  events at version {version}: maintenance {status} "
              f"({time.monotonic() - started:.0f} s)", flush=True)


# ---- the screenshots -------------------------------------------------------------------------


def capture(base: str, out: Path, chromium: str) -> list[Path]:
    """One PNG per entry of SHOTS, in `out`."""
    from playwright.sync_api import sync_playwright

    shots: list[Path] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=VIEWPORT)
        page.set_default_timeout(60_000)
        for name, height, shoot in SHOTS:
            page.set_viewport_size({"width": VIEWPORT["width"], "height": height})
            path = out / f"{name}.png"
            shoot(page, base)
            page.mouse.move(5, height - 5)  # no hover tooltip in the picture
            page.wait_for_timeout(500)
            page.screenshot(path=str(path))
            size = path.stat().st_size
            print(f"  {path} ({size // 1024} KB)", flush=True)
            if size > MAX_BYTES:
                print(f"  warning: {path.name} is over {MAX_BYTES // 1024} KB", flush=True)
            shots.append(path)
        browser.close()
    return shots


def open_page(page, url: str, ready: str) -> None:
    """Go to `url`, wait for the text `ready`, dismiss the community dialog the UI shows
    on a first visit, and let the page settle."""
    page.goto(url)
    page.get_by_text(ready).first.wait_for()
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(1500)
    skip = page.get_by_role("button", name="Skip")
    if skip.count():
        skip.first.click()
    page.wait_for_timeout(1500)


def shot_lineage(page, base: str) -> None:
    """The `events` group: seven assets, the observed delta_log feeding the others."""
    open_page(page, f"{base}/locations/delta_ops/asset-groups/events", "version_checksum")


def shot_asset_metadata(page, base: str) -> None:
    """`events`/`delta_log`, Overview -> Metadata, switched to Plots."""
    open_page(page, f"{base}/assets/events/delta_log", "Metadata")
    page.get_by_text("Plots", exact=True).first.click()
    page.get_by_text("dagster/row_count").first.wait_for()
    page.wait_for_timeout(2000)


def shot_checks(page, base: str) -> None:
    """`orders_dv`/`delta_log`, Checks: fsck failed, naming the deleted file."""
    open_page(page, f"{base}/assets/orders_dv/delta_log?view=checks", "fsck")
    page.get_by_text("fsck", exact=True).first.click()
    page.get_by_text("are missing").first.wait_for()
    page.wait_for_timeout(1500)


def shot_launchpad(page, base: str) -> None:
    """`row_tracking_backfill` -> Launchpad: one table (partition) and the op's config, the
    config reference on the right describing `confirm_protocol_upgrade`."""
    open_page(page, f"{base}/locations/delta_ops/jobs/row_tracking_backfill/playground",
              "backfill_row_tracking")
    page.evaluate("text => document.querySelector('.CodeMirror').CodeMirror.setValue(text)",
                  LAUNCHPAD_CONFIG)
    partition = page.locator('input[placeholder="Partition"]').first
    partition.fill("customers")
    partition.press("Enter")
    page.get_by_text("partition: customers").first.wait_for()
    page.locator(".CodeMirror").get_by_text("confirm_protocol_upgrade").first.click()
    page.wait_for_timeout(1500)


LAUNCHPAD_CONFIG = """ops:
  backfill_row_tracking:
    config:
      batch_size: 10000
      confirm_protocol_upgrade: true
"""
#: (file name, viewport height, what to do before the picture)
SHOTS = [
    ("lineage", 1350, shot_lineage),
    ("asset_metadata", 1300, shot_asset_metadata),
    ("asset_checks", 900, shot_checks),
    ("backfill_launchpad", 900, shot_launchpad),
]
MAX_BYTES = 300 * 1024


# ---- main ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where tables, registry and DAGSTER_HOME go (default: a "
                        "temporary directory, removed afterwards)")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--serve", action="store_true",
                        help="after the runs, keep dagster dev up until interrupted instead "
                        "of taking the screenshots")
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="delta_ops_docs_"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"building the demo tables in {workdir} ...", flush=True)
    registry = prepare(workdir)
    home = workdir / "dagster_home"
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {**os.environ, "DAGSTER_HOME": str(home), "DELTA_OPS_REGISTRY": str(registry),
           "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with open(workdir / "dagster_dev.log", "wb") as log:
        proc = start_dagster_dev(REPO_ROOT / "workspace.yaml", REPO_ROOT, env, log, port)
        try:
            dagit = Dagit(f"{base}/graphql")
            dagit.wait_for_location(proc, timeout=180)
            print(f"dagster dev is up at {base}; running maintenance ...", flush=True)
            populate(dagit, workdir / "demo_tables")
            if args.serve:
                print(f"serving {base} (Ctrl-C stops)", flush=True)
                try:
                    proc.wait()
                except KeyboardInterrupt:
                    pass
            else:
                print("taking the screenshots ...", flush=True)
                capture(base, args.out, args.chromium)
        finally:
            stop_group(proc)
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
