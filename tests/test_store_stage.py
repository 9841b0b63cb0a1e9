"""The store is one stage (`divfuzz.fuzzer.store`): one transaction, one store name, named rows,
and merge written through the store's own methods. Real SQLite files throughout."""

from __future__ import annotations

import ast
import json
import sqlite3
from pathlib import Path

import pytest

from divfuzz.oracles.severity_policy import bucket_severity
from divfuzz.fuzzer.store import STORE_NAME, Store
from divfuzz.records.buckets import BucketKey
from divfuzz.records.errors import StoreError

ROOT = Path(__file__).resolve().parents[1]
SOURCE_FOLDERS = ("fuzzer", "generators", "oracles", "reports", "records", "scripts", "tests")
STORE_PACKAGE = ROOT / "fuzzer" / "store"
GELU = BucketKey("ulp", "bfloat16", "cpu", ops=("gelu",))
NORM = BucketKey("ulp", "bfloat16", "cpu", ops=("layer_norm",))
_VERDICT = {"status": "diverged", "outputs": [], "timings": []}


def _sources(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


def _dump(path: Path) -> list[str]:
    """Every row of every table, from a connection of its own: what a reader would see."""
    db = sqlite3.connect(path)
    try:
        return list(db.iterdump())
    finally:
        db.close()


def _case(store: Store, run_id: int, idx: int, key: BucketKey | None, **extra) -> tuple[int, int | None, bool]:
    return store.add_case(run_id=run_id, slot=0, idx=idx, spec_digest=f"d{idx}", spec_json=json.dumps({"d": idx}),
                          device="cpu", config={}, verdict=extra.pop("verdict", _VERDICT), score=1.0, wall_s=0.1,
                          finding_kind=key.kind if key else None, key=key, triage="compiled-worse",
                          judged=bucket_severity(key, {"severity": "suspect", "rule": "test", "output": "v1", "detail": ""}), ran_on="cpu")


@pytest.fixture
def store(tmp_path):
    store = Store(tmp_path / STORE_NAME)
    run_id, _ = store.start_run(seed=1, device="cpu", config={}, options={"workers": 1}, versions={"torch": "x"})
    _case(store, run_id, 0, GELU)
    yield store, run_id
    store.close()


def test_a_write_that_raises_inside_a_transaction_leaves_the_store_unchanged(store, tmp_path):
    store, run_id = store
    before = _dump(tmp_path / STORE_NAME)
    with pytest.raises(RuntimeError, match="half-way"):
        with store.transaction():
            store.finish_run(run_id)  # each of these would commit on its own; inside, they join the block
            _case(store, run_id, 1, NORM)
            _case(store, run_id, 2, GELU)
            store.set_bucket_folder(1, "/somewhere")
            store.remember_root_cause(NORM, GELU)
            raise RuntimeError("half-way")
    assert _dump(tmp_path / STORE_NAME) == before
    assert store.run_info(run_id)["status"] == "running" and [b.count for b in store.buckets()] == [1]
    with store.transaction():  # and the store still writes afterwards: the transaction was closed
        _case(store, run_id, 1, NORM)
    assert [b.key for b in store.buckets()] == [GELU, NORM]


def test_a_write_method_that_fails_part_way_writes_none_of_its_rows(store, tmp_path):
    store, run_id = store
    before = _dump(tmp_path / STORE_NAME)
    # The bucket row is written before the case row, whose verdict has no status: the whole case rolls back.
    with pytest.raises(StoreError, match="damaged row") as info:
        _case(store, run_id, 1, NORM, verdict={"outputs": []})
    assert str(tmp_path / STORE_NAME) in str(info.value)
    assert _dump(tmp_path / STORE_NAME) == before
    assert [b.key for b in store.buckets()] == [GELU]


def test_store_name_is_defined_once_and_written_nowhere_else():
    definitions, literals = [], []
    for path in _sources(*SOURCE_FOLDERS):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            definitions += [path.relative_to(ROOT) for t in targets if isinstance(t, ast.Name) and t.id == "STORE_NAME"]
            if isinstance(node, ast.Constant) and node.value == "divfuzz.sqlite":
                literals.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert definitions == [Path("fuzzer/store/schema.py")]
    package_literals = [f for f in literals if f.split("/")[0] in ("fuzzer", "generators", "oracles", "reports", "records")]
    assert [f.split(":")[0] for f in package_literals] == ["fuzzer/store/schema.py"], package_literals


def test_nothing_outside_the_store_package_imports_the_old_engine_modules():
    stale = [f"{p.relative_to(ROOT)}" for p in _sources(*SOURCE_FOLDERS)
             if any(s in p.read_text() for s in ("engine.store", "engine.merge", "engine import store", "engine import merge"))
             and p.name != "test_store_stage.py"]
    assert stale == []
    assert not (ROOT / "fuzzer" / "engine" / "store.py").exists() and not (ROOT / "fuzzer" / "engine" / "merge.py").exists()


def _positional_row_reads(tree: ast.AST) -> list[str]:
    """`r[3]`, `row[:2]`, `fetchone()[0]`, and tuple-unpacking a query's rows (`for a, b in db.execute(...)`)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            s = node.slice
            if (isinstance(s, ast.Constant) and isinstance(s.value, int)) or isinstance(s, ast.Slice):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        target, value = None, None
        if isinstance(node, (ast.For, ast.comprehension)):
            target, value = node.target, node.iter
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        if isinstance(target, ast.Tuple) and value is not None and any(
                isinstance(n, ast.Attribute) and n.attr in ("execute", "fetchone", "fetchall", "fetchmany")
                for n in ast.walk(value)):
            found.append(f"{node.lineno}: {ast.unparse(target)} = {ast.unparse(value)[:60]}")
    return found


def test_the_store_package_reads_no_row_by_position():
    found = {str(p.relative_to(ROOT)): _positional_row_reads(ast.parse(p.read_text())) for p in _sources("fuzzer/store")}
    assert len(found) >= 6 and not any(found.values()), found
    # The check can fail: the old store's way of reading is caught.
    assert _positional_row_reads(ast.parse("r = db.execute(q).fetchone()\nx = (r[0], r[1])\nfor a, b in db.execute(q): pass"))


def _string_constants(path: Path) -> list[str]:
    return [n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def test_one_begin_commit_rollback_in_all_of_divfuzz_and_none_of_it_in_merge():
    sites = {word: [str(p.relative_to(ROOT)) for p in _sources("fuzzer", "generators", "oracles", "reports", "records")
                    for s in _string_constants(p) if s.strip().upper().startswith(word)]
             for word in ("BEGIN", "COMMIT", "ROLLBACK")}
    assert sites == {word: ["fuzzer/store/connection.py"] for word in sites}, sites
    merge = STORE_PACKAGE.parent / "campaign" / "merge.py"  # above the store: it files through Filing
    sql = [s for s in _string_constants(merge) if s.lstrip().upper().startswith(("SELECT", "INSERT", "UPDATE", "DELETE", "PRAGMA"))]
    calls = [n for n in ast.walk(ast.parse(merge.read_text()))
             if isinstance(n, ast.Attribute) and n.attr in ("execute", "executemany", "executescript", "db")]
    assert sql == [] and calls == []


def test_an_older_input_is_read_through_a_migrated_private_copy_and_left_byte_identical(tmp_path):
    """`Store.open_input` on a schema-1 store: what merge reads is the upgraded view (severity
    'suspect', no ran_on), and the input's bytes and folder do not change."""
    old = tmp_path / "old"
    old.mkdir()
    store = Store(old / STORE_NAME)
    run_id, _ = store.start_run(seed=3, device="cpu", config={}, options={}, versions={})
    _case(store, run_id, 0, GELU)
    store.close()
    db = sqlite3.connect(old / STORE_NAME)  # back to schema 1: no severity, no ran_on, no pending_analyses
    db.executescript("DROP TABLE pending_analyses; ALTER TABLE buckets DROP COLUMN severity;"
                     "ALTER TABLE buckets DROP COLUMN severity_json; ALTER TABLE cases DROP COLUMN ran_on;"
                     "UPDATE meta SET value='1' WHERE key='schema_version';")
    # and its key as schema 1 to 4 wrote it: a text, a signature in key_json
    db.execute("UPDATE buckets SET key=?, key_json=?", ("ulp · bfloat16 · cpu · gelu", json.dumps(
        {"kind": "ulp", "dtype": "bfloat16", "device_type": "cpu", "signature": "gelu", "detail": ""})))
    db.commit()
    db.execute("PRAGMA journal_mode=DELETE")
    db.close()
    before = {p.name: p.read_bytes() for p in old.iterdir()}
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with Store.open_input(old / STORE_NAME, scratch) as source:
        (bucket,) = source.buckets()
        (case,) = source.iter_cases()
        assert (bucket.key, bucket.severity, bucket.severity_reason) == (GELU, "suspect", None)
        assert case.ran_on is None and source.pending_analyses() == [] and source.root_cause_rows() == []
        assert source.path == old / STORE_NAME  # its errors name the input, not the copy
    assert {p.name: p.read_bytes() for p in old.iterdir()} == before
