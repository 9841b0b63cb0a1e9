"""A store received from someone else (issue 56): a command that only reads it opens it read-only
and never upgrades it; the attacks are repeated through the real command line, and each refusal
is exit 2 with the store named and the file left byte for byte as it was."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from divfuzz.fuzzer.cli.main import main
from divfuzz.fuzzer.store import SCHEMA_VERSION, STORE_NAME, Store
from divfuzz.records.errors import StoreError, UnsafePathError
from divfuzz.records.safe_paths import open_plain
from test_input_errors import small_store


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _flat(text: str) -> str:
    return " ".join(text.split())


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _folder(path: Path) -> dict[str, str]:
    return {p.name: _sha(p) for p in sorted(path.parent.iterdir()) if p.is_file()}


def _sql(path: Path, *statements: str) -> None:
    db = sqlite3.connect(path)
    for statement in statements:
        db.execute(statement)
    db.commit()
    db.close()


def _claiming_version_4(tmp_path: Path) -> Path:
    """The issue's attack: a current store whose meta was edited to claim schema 4."""
    path = small_store(tmp_path / "received")
    _sql(path, "UPDATE meta SET value='4' WHERE key='schema_version'")
    return path


def _version_4(tmp_path: Path) -> Path:
    """A store as schema 4 wrote it: its bucket keyed by a text, a signature in its key_json."""
    path = _claiming_version_4(tmp_path)
    old = '{"kind": "ulp", "dtype": "bfloat16", "device_type": "cpu", "signature": "gelu", "detail": ""}'
    _sql(path, f"UPDATE buckets SET key='ulp \u00b7 bfloat16 \u00b7 cpu \u00b7 gelu', key_json='{old}'")
    return path


@pytest.mark.parametrize("command", [
    ("report", "--out", "{dir}"),
    ("report", "--out", "{dir}", "--html", "{tmp}/page.html"),
    ("report", "--out", "{dir}", "--bucket", "1", "--issue"),
    ("diff", "{dir}", "{dir}"),
    ("minimize", "1", "--out", "{dir}", "--repro-dir", "{tmp}/min"),
    ("bench", "--breakdown", "{dir}"),
])
def test_a_reading_command_refuses_a_store_that_needs_upgrading_and_leaves_it_byte_identical(tmp_path, command):
    """The attack: a copied store whose meta claims schema 4 was rewritten by `report` (every
    key's ops emptied, root causes dropped) and the command exited 0."""
    path = _claiming_version_4(tmp_path)
    before = _folder(path)
    result = _invoke(*(a.format(dir=path.parent, tmp=tmp_path) for a in command))
    message = _flat(result.output)
    assert result.exit_code == 2, result.output
    assert f"{path}: store schema version 4 is older than this divfuzz's ({SCHEMA_VERSION})" in message, message
    assert f"divfuzz fuzz --out {path.parent}" in message and "left as it is" in message, message
    assert _folder(path) == before  # the store byte for byte, and no -wal, -shm or log beside it
    assert not (tmp_path / "page.html").exists() and not (tmp_path / "min").exists()


def test_a_read_only_open_never_migrates_and_a_writing_open_does(tmp_path, monkeypatch):
    path = _version_4(tmp_path)
    before = _sha(path)
    import divfuzz.fuzzer.store.store as store_module

    def no_migration(*args):
        raise AssertionError("migrate() called on a read path")

    with monkeypatch.context() as m:
        m.setattr(store_module, "migrate", no_migration)
        with pytest.raises(StoreError, match="older than this divfuzz"):
            Store(path, create=False)
    assert _sha(path) == before
    Store(path, create=False, read_only=False).close()  # a writing command's open: checked, then upgraded
    store = Store(path, create=False)
    try:
        assert store.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
        [bucket] = store.buckets()
        assert bucket.count == 1 and bucket.key.ops == ("gelu",)
    finally:
        store.close()


def test_a_store_whose_version_was_lowered_by_hand_is_not_upgraded_by_a_writing_command_either(tmp_path):
    """Upgrading the attack's store would have emptied every key's ops: its keys are no schema-4
    keys, and the writing open says so, naming the row, and converts nothing."""
    path = _claiming_version_4(tmp_path)
    before = _sha(path)
    with pytest.raises(StoreError) as refused:
        Store(path, create=False, read_only=False)
    assert f"{path}: its meta table says schema 4, but buckets row 1 holds no schema-4 key" in str(refused.value)
    assert _sha(path) == before
    result = _invoke("merge", tmp_path / "merged", path.parent)
    assert result.exit_code == 2 and "buckets row 1 holds no schema-4 key" in _flat(result.output), result.output
    assert not (tmp_path / "merged").exists() and _sha(path) == before


def test_a_store_opened_read_only_refuses_every_write_and_creates_no_journal(tmp_path):
    path = small_store(tmp_path)
    before = _folder(path)
    store = Store(path, create=False)
    try:
        with pytest.raises(StoreError, match="read-only"):
            store.finish_run(1, "interrupted")
        assert store.run_info(1)["status"] == "finished"
    finally:
        store.close()
    assert _folder(path) == before


def test_a_reader_sees_what_a_live_writer_has_committed(tmp_path):
    """With a writer's log beside it (a campaign running), the read-only open reads through it
    (not `immutable`, which would miss the log's rows)."""
    path = small_store(tmp_path)
    writer = Store(path)
    try:
        run_id, _ = writer.start_run(seed=9, device="cpu", config={}, options={}, versions={})
        assert Path(f"{path}-wal").exists()
        reader = Store(path, create=False)
        try:
            assert reader.has_run(run_id)
        finally:
            reader.close()
    finally:
        writer.close()


def test_fuzz_the_writing_command_the_refusal_names_upgrades_the_store(tmp_path):
    path = _version_4(tmp_path)
    result = _invoke("fuzz", "--out", path.parent, "--device", "cpu", "--max-cases", "1", "--workers", "1", "--no-live",
                     "--no-minimize", "--max-ops", "2", "--backend", "divfuzz.fuzzer.engine.planted:ulp_bump")
    assert result.exit_code == 0, result.output
    store = Store(path, create=False)  # now current: read without refusal
    try:
        assert store.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
        assert len(store.runs()) == 2
    finally:
        store.close()


PLANTED_SQL = {
    "trigger": ("CREATE TRIGGER quiet AFTER INSERT ON cases BEGIN UPDATE buckets SET severity='noise'; END",
                "trigger 'quiet' on 'cases'"),
    "view": ("CREATE VIEW everything AS SELECT spec_json FROM cases", "view 'everything'"),
    "table": ("CREATE TABLE stolen (spec_json TEXT)", "table 'stolen'"),
    "index": ("CREATE UNIQUE INDEX one_digest ON cases(spec_digest)", "index 'one_digest' on 'cases'"),
}


@pytest.mark.parametrize("what", sorted(PLANTED_SQL))
@pytest.mark.parametrize("command", ["report", "fuzz", "merge"])
def test_a_store_with_a_trigger_view_or_unknown_table_is_refused_naming_it(tmp_path, what, command):
    """The attack: a planted `create trigger ... after insert on cases` turned a suspect bucket to
    noise during a resume, and the command exited 0."""
    path = small_store(tmp_path / "received")
    statement, named = PLANTED_SQL[what]
    _sql(path, statement)
    before = _folder(path)
    args = {"report": ("report", "--out", path.parent),
            "fuzz": ("fuzz", "--out", path.parent, "--device", "cpu", "--max-cases", "1", "--no-live", "--workers", "1"),
            "merge": ("merge", tmp_path / "merged", path.parent)}[command]
    result = _invoke(*args)
    message = _flat(result.output)
    assert result.exit_code == 2, result.output
    assert f"{path}: holds what no divfuzz store has: {named}" in message and "refused and left as it is" in message, message
    assert _folder(path) == before and not (tmp_path / "merged").exists()


# ---- files divfuzz writes into a store folder: never through a hard link --------------------------
def _hard_link_to_an_unrelated_file(tmp_path: Path, name: str) -> tuple[Path, Path, bytes]:
    path = small_store(tmp_path / "received")
    unrelated = tmp_path / "unrelated.txt"
    unrelated.write_bytes(b"the user's own file, kept byte for byte\n")
    os.link(unrelated, path.parent / name)
    return path, unrelated, unrelated.read_bytes()


@pytest.mark.parametrize("command", ["merge", "minimize-pending"])
def test_a_hard_linked_lock_is_refused_and_the_file_it_names_is_left_byte_identical(tmp_path, command):
    """The attack: `divfuzz.lock` hard-linked to an unrelated file had that file overwritten with
    the lock's JSON, exit 0."""
    path, unrelated, before = _hard_link_to_an_unrelated_file(tmp_path, "divfuzz.lock")
    args = {"merge": ("merge", path.parent, small_store(tmp_path / "shard")),
            "minimize-pending": ("minimize", "--pending", "--out", path.parent, "--device", "cpu")}[command]
    result = _invoke(*args)
    message = _flat(result.output)
    assert result.exit_code == 2, result.output
    assert f"campaign lock {path.parent / 'divfuzz.lock'}: is a hard link (2 names for one file)" in message, message
    assert "refused and left as it is" in message
    assert unrelated.read_bytes() == before


def test_a_hard_linked_store_is_not_written_but_may_be_read(tmp_path):
    path = small_store(tmp_path / "received")
    os.link(path, tmp_path / "second-name.sqlite")
    before = _sha(path)
    with pytest.raises(UnsafePathError, match="is a hard link"):
        Store(path)
    with pytest.raises(UnsafePathError, match="is a hard link"):
        Store(path, create=False, read_only=False)
    Store(path, create=False).close()  # read-only and immutable: nothing is written through it
    assert _sha(path) == before


def test_open_plain_refuses_writing_or_truncating_a_hard_link_before_touching_it(tmp_path):
    target = tmp_path / "target"
    target.write_bytes(b"kept")
    os.link(target, tmp_path / "link")
    for flags in (os.O_RDWR | os.O_CREAT, os.O_WRONLY | os.O_TRUNC, os.O_WRONLY | os.O_APPEND):
        with pytest.raises(UnsafePathError, match="is a hard link"):
            open_plain(tmp_path / "link", flags, what="log")
    os.close(open_plain(tmp_path / "link", what="spec"))  # reading is harmless
    assert target.read_bytes() == b"kept"
    os.symlink(target, tmp_path / "symlink")
    with pytest.raises(UnsafePathError, match="is a symlink"):
        open_plain(tmp_path / "symlink", os.O_WRONLY | os.O_TRUNC, what="log")
    assert target.read_bytes() == b"kept"


def test_the_html_report_and_the_logs_are_never_written_through_a_planted_name(tmp_path):
    """report.html's temporary file had a guessable name (`.report.html.tmp-<pid>`) opened with
    a plain `open`: a symlink planted there was followed."""
    from divfuzz.reports.html import write_page
    from divfuzz.records.safe_paths import write_text_plain

    unrelated = tmp_path / "unrelated.txt"
    unrelated.write_text("kept")
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(unrelated, out / f".report.html.tmp-{os.getpid()}")
    write_page("<p>page</p>", out / "report.html")
    assert (out / "report.html").read_text() == "<p>page</p>" and unrelated.read_text() == "kept"
    os.link(unrelated, out / "divfuzz-run1-failure.log")
    with pytest.raises(UnsafePathError, match="is a hard link"):
        write_text_plain(out / "divfuzz-run1-failure.log", "traceback", what="failure log")
    assert unrelated.read_text() == "kept"


# ---- every stored row is checked as it is read --------------------------------------------------
DAMAGED_ROWS = {
    # the four, and one per kind of field
    "severity_json list": ("UPDATE buckets SET severity_json='[1,2]'", "table buckets, row 1, field severity_json: expected a JSON object"),
    "options_json list": ("UPDATE runs SET options_json='[1,2]'", "table runs, row 1, field options_json: expected a JSON object"),
    "text first_seen": ("UPDATE buckets SET first_seen='yesterday'", "table buckets, row 1, field first_seen: expected a finite number"),
    "spec nodes 5": ("""UPDATE cases SET spec_json='{"nodes": 5}'""", "table cases, row 1, field spec_json: nodes must be a list"),
    "verdict not a verdict": ("""UPDATE cases SET verdict_json='{"status": "exploded"}'""", "table cases, row 1, field verdict_json: not a verdict"),
    "unknown severity": ("UPDATE buckets SET severity='catastrophic'", "table buckets, row 1, field severity: expected one of bug"),
    "key_json list": ("UPDATE buckets SET key_json='[]'", "table buckets, row 1, field key_json: expected a JSON object"),
    "culprit without a stage": ("""UPDATE buckets SET culprit_json='{"summary": "x"}'""", "table buckets, row 1, field culprit_json: not a culprit"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGED_ROWS))
@pytest.mark.parametrize("command", ["report --html", "diff", "merge"])
def test_a_damaged_row_exits_2_naming_store_table_row_and_field_and_writes_no_log(tmp_path, damage, command):
    """The attack: such rows gave `internal error: ... AttributeError: 'list' object has no
    attribute 'get'`, naming nothing, with a traceback log written into the received folder;
    `merge` copied them and exited 0 (its output then failed `report --html`)."""
    path = small_store(tmp_path / "received")
    statement, fragment = DAMAGED_ROWS[damage]
    _sql(path, statement)
    before = _folder(path)
    args = {"report --html": ("report", "--out", path.parent, "--html", tmp_path / "page.html"),
            "diff": ("diff", small_store(tmp_path / "other"), path.parent),
            "merge": ("merge", tmp_path / "merged", path.parent)}[command]
    result = _invoke(*args)
    message = _flat(result.output)
    assert result.exit_code == 2, result.output
    assert f"{path}: a damaged row: {fragment}" in message and "internal error" not in message, message
    assert _folder(path) == before  # no divfuzz-error-*.log beside the store, and the store as it was
    assert not (tmp_path / "merged").exists() and not (tmp_path / "page.html").exists()


def test_a_bucket_id_past_sqlites_integers_is_an_input_error_not_an_overflow(tmp_path):
    path = small_store(tmp_path / "received")
    result = _invoke("report", "--out", path.parent, "--bucket", "99999999999999999999", "--html", tmp_path / "page.html")
    message = _flat(result.output)
    assert result.exit_code == 2 and "--bucket" in message and "from 1 to 9223372036854775807" in message, message
    assert "OverflowError" not in message and "internal error" not in message
    with pytest.raises(StoreError, match="no row has such an id"):  # the store's own backstop, for any caller
        store = Store(path, create=False)
        try:
            store.bucket(10**20)
        finally:
            store.close()
