"""Symlinks where divfuzz writes folders (issue 56): a symlinked `minimize --repro-dir` is refused
before any work, in words that name the option (it was refused after 48 s of minimizing, as a
"buckets folder")."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from divfuzz.fuzzer.cli.main import main
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
