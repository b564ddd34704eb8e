"""Benchmark scripts (each runs as `python benchmarks/NAME.py` or `python -m benchmarks.NAME`)
and the helpers they share (`common`, `versus`). Not installed with the package."""
