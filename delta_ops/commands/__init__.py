"""One module per `delta-ops` subcommand; each exposes `register(subparsers)`.

These modules are light: they import argparse and the standard library at module level and
the library (pyarrow, the log reader, the operations) inside their handlers, so building the
whole parser costs a few milliseconds and a command imports only what it runs.

A handler takes the parsed arguments and returns `(json_object, text, exit_code)`; `cli.py`
prints one or the other.
"""

COMMAND_MODULES = ("snapshot", "checkpoint", "cleanup", "vacuum", "crc", "compact", "row_tracking",
                   "due", "fsck", "history", "restore", "optimize", "purge", "stats")
