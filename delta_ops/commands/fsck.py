"""`delta-ops fsck`: is the table whole? Verify, and repair what can be proven lost.

    delta-ops fsck TABLE [--verify-data] [--no-leftovers] [--repair [--confirm]]
                         [--engine local|spark ...] [--json]
    delta-ops fsck TABLE --check-files [--engine ...] [--json]

The checks and their severities are `delta_ops.maintenance.fsck.fsck`'s (docs/fsck.md):
one line per problem, with the file and what is wrong. `--repair` prints what it would
remove and how many rows are lost; with `--confirm` it commits the removes (`FSCK`).
`--check-files` is the narrower check of the data files alone
(`delta_ops.maintenance.fsck.check_files_exist`).

Exit codes: 0 no errors (warnings may be listed); 3 errors found (after a confirmed repair:
errors the repair did not fix); 1 the check could not run or a repair was refused (a
listing failed, the table does not read); 2 bad arguments.
"""

from __future__ import annotations

import argparse
from typing import Any

from delta_ops.commands.common import add_table_arguments, open_table

#: The most problems (or files) the text output lists (the JSON lists them all).
SHOWN = 1000
#: Exit code when errors are found.
ERRORS_FOUND = 3


def _cmd_check_files(args: argparse.Namespace) -> tuple[dict[str, Any], str, int]:
    from delta_ops.maintenance.fsck import check_files_exist

    result = check_files_exist(open_table(args), engine=args.engine)
    lines = [
        f"table       {result.table}",
        f"version     {result.version}",
        f"files       {result.num_checked} checked, {len(result.missing)} missing"
        + (f", {result.num_outside_table} outside the table root (not checked)"
           if result.num_outside_table else ""),
    ]
    lines += [f"  missing   {key}" for key in result.missing[:SHOWN]]
    if len(result.missing) > SHOWN:
        lines.append(f"  ... and {len(result.missing) - SHOWN} more (--json lists them all)")
    return ({"files": result.to_dict(), "ok": result.ok}, "\n".join(lines),
            0 if result.ok else ERRORS_FOUND)


def _cmd_fsck(args: argparse.Namespace) -> tuple[dict[str, Any], str, int]:
    if args.check_files:
        if args.repair or args.confirm or args.verify_data:
            raise argparse.ArgumentTypeError(
                "--check-files is the data-file check alone; it takes no --repair, "
                "--confirm or --verify-data")
        return _cmd_check_files(args)
    if args.confirm and not args.repair:
        raise argparse.ArgumentTypeError("--confirm confirms a repair: give --repair too")
    from delta_ops.maintenance.fsck import fsck

    result = fsck(
        open_table(args), repair=args.repair, confirm=args.confirm,
        verify_data=args.verify_data, leftovers=not args.no_leftovers, engine=args.engine,
    )
    lines = [
        f"table       {result.table}",
        f"version     {result.version}",
        f"checked     {result.num_files} live files, {result.num_deletion_vectors} deletion "
        f"vectors" + (", Parquet footers" if result.verified_data else "")
        + (f"; {result.num_outside_table} outside the table root (data files: existence only)"
           if result.num_outside_table else ""),
        f"found       {len(result.errors)} errors, {len(result.warnings)} warnings",
    ]
    lines += [p.line() for p in result.problems[:SHOWN]]
    if len(result.problems) > SHOWN:
        lines.append(f"... and {len(result.problems) - SHOWN} more (--json lists them all)")
    lines += [f"note        {n}" for n in result.notes]
    repair = result.repair
    if repair is not None:
        rows = f"{repair.rows_lost}" if repair.rows_lost_known else \
            f"at least {repair.rows_lost} (some files have no numRecords)"
        if not repair.entries:
            lines.append("repair      nothing to remove")
        elif repair.dry_run:
            lines.append(f"repair      DRY RUN: would remove {repair.num_files} files, "
                         f"losing {rows} rows; run again with --confirm to commit")
        else:
            lines.append(f"repair      removed {repair.num_files} files in version "
                         f"{repair.version} (FSCK), losing {rows} rows")
        for e in repair.entries[:SHOWN]:
            why = "data file missing" if e.data_file_missing else (
                "deletion vector missing" if e.deletion_vector_missing
                else "deletion vector corrupt")
            lost = "?" if e.rows is None else str(e.rows)
            lines.append(f"  remove    {e.key} ({why}; {lost} rows)")
        lines += [f"  kept      {path}: {why}" for path, why in repair.kept]
    code = ERRORS_FOUND if result.unrepaired_errors else 0
    return result.to_dict(), "\n".join(lines), code


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "fsck",
        help="check that the table is whole (log, checkpoints, .crc, data files, deletion "
        "vectors, leftovers); --repair --confirm removes live files that are proven lost. "
        f"Exit 0: no errors; {ERRORS_FOUND}: errors found; 1: could not check or repair "
        "refused; 2: bad arguments",
        description="Check a Delta table: the log is contiguous from its checkpoint, "
        "checkpoints and sidecars are complete, _last_checkpoint is sane, the latest .crc "
        "agrees, every live data file exists with its recorded size, every deletion vector "
        "exists and decodes (CRC-32, cardinality), and leftovers (temporary files, "
        "incomplete checkpoints, orphan sidecars, unreferenced data files). Errors are "
        "missing or corrupt data and a broken log; warnings are leftovers. Read-only "
        f"unless --repair --confirm. Exit codes: 0 no errors (warnings allowed); "
        f"{ERRORS_FOUND} errors found (after a confirmed repair: errors it did not fix); "
        "1 the check could not run or the repair was refused (e.g. a listing failed); "
        "2 bad arguments.",
    )
    add_table_arguments(p, engine=True)
    p.add_argument(
        "--verify-data", action="store_true",
        help="also read every live data file's Parquet footer and compare its row count "
        "with the statistics' numRecords",
    )
    p.add_argument(
        "--no-leftovers", action="store_true",
        help="skip the search for unreferenced data files (VACUUM's dry-run plan, a second "
        "listing of the data directories)",
    )
    p.add_argument(
        "--repair", action="store_true",
        help="remove (commit remove actions for) the live files that are missing or whose "
        "deletion vector is missing or corrupt; a dry run unless --confirm",
    )
    p.add_argument(
        "--confirm", action="store_true",
        help="with --repair: commit the removes (operation FSCK); each file is proven "
        "missing again by a direct look first, and a listing error refuses the repair",
    )
    p.add_argument(
        "--check-files", action="store_true",
        help="only check that every live data file of the latest version exists (the "
        "narrower check; exit 3 when some are missing)",
    )
    p.set_defaults(handler=_cmd_fsck)
