"""What the tests and the benchmarks share, and gpart does not ship: synthetic graphs, memory caps, gloo process groups.

The tests import it as `support` (pytest puts tests/ on sys.path); the benchmarks as
`tests.support` (benchmarks/harness.py puts the repository root on sys.path).
"""
