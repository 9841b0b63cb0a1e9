"""The workers' Inductor and Triton cache lives beside the store, one folder per torch version and
device (issue 25): it outlives a night where /tmp does not, and a user's own cache folder wins."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from divfuzz.fuzzer.campaign.loop import COMPILE_CACHE, CampaignOptions, compile_cache_env, run_campaign
from divfuzz.fuzzer.store import STORE_NAME
from divfuzz.records.errors import UnsafePathError

VERSIONS = {"torch": "2.13.0+cpu", "cpu_capability": "AVX512", "gpu": "NVIDIA H100 80GB HBM3"}


def test_the_cache_folder_is_keyed_by_torch_and_device_and_a_users_own_wins(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    cpu = compile_cache_env(tmp_path, VERSIONS, "cpu")["TORCHINDUCTOR_CACHE_DIR"]
    gpu = compile_cache_env(tmp_path, VERSIONS, "cuda")["TORCHINDUCTOR_CACHE_DIR"]
    other = compile_cache_env(tmp_path, VERSIONS | {"torch": "2.14.0"}, "cpu")["TORCHINDUCTOR_CACHE_DIR"]
    assert Path(cpu).parent == Path(gpu).parent == tmp_path / COMPILE_CACHE
    assert len({cpu, gpu, other}) == 3 and "AVX512" in cpu and "H100" in gpu and "2_14_0" in other
    # Inductor writes its default folder into the environment once asked: that is not the user's.
    from torch._inductor.runtime.cache_dir_utils import cache_dir, default_cache_dir

    cache_dir()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == default_cache_dir()
    assert compile_cache_env(tmp_path, VERSIONS, "cpu")["TORCHINDUCTOR_CACHE_DIR"] == cpu
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert compile_cache_env(tmp_path, VERSIONS, "cpu") == {}


def test_a_cache_folder_that_is_a_symlink_out_of_the_store_folder_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    (tmp_path / "elsewhere").mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / COMPILE_CACHE).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafePathError, match=COMPILE_CACHE):
        compile_cache_env(out, VERSIONS, "cpu")


def test_a_campaigns_workers_compile_into_the_cache_beside_its_store(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    result = run_campaign(CampaignOptions(device="cpu", out_dir=tmp_path, max_cases=1, seed=3, max_ops=2))
    assert result.progress.cases == 1
    with sqlite3.connect(tmp_path / STORE_NAME) as db:
        status = db.execute("SELECT status FROM cases").fetchone()[0]
    folders = list((tmp_path / COMPILE_CACHE).iterdir())
    assert len(folders) == 1 and folders[0].name.startswith("torch-")
    if status in ("ok", "diverged"):  # it compiled: Inductor's FX graph cache is in that folder
        assert any(folders[0].rglob("*")), json.dumps(status)
