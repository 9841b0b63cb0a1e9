"""Numerical oracles: pure functions from tensors to frozen verdicts.

Nothing here imports `fuzzer`; nothing here raises for a mismatch: a mismatch is a verdict.
Tensors are reduced where they live (CPU or GPU); only scalars cross to the host.
"""
