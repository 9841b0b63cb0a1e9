"""Turning buckets into what people read: repro.py, markdown reports, JUnit."""
