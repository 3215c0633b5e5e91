"""The segment room of `delta_ops.log`: the files that make version v, and the cheap questions
about them.

The log segment, the protocol/metadata light replay, commit timestamps and time travel, the
cheap state a sensor reads and whether the log reads. Code outside `log/` reaches these
through the face, `delta_ops.log`.
"""
