"""Imported into a warm template by tests/test_warm_template.py: every process forked from the
importing process exits at once, as a child of a template that initialised CUDA would fail."""

import os

os.register_at_fork(after_in_child=lambda: os._exit(3))
