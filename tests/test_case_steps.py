"""One case's path through the campaign (`divfuzz.fuzzer.campaign.case_steps`): its severity is
judged once, its rule goes into its raw key, and what the store and the run's progress hold is
its key's severity (`key_severity`), never a judgement made again.

Real campaigns on the CPU with the planted `ulp_bump` backend (each bf16 case a finding, some
`suspect`, some `noise`), real workers and the real SQLite store, on the three paths a case can
take: no minimization, analyses in the slot (`analysis_workers=0`), and the analysis pool.
"""

from __future__ import annotations

import json
import sys
from collections import Counter

import pytest

import divfuzz.oracles.severity_policy as severity_policy
from divfuzz.fuzzer.campaign import schedule
from divfuzz.fuzzer.campaign.loop import CampaignOptions, run_campaign
from divfuzz.fuzzer.store import STORE_NAME, Store
from divfuzz.oracles.severity_policy import key_severity
from divfuzz.records.config import CompileConfig
from divfuzz.records.verdict import Verdict

PATHS = {
    "no-minimize": {},
    "in-slot": {"minimize": True, "analysis_workers": 0, "minimize_budget_s": 20.0},
    # No analysis fits in the budget (MIN_ANALYSIS_S below): every finding is stored for the pool and stays pending.
    "pool": {"minimize": True, "analysis_workers": 1, "budget_s": 600.0},
}


def _count_severity_calls(monkeypatch) -> list[tuple[str, str | None]]:
    """Each call of the one severity policy, wherever a divfuzz module bound it: (the verdict's
    JSON, the switch). A verdict's timings make its JSON one case's own."""
    calls: list[tuple[str, str | None]] = []
    real = severity_policy.severity_of

    def counted(verdict, *, switch=None, subsystem=None):
        calls.append((json.dumps(verdict.to_dict(), sort_keys=True), switch))
        return real(verdict, switch=switch, subsystem=subsystem)

    for name, module in list(sys.modules.items()):
        if name.startswith("divfuzz.") and getattr(module, "severity_of", None) is real:
            monkeypatch.setattr(module, "severity_of", counted)
    return calls


@pytest.mark.parametrize("path", sorted(PATHS))
def test_each_case_s_severity_is_judged_once_and_stored_and_reported_as_judged(tmp_path, monkeypatch, path):
    if path == "pool":
        monkeypatch.setattr(schedule, "MIN_ANALYSIS_S", 10_000.0)
    calls = _count_severity_calls(monkeypatch)
    # seed 4 draws both a suspect and a noise finding (the draws move when the op set grows: seed 3
    # drew three noise ones once binary minimum/maximum joined it)
    result = run_campaign(CampaignOptions(device="cpu", out_dir=tmp_path, seed=4, dtypes=("bfloat16",), max_cases=4, max_ops=4,
                                          config=CompileConfig(backend="divfuzz.fuzzer.engine.planted:ulp_bump"), **PATHS[path]))
    monkeypatch.undo()
    store = Store(tmp_path / STORE_NAME, create=False)
    try:
        cases = [store.case(i) for i in range(1, store.run_stats(result.run_id)["cases"] + 1)]
        buckets = {b.id: b for b in store.buckets(run_id=result.run_id)}
    finally:
        store.close()
    findings = [c for c in cases if c.bucket_id is not None]
    assert len(cases) == 4 and len(findings) == result.progress.findings >= 2, (len(cases), result.progress)
    severities = {buckets[c.bucket_id].severity for c in findings}
    assert {"suspect", "noise"} <= severities, severities  # both a case the campaign minimizes and one it never does

    per_case = Counter(verdict for verdict, _ in calls)
    per_key = Counter(calls)
    for c in cases:
        mine = json.dumps(c.verdict, sort_keys=True)
        if c.bucket_id is None:
            assert per_case[mine] == 0
            continue
        # Once, with no switch, as the case is judged; once more only where the slot's analysis
        # rated the case under the switch its rough culprit names (a root cause, in the slot).
        assert per_key[(mine, None)] == 1, (path, c.id, [k for k in calls if k[0] == mine])
        assert all(n == 1 for (v, _), n in per_key.items() if v == mine)
        if path != "in-slot" or buckets[c.bucket_id].key.culprit is None:
            assert per_case[mine] == 1, (path, c.id, [k[1] for k in calls if k[0] == mine])

    # What the store holds is its key's severity: every case of a bucket was rated by the key's rule
    # (judged here again, outside the campaign), and the reason shown is of that rule and severity.
    for bucket_id, b in buckets.items():
        rules = {severity_policy.severity_of(Verdict.from_dict(c.verdict)).rule for c in findings if c.bucket_id == bucket_id}
        assert rules == {b.key.rule}, (path, str(b.key), rules)
        assert b.severity == key_severity(b.key).value, (path, str(b.key))
        assert (b.severity_reason["severity"], b.severity_reason["rule"]) == (b.severity, b.key.rule), (path, str(b.key))
    # And the run's progress reports the same severities.
    assert result.progress.by_severity == Counter(b.severity for b in buckets.values())
