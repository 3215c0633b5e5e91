"""One module per `delta-ops` subcommand; each exposes `register(subparsers)`.

A handler takes the parsed arguments and returns `(json_object, text, exit_code)`; `cli.py`
prints one or the other.
"""

COMMAND_MODULES = ("snapshot", "checkpoint", "cleanup", "vacuum", "crc", "compact", "row_tracking",
                   "due")
