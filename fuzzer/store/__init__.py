"""The store, a stage of its own: everything that reads or writes a campaign's SQLite file.

- `schema`: the file's name (`STORE_NAME`), finding it from what a command was given
  (`resolve_store`), tables and version; creating, recognising and upgrading a store.
- `connection`: connecting, the one `transaction()`, SQLite errors in words that name the file.
- `rows`: each table's row as a named, frozen value.
- `store`: `Store`, every query and every write.
- `lock`: one live campaign per store (`CampaignLock`).
- the `import_*` methods `divfuzz merge` folds shard stores in by (the merge itself sits above,
  in `divfuzz.fuzzer.campaign.merge`, and files folders and verdicts through `Filing`).

It sits beside the engine (neither imports the other), below campaign, triage and gate.
"""

from divfuzz.fuzzer.store.connection import describe_sqlite_error
from divfuzz.fuzzer.store.lock import CampaignLock
from divfuzz.fuzzer.store.rows import BucketRow, CaseRow, PendingAnalysis, RootCauseFiled, RunRow
from divfuzz.fuzzer.store.schema import SCHEMA_VERSION, STORE_NAME, resolve_store
from divfuzz.fuzzer.store.store import Store

__all__ = ["STORE_NAME", "SCHEMA_VERSION", "resolve_store", "Store", "CampaignLock", "BucketRow", "CaseRow", "PendingAnalysis",
           "RootCauseFiled", "RunRow", "describe_sqlite_error"]
