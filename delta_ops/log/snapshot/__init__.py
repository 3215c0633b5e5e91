"""The snapshot room of `delta_ops.log`: a version's state, loaded, streamed, small or rebuilt
by bucket, and which one a caller reads (`state_choice`).

Code outside `log/` reaches these through the face, `delta_ops.log`.
"""
