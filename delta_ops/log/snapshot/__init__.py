"""The snapshot room of `delta_ops.log`: a version's state, loaded, small or rebuilt by bucket.

Code outside `log/` reaches these through the face, `delta_ops.log`.
"""
