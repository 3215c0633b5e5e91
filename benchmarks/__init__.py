"""Benchmarks: delta_ops side by side with deltalake (delta-rs). Run with `make bench`."""
