"""A bucket's folder read back as a record (`divfuzz.reports.bucket_folder.BucketFolder`): what
`write_bucket_folder` wrote comes back field for field; a folder placed by id and key, never by a
stored path; a file that does not parse, or one planted as a link, is refused naming it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from divfuzz.generators.spec import GraphSpec
from divfuzz.records.buckets import BucketKey, CulpritKey
from divfuzz.records.config import CompileConfig
from divfuzz.records.errors import StoreError, UnsafePathError
from divfuzz.records.outcomes import Status
from divfuzz.records.verdict import Verdict
from divfuzz.reports import bucket_files
from divfuzz.reports.bucket_files import CASE_FILE, ISSUE_MARKDOWN, REPRO_FILE, SPEC_FILE, VERDICT_FILE, bucket_folder_path
from divfuzz.reports.bucket_folder import BucketFolder, write_bucket_folder
from test_spec_safety import base

KEY = BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("gelu",), rule="bf16-ulp",
                culprit=CulpritKey("inductor", switch="emulate_precision_casts"))


def _written(out: Path, bucket_id: int = 3, **extra) -> Path:
    return write_bucket_folder(out / "buckets", bucket_id=bucket_id, key=KEY, spec=GraphSpec.from_dict(base()), device="cpu",
                               config=CompileConfig(inductor=(("fallback_random", True),)), verdict=Verdict(Status.OK, threads=2),
                               case_id=17, check_issue=False, **extra)


def test_what_was_written_loads_back_field_for_field(tmp_path):
    folder = _written(tmp_path, extra_files={"analysis.json": json.dumps({"phases": {"minimize": 1.5}}) + "\n"})
    assert folder == bucket_folder_path(tmp_path, 3, KEY)
    loaded = BucketFolder.load(tmp_path, 3, KEY)
    assert loaded.path == folder and loaded.key == KEY and loaded.device == "cpu" and loaded.case_id == 17
    assert loaded.config == CompileConfig(inductor=(("fallback_random", True),)) and loaded.threads == 2
    assert loaded.spec.to_json() == GraphSpec.from_dict(base()).to_json()
    assert loaded.verdict.status is Status.OK
    assert loaded.analysis == {"phases": {"minimize": 1.5}}
    assert loaded.file(REPRO_FILE) == folder / REPRO_FILE and loaded.file(ISSUE_MARKDOWN) is None
    assert set(loaded.names()) >= {SPEC_FILE, CASE_FILE, VERDICT_FILE, REPRO_FILE}


def test_replace_file_writes_whole_and_read_file_reads_it_back(tmp_path):
    _written(tmp_path)
    loaded = BucketFolder.load(tmp_path, 3, KEY)
    loaded.replace_file(ISSUE_MARKDOWN, "# title\n")
    assert loaded.read_file(ISSUE_MARKDOWN) == "# title\n"
    assert not [p for p in loaded.path.iterdir() if p.name.startswith(".")]
    with pytest.raises(ValueError, match="not a bucket file name"):
        loaded.replace_file("../escape.md", "x")


def test_a_folder_is_placed_by_its_id_and_key_not_by_another_buckets_name(tmp_path):
    _written(tmp_path, bucket_id=3)
    assert BucketFolder.exists(tmp_path, 3, KEY)
    assert not BucketFolder.exists(tmp_path, 4, KEY)
    with pytest.raises(StoreError, match="no such bucket folder"):
        BucketFolder.load(tmp_path, 4, KEY)


@pytest.mark.parametrize("name,text,words", [
    (CASE_FILE, "[1, 2]", "a JSON object expected, found list"),
    (CASE_FILE, "{not json", "not JSON"),
    (CASE_FILE, json.dumps({"device": "cpu", "config": {}}), "field 'bucket' is missing"),
    (VERDICT_FILE, json.dumps({"status": "no-such-status"}), "not a verdict"),
    (SPEC_FILE, json.dumps({"inputs": "x"}), SPEC_FILE),
    # parsed but not a valid graph: an op divfuzz does not know
    (SPEC_FILE, json.dumps(base() | {"nodes": [{"name": "v1", "op": "no_such_op", "inputs": ["x0"], "params": {},
                                                "dtype": "float32", "shape": [4]}]}), "no_such_op"),
])
def test_a_file_that_does_not_parse_is_refused_naming_the_file(tmp_path, name, text, words):
    folder = _written(tmp_path)
    (folder / name).write_text(text)
    with pytest.raises(StoreError) as refused:
        BucketFolder.load(tmp_path, 3, KEY)
    assert str(folder / name) in str(refused.value) and words in str(refused.value)


def test_a_missing_required_file_is_named(tmp_path):
    folder = _written(tmp_path)
    os.unlink(folder / VERDICT_FILE)
    with pytest.raises(StoreError, match=f"{VERDICT_FILE} missing"):
        BucketFolder.load(tmp_path, 3, KEY)


def test_a_file_planted_as_a_link_is_refused_and_left_alone(tmp_path):
    folder = _written(tmp_path)
    secret = tmp_path / "secret.md"
    secret.write_text("not divfuzz's")
    (folder / ISSUE_MARKDOWN).symlink_to(secret)
    loaded = BucketFolder.load(tmp_path, 3, KEY)
    with pytest.raises(UnsafePathError, match="symlink"):
        loaded.read_file(ISSUE_MARKDOWN)
    with pytest.raises(UnsafePathError):
        loaded.replace_file(ISSUE_MARKDOWN, "overwritten")
    assert secret.read_text() == "not divfuzz's"


def test_every_bucket_file_name_is_a_plain_name_owned_by_bucket_files():
    names = [v for k, v in vars(bucket_files).items() if k.endswith(("_FILE", "_SCRIPT", "_MARKDOWN", "_LOG"))]
    assert len(names) == len(set(names)) >= 9
    assert all("/" not in n and n == Path(n).name for n in names)
