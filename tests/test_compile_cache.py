"""The workers' Inductor and Triton cache: one folder per torch version and device (issue 25), in this
user's own cache home and never beside a store (issue 40: a received store folder must never run
code), refused unless only this user can write it; a user's own cache folder wins. A cache that
gives an error a compile without it does not is reported as corrupt, never filed as a finding."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from divfuzz.fuzzer.campaign.loop import CampaignOptions, compile_cache_env, run_campaign
from divfuzz.fuzzer.engine.compile_cache import COMPILE_CACHE
from divfuzz.fuzzer.store import STORE_NAME
from divfuzz.records.errors import UnsafePathError

VERSIONS = {"torch": "2.13.0+cpu", "cpu_capability": "AVX512", "gpu": "NVIDIA H100 80GB HBM3"}


def test_the_cache_folder_is_private_keyed_by_torch_and_device_and_a_users_own_wins(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cpu = compile_cache_env(VERSIONS, "cpu", tmp_path / "out")["TORCHINDUCTOR_CACHE_DIR"]
    gpu = compile_cache_env(VERSIONS, "cuda", tmp_path / "out")["TORCHINDUCTOR_CACHE_DIR"]
    other = compile_cache_env(VERSIONS | {"torch": "2.14.0"}, "cpu", tmp_path / "out")["TORCHINDUCTOR_CACHE_DIR"]
    root = tmp_path / "xdg" / "divfuzz" / COMPILE_CACHE
    assert Path(cpu).parent == Path(gpu).parent == root
    assert len({cpu, gpu, other}) == 3 and "AVX512" in cpu and "H100" in gpu and "2_14_0" in other
    for folder in (root.parent, root, Path(cpu)):
        st = folder.lstat()
        assert (st.st_mode & 0o777) == 0o700 and st.st_uid == os.getuid(), folder
    # A relative XDG_CACHE_HOME is ignored (the XDG rule): ~/.cache.
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert compile_cache_env(VERSIONS, "cpu", tmp_path / "out")["TORCHINDUCTOR_CACHE_DIR"].startswith(str(tmp_path / "home" / ".cache" / "divfuzz"))
    # Inductor writes its default folder into the environment once asked: that is not the user's.
    from torch._inductor.runtime.cache_dir_utils import cache_dir, default_cache_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cache_dir()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == default_cache_dir()
    assert compile_cache_env(VERSIONS, "cpu", tmp_path / "out")["TORCHINDUCTOR_CACHE_DIR"] == cpu
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert compile_cache_env(VERSIONS, "cpu", tmp_path / "out") == {}


@pytest.mark.parametrize("spoil, fragment", [
    (lambda d, tmp: (shutil.rmtree(d), d.symlink_to(tmp)), "is a symlink"),
    (lambda d, tmp: os.chmod(d, 0o770), "writable by its group"),
    (lambda d, tmp: os.chmod(d, 0o707), "writable by others"),
    (lambda d, tmp: os.chown(d, 65534, -1), "owned by uid 65534"),
    (lambda d, tmp: (shutil.rmtree(d), d.write_text("x")), "is not a folder"),
])
@pytest.mark.parametrize("level", ["divfuzz", "divfuzz/" + COMPILE_CACHE])
def test_a_cache_folder_another_user_could_write_is_refused_and_left_as_it_is(tmp_path, monkeypatch, spoil, fragment, level):
    if "uid" in fragment and os.getuid() != 0:
        pytest.skip("chown to another user needs root")
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    compile_cache_env(VERSIONS, "cpu", tmp_path / "out")
    folder = tmp_path / "xdg" / level
    (tmp_path / "elsewhere").mkdir()
    spoil(folder, tmp_path / "elsewhere")
    before = (folder.lstat().st_mode, folder.lstat().st_uid)
    with pytest.raises(UnsafePathError, match=fragment) as refused:
        compile_cache_env(VERSIONS, "cpu", tmp_path / "out")
    assert str(folder) in str(refused.value)
    assert (folder.lstat().st_mode, folder.lstat().st_uid) == before  # never repaired
    assert not any((tmp_path / "elsewhere").iterdir())  # never followed


@pytest.mark.parametrize("variable", ["TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"])
@pytest.mark.parametrize("how", ["inside", "through a symlink", "the folder itself"])
def test_a_users_cache_folder_inside_the_store_folder_is_refused_before_any_worker(tmp_path, monkeypatch, variable, how):
    """The attack (issue 56): TORCHINDUCTOR_CACHE_DIR pointed at a received store's
    `compile-cache/`, and its planted pickle ran; the private cache's checks were never asked
    (and would not help: unpacking a store makes its files the user's)."""
    out = tmp_path / "received"
    (out / COMPILE_CACHE).mkdir(parents=True)
    named = {"inside": out / COMPILE_CACHE, "through a symlink": tmp_path / "link", "the folder itself": out}[how]
    if how == "through a symlink":
        named.symlink_to(out / COMPILE_CACHE)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv(variable, str(named))
    with pytest.raises(UnsafePathError) as refused:
        compile_cache_env(VERSIONS, "cpu", out)
    message = str(refused.value)
    assert f"{variable}={named} lies inside --out {out}" in message and "refused before any worker started" in message
    monkeypatch.setenv(variable, str(tmp_path / "mine"))  # outside the store folder: the user's own, as before
    compile_cache_env(VERSIONS, "cpu", out)


def test_fuzz_refuses_a_cache_inside_its_out_before_recording_a_run(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from divfuzz.fuzzer.cli.main import main

    out = tmp_path / "received"
    (out / COMPILE_CACHE).mkdir(parents=True)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(out / COMPILE_CACHE))
    result = CliRunner().invoke(main, ["fuzz", "--device", "cpu", "--max-cases", "1", "--workers", "1", "--no-live",
                                       "--out", str(out)])
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and f"TORCHINDUCTOR_CACHE_DIR={out / COMPILE_CACHE} lies inside --out {out}" in text, text
    assert not (out / STORE_NAME).exists()


def test_a_long_failure_message_is_never_cut_without_saying_so():
    """A cache's warning was clipped at 300 characters and read "...compiles without the cache (;"."""
    from divfuzz.reports.terminal import one_line

    warning = ("the compile cache /home/someone/.cache/divfuzz/compile-cache/torch-2_13_0_cpu-cpu-AVX512 is corrupt or "
               "was tampered with: delete that folder. Inductor raised UnpicklingError while it read a cached graph, "
               "and the same graph compiles without the cache (invalid load key, 'x')")
    said = f"divfuzz's own code failed in the worker (not the compiler under test): CompileCacheError: {warning}"
    assert len(said) > 300 and one_line(said).endswith("(invalid load key, 'x')")
    assert one_line("word " * 1000, limit=100).endswith("… (4899 more characters)")


def test_a_campaigns_workers_compile_into_the_private_cache_not_beside_the_store(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    out = tmp_path / "out"
    result = run_campaign(CampaignOptions(device="cpu", out_dir=out, max_cases=1, seed=3, max_ops=2, inputs_per_compile=1))
    assert result.progress.cases == 1
    with sqlite3.connect(out / STORE_NAME) as db:
        status = db.execute("SELECT status FROM cases").fetchone()[0]
    assert not (out / COMPILE_CACHE).exists()
    folders = list((tmp_path / "xdg" / "divfuzz" / COMPILE_CACHE).iterdir())
    assert len(folders) == 1 and folders[0].name.startswith("torch-")
    # The case must have compiled for the test to say anything: a compile error (or a crash) would
    # leave the cache empty for another reason, so it fails here rather than passing unchecked.
    assert status in ("ok", "diverged"), status
    assert any(folders[0].rglob("*")), "Inductor's FX graph cache is not in the private folder"


# ---- hostile caches, through the real command line and real workers --------------------------

HOSTILE_PICKLE = "import os, pickle, sys\nclass Evil:\n    def __reduce__(self):\n        return (os.system, ('touch ' + sys.argv[1],))\nsys.stdout.buffer.write(pickle.dumps(Evil()))\n"


def _fuzz(out: Path, xdg: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"} | {"XDG_CACHE_HOME": str(xdg)}
    return subprocess.run([sys.executable, "-m", "divfuzz.fuzzer", "fuzz", "--device", "cpu", "--max-cases", "1",
                           "--seed", "3", "--max-ops", "2", "--workers", "1", "--no-live", "--no-minimize",
                           "--inputs-per-compile", "1", "--out", str(out), *extra],
                          env=env, capture_output=True, text=True, timeout=600)


def _tamper(cache: Path, marker: Path) -> int:
    """Every FX-graph and AOT-autograd entry becomes a pickle that touches `marker`; every Python
    kernel gets a first line that does the same. Returns how many files were changed."""
    evil = subprocess.run([sys.executable, "-c", HOSTILE_PICKLE, str(marker)], capture_output=True, check=True).stdout
    changed = 0
    for entry in cache.rglob("*"):
        if entry.is_file() and entry.parent.parent.parent.name in ("fxgraph", "aotautograd"):
            entry.write_bytes(evil)
            changed += 1
        elif entry.is_file() and entry.suffix == ".py":
            entry.write_text(f"import pathlib; pathlib.Path({str(marker)!r}).touch()\n" + entry.read_text())
            changed += 1
    return changed


def _cache_trees(*roots: Path) -> list[Path]:
    """The per-version cache folders a campaign wrote under any of `roots` (each holds `fxgraph/`)."""
    return sorted({p.parent for root in roots if root.exists() for p in root.rglob("fxgraph")})


@pytest.mark.slow
def test_a_received_store_folders_compile_cache_never_runs(tmp_path):
    """A store folder carrying a hostile `compile-cache/` (as divfuzz wrote one there before issue
    40) is resumed with `fuzz --out`: the same specs compile again, and nothing of it runs."""
    out, xdg, marker = tmp_path / "received", tmp_path / "xdg", tmp_path / "MARKER"
    first = _fuzz(out, xdg)
    assert first.returncode == 0, first.stdout + first.stderr
    trees = _cache_trees(out, xdg)
    assert len(trees) == 1, trees
    planted = out / COMPILE_CACHE / trees[0].name  # where the store's own cache used to live
    if planted != trees[0]:
        shutil.copytree(trees[0], planted)
    assert _tamper(planted, marker) > 0
    shutil.rmtree(xdg, ignore_errors=True)  # this machine has no cache of its own: a compile would read the received one if anything did
    again = _fuzz(out, xdg, "--max-cases", "2")
    assert again.returncode == 0, again.stdout + again.stderr
    assert not marker.exists()
    with sqlite3.connect(out / STORE_NAME) as db:
        statuses = [s for (s,) in db.execute("SELECT status FROM cases")]
    assert "compile-error" not in statuses, statuses


@pytest.mark.slow
def test_a_tampered_cache_of_ones_own_is_reported_as_corrupt_never_filed_as_a_compiler_bug(tmp_path):
    out, xdg, marker = tmp_path / "out", tmp_path / "xdg", tmp_path / "MARKER"
    first = _fuzz(tmp_path / "first", xdg)
    assert first.returncode == 0, first.stdout + first.stderr
    (tree,) = _cache_trees(xdg)
    assert _tamper(tree, marker) > 0
    again = _fuzz(out, xdg)  # the same seed: the same graph, a cache hit on the tampered entry
    text = " ".join((again.stdout + again.stderr).split())
    assert again.returncode == 2, text
    assert f"the compile cache {tree} is corrupt or was tampered with: delete that folder" in text
    with sqlite3.connect(out / STORE_NAME) as db:
        assert db.execute("SELECT COUNT(*) FROM cases WHERE status = 'compile-error'").fetchone()[0] == 0
        assert db.execute("SELECT COUNT(*) FROM buckets").fetchone()[0] == 0
