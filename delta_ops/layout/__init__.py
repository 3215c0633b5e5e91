"""Data layout maintenance: optimize, purge, statistics."""
