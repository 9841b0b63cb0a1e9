"""How divfuzz talks to an SQLite file: one way to connect, one transaction, one wording of errors.

Invariants:
- every connection the store package opens reads rows by column name (`sqlite3.Row`), and runs
  in autocommit mode (`isolation_level=None`): nothing is written outside `transaction()`;
- `transaction()` is the only `BEGIN ... COMMIT / ROLLBACK` in divfuzz. Inside an open transaction
  it joins it, so a store method that writes can be called on its own (its own transaction) or
  by `divfuzz merge` inside the merge's one transaction (all or nothing);
- an SQLite error reaches the user as a sentence naming the file (`describe_sqlite_error`), and
  so does a row that does not decode (`errors_named`).
"""

from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from divfuzz.fuzzer.store.rows import DamagedRow
from divfuzz.records.errors import StoreError


def connect(target: str, **kwargs) -> sqlite3.Connection:
    """A connection in autocommit mode whose rows are read by column name. `target` is a path, or
    a `file:` URI when `uri=True` is passed."""
    db = sqlite3.connect(target, isolation_level=None, **kwargs)
    db.row_factory = sqlite3.Row
    return db


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """All the writes in the block, or none: `BEGIN IMMEDIATE` (the write lock is taken at once, so
    two writers wait rather than fail half-way), `COMMIT` at the end, `ROLLBACK` on any exception
    (a full disk may already have rolled it back). Inside a transaction already open on `db` the
    block joins it: the outermost block commits or rolls back everything."""
    if db.in_transaction:
        yield db
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def describe_sqlite_error(path: Path, e: sqlite3.Error) -> str:
    """What an SQLite error means for the person running divfuzz, naming the file."""
    text = str(e)
    code = getattr(e, "sqlite_errorname", "")
    if code.startswith("SQLITE_FULL") or "disk is full" in text:
        return f"{path}: the disk is full ({text}); the store keeps every case stored before this one"
    if code.startswith("SQLITE_READONLY") or "readonly" in text:
        return f"{path}: the store is read-only ({text})"
    if code.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in text or "not a database" in text:
        return f"{path}: the store is corrupt ({text}); it was left as it is"
    return f"{path}: store error ({type(e).__name__}: {text})"


@contextmanager
def sqlite_errors_named(path: Path) -> Iterator[None]:
    """The block's SQLite errors raised as StoreError naming the store's file (what a transaction
    whose block is the caller's code, `Store.transaction`, raises at its COMMIT: a full disk)."""
    try:
        yield
    except sqlite3.Error as e:
        raise StoreError(describe_sqlite_error(path, e)) from e


@contextmanager
def errors_named(path: Path) -> Iterator[None]:
    """The block's SQLite errors, and the rows it could not decode (ValueError, TypeError,
    KeyError: damaged content), raised as StoreError naming the store's file."""
    try:
        yield
    except sqlite3.Error as e:
        raise StoreError(describe_sqlite_error(path, e)) from e
    except DamagedRow as e:  # a field checked as it was read (`divfuzz.fuzzer.store.rows.Fields`)
        raise StoreError(f"{path}: a damaged row: {e}; refused, and the store left as it is") from None
    except OverflowError as e:  # a number past SQLite's 64-bit integers, given as a row's id
        raise StoreError(f"{path}: {e}: no row has such an id") from None
    except (ValueError, TypeError, KeyError) as e:  # a row that does not decode: damaged content
        raise StoreError(f"{path}: the store holds a damaged row ({type(e).__name__}: {e})") from e
