"""The files room of `delta_ops.log`: what lies in `_delta_log` and how one file is read.

The sorted listing of the log, `_last_checkpoint` (reader and only writer), checkpoint files
and their parts, the checkpoint reader, V2 sidecars and newline-delimited JSON actions.
Code outside `log/` reaches these through the face, `delta_ops.log`.
"""
