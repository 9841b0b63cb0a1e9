"""Symlinks where divfuzz writes folders (issue 56): a symlinked `minimize --repro-dir` is refused
before any work, in words that name the option (it was refused after 48 s of minimizing, as a
"buckets folder"); a bucket folder that is a symlink (to another bucket's folder) is refused naming
it, with no `.tmp-*` folder left (a resume failed with "Cannot call rmtree on a symbolic link")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from divfuzz.fuzzer.cli.main import main
from divfuzz.generators.spec import GraphSpec
from divfuzz.records.buckets import BucketKey
from divfuzz.records.config import CompileConfig
from divfuzz.records.errors import UnsafePathError
from divfuzz.records.outcomes import Status
from divfuzz.records.verdict import Verdict
from divfuzz.reports.bucket_folder import bucket_folder_name, write_bucket_folder
from test_spec_safety import base


def _invoke(*args) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, " ".join(result.output.split())


def _no_worker(monkeypatch) -> None:
    import divfuzz.fuzzer.engine.worker as worker

    def refuse(self, *args, **kwargs):
        raise AssertionError("a worker was started: the work began before the path was checked")

    monkeypatch.setattr(worker.Worker, "__init__", refuse)


@pytest.mark.parametrize("spelling", [("--repro-dir",), ("--store", "campaign", "--out")])
def test_a_symlinked_repro_dir_is_refused_before_any_work_naming_the_option(tmp_path, monkeypatch, spelling):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(base()))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "min"
    link.symlink_to(elsewhere)
    _no_worker(monkeypatch)
    *before, option = spelling
    code, text = _invoke("minimize", spec, *(tmp_path / a if a == "campaign" else a for a in before), option, link,
                         "--device", "cpu")
    assert code == 2, text
    # the old spelling (--store DIR --out OUT) is said, in its note, to be --repro-dir now: named so
    assert f"--repro-dir {link}: is a symlink (to {elsewhere}); divfuzz writes it only as a real folder" in text, text
    assert "refused before any work" in text and "buckets folder" not in text
    assert not any(elsewhere.iterdir())


def _write(root: Path, bucket_id: int, key: BucketKey) -> Path:
    return write_bucket_folder(root, bucket_id=bucket_id, key=key, spec=GraphSpec.from_dict(base()), device="cpu",
                               config=CompileConfig(), verdict=Verdict(Status.OK))


def test_a_bucket_folder_that_is_a_symlink_to_another_is_refused_naming_it_and_leaves_no_tmp(tmp_path):
    root = tmp_path / "out" / "buckets"
    one, two = BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("gelu",)), BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("relu",))
    first = _write(root, 1, one)
    before = sorted(p.name for p in first.iterdir())
    second = root / bucket_folder_name(2, two)
    second.symlink_to(first)  # the attack: bucket 2's folder points at bucket 1's
    with pytest.raises(UnsafePathError) as refused:
        _write(root, 2, two)
    assert f"bucket folder {second}: is a symlink, not a folder; refused and left as it is" in str(refused.value)
    assert second.is_symlink() and sorted(p.name for p in first.iterdir()) == before
    assert not [p for p in root.iterdir() if p.name.startswith(".tmp-")]


def test_a_bucket_folder_whose_writing_fails_leaves_no_tmp(tmp_path):
    root = tmp_path / "out" / "buckets"
    with pytest.raises(ValueError, match="not a bucket file name"):
        write_bucket_folder(root, bucket_id=1, key=BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("gelu",)),
                            spec=GraphSpec.from_dict(base()), device="cpu", config=CompileConfig(), verdict=Verdict(Status.OK),
                            extra_files={"../escape.json": "{}"})
    assert list(root.iterdir()) == []


def test_a_resume_over_a_symlinked_bucket_folder_exits_2_naming_it(tmp_path):
    """Through the campaign's own repair on resume (`Filing.finish_interrupted`): a bucket whose
    folder a kill left unrecorded is written again, and its name is a planted symlink."""
    from divfuzz.fuzzer.campaign.bucket_folders import Filing
    from divfuzz.fuzzer.store import STORE_NAME, Store

    out = tmp_path / "out"
    out.mkdir()
    store = Store(out / STORE_NAME)
    key = BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("gelu",), rule="many-ulps")
    try:
        run_id, _ = store.start_run(seed=0, device="cpu", config={}, options={}, versions={})
        row = dict(run_id=run_id, slot=0, idx=0, spec_digest="d", spec_json=json.dumps(base()), device="cpu",
                   config=CompileConfig().to_dict(), verdict={"status": "diverged"}, score=1.0, wall_s=0.1,
                   finding_kind="bf16-ulp")
        filing = Filing(store, out, timeout_s=60)
        filing.store_case(row, key=key, raw_key=key, triage="", severity=None, for_analysis=False)  # killed before its folder
        other = out / "buckets" / "0009-bf16-ulp-relu"  # another bucket's folder, which the link points at
        other.mkdir(parents=True)
        (other / "repro.py").write_text("bucket 9's\n")
        planted = out / "buckets" / bucket_folder_name(1, key)
        planted.symlink_to(other)
        with pytest.raises(UnsafePathError, match=f"bucket folder {planted}: is a symlink"):
            filing.finish_interrupted()
    finally:
        store.close()
    assert [p.name for p in other.iterdir()] == ["repro.py"] and (other / "repro.py").read_text() == "bucket 9's\n"
    assert not [p for p in (out / "buckets").iterdir() if p.name.startswith(".tmp-")]
