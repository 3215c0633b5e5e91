"""The replay room of `delta_ops.log`: reconciliation of a segment's actions, one module per
strategy.

Full columnar replay, the columnar commit reader, the action-by-action rule, streamed
checkpoint actions, VACUUM's references (in memory and by bucket), the checkpoint fallback,
bounded delta chunks, staged commits and VACUUM LITE's window. Code outside `log/` reaches
these through the face, `delta_ops.log`.
"""
