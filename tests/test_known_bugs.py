"""Known upstream bugs (`divfuzz.records.known_bugs`, `corpus/known-bugs.json`): every entry matches a root
cause built from its own pattern, near misses (another dtype, a missing op, forward vs backward,
another rule) do not, a malformed file is refused with the entry and field named, and the curated
file holds at least 40 distinct issues. Torch-free: no compile runs here."""

from __future__ import annotations

import ast
import copy
import inspect
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from divfuzz.records.buckets import BucketKey, CulpritKey
from divfuzz.records.known_bugs import (
    DTYPES,
    NUMERIC_RULES,
    RULES,
    KnownBug,
    KnownBugsError,
    RootCausePattern,
    default_known_bugs,
    describe,
    load_known_bugs,
    match_one,
    parse_known_bugs,
)

ROOT = Path(__file__).resolve().parents[1]
BUGS = default_known_bugs()
ENTRIES = BUGS.entries
IDS = [f"pytorch#{b.issue}" for b in ENTRIES]


def self_pattern(bug: KnownBug, **change) -> RootCausePattern:
    """The root cause an entry describes: one name of each op item, one of its dtypes and rules,
    its culprit name as the culprit text and its device."""
    fields = dict(
        ops=tuple(sorted(item)[0] for item in bug.ops),
        dtypes=frozenset({sorted(bug.dtypes)[0]}),
        backward=bool(bug.backward),
        rule=sorted(bug.rules)[0],
        culprit=None if bug.culprit is None or bug.culprit.name is None else f"inductor lowering of {bug.culprit.name}",
        device_type=None if bug.device == "any" else bug.device,
        mechanism=bug.mechanism or "",
        site=bug.message or "",
    )
    return RootCausePattern(**{**fields, **change})


def matched_issues(pattern: RootCausePattern) -> list[int]:
    return [m.bug.issue for m in BUGS.matches(pattern)]


# ---- the curated file ---------------------------------------------------------------------------


def test_the_file_holds_at_least_40_distinct_issues_including_the_seeds_and_the_amax_ones():
    numbers = [b.issue for b in ENTRIES]
    assert len(set(numbers)) >= 40
    # an issue shows in more than one pattern (its ops, and a mechanism or message over many ops)
    patterns = [(b.issue, b.mechanism, b.message) for b in ENTRIES]
    assert len(set(patterns)) == len(patterns)
    assert {195214, 186799, 168126, 178045} <= set(numbers)


def test_every_rule_id_is_one_the_severity_policy_emits():
    # records may not import oracles: the rule vocabulary is checked against the policy's source here.
    import divfuzz.oracles.severity_policy

    literals = {n.value for n in ast.walk(ast.parse(inspect.getsource(divfuzz.oracles.severity_policy)))
                if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    emitted = {n.args[1].value for n in ast.walk(ast.parse(inspect.getsource(divfuzz.oracles.severity_policy)))
               if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "SeverityReason" and len(n.args) > 1
               and isinstance(n.args[1], ast.Constant)}
    perf = {"slower-beyond-noise", "slower-within-noise", "wrapper-overhead"}
    assert set(NUMERIC_RULES) <= literals, sorted(set(NUMERIC_RULES) - literals)
    assert emitted - perf == set(NUMERIC_RULES), sorted(emitted.symmetric_difference(NUMERIC_RULES))
    assert {r for b in ENTRIES for r in b.rules} <= RULES


# ---- every entry matches itself -----------------------------------------------------------------


@pytest.mark.parametrize("bug", ENTRIES, ids=IDS)
def test_an_entry_matches_a_root_cause_built_from_its_own_pattern(bug):
    pattern = self_pattern(bug)
    found = BUGS.matches(pattern)
    assert bug.issue in [m.bug.issue for m in found]
    mine = next(m for m in found if m.bug.issue == bug.issue)
    # It ranks first, or ties with an entry of the same pattern (duplicate upstream reports).
    assert found[0]._rank()[:4] == mine._rank()[:4]
    assert mine.device_agrees in (None, True)
    assert mine.confidence == ("high" if pattern.culprit else "medium")
    assert BUGS.match(pattern) is not None and describe(BUGS.match(pattern)).startswith("known: pytorch#")


@pytest.mark.parametrize("bug", ENTRIES, ids=IDS)
def test_an_entry_matches_whichever_alternative_dtype_and_rule_is_seen_and_extra_ops(bug):
    base = self_pattern(bug)
    for i, item in enumerate(bug.ops):
        for name in item:
            ops = base.ops[:i] + (name,) + base.ops[i + 1:]
            assert match_one(bug, self_pattern(bug, ops=ops)) is not None, name
    for dtype in bug.dtypes:
        assert match_one(bug, self_pattern(bug, dtypes=frozenset({dtype, "float64"}))) is not None, dtype
    for rule in bug.rules:
        assert match_one(bug, self_pattern(bug, rule=rule)) is not None, rule
    # Order does not matter, and unrelated ops around the pattern do not hide it.
    assert match_one(bug, self_pattern(bug, ops=("cast",) + tuple(reversed(base.ops)) + ("add", "sum"))) is not None


# ---- near misses --------------------------------------------------------------------------------


@pytest.mark.parametrize("bug", ENTRIES, ids=IDS)
def test_another_dtype_is_a_near_miss(bug):
    other = sorted(DTYPES - bug.dtypes)[0]
    assert bug.issue not in matched_issues(self_pattern(bug, dtypes=frozenset({other})))


@pytest.mark.parametrize("bug", ENTRIES, ids=IDS)
def test_a_missing_op_is_a_near_miss(bug):
    for item in bug.ops:
        ops = tuple(op for op in self_pattern(bug).ops if op not in item)
        assert bug.issue not in matched_issues(self_pattern(bug, ops=ops)), sorted(item)


@pytest.mark.parametrize("bug", ENTRIES, ids=IDS)
def test_forward_against_backward_is_a_near_miss(bug):
    """... except for an entry by mechanism, or one whose backward is null (either pass shows it:
    a comparison's mask is compared again in the backward), which meet both alike."""
    for backward in (True, False):
        either = bug.mechanism is not None or bug.backward is None
        assert (bug.issue in matched_issues(self_pattern(bug, backward=backward))) == (either or backward == bug.backward)


@pytest.mark.parametrize("bug", ENTRIES, ids=IDS)
def test_another_rule_is_a_near_miss(bug):
    for rule in sorted(RULES - bug.rules):
        assert match_one(bug, self_pattern(bug, rule=rule)) is None, rule


def test_device_and_culprit_rank_a_match_but_do_not_refuse_it():
    bug = BUGS.by_issue(168126)  # decomposition of aten.native_layer_norm, bf16, forward
    seen = self_pattern(bug, culprit="decomposition of aten.native_layer_norm", device_type="cpu")
    agreeing = match_one(bug, seen)
    assert agreeing is not None and agreeing.confidence == "high"
    other = match_one(bug, self_pattern(bug, culprit="inductor: emulate_precision_casts removes it"))
    assert other is not None and other.confidence == "low" and other.culprit_agrees is False
    cuda_only = BUGS.by_issue(185610)
    moved = match_one(cuda_only, self_pattern(cuda_only, device_type="cpu"))
    assert moved is not None and moved.device_agrees is False


def test_the_best_match_prefers_an_agreeing_culprit_then_the_more_specific_pattern():
    # A floor of a softmax's sum, divided: pytorch#197895 (a floor division's lowering, one op) and
    # pytorch#189787 (softmax, sum, then a rounding: three ops, no culprit name) both match.
    pattern = RootCausePattern(ops=("softmax", "sum", "div"), dtypes=frozenset({"float32"}), backward=False,
                               rule="int-valued-wrong", culprit="inductor lowering of aten.div", device_type="cpu")
    assert matched_issues(pattern)[:2] == [197895, 189787]
    assert describe(BUGS.match(pattern)).startswith("known: pytorch#197895")
    # The same graph without that culprit: the three-op entry outranks the one-op one.
    assert matched_issues(RootCausePattern(("softmax", "sum", "div"), frozenset({"float32"}), False, "int-valued-wrong"))[0] == 189787
    # An amax backward whose gradient is NaN/Inf under a precision knob: pytorch#195214, whatever op fed it.
    knob = RootCausePattern(ops=("cumsum", "amin"), dtypes=frozenset({"float16"}), backward=True, rule="nan-inf-new",
                            culprit="inductor: emulate_precision_casts removes it", device_type="cpu")
    assert describe(BUGS.match(knob)) == "known: pytorch#195214 (closed)"


def test_a_half_precision_floor_division_one_above_eager_is_the_float_floor_division_entry():
    # pytorch#197895's mechanism (floor(div_rn) against eager's fmod-based floor) does not depend on the
    # dtype: float16 is divided in float32 on both sides (measured: H200, seed 6060, float16 x // 0.1).
    pattern = RootCausePattern(ops=("div",), dtypes=frozenset({"float16"}), backward=False, rule="int-valued-wrong",
                               culprit="inductor lowering of div", device_type="cuda")
    assert matched_issues(pattern)[0] == 197895
    # an integer floor division is another lowering (floordiv), not this entry
    assert 197895 not in matched_issues(RootCausePattern(("div",), frozenset({"int64"}), False, "int-valued-wrong"))


def test_a_lowering_named_by_its_node_agrees_with_the_entrys_aten_name():
    # torch's bisector names a lowering by its FX node, the aten op's name without "aten."
    # (H200 seed 6060: "inductor lowering of div"); pytorch#197895's culprit is "aten.div".
    from divfuzz.records.known_bugs import _names_in

    assert _names_in("aten.div", "inductor lowering of div") and _names_in("aten.div", "decomposition of aten.div")
    assert _names_in("aten.div", "inductor lowering of div.Tensor_mode")
    assert not _names_in("aten.div", "inductor lowering of div_rn") and not _names_in("aten.div", "inductor lowering of floordiv")
    assert not _names_in("joint_graph_passes", "inductor lowering of joint")
    # The graph of that campaign's bucket 177: the lowering's entry, at high confidence, over the
    # mechanism entry its explanation also matches (no culprit there: medium).
    pattern = RootCausePattern(ops=("div", "amax", "mul_scalar_"), dtypes=frozenset({"float16"}), backward=False,
                               rule="int-valued-wrong", culprit="inductor lowering of div", device_type="cuda",
                               mechanism="rounding-decides")
    best = BUGS.match(pattern)
    assert best is not None and best.bug.issue == 197895 and best.confidence == "high"


def test_describe_names_the_issue_and_its_state_or_says_new():
    assert describe(None) == "new"
    fixed = BUGS.by_issue(173987)
    assert fixed.describe() == "known: pytorch#173987 (fixed in PR 175807 after torch 2.10)"
    # on the torch a finding ran on: whether the fix is in it
    assert BUGS.by_issue(183250).describe("2.11.0+cu130") == \
        "known: pytorch#183250 (fixed in PR 183653 after torch 2.11: not in your 2.11.0)"
    assert BUGS.by_issue(183250).describe("2.13.0+cpu") == \
        "known: pytorch#183250 (fixed in PR 183653 after torch 2.11: in your 2.13.0, so a regression or another bug)"
    assert BUGS.by_issue(197895).describe() == "known: pytorch#197895 (open, live in 2.14.0)"
    assert BUGS.by_issue(185596).describe() == "known: pytorch#185596 (not a bug)"
    for bug in ENTRIES:
        assert re.fullmatch(r"known: pytorch#\d+ \((open|fixed|closed|not a bug)[^()]*\)", bug.describe()), bug.describe()
    unknown = RootCausePattern(("gelu",), frozenset({"float32"}), False, "float-gross-worse")
    assert BUGS.match(unknown) is None


# ---- the root cause's forms ---------------------------------------------------------------------


def test_a_minimized_bucket_key_gives_its_ops_culprit_mode_and_rule_from_its_fields():
    from dataclasses import replace

    key = BucketKey("bf16-ulp", "bfloat16", "cuda", ops=("layer_norm", "linear"), rule="many-ulps",
                    culprit=CulpritKey("aot_eager_decomp_partition", "decomposition", "aten.native_layer_norm"))
    pattern = RootCausePattern.from_bucket(key)
    assert pattern.ops == ("layer_norm", "linear") and pattern.culprit == "decomposition of aten.native_layer_norm"
    assert pattern.rule == "many-ulps" and pattern.backward is False and pattern.device_type == "cuda"
    match = BUGS.match(pattern)
    assert match is not None and match.bug.issue == 168126 and match.confidence == "high"
    # The key's own rule counts; its backward does not here: the statistics are the forward's,
    # met by a backward spec's forward output alike (the entry's backward is null).
    assert BUGS.by_issue(168126).backward is None
    assert BUGS.match(RootCausePattern.from_bucket(replace(key, backward=True))).bug.issue == 168126
    assert BUGS.match(RootCausePattern.from_bucket(replace(key, rule="int-flip"))) is None
    assert RootCausePattern.from_bucket(key, rule="rmse-worse").rule == "rmse-worse"  # a rule given wins


def test_a_raw_bucket_key_gives_backward_and_the_autocast_dtype_from_its_modes():
    key = BucketKey("nan-inf", "float32", "cpu", ops=("amax", "div"), autocast="bfloat16", backward=True, rule="nan-inf-new")
    pattern = RootCausePattern.from_bucket(key)
    assert pattern.backward and pattern.dtypes == {"float32", "bfloat16"} and pattern.culprit is None
    assert pattern.ops == ("amax", "div") and pattern.rule == "nan-inf-new"
    assert BUGS.match(pattern).bug.issue == 195214
    forward = RootCausePattern.from_bucket(BucketKey("nan-inf", "float32", "cpu", ops=("amax", "div"), autocast="bfloat16",
                                                     rule="nan-inf-new"))
    assert not forward.backward and BUGS.match(forward) is None
    # A culprit switch is named in the culprit text a known bug's culprit name is looked for in.
    switched = RootCausePattern.from_bucket(BucketKey("nan-inf", "float32", "cpu", ops=("amax", "div"), autocast="bfloat16",
                                                      backward=True, rule="nan-inf-new",
                                                      culprit=CulpritKey("inductor", switch="emulate_precision_casts")))
    assert "emulate_precision_casts" in switched.culprit
    assert BUGS.match(switched).bug.issue == 195214 and BUGS.match(switched).confidence == "high"


def test_a_stored_spec_gives_its_ops_in_graph_order_its_dtypes_and_its_mode():
    spec = json.loads((ROOT / "corpus" / "specs" / "activation-bfloat16-bwd.json").read_text())
    pattern = RootCausePattern.from_spec_dict(spec, rule="many-ulps", output_dtype="bfloat16")
    assert pattern.ops == tuple(n["op"] for n in spec["nodes"])
    assert pattern.backward is True and "bfloat16" in pattern.dtypes
    with pytest.raises(ValueError, match="spec dict"):
        RootCausePattern.from_spec_dict({"nodes": "x"}, rule="many-ulps")


# ---- malformed files are refused, naming the entry and the field ---------------------------------

GOOD = json.loads((ROOT / "corpus" / "known-bugs.json").read_text())


def write(tmp_path: Path, doc) -> Path:
    path = tmp_path / "known-bugs.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def with_entry(change) -> dict:
    doc = copy.deepcopy(GOOD)
    doc["entries"] = doc["entries"][:2]
    change(doc["entries"][1])
    return doc


def test_the_committed_file_loads_from_a_copy(tmp_path):
    assert len(load_known_bugs(write(tmp_path, GOOD)).entries) == len(ENTRIES)


BAD_ENTRIES = {
    "issue as text": (lambda e: e.update(issue="186799"), "'issue'"),
    "issue as bool": (lambda e: e.update(issue=True), "'issue'"),
    "negative issue": (lambda e: e.update(issue=-5), "'issue'"),
    "missing field": (lambda e: e.pop("rules"), "'rules' is missing"),
    "unknown field": (lambda e: e.update(severity="bug"), "'severity'"),
    "unknown dtype": (lambda e: e.update(dtypes=["bfloat16", "float8"]), "'dtypes'"),
    "repeated dtype": (lambda e: e.update(dtypes=["float32", "float32"]), "'dtypes'"),
    "unknown rule": (lambda e: e.update(rules=["looks-wrong"]), "'rules'"),
    "empty rules": (lambda e: e.update(rules=[]), "'rules'"),
    "empty ops": (lambda e: e.update(ops=[]), "'ops'"),
    "op name with code": (lambda e: e.update(ops=["amax; import os"]), "'ops'"),
    "empty alternatives": (lambda e: e.update(ops=[[]]), "'ops'"),
    "op as number": (lambda e: e.update(ops=[3]), "'ops'"),
    "unknown device": (lambda e: e.update(device="tpu"), "'device'"),
    "backward as text": (lambda e: e.update(backward="yes"), "'backward'"),
    "unknown state": (lambda e: e.update(state="wontfix"), "'state'"),
    "culprit kind": (lambda e: e.update(culprit={"kind": "gremlins", "name": None}), "'culprit.kind'"),
    "culprit extra key": (lambda e: e.update(culprit={"kind": "lowering", "name": None, "pr": 1}), "'culprit'"),
    "culprit name": (lambda e: e.update(culprit={"kind": "lowering", "name": "aten div()"}), "'culprit.name'"),
    "reported date": (lambda e: e.update(reported="June 2026"), "'reported'"),
    "live_in not a list": (lambda e: e.update(live_in="2.13"), "'live_in'"),
    "fixed_in while open": (lambda e: e.update(state="open", fixed_in="PR 1"), "'fixed_in'"),
    "title on two lines": (lambda e: e.update(title="a\nb"), "'title'"),
    "unknown op class": (lambda e: e.update(op_class="misc"), "'op_class'"),
}


@pytest.mark.parametrize("case", sorted(BAD_ENTRIES))
def test_a_malformed_entry_is_refused_naming_the_entry_and_field(tmp_path, case):
    change, field = BAD_ENTRIES[case]
    doc = with_entry(change)
    with pytest.raises(KnownBugsError) as e:
        load_known_bugs(write(tmp_path, doc))
    message = str(e.value)
    assert "entry 1" in message and field in message, message
    assert str(tmp_path / "known-bugs.json") in message


def test_a_repeated_issue_number_is_refused_naming_both_entries():
    doc = with_entry(lambda e: e.update(issue=GOOD["entries"][0]["issue"]))
    with pytest.raises(KnownBugsError, match=r"entry 1 \(pytorch#\d+\): field 'issue': already used by entry 0"):
        parse_known_bugs(doc)


@pytest.mark.parametrize("doc, expected", [
    ("{not json", "not valid JSON"),
    ([], "expected a JSON object"),
    ({**GOOD, "schema": "other"}, "field 'schema'"),
    ({**GOOD, "schema_version": 2}, "newer than this divfuzz reads"),
    ({**GOOD, "schema_version": "1"}, "field 'schema_version'"),
    ({**GOOD, "extra": 1}, "unknown top-level field 'extra'"),
    ({**GOOD, "entries": {}}, "field 'entries'"),
    ({**GOOD, "entries": ["x"]}, "entry 0: expected an object"),
])
def test_a_malformed_file_is_refused(tmp_path, doc, expected):
    with pytest.raises(KnownBugsError, match=re.escape(expected)):
        load_known_bugs(write(tmp_path, doc))


def test_only_a_plain_file_is_read(tmp_path):
    real = write(tmp_path, GOOD)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    for path in (link, tmp_path, tmp_path / "missing.json"):
        with pytest.raises(KnownBugsError, match="not a regular file"):
            load_known_bugs(path)
    (tmp_path / "latin1.json").write_bytes(b'{"schema": "\xe9"}')
    with pytest.raises(KnownBugsError, match="not UTF-8"):
        load_known_bugs(tmp_path / "latin1.json")


def test_an_entry_by_mechanism_matches_any_ops_explained_by_it_and_nothing_else():
    """Issue 39: a known upstream mechanism reached through another op is still known. The
    subnormal-flush entry matches a root cause of any ops that the flush experiment explained,
    forward or backward, and no root cause without that mechanism."""
    bug = default_known_bugs().by_issue(125557)
    assert bug.mechanism == "subnormal-flush" and bug.ops == () and bug.checked
    for ops, backward in ((("ceil",), False), (("fmod_tensor",), True), (("batch_norm_eval", "rsqrt"), False)):
        explained = RootCausePattern(ops, frozenset({"float32"}), backward, "nan-inf-new", None, "cuda", "subnormal-flush")
        assert match_one(bug, explained) is not None, ops
        assert match_one(bug, replace(explained, mechanism="")) is None
        assert match_one(bug, replace(explained, mechanism="range-edge")) is None


def test_an_entry_by_message_matches_a_compile_error_at_that_site_through_any_ops():
    raw = {"issue": 1, "title": "t", "op_class": "cumulative", "ops": [], "dtypes": ["float32"], "device": "cuda",
           "backward": True, "rules": ["compile-error"], "culprit": None, "state": "open", "reported": None,
           "live_in": [], "fixed_in": None, "message": "AssertionError in torch/_inductor/codegen/triton.py"}
    data = {"schema": "divfuzz-known-bugs", "schema_version": 1, "description": "d", "entries": [raw]}
    bug = parse_known_bugs(data).entries[0]
    site = "AssertionError in torch/_inductor/codegen/triton.py:codegen_range: assert N v.s. N"
    hit = RootCausePattern(("cumprod", "group_norm"), frozenset({"float32"}), True, "compile-error", None, "cuda", site=site)
    assert match_one(bug, hit) is not None
    assert match_one(bug, replace(hit, site="TypeError in torch/_inductor/lowering.py:x: list indices")) is None
    with pytest.raises(KnownBugsError, match="field 'ops'"):
        parse_known_bugs({**data, "entries": [{**raw, "message": None, "ops": []}]})
    with pytest.raises(KnownBugsError, match="field 'checked'"):
        parse_known_bugs({**data, "entries": [{**raw, "checked": "last week"}]})


def test_a_compiler_error_matches_an_entry_by_its_own_words_whatever_its_ops_and_never_by_ops_alone():
    """The split-scan NotImplementedError of issue 183250 met through group_norm and logcumsumexp
    in the forward (seed 307 on the H200) is 183250; an AssertionError in cumprod's backward, the
    ops of 183250's own report, is not (seed 353: a MixOrderReduction crash hidden as known)."""
    site = "torch/_inductor/codegen/triton.py: NotImplementedError: NYI TritonSplitDimKernel reductions"
    seen = RootCausePattern(("group_norm", "logcumsumexp", "sum"), frozenset({"bfloat16"}), False, "compile-error",
                            device_type="cuda", site=site)
    assert BUGS.match(seen).bug.issue == 183250
    other = RootCausePattern(("rms_norm", "remainder", "cumprod"), frozenset({"float32"}), True, "compile-error",
                             device_type="cuda", site="mix_order_reduction.py: AssertionError: 256 v.s. 255")
    match = BUGS.match(other)
    assert match is None or match.bug.issue != 183250, match


def test_a_floor_division_an_approximate_division_explains_is_known_by_its_mechanism():
    pattern = RootCausePattern(("div",), frozenset({"float16"}), False, "int-valued-wrong", device_type="cuda",
                               mechanism="approximate-division")
    match = BUGS.match(pattern)
    assert match is not None and match.bug.issue == 177740 and match.bug.fixed_after == "2.11"


def test_a_low_confidence_match_is_possibly_never_plainly_known():
    from divfuzz.records.known_bugs import KnownMatch

    bug = BUGS.by_issue(195214)
    assert KnownMatch(bug, culprit_agrees=False, device_agrees=None).describe().startswith("possibly: pytorch#195214")
    assert KnownMatch(bug, culprit_agrees=True, device_agrees=None).describe().startswith("known: pytorch#195214")


def test_an_op_computed_in_the_other_kind_of_dtype_is_not_the_entry_s_op():
    """186875 is a bf16/fp16 remainder: an int64 remainder beside a float16 sigmoid is not it,
    while a float32 op whose bits show in a later float16 rounding keeps its float entry."""
    from divfuzz.records.known_bugs import RootCausePattern, default_known_bugs

    def spec(remainder_dtype: str) -> dict:
        return {"inputs": [{"name": "x0", "dtype": "float32"}],
                "nodes": [{"name": "v1", "op": "cast", "inputs": ["x0"], "dtype": "float16"},
                          {"name": "v2", "op": "sigmoid", "inputs": ["v1"], "dtype": "float16"},
                          {"name": "v3", "op": "cast", "inputs": ["x0"], "dtype": remainder_dtype},
                          {"name": "v4", "op": "remainder", "inputs": ["v3"], "dtype": remainder_dtype}],
                "backward": False}

    known = default_known_bugs()
    integral = RootCausePattern.from_spec_dict(spec("int64"), rule="float-gross-worse", device_type="cpu")
    assert 186875 not in {m.bug.issue for m in known.matches(integral)}
    floating = RootCausePattern.from_spec_dict(spec("float32"), rule="float-gross-worse", device_type="cpu")
    assert 186875 in {m.bug.issue for m in known.matches(floating)}


def test_a_difference_in_numbers_is_never_matched_to_a_crash_s_issue():
    from divfuzz.records.known_bugs import RootCausePattern, default_known_bugs

    pattern = RootCausePattern(("remainder",), frozenset({"int64"}), False, "few-ulps")
    assert 147206 not in {m.bug.issue for m in default_known_bugs().matches_any_rule(pattern)}
    crash = replace(pattern, rule="crash")
    assert 147206 in {m.bug.issue for m in default_known_bugs().matches(crash)}


def test_where_a_difference_arises_an_issue_of_another_family_of_rule_is_not_it():
    """173793 (LayerNorm NaN near 1e37, CUDA) is about NaNs: a LayerNorm's few-ULP difference on CUDA
    is 168126's (the decomposition's statistics), never the NaN issue's."""
    from divfuzz.records.known_bugs import RootCausePattern, default_known_bugs

    pattern = RootCausePattern(("layer_norm", "linear"), frozenset({"float32", "bfloat16"}), False, "within-same",
                               culprit="decomposition of aten.native_layer_norm", device_type="cuda")
    found = [m.bug.issue for m in default_known_bugs().matches_any_rule(pattern)]
    assert 173793 not in found and found[:1] == [168126], found
    nan = replace(pattern, rule="nan-inf-new")
    assert 173793 in [m.bug.issue for m in default_known_bugs().matches_any_rule(nan)]


def test_a_match_whose_fix_is_in_the_torch_under_test_reads_possibly():
    """The finding outlived the fix: a regression or another bug of the same pattern, never "known"."""
    pattern = RootCausePattern(("div",), frozenset({"float16"}), False, "int-valued-wrong", device_type="cuda",
                               mechanism="approximate-division")
    match = BUGS.match(pattern)
    assert match is not None and match.bug.issue == 177740
    assert match.describe("2.11.0+cu130").startswith("known: pytorch#177740 (fixed in PR 177926 after torch 2.11: not in your")
    assert match.describe("2.12.1+cu130").startswith("possibly: pytorch#177740 (fixed in PR 177926 after torch 2.11: in your 2.12.1")
    assert match.describe().startswith("known: ")  # the torch not known: as before
