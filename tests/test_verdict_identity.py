"""Speed changes leave verdicts identical (issue 25): the fp64 reference runs only when compiled
differs from eager in a bit (`divfuzz.fuzzer.engine.execute.judge_case`), and the verdict is the one the
full judgement gives, on real Inductor, over a fixed set of drawn specs (forward and backward,
float and integer outputs) and the seed specs' integer encoding."""

from __future__ import annotations

from divfuzz.fuzzer.campaign.loop import CampaignOptions, _StopCampaign, slot_engines
from divfuzz.fuzzer.engine.execute import single_thread, judge_case, judge_outputs, prepare_case, run_compiled
from divfuzz.records.config import CompileConfig
from divfuzz.records.outcomes import Status
from divfuzz.records.verdict import Verdict
from seed_specs import e8m0


def _drawn_specs(count: int, seed: int):
    """The first `count` specs a campaign's slot 0 draws with `seed` (small graphs)."""
    specs = []

    def body(spec):
        specs.append(spec)
        if len(specs) >= count:
            raise _StopCampaign

    strategy = CampaignOptions(device="cpu", out_dir=None, max_ops=4).strategy()
    try:
        for engine in slot_engines(strategy, seed, 0, body):
            engine()
    except _StopCampaign:
        pass
    return specs


def _verdict(outputs) -> Verdict:
    return Verdict(Status.DIVERGED if any(v.differs for v in outputs) else Status.OK, outputs=tuple(outputs))


def test_skipping_the_fp64_reference_where_compiled_equals_eager_leaves_every_verdict_identical():
    specs = _drawn_specs(10, seed=3) + [e8m0(rows=16, dim=16)]
    skipped = ran = 0
    backward = integer = False
    for spec in specs:
        case = prepare_case(spec, "cpu")
        if isinstance(case, Verdict):
            continue
        compiled, failed = run_compiled(spec, "cpu", CompileConfig(), case.inputs, case.cots, case.clock)
        if failed is not None:
            continue
        fast = _verdict(judge_case(case, compiled))
        took_reference = "reference" in case.clock.spans
        reference, bounds = case.reference, case.bounds  # run now if it was skipped
        with single_thread("cpu"):  # as the judgement always ran (a reduction's order changes its last bit)
            full = _verdict(judge_outputs(case.eager, compiled, reference, bounds))
        assert fast == full and fast.to_dict() == full.to_dict(), spec.to_json()
        skipped += not took_reference
        ran += took_reference
        backward |= spec.backward
        integer |= any(o.int_cmp is not None for o in full.outputs)
    # Both paths were taken, on forward and backward graphs with integer outputs among them.
    assert skipped >= 1 and ran >= 1 and backward and integer, (skipped, ran, backward, integer)


def test_the_slots_first_specs_are_what_their_engines_draw_distinct_and_past_the_skip():
    """Benchmarks compile a campaign's own first graphs (`slots_first_specs`): per slot, its
    engine's draws in order, none repeated across slots, the first `skip` left out."""
    from divfuzz.fuzzer.campaign.loop import slots_first_specs
    from divfuzz.fuzzer.campaign.campaign_options import build
    from pathlib import Path

    strategy = build(device="cpu", out_dir=Path("."), inputs_per_compile=1, minimize=False, workers=1).strategy
    rows = slots_first_specs(strategy, 3, 2, 3)
    assert [len(r) for r in rows] == [3, 3]
    digests = [s.digest() for r in rows for s in r]
    assert len(set(digests)) == 6
    assert [s.digest() for r in slots_first_specs(strategy, 3, 2, 3) for s in r] == digests  # deterministic
    skipped = slots_first_specs(strategy, 3, 1, 2, skip=1)[0]
    drawn: list = []

    def body(spec):
        drawn.append(spec.digest())
        if len(drawn) == 3:
            raise _StopCampaign

    try:
        for engine in slot_engines(strategy(0), 3, 0, body):
            engine()
    except _StopCampaign:
        pass
    assert [s.digest() for s in skipped] == [d for d in dict.fromkeys(drawn[1:])][:2]
