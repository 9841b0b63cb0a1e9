"""A store's root causes, folded and counted by SQLite: what `divfuzz report` reads instead of
every bucket row (issue 40, item 8: a store of 100,001 buckets).

`RootCauseIndex` files each bucket in scope (the store, the buckets a run's cases fell into, or one
bucket) under its root cause by the one rule (`divfuzz.oracles.root_cause_rule.cause_parts` over
`divfuzz.generators.pattern.minimized_pattern`), a page of
buckets at a time, into TEMP tables. Then the grouping, the counts, the order, the leads and the
limits are SQL, and a report asks only for what it shows: a section's totals, its first root
causes with their first buckets, the folds by culprit with their first bucket ids.

Invariants:
- memory grows with a page of buckets and with what a caller asks for (`causes(limit=, buckets=)`,
  `folds(ids=)`), never with the store;
- the root causes, their order, leads, patterns, culprits, counts and `known` labels are those of
  `root_cause_groups(store.buckets())` (tests/test_report_memory.py holds them equal);
- the tables live in SQLite's temp database, never in the store file: a reader opened with
  `create=False` still writes nothing to the store; `close()` drops them;
- every SQLite error and undecodable row is a StoreError naming the store's file.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import threading
from collections import Counter
from pathlib import Path
from typing import Iterator

from divfuzz.fuzzer.store.connection import errors_named
from divfuzz.fuzzer.store.rows import BucketRow
from divfuzz.generators.pattern import minimized_pattern
from divfuzz.oracles.root_cause_rule import (
    EAGER_WORSE, CauseTotals, RootCause, cause_parts, culprit_of, known_of_buckets, severity_rank,
)

PAGE = 500  # bucket rows read at a time
_SERIAL = itertools.count(1)  # each index's own table names: two may be open on one connection
_BUCKET_COLUMNS = ", ".join(f"b.{name.strip()}" for name in BucketRow.COLUMNS.split(","))


class RootCauseIndex:
    """A scope's root causes in TEMP tables (see the module docstring); a context manager.

    `new_only` hides every root cause that matches a known upstream bug (`RootCause.is_new`):
    each query then leaves them out, and `hidden` counts them."""

    def __init__(self, db: sqlite3.Connection, lock: threading.RLock, path: Path, *, run_id: int | None = None,
                 bucket_id: int | None = None, new_only: bool = False):
        self.db, self._lock, self.path = db, lock, Path(path)
        n = next(_SERIAL)
        self._causes, self._members = f"divfuzz_report_causes_{n}", f"divfuzz_report_members_{n}"
        self.hidden = 0
        with errors_named(self.path):
            try:
                self._build(run_id, bucket_id)
                if new_only:
                    self.hidden = self._hide_known()
            except BaseException:
                self.close()
                raise

    def __enter__(self) -> "RootCauseIndex":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Drop the tables (a closed connection has dropped them already)."""
        try:
            with self._lock:
                for table in (self._members, self._causes, self._members + "_raw"):
                    self.db.execute(f"DROP TABLE IF EXISTS temp.{table}")
        except sqlite3.ProgrammingError:  # the store was closed first
            pass

    def _torch_versions(self) -> dict[int, str]:
        """Each run's torch version (`runs.versions_json`'s "torch"), for the known labels: a fix
        that is in the torch a bucket was found on makes its match "possibly". A run whose
        versions do not read as an object with a text "torch" is left out (its matches unchanged)."""
        if getattr(self, "_versions", None) is None:
            versions = {}
            for row in self._rows("SELECT id, versions_json FROM runs"):
                try:
                    value = json.loads(row["versions_json"])
                except (TypeError, ValueError):
                    continue
                torch_version = value.get("torch") if isinstance(value, dict) else None
                if isinstance(torch_version, str):
                    versions[row["id"]] = torch_version
            self._versions = versions
        return self._versions

    def _rows(self, query: str, args: tuple = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self.db.execute(query, args).fetchall()

    def _one(self, query: str, args: tuple = ()) -> sqlite3.Row:
        with self._lock:
            return self.db.execute(query, args).fetchone()

    # ---- building ----------------------------------------------------------------------------
    def _build(self, run_id: int | None, bucket_id: int | None) -> None:
        raw, causes, members = self._members + "_raw", self._causes, self._members
        where, scope = "", ()
        if run_id is not None:  # as `Store.buckets(run_id=)`: the buckets this run's cases fell into
            where, scope = " AND EXISTS (SELECT 1 FROM cases c WHERE c.bucket_id = b.id AND c.run_id = ?)", (run_id,)
        if bucket_id is not None:
            where, scope = where + " AND b.id = ?", (*scope, bucket_id)
        with self._lock:
            self.db.execute(f"CREATE TEMP TABLE {raw} (id INTEGER PRIMARY KEY, cause TEXT NOT NULL, culprit TEXT NOT NULL,"
                            " pattern TEXT, severity TEXT NOT NULL, rank INTEGER NOT NULL, count INTEGER NOT NULL)")
        after = 0
        while True:
            rows = self._rows(f"SELECT {_BUCKET_COLUMNS} FROM buckets b WHERE b.id > ?{where} ORDER BY b.id LIMIT ?",
                              (after, *scope, PAGE))
            if not rows:
                break
            filed = []
            for r in rows:
                b = BucketRow.from_row(r)
                pattern = minimized_pattern(b)  # the rule's input, then the rule (as `reports.root_causes.bucket_cause`)
                parts = cause_parts(b, pattern)
                filed.append((b.id, json.dumps(parts), culprit_of(b), pattern, b.severity, severity_rank(b.severity), b.count))
            with self._lock:
                self.db.executemany(f"INSERT INTO temp.{raw} VALUES (?, ?, ?, ?, ?, ?, ?)", filed)
            after = rows[-1]["id"]
        with self._lock:
            # One row per root cause, numbered in a reader's order (`root_cause_groups`): the
            # compiler's by severity, then eager-worse, each by cases (most first), then lead id. The
            # lead is the most severe bucket with the most cases (then the oldest); the pattern is
            # that of the cause's first bucket by id, as `root_cause_groups` keeps it.
            self.db.execute(f"CREATE TEMP TABLE {causes} (rc INTEGER PRIMARY KEY, cause TEXT NOT NULL UNIQUE,"
                            " lead INTEGER NOT NULL, severity TEXT NOT NULL, culprit TEXT NOT NULL, pattern TEXT,"
                            " buckets INTEGER NOT NULL, cases INTEGER NOT NULL, known TEXT, hidden INTEGER NOT NULL DEFAULT 0)")
            self.db.execute(
                f"INSERT INTO temp.{causes}(rc, cause, lead, severity, culprit, pattern, buckets, cases)"
                " SELECT row_number() OVER (ORDER BY l.severity = ?, l.rank, a.cases DESC, l.id), l.cause, l.id, l.severity,"
                " l.culprit, f.pattern, a.n, a.cases"
                f" FROM (SELECT cause, count(*) AS n, sum(count) AS cases, min(id) AS first FROM temp.{raw} GROUP BY cause) a"
                " JOIN (SELECT id, cause, severity, culprit, rank,"
                f"       row_number() OVER (PARTITION BY cause ORDER BY rank, count DESC, id) AS pos FROM temp.{raw}) l"
                f"   ON l.cause = a.cause AND l.pos = 1 JOIN temp.{raw} f ON f.id = a.first", (EAGER_WORSE,))
            self.db.execute(f"CREATE INDEX temp.{causes}_by_severity ON {causes}(severity, hidden, rc)")
            # Each bucket numbered by its root cause's number, then in the cause's order: a cause's
            # buckets are one run of `seq`, its lead first.
            self.db.execute(f"CREATE TEMP TABLE {members} (seq INTEGER PRIMARY KEY, rc INTEGER NOT NULL, id INTEGER NOT NULL,"
                            " severity TEXT NOT NULL)")
            self.db.execute(
                f"INSERT INTO temp.{members}(seq, rc, id, severity)"
                " SELECT row_number() OVER (ORDER BY c.rc, r.rank, r.count DESC, r.id), c.rc, r.id, r.severity"
                f" FROM temp.{raw} r JOIN temp.{causes} c ON c.cause = r.cause")
            self.db.execute(f"CREATE INDEX temp.{members}_by_cause ON {members}(rc, seq)")
            self.db.execute(f"DROP TABLE temp.{raw}")

    def _member_rows(self, rc: int, *, after: int = 0, limit: int = PAGE) -> list[sqlite3.Row]:
        return self._rows(f"SELECT m.seq, {_BUCKET_COLUMNS} FROM temp.{self._members} m JOIN buckets b ON b.id = m.id"
                          " WHERE m.rc = ? AND m.seq > ? ORDER BY m.seq LIMIT ?", (rc, after, limit))

    def _buckets_after(self, rc: int, after: int) -> Iterator[BucketRow]:
        """A root cause's buckets after `seq`, in its order, read a page at a time."""
        while True:
            rows = self._member_rows(rc, after=after)
            if not rows:
                return
            for r in rows:
                yield BucketRow.from_row(r)
            after = rows[-1]["seq"]

    def _all_members(self) -> Iterator[sqlite3.Row]:
        """Every filed bucket with its root cause's number, culprit and severity, in `seq` order."""
        after = 0
        while True:
            rows = self._rows(f"SELECT m.seq, m.rc, c.culprit AS rc_culprit, c.severity AS rc_severity, {_BUCKET_COLUMNS}"
                              f" FROM temp.{self._members} m JOIN temp.{self._causes} c ON c.rc = m.rc"
                              " JOIN buckets b ON b.id = m.id WHERE m.seq > ? ORDER BY m.seq LIMIT ?", (after, PAGE))
            if not rows:
                return
            yield from rows
            after = rows[-1]["seq"]

    def _hide_known(self) -> int:
        """`new_only`: each root cause's `known` label (its buckets read only until one matches),
        and those that match a known upstream bug hidden. Returns how many."""
        labels = []
        for rc, rows in itertools.groupby(self._all_members(), key=lambda r: r["rc"]):
            first = next(rows)
            known = known_of_buckets(map(BucketRow.from_row, itertools.chain([first], rows)),
                                     culprit=first["rc_culprit"], severity=first["rc_severity"],
                                     torch_versions=self._torch_versions())
            labels.append((known, known != "new", rc))
        with self._lock:
            self.db.executemany(f"UPDATE temp.{self._causes} SET known = ?, hidden = ? WHERE rc = ?", labels)
        return sum(hide for _, hide, _ in labels)

    # ---- what a report asks --------------------------------------------------------------------
    def bucket_counts(self) -> Counter:
        """Severity -> buckets in scope (hidden root causes' buckets included)."""
        with errors_named(self.path):
            return Counter({r["severity"]: r["n"] for r in self._rows(
                f"SELECT severity, count(*) AS n FROM temp.{self._members} GROUP BY severity")})

    def bucket_total(self) -> int:
        with errors_named(self.path):
            return self._one(f"SELECT count(*) AS n FROM temp.{self._members}")["n"]

    def cause_counts(self) -> Counter:
        """Severity -> root causes (not hidden)."""
        with errors_named(self.path):
            return Counter({r["severity"]: r["n"] for r in self._rows(
                f"SELECT severity, count(*) AS n FROM temp.{self._causes} WHERE hidden = 0 GROUP BY severity")})

    def section(self, severity: str) -> tuple[int, int, int]:
        """(root causes, buckets, cases) of a severity's root causes (not hidden)."""
        with errors_named(self.path):
            r = self._one(f"SELECT count(*) AS n, coalesce(sum(buckets), 0) AS buckets, coalesce(sum(cases), 0) AS cases"
                          f" FROM temp.{self._causes} WHERE severity = ? AND hidden = 0", (severity,))
        return r["n"], r["buckets"], r["cases"]

    def causes(self, severity: str, *, limit: int | None = None, buckets: int) -> Iterator[RootCause]:
        """A severity's root causes (not hidden) in a reader's order, at most `limit` of them, read a
        page at a time: each a `RootCause` holding its first `buckets` buckets (lead first), with
        `totals` over all of them (its `known` label read over its buckets until one matches)."""
        after, left = 0, limit
        with errors_named(self.path):
            while left is None or left > 0:
                page = PAGE if left is None else min(PAGE, left)
                rows = self._rows(f"SELECT * FROM temp.{self._causes} WHERE severity = ? AND hidden = 0 AND rc > ?"
                                  " ORDER BY rc LIMIT ?", (severity, after, page))
                if not rows:
                    return
                for row in rows:
                    rc = self._cause(row, buckets)
                    if rc is not None:
                        yield rc
                after = rows[-1]["rc"]
                left = None if left is None else left - len(rows)

    def _cause(self, row: sqlite3.Row, n_buckets: int) -> RootCause | None:
        members = self._member_rows(row["rc"], limit=max(1, n_buckets))
        if not members:  # its buckets were deleted since (a campaign writing the store meanwhile)
            return None
        shown = tuple(BucketRow.from_row(r) for r in members)
        whole = row["buckets"] <= len(shown)
        if whole:
            counts = Counter(b.severity for b in shown)
            tally = tuple((sev, counts[sev]) for sev in sorted(counts, key=severity_rank))
        else:
            tally = tuple((r["severity"], r["n"]) for r in sorted(self._rows(
                f"SELECT severity, count(*) AS n, min(seq) AS first FROM temp.{self._members} WHERE rc = ? GROUP BY severity"
                " ORDER BY first", (row["rc"],)), key=lambda r: severity_rank(r["severity"])))
        known = row["known"]
        if known is None:
            rest = () if whole else self._buckets_after(row["rc"], members[-1]["seq"])
            known = known_of_buckets(itertools.chain(shown, rest), culprit=row["culprit"], severity=row["severity"],
                                     torch_versions=self._torch_versions())
        return RootCause(parts=tuple(json.loads(row["cause"])), severity=row["severity"], culprit=row["culprit"],
                         pattern=row["pattern"], buckets=shown,
                         totals=CauseTotals(buckets=row["buckets"], cases=row["cases"], severities=tally, known=known))

    def folds(self, severity: str, *, ids: int) -> list[tuple[str, str, int, int, int, list[int]]]:
        """A severity's root causes (not hidden) folded by culprit, as `fold_by_culprit` folds them:
        (severity, culprit, root causes, buckets, cases, the first `ids` bucket ids), by buckets
        (most first), then culprit."""
        out = []
        with errors_named(self.path):
            for r in self._rows(f"SELECT culprit, count(*) AS n_rc, sum(buckets) AS n, sum(cases) AS cases"
                                f" FROM temp.{self._causes} WHERE severity = ? AND hidden = 0 GROUP BY culprit"
                                " ORDER BY n DESC, culprit", (severity,)):
                first = [i["id"] for i in self._rows(
                    f"SELECT m.id AS id FROM temp.{self._members} m JOIN temp.{self._causes} c ON c.rc = m.rc"
                    " WHERE c.severity = ? AND c.hidden = 0 AND c.culprit = ? ORDER BY m.id LIMIT ?",
                    (severity, r["culprit"], ids))]
                out.append((severity, r["culprit"], r["n_rc"], r["n"], r["cases"], first))
        return out
