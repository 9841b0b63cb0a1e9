"""Imported into a warm template by tests/test_warm_template.py: it fails with an error that is
not an ImportError, so the fork server itself dies while starting."""

raise ValueError("a preload module that fails")
