"""`divfuzz fuzz --replay-known`: the known buckets' minimal specs run first in the new run, so
`divfuzz diff` says "fixed" (not "not reached") for a bucket whose bug went away; a stored spec
that does not load exits 2 naming the store and the bucket, and leaves the store as it was."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from click.testing import CliRunner

from divfuzz.oracles.severity_policy import bucket_severity
from divfuzz.fuzzer.campaign.loop import CampaignOptions, run_campaign
from divfuzz.fuzzer.store import STORE_NAME, Store
from divfuzz.fuzzer.campaign.replay_known import REPLAY_SLOT, known_specs
from divfuzz.fuzzer.cli.main import main
from divfuzz.records.buckets import BucketKey, CulpritKey
from divfuzz.records.config import CompileConfig
from divfuzz.records.outcomes import Status
from divfuzz.records.verdict import Verdict
from tests.seed_specs import layer_norm_linear, sigmoid_gate

ROOT = Path(__file__).resolve().parents[1]
OPS = ("gelu", "layer_norm")


@pytest.mark.slow  # two real campaigns: 2-3 min on 2 cores; the default tier keeps the load and resume checks
def test_a_bucket_planted_away_is_fixed_after_replay_known(tmp_path):
    out = tmp_path / "store"
    # Last night: a compiler with a planted bf16 bug (one ULP on the first bf16 output).
    opts = CampaignOptions(device="cpu", out_dir=out, config=CompileConfig(backend="divfuzz.fuzzer.engine.planted:ulp_bump"),
                           ops=OPS, dtypes=("bfloat16",), max_cases=2, seed=3, workers=1)
    first = run_campaign(opts)
    store = Store(out / STORE_NAME, create=False)
    buckets = store.buckets(run_id=first.run_id)
    store.close()
    assert buckets, "the planted bug made no bucket"
    # the live view's severity counts are the run's buckets by their stored severity
    assert first.progress.by_severity == Counter(b.severity for b in buckets)
    known = {k.spec.digest() for k in known_specs(out / STORE_NAME)}
    # Tonight: the bug is gone (eager backend), another seed, one case, and --replay-known.
    r = subprocess.run(
        [sys.executable, "-m", "divfuzz.fuzzer", "fuzz", "--device", "cpu", "--backend", "eager", "--ops", ",".join(OPS),
         "--dtypes", "bfloat16", "--max-cases", "1", "--seed", "99", "--workers", "1", "--no-minimize", "--no-live",
         "--replay-known", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"--replay-known: {len(known)} known spec(s)" in r.stderr
    with sqlite3.connect(out / STORE_NAME) as db:
        rows = db.execute("SELECT slot, spec_digest FROM cases WHERE run_id=2").fetchall()
    replayed = {d for slot, d in rows if slot == REPLAY_SLOT}
    assert replayed == known
    # the fuzzing slot alone never ran a known spec: without the replays every bucket would be "not reached"
    assert not {d for slot, d in rows if slot != REPLAY_SLOT} & known
    d = CliRunner().invoke(main, ["diff", f"{out}:{first.run_id}", f"{out}:2", "--json"], catch_exceptions=False)
    assert d.exit_code == 0, d.stderr
    gone = json.loads(d.stdout)["gone"]
    assert {g["key"] for g in gone} == {str(b.key) for b in buckets}
    assert {g["status"] for g in gone} == {"fixed"}, gone


def _store(out: Path, *, minimized=None, spec_json=None) -> tuple[int, int]:
    """A store with two buckets: one whose first case is `sigmoid_gate`, and one whose first case
    is `layer_norm_linear` (or `spec_json`) with `minimized` as its minimized spec."""
    out.mkdir(parents=True, exist_ok=True)
    store = Store(out / STORE_NAME)
    run, _ = store.start_run(seed=1, device="cpu", config={"backend": "inductor"}, options={}, versions={})
    ids = []
    for idx, (spec, ops) in enumerate(((sigmoid_gate(rows=4, dim=8), ("linear", "sigmoid")), (layer_norm_linear(rows=4, dim=8), ("layer_norm",)))):
        text = spec.to_json(indent=None) if idx == 0 or spec_json is None else spec_json
        _, bucket_id, _ = store.add_case(
            run_id=run, slot=0, idx=idx, spec_digest=spec.digest(), spec_json=text, device="cpu", config={},
            verdict=Verdict(Status.DIVERGED).to_dict(), score=1.0, wall_s=0.1, finding_kind="bf16-ulp",
            key=BucketKey("bf16-ulp", "bfloat16", "cpu", ops=ops, rule="many-ulps", culprit=CulpritKey("inductor")), judged=bucket_severity(BucketKey("bf16-ulp", "bfloat16", "cpu", ops=ops, rule="many-ulps", culprit=CulpritKey("inductor")), None),
            triage="compiled-worse",
        )
        ids.append(bucket_id)
    if minimized is not None:
        store.set_bucket_analysis(ids[1], minimized={"spec": minimized}, culprit=None)
    store.finish_run(run)
    store.close()
    return ids[0], ids[1]


def test_the_minimized_spec_is_replayed_when_there_is_one(tmp_path):
    small = layer_norm_linear(rows=2, dim=8)
    _store(tmp_path, minimized=small.to_dict())
    known = known_specs(tmp_path / STORE_NAME)
    assert [(k.where, k.spec.digest()) for k in known] == [
        ("first case's spec", sigmoid_gate(rows=4, dim=8).digest()), ("minimized spec", small.digest())]
    assert known_specs(tmp_path / "nowhere" / STORE_NAME) == []  # no store yet: nothing known


def _fuzz(out: Path):
    return CliRunner().invoke(main, ["fuzz", "--device", "cpu", "--max-cases", "1", "--workers", "1", "--no-live",
                                     "--replay-known", "--out", str(out)], catch_exceptions=False)


def test_a_stored_spec_that_does_not_load_exits_2_naming_the_store_and_bucket(tmp_path):
    bad_op = json.loads(layer_norm_linear(rows=4, dim=8).to_json())
    bad_op["nodes"][0]["op"] = "no_such_op"
    for name, kw in (
        ("unknown-op", {"spec_json": json.dumps(bad_op)}),
        ("corrupt-minimized", {"minimized": {"inputs": "not a list"}}),
        ("truncated", {"spec_json": layer_norm_linear(rows=4, dim=8).to_json()[:40]}),
    ):
        out = tmp_path / name
        _, bad = _store(out, **kw)
        before = hashlib.sha256((out / STORE_NAME).read_bytes()).hexdigest()
        r = _fuzz(out)
        assert r.exit_code == 2, (name, r.stdout, r.stderr)
        assert str(out / STORE_NAME) in r.stderr and f"bucket {bad} " in r.stderr, (name, r.stderr)
        assert "Traceback" not in r.stderr
        assert hashlib.sha256((out / STORE_NAME).read_bytes()).hexdigest() == before, name  # no run started


def test_work_before_the_slots_fails_or_is_interrupted_like_a_slot(tmp_path):
    """`Campaign.run(before_slots)`: divfuzz's own error there fails the run (exit 2 upstream, no
    slot started); an interrupt there ends the run as interrupted at once (no slot to wait for)."""
    import time

    import pytest

    from divfuzz.records.errors import InternalError

    def boom(campaign):
        raise RuntimeError("planted before-slots failure")

    def interrupt(campaign):
        raise KeyboardInterrupt

    opts = CampaignOptions(device="cpu", out_dir=tmp_path / "a", max_cases=1, workers=1, config=CompileConfig(backend="eager"))
    with pytest.raises(InternalError, match="planted before-slots failure"):
        run_campaign(opts, before_slots=boom)
    opts = CampaignOptions(device="cpu", out_dir=tmp_path / "b", max_cases=1, workers=1, config=CompileConfig(backend="eager"))
    t0 = time.time()
    result = run_campaign(opts, before_slots=interrupt)
    assert result.interrupted and time.time() - t0 < 20
    for name, status in (("a", "failed"), ("b", "interrupted")):
        with sqlite3.connect(tmp_path / name / STORE_NAME) as db:
            assert db.execute("SELECT status FROM runs").fetchall() == [(status,)]
            assert db.execute("SELECT count(*) FROM cases").fetchone() == (0,)  # no slot ran


def test_a_resumed_run_skips_what_it_replayed_and_numbers_the_rest_after_it(tmp_path):
    """The known list may grow between an interrupted run and its resume (buckets it found): the
    replays already stored are skipped, the others take the next free indices (never a taken one)."""
    from divfuzz.fuzzer.campaign.loop import Campaign
    from divfuzz.fuzzer.campaign.replay_known import KnownSpec, replay_known

    specs = [sigmoid_gate(rows=4, dim=8), layer_norm_linear(rows=4, dim=8), layer_norm_linear(rows=2, dim=8)]
    known = [KnownSpec(i + 1, f"k{i}", "first case's spec", s) for i, s in enumerate(specs)]
    campaign = Campaign(CampaignOptions(device="cpu", out_dir=tmp_path, max_cases=1, workers=1, config=CompileConfig(backend="eager")))
    ran = []

    def run_case(spec, worker, *, slot, idx):  # stands in for compiling: stores the case where it is told
        ran.append((spec.digest(), slot, idx))
        campaign.store.add_case(run_id=campaign.run_id, slot=slot, idx=idx, spec_digest=spec.digest(),
                                spec_json=spec.to_json(indent=None), device="cpu", config={}, verdict=Verdict(Status.OK).to_dict(),
                                score=0.0, wall_s=0.1, finding_kind=None, key=None)

    campaign.run_case = run_case
    try:
        assert replay_known(campaign, known[1:]) == 2
        assert replay_known(campaign, known) == 3  # resumed, with one more known spec in front
    finally:
        campaign.close()
    assert ran == [(specs[1].digest(), REPLAY_SLOT, 0), (specs[2].digest(), REPLAY_SLOT, 1), (specs[0].digest(), REPLAY_SLOT, 2)]
