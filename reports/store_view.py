"""What the reports read of a store: the typed view `divfuzz.fuzzer.store.Store` implements.

The reports sit below the store in the layers (the store files buckets by root cause with
`divfuzz.reports.root_causes`' rule), so they cannot import it; they take any object of this shape
instead. `tests/test_store_view.py` holds the two sides together: every member here is the
`Store`'s with the same parameters, and the reports call nothing on a store that is not here.
Read-only: no member writes. Rows come back as the store's own records (`BucketRow`, `RecheckRow`,
a `RootCauseIndex`), typed `Any` here because their classes live above.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Protocol, runtime_checkable


@runtime_checkable
class StoreView(Protocol):
    """The store as `report`, `report --html`, `diff` and the markdown tables read it."""

    path: Path

    def runs(self) -> list[dict[str, Any]]: ...

    def buckets(self, *, run_id: int | None = None) -> list[Any]: ...

    def case_count(self, *, run_id: int | None = None, bucket_id: int | None = None, opened: bool = False) -> int: ...

    def case_summaries(self, *, run_id: int | None = None) -> list[dict[str, Any]]: ...

    def iter_case_summaries(self, *, run_id: int | None = None, bucket_id: int | None = None) -> Iterator[dict[str, Any]]: ...

    def bucket_case_summaries(self, bucket_id: int, *, limit: int, also: int | None = None) -> list[dict[str, Any]]: ...

    def iter_case_specs(self, *, run_id: int | None = None) -> Iterator[tuple[str, int | None, str | None]]: ...

    def iter_case_times(self, *, run_id: int | None = None, bucket_id: int | None = None,
                        opened: bool = False) -> Iterator[float]: ...

    def rechecks(self, *, bucket_id: int | None = None) -> list[Any]: ...

    def root_cause_index(self, *, run_id: int | None = None, bucket_id: int | None = None, new_only: bool = False) -> Any: ...
