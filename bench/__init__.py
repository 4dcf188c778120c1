"""Benchmarks: pytest-benchmark micro-benchmarks and ``python -m bench.compare``."""
