"""specroute's benchmarks, run from the repository root: `python -m bench.NAME`."""
