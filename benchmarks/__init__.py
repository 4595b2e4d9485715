"""envgym's benchmark suite: `python -m benchmarks` (see __main__.py and suite.py)."""
