"""Fixtures of the fsck wing (`delta-ops fsck`: the table-wide file-existence check); its
modules keep their own helpers."""
