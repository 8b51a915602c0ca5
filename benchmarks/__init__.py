"""Benchmarks of DeerFlow Memory; run them from the repository root (`make bench`)."""
