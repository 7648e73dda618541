"""forged's benchmarks: `python -m bench` measures each figure beside its limit in the same run."""
