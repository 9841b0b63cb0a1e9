"""The engine: compile configs, executing cases in isolated workers, campaigns, the store,
buckets, and the `divfuzz` CLI."""
