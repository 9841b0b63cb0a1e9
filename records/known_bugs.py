"""Known upstream bugs: which public pytorch/pytorch issue a root cause is, matched by pattern.

`corpus/known-bugs.json` lists torch.compile numerical-correctness issues, each as the minimal
pattern divfuzz would bucket it under. `load_known_bugs` reads and validates it (untrusted data:
a bad file raises `KnownBugsError` naming the entry and the field); `KnownBugs.match(pattern)`
returns the best `KnownMatch` for a root cause's `RootCausePattern`, or None; `describe(match)`
says "known: pytorch#N (state)" or "new". Torch-free: this is data and set logic.

The file (schema "divfuzz-known-bugs", schema_version 1) is an object with `schema`,
`schema_version`, `description` and `entries`; each entry has exactly these fields:
  issue      the pytorch/pytorch issue number (a positive int), unique in the file;
  title      one line in the curator's words;
  op_class   the class of issue 24's list it falls in (`OP_CLASSES`);
  ops        the ops the pattern needs: a list whose items are an op name or a list of
             alternative names. Names are divfuzz registry names where divfuzz has the op
             (`div`, `amax`, `where_cmp`, `e8m0_encode`, ...), else the torch function's name
             (`argmax`, `remainder`, `cumsum`, ...);
  dtypes     the dtypes the issue shows it in (`DTYPES`);
  device     "cpu", "cuda" or "any" (where the issue reproduces it, not a promise it is absent elsewhere);
  backward   true when only the backward (gradients) is wrong, false when the forward is, null when
             either shows it (a forward op whose value the backward computes again, as a
             comparison's mask is recomputed for its gradient);
  rules      the divfuzz severity rule ids (`RULES`) a case of it would get;
  culprit    null, or {"kind": one of `CULPRIT_KINDS`, "name": null or the name divfuzz's culprit
             text would contain, e.g. "aten.native_layer_norm", "emulate_precision_casts"};
  state      "open", "fixed" (a fix named), "closed" (closed, fix not named) or "not-a-bug";
  reported   "YYYY-MM" when the report's date was seen, else null;
  live_in    torch versions the issue shows it live in (may be empty);
  fixed_in   null, or the version or PR that fixed it;
  note       optional, one or two sentences;
  mechanism  optional: a mechanism id (`divfuzz.oracles.mechanisms`, e.g. "subnormal-flush"): the
             root cause must be explained by it; its ops may then be empty (any ops) and its
             backward any (a mechanism meets the forward and the backward alike);
  message    optional: text a compiler error's masked site must contain (case-insensitive, plain
             text, never a pattern), for errors met through many ops; its ops may then be empty;
  checked    optional: "YYYY-MM-DD", when the entry's state was last checked against the issue;
  fixed_after optional, with state "fixed": the last torch release the fix is not in ("2.11"),
             so a finding on that torch or older is "known, fixed after your torch".
An issue may have more than one entry where it shows in more than one pattern (its ops, and a
mechanism or an error message that meets many ops): (issue, mechanism, message) is unique.

Matching (invariants, tested on the entries themselves and on near misses):
- ops by set, not order: every op item of the entry has one of its names among the root cause's
  ops (a minimized graph keeps the ops that matter but may order independent branches either way);
- dtypes overlap: one of the entry's dtypes is among the root cause's (inputs, nodes, autocast, output),
  and, where the root cause's graph says each op's dtypes, every op item of the entry has an op
  computed in (or on operands of) the same kind of dtype, floating or integral, as the entry's;
- backward agrees exactly, unless the entry's is null (either) or it has a mechanism; the root
  cause's severity rule is one of the entry's rules;
- device and culprit only rank matches: a culprit name found in the root cause's culprit text makes
  the match "high" confidence, a culprit that names something else makes it "low" ("aten.div" is found
  in "inductor lowering of div": the bisector names a lowering by its FX node, the op without "aten.");
- among matches of one confidence, an entry by mechanism comes first (divfuzz's own experiment showed
  that mechanism at the finding), then the entry with the most ops;
- an entry with a `message` matches by the compiler's own words alone: any ops, any device, the
  forward or the backward; a root cause whose error does not contain them never matches it, whatever
  its ops (a different crash in the same ops is a different bug);
- a low-confidence match is said as "possibly: pytorch#N", never plainly "known".
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from divfuzz.records.buckets import BucketKey
from divfuzz.records.errors import DivfuzzError
from divfuzz.records.outcomes import COMPILER_FAILURES
from divfuzz.records.severity import NUMERIC_RULES, rule_family

SCHEMA = "divfuzz-known-bugs"
SCHEMA_VERSION = 1
DEFAULT_PATH = Path(__file__).resolve().parents[1] / "corpus" / "known-bugs.json"

# The numeric rule ids `divfuzz.oracles.severity_policy` emits (records may not import it: tests check each id
# against its source), plus the compiler-failure rules, which are the finding kinds of
# `divfuzz.records.outcomes.COMPILER_FAILURES`.
RULES = frozenset(NUMERIC_RULES) | {kind.value for kind in COMPILER_FAILURES.values()}
DTYPES = frozenset({"bfloat16", "float16", "float32", "float64", "uint8", "int8", "int16", "int32", "int64", "bool"})
DEVICES = ("cpu", "cuda", "any")
STATES = ("open", "fixed", "closed", "not-a-bug")
# The classes of issue 24's list, and two for what it calls the card's families.
OP_CLASSES = (
    "value-selecting",  # max, min, argmax, argmin, amax, amin, topk, sort and their backward with ties
    "remainder-fmod",  # remainder, fmod, floor division
    "scalar-compare",  # a low-precision tensor against a Python scalar: type promotion
    "cumulative",  # cumsum, cumprod, logcumsumexp
    "near-zero",  # rsqrt, reciprocal, sqrt near zero and -0.0; overflow to NaN
    "rounding-clamp-pow",  # pow, clamp, round, trunc, floor, ceil
    "var-std",  # var, std, var_mean and the norms computed from them
    "losses",  # cross-entropy, MSE, margin ranking, ...
    "index",  # gather, scatter_add, index_add, slice/diagonal scatter
    "pooling-interp",  # pooling with ties, interpolation
    "softmax",
    "norms-precision",  # low-precision casts a fused kernel skips (emulate_precision_casts)
)
CULPRIT_KINDS = ("decomposition", "lowering", "fusion", "precision-knob", "pattern-pass", "codegen", "meta",
                 "constant-folding", "inductor")
_FIELDS = ("issue", "title", "op_class", "ops", "dtypes", "device", "backward", "rules", "culprit", "state",
           "reported", "live_in", "fixed_in")
_OPTIONAL = ("note", "mechanism", "message", "checked", "fixed_after")
_TOP = ("schema", "schema_version", "description", "entries")
_OP_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}\Z")
_CULPRIT_NAME = re.compile(r"[A-Za-z0-9_.]{1,80}\Z")
_MONTH = re.compile(r"20[0-9]{2}-(0[1-9]|1[0-2])\Z")
_DAY = re.compile(r"20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])\Z")
_MECHANISM = re.compile(r"[a-z][a-z0-9-]{0,39}\Z")
_TEXT = re.compile(r"[ -~]*\Z")  # printable ASCII, one line
_TOKENS = re.compile(r"[a-z0-9]+")


class KnownBugsError(DivfuzzError):
    """The known-bugs file is missing, not JSON, or an entry has a malformed field.
    (It belongs in `divfuzz.records.errors` with the others; kept here until that file is free to change.)"""


@dataclass(frozen=True)
class KnownCulprit:
    kind: str
    name: str | None


@dataclass(frozen=True)
class KnownBug:
    """One curated upstream issue and its minimal pattern (see the module docstring for fields)."""

    issue: int
    title: str
    op_class: str
    ops: tuple[frozenset[str], ...]  # each item: the alternative names of one required op
    dtypes: frozenset[str]
    device: str
    backward: bool | None  # None: the forward and the backward alike
    rules: frozenset[str]
    culprit: KnownCulprit | None
    state: str
    reported: str | None
    live_in: tuple[str, ...]
    fixed_in: str | None
    note: str = ""
    mechanism: str | None = None  # a mechanism id (`divfuzz.oracles.mechanisms`) the root cause must carry
    message: str | None = None  # text the compiler error's masked site must contain (case-insensitive)
    checked: str | None = None  # "YYYY-MM-DD": when the entry's state was last checked against the issue
    fixed_after: str | None = None  # the last torch release without the fix ("2.11"), for state "fixed"

    def state_text(self, torch_version: str | None = None) -> str:
        """e.g. "open, live in 2.14.0", "fixed in PR 175807", "fixed in PR 183653 after torch 2.11:
        not in your 2.11.0", "closed", "not a bug". `torch_version` is the torch the finding ran on."""
        if self.state == "open":
            return f"open, live in {self.live_in[-1]}" if self.live_in else "open"
        if self.state == "fixed":
            text = f"fixed in {self.fixed_in}" if self.fixed_in else "fixed"
            if self.fixed_after:
                text += f" after torch {self.fixed_after}"
                if torch_version and not version_after(torch_version, self.fixed_after):
                    text += f": not in your {torch_version.split('+')[0]}"
                elif self.fix_in(torch_version):
                    text += f": in your {torch_version.split('+')[0]}, so a regression or another bug"
            return text
        return "not a bug" if self.state == "not-a-bug" else self.state

    def fix_in(self, torch_version: str | None) -> bool:
        """Whether the fix is in `torch_version`: a fixed entry whose `fixed_after` release that
        torch is later than. A finding there is not this bug as reported (a regression, or another
        bug of the same pattern): its match is said "possibly"."""
        return bool(self.state == "fixed" and self.fixed_after and torch_version
                    and version_after(torch_version, self.fixed_after))

    def describe(self, torch_version: str | None = None) -> str:
        return f"known: pytorch#{self.issue} ({self.state_text(torch_version)})"


@dataclass(frozen=True)
class RootCausePattern:
    """A root cause as matching sees it: its ops in graph order, every dtype it computes in,
    whether the finding is in the backward, its severity rule, and attribution's culprit text."""

    ops: tuple[str, ...]
    dtypes: frozenset[str]
    backward: bool
    rule: str
    culprit: str | None = None
    device_type: str | None = None
    mechanism: str = ""  # the mechanism that explains it (`BucketKey.mechanism`), "" for none
    site: str = ""  # a compiler error's masked site (`BucketKey.site`), "" for none
    # Each op's dtypes (its own result's and its operands'), where the root cause's graph says them
    # (a spec's nodes); () where only the ops and the dtype set are known (a bucket key).
    op_dtypes: tuple[tuple[str, frozenset[str]], ...] = ()

    @classmethod
    def from_spec_dict(cls, spec: dict, *, rule: str, culprit: str | None = None, device_type: str | None = None,
                       output_dtype: str | None = None, mechanism: str = "", site: str = "") -> RootCausePattern:
        """From a minimal spec as a store or analysis.json keeps it (`GraphSpec.to_dict`): ops from
        its nodes, dtypes from its inputs, nodes and autocast, backward from the spec."""
        if not isinstance(spec, dict) or not isinstance(spec.get("nodes"), list) or not isinstance(spec.get("inputs"), list):
            raise ValueError(f"Expected a spec dict with 'nodes' and 'inputs' lists but got {spec!r:.80}")
        ops = tuple(str(n.get("op")) for n in spec["nodes"] if isinstance(n, dict))
        dtypes = {str(t.get("dtype")) for t in spec["inputs"] + spec["nodes"] if isinstance(t, dict)}
        dtypes |= {d for d in (spec.get("autocast"), output_dtype) if isinstance(d, str)}
        return cls(ops, frozenset(dtypes), bool(spec.get("backward")), rule, culprit, device_type, mechanism, site,
                   _op_dtypes(spec))

    @classmethod
    def from_bucket(cls, key: BucketKey, *, rule: str | None = None, dtypes: frozenset[str] = frozenset()) -> RootCausePattern:
        """From a bucket key's fields: its ops, modes, output dtype, rule (`rule` when given) and
        culprit (described as the culprit text a known bug's culprit name is looked for in)."""
        culprit = key.culprit.describe() + (f" ({key.culprit.switch})" if key.culprit.switch else "") if key.culprit else None
        dtypes = frozenset({key.dtype} | ({key.autocast} if key.autocast else set()) | set(dtypes))
        return cls(tuple(key.ops), dtypes, key.backward, rule if rule is not None else key.rule, culprit, key.device_type,
                   key.mechanism, key.site)


def _op_dtypes(spec: dict) -> tuple[tuple[str, frozenset[str]], ...]:
    """Each op of a spec dict with the dtypes it touches: its node's own and its named inputs'
    (and autocast's, which may compute any op in it). () when a node names no dtype (a spec as
    a bucket key shows it): then the pattern's dtype set alone is matched."""
    nodes = [n for n in spec["nodes"] if isinstance(n, dict)]
    if not nodes or any(not isinstance(n.get("dtype"), str) for n in nodes):
        return ()
    by_name = {str(t.get("name")): str(t.get("dtype")) for t in spec["inputs"] + nodes if isinstance(t, dict) and t.get("name")}
    autocast = {spec["autocast"]} if isinstance(spec.get("autocast"), str) else set()
    found: dict[str, set[str]] = {}
    for n in nodes:
        named = n.get("inputs") if isinstance(n.get("inputs"), list) else []
        found.setdefault(str(n.get("op")), set()).update(
            {str(n["dtype"])} | {by_name[a] for a in named if isinstance(a, str) and a in by_name} | autocast)
    return tuple((op, frozenset(d)) for op, d in found.items())


_CONFIDENCE = ("high", "medium", "low")


@dataclass(frozen=True)
class KnownMatch:
    """A known bug a root cause matches. `culprit_agrees`/`device_agrees` are None where the
    entry or the root cause does not say."""

    bug: KnownBug
    culprit_agrees: bool | None
    device_agrees: bool | None

    @property
    def confidence(self) -> str:
        """"high" when the culprits agree, "low" when they name different things, else "medium"."""
        return {True: "high", None: "medium", False: "low"}[self.culprit_agrees]

    def describe(self, torch_version: str | None = None) -> str:
        """"known: pytorch#N (state)", or "possibly: pytorch#N (state)" for a low-confidence match
        (the culprits name different things: the pattern fits, the cause may not) and for one whose
        fix is in `torch_version` (`KnownBug.fix_in`: the finding outlived the fix)."""
        text = self.bug.describe(torch_version)
        doubtful = self.confidence == "low" or self.bug.fix_in(torch_version)
        return text.replace("known: ", "possibly: ", 1) if doubtful else text

    def _rank(self) -> tuple:
        # Best first: confidence, an entry by mechanism (it matches only where divfuzz's own experiment
        # showed that mechanism at the finding: more than its op names say), the most specific
        # pattern, device, fewest dtypes, the earliest report.
        return (_CONFIDENCE.index(self.confidence), self.bug.mechanism is None, -len(self.bug.ops), self.device_agrees is False,
                len(self.bug.dtypes), self.bug.issue)


def describe(match: KnownMatch | None, torch_version: str | None = None) -> str:
    """What a report, `diff` and the gate print: "known: pytorch#N (state)", "possibly: pytorch#N
    (state)" (a low-confidence match) or "new"."""
    return match.describe(torch_version) if match is not None else "new"


_RELEASE = re.compile(r"(\d+)\.(\d+)")


def version_after(version: str, release: str) -> bool:
    """Whether torch `version` ("2.13.0+cpu", "2.15.0.dev20260921") is a later release than
    `release` ("2.11"): a nightly of the next release counts as later. False when either does not
    read as MAJOR.MINOR."""
    got, base = _RELEASE.match(version or ""), _RELEASE.match(release or "")
    if got is None or base is None:
        return False
    return (int(got[1]), int(got[2])) > (int(base[1]), int(base[2]))


def _tokens(text: str) -> list[str]:
    return _TOKENS.findall(text.lower())


def _names_in(name: str, text: str) -> bool:
    """Whether `name`'s tokens appear as a run in `text`'s ("aten.native_layer_norm" in
    "decomposition of aten.native_layer_norm"; "joint_graph_passes" in "inductor joint graph passes: ...")."""
    want, have = _tokens(name), _tokens(text)
    if any(have[i:i + len(want)] == want for i in range(len(have) - len(want) + 1)):
        return True
    # The bisector names a lowering by its FX node ("inductor lowering of div"; `records.culprit.
    # readable_detail`), which is the aten op's name without its namespace: "aten.div" agrees with
    # "div" as a whole name (not "div_rn", not "floordiv").
    bare = name.lower().removeprefix("aten.")
    return bare != name.lower() and re.search(rf"(?<![\w.]){re.escape(bare)}(?!\w)", text.lower()) is not None


def match_one(bug: KnownBug, pattern: RootCausePattern, *, any_rule: bool = False) -> KnownMatch | None:
    """`bug` as a match for `pattern`, or None (the rules are the module docstring's). `any_rule`
    leaves the severity rule out: where a difference arises (below suspect, say), the issue that
    names its ops and culprit, whatever rule of the same family (`rule_family`: ULPs, NaN/Inf,
    integers, ...) its own report was rated by: a few ULPs are never a NaN issue's, and a
    difference in numbers never a crash's or a compile error's."""
    ops = set(pattern.ops)
    if any_rule:
        family = rule_family(pattern.rule)
        kin = sorted(r for r in bug.rules & frozenset(NUMERIC_RULES) if rule_family(r) == family)
        if not kin:
            return None
        pattern = replace(pattern, rule=kin[0])
    if bug.mechanism is not None and pattern.mechanism != bug.mechanism:
        return None
    if bug.message is not None and bug.message.lower() not in pattern.site.lower():
        return None
    if (bug.backward is not None and pattern.backward != bug.backward and bug.mechanism is None and bug.message is None) \
            or pattern.rule not in bug.rules:
        return None
    if not bug.dtypes & pattern.dtypes or not all(item & ops for item in bug.ops):
        return None
    if pattern.op_dtypes and not _ops_in_its_dtypes(bug, dict(pattern.op_dtypes)):
        return None
    culprit_agrees = None
    if bug.culprit is not None and bug.culprit.name is not None and pattern.culprit:
        culprit_agrees = _names_in(bug.culprit.name, pattern.culprit)
    device_agrees = None if bug.device == "any" or not pattern.device_type else bug.device == pattern.device_type
    return KnownMatch(bug, culprit_agrees, device_agrees)


def _kinds(dtypes) -> set[str]:
    return {"float" if d.startswith(("float", "bfloat")) else "integral" for d in dtypes}


def _ops_in_its_dtypes(bug: KnownBug, op_dtypes: dict[str, frozenset[str]]) -> bool:
    """Whether each op item of `bug` has an op that the root cause computes in the kind of dtype
    (floating or integral) the entry shows it in: a bf16 remainder's issue is not an int64
    remainder's beside a bf16 sigmoid. The kind, not the dtype: a float32 layer norm whose bits
    flip a later bf16 rounding is the bf16 issue's (the dtype where it shows is the entry's). An
    entry matched by its mechanism or message names the dtypes of the whole case only."""
    if bug.mechanism is not None or bug.message is not None:
        return True
    wanted = _kinds(bug.dtypes)
    return all(any(_kinds(op_dtypes.get(op, frozenset())) & wanted for op in item) for item in bug.ops)


@dataclass(frozen=True)
class KnownBugs:
    """The validated file: entries in file order."""

    entries: tuple[KnownBug, ...]
    source: str = "known-bugs"

    def matches(self, pattern: RootCausePattern) -> tuple[KnownMatch, ...]:
        """Every entry `pattern` matches, best first."""
        found = (match_one(bug, pattern) for bug in self.entries)
        return tuple(sorted((m for m in found if m is not None), key=KnownMatch._rank))

    def matches_any_rule(self, pattern: RootCausePattern) -> tuple[KnownMatch, ...]:
        """`matches` with the severity rule left out (`match_one`'s `any_rule`), culprits agreeing
        first: the issues a difference's ops and culprit name, at any severity."""
        found = (match_one(bug, pattern, any_rule=True) for bug in self.entries)
        return tuple(sorted((m for m in found if m is not None and m.culprit_agrees is not False), key=KnownMatch._rank))

    def match(self, pattern: RootCausePattern) -> KnownMatch | None:
        """The best entry `pattern` matches, or None (a new root cause)."""
        found = self.matches(pattern)
        return found[0] if found else None

    def by_issue(self, issue: int) -> KnownBug:
        for bug in self.entries:
            if bug.issue == issue:
                return bug
        raise KeyError(f"pytorch#{issue} is not in {self.source}")


# ---- loading and validation ---------------------------------------------------------------------


class _Entry:
    """Reads one entry's fields, each error naming the entry and the field."""

    def __init__(self, raw: dict, where: str):
        self.raw, self.where = raw, where

    def fail(self, field: str, expected: str, value: Any) -> KnownBugsError:
        return KnownBugsError(f"{self.where}: field {field!r}: expected {expected} but got {value!r:.80}")

    def text(self, field: str, *, limit: int, optional: bool = False) -> str | None:
        value = self.raw.get(field)
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value.strip() or len(value) > limit or not _TEXT.match(value):
            raise self.fail(field, f"a one-line printable string of at most {limit} characters", value)
        return value

    def choice(self, field: str, choices) -> str:
        value = self.raw.get(field)
        if not isinstance(value, str) or value not in choices:
            raise self.fail(field, f"one of {sorted(choices)}", value)
        return value

    def names(self, field: str, choices) -> frozenset[str]:
        value = self.raw.get(field)
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v in choices for v in value):
            raise self.fail(field, f"a non-empty list of names from {sorted(choices)}", value)
        if len(set(value)) != len(value):
            raise self.fail(field, "a list without repeats", value)
        return frozenset(value)

    def ops(self, *, may_be_empty: bool = False) -> tuple[frozenset[str], ...]:
        value = self.raw.get("ops")
        if may_be_empty and value == []:
            return ()
        if not isinstance(value, list) or not value:
            raise self.fail("ops", "a non-empty list of op names or lists of alternative op names", value)
        items = []
        for item in value:
            alternatives = [item] if isinstance(item, str) else item
            if not isinstance(alternatives, list) or not alternatives or not all(
                    isinstance(a, str) and _OP_NAME.match(a) for a in alternatives):
                raise self.fail("ops", "op names like 'amax' (lowercase letters, digits, '_') or non-empty lists of them", item)
            items.append(frozenset(alternatives))
        return tuple(items)

    def culprit(self) -> KnownCulprit | None:
        value = self.raw.get("culprit")
        if value is None:
            return None
        if not isinstance(value, dict) or set(value) != {"kind", "name"}:
            raise self.fail("culprit", "null or an object with exactly 'kind' and 'name'", value)
        if value["kind"] not in CULPRIT_KINDS:
            raise self.fail("culprit.kind", f"one of {list(CULPRIT_KINDS)}", value["kind"])
        name = value["name"]
        if name is not None and not (isinstance(name, str) and _CULPRIT_NAME.match(name)):
            raise self.fail("culprit.name", "null or a name like 'aten.native_layer_norm' (letters, digits, '_', '.')", name)
        return KnownCulprit(value["kind"], name)

    def versions(self) -> tuple[str, ...]:
        value = self.raw.get("live_in")
        if not isinstance(value, list) or not all(isinstance(v, str) and v and len(v) <= 60 and _TEXT.match(v) for v in value):
            raise self.fail("live_in", "a list of version strings (each at most 60 printable characters)", value)
        return tuple(value)


def _entry(raw: Any, index: int, source: str) -> KnownBug:
    if not isinstance(raw, dict):
        raise KnownBugsError(f"{source}: entry {index}: expected an object but got {raw!r:.80}")
    issue = raw.get("issue")
    if not isinstance(issue, int) or isinstance(issue, bool) or not 0 < issue < 10**7:
        raise KnownBugsError(f"{source}: entry {index}: field 'issue': expected a positive issue number but got {issue!r:.80}")
    e = _Entry(raw, f"{source}: entry {index} (pytorch#{issue})")
    unknown = sorted(set(raw) - set(_FIELDS) - set(_OPTIONAL))
    if unknown:
        raise e.fail(unknown[0], f"only the fields {list(_FIELDS + _OPTIONAL)}", raw[unknown[0]])
    missing = [f for f in _FIELDS if f not in raw]
    if missing:
        raise KnownBugsError(f"{e.where}: field {missing[0]!r} is missing")
    if raw["backward"] is not None and not isinstance(raw["backward"], bool):
        raise e.fail("backward", "true, false or null", raw["backward"])
    reported = raw["reported"]
    if reported is not None and not (isinstance(reported, str) and _MONTH.match(reported)):
        raise e.fail("reported", "null or a month like '2026-05'", reported)
    state = e.choice("state", STATES)
    mechanism = raw.get("mechanism")
    if mechanism is not None and not (isinstance(mechanism, str) and _MECHANISM.match(mechanism)):
        raise e.fail("mechanism", "null or a mechanism id like 'subnormal-flush'", mechanism)
    message = e.text("message", limit=120, optional=True)
    checked = raw.get("checked")
    if checked is not None and not (isinstance(checked, str) and _DAY.match(checked)):
        raise e.fail("checked", "null or a day like '2026-11-26'", checked)
    fixed_in = e.text("fixed_in", limit=80, optional=True)
    if fixed_in is not None and state != "fixed":
        raise e.fail("fixed_in", f"null for state {state!r}", fixed_in)
    fixed_after = raw.get("fixed_after")
    if fixed_after is not None and not (isinstance(fixed_after, str) and _RELEASE.fullmatch(fixed_after) and state == "fixed"):
        raise e.fail("fixed_after", "null, or a release like '2.11' for state 'fixed'", fixed_after)
    return KnownBug(
        issue=issue,
        title=e.text("title", limit=200),
        op_class=e.choice("op_class", OP_CLASSES),
        ops=e.ops(may_be_empty=mechanism is not None or message is not None),
        dtypes=e.names("dtypes", DTYPES),
        device=e.choice("device", DEVICES),
        backward=raw["backward"],
        rules=e.names("rules", RULES),
        culprit=e.culprit(),
        state=state,
        reported=reported,
        live_in=e.versions(),
        fixed_in=fixed_in,
        note=e.text("note", limit=500, optional=True) or "",
        mechanism=mechanism,
        message=message,
        checked=checked,
        fixed_after=fixed_after,
    )


def parse_known_bugs(data: Any, *, source: str = "known-bugs") -> KnownBugs:
    """Validate a decoded file: every field of every entry, unique issue numbers."""
    if not isinstance(data, dict):
        raise KnownBugsError(f"{source}: expected a JSON object but got {type(data).__name__}")
    unknown = sorted(set(data) - set(_TOP))
    if unknown:
        raise KnownBugsError(f"{source}: unknown top-level field {unknown[0]!r}; expected {list(_TOP)}")
    if data.get("schema") != SCHEMA:
        raise KnownBugsError(f"{source}: field 'schema': expected {SCHEMA!r} but got {data.get('schema')!r:.80}")
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise KnownBugsError(f"{source}: field 'schema_version': expected a positive int but got {version!r:.80}")
    if version > SCHEMA_VERSION:
        raise KnownBugsError(f"{source}: schema_version {version} is newer than this divfuzz reads ({SCHEMA_VERSION}); update divfuzz")
    if not isinstance(data.get("description"), str):
        raise KnownBugsError(f"{source}: field 'description': expected a string but got {data.get('description')!r:.80}")
    raw_entries = data.get("entries")
    if not isinstance(raw_entries, list):
        raise KnownBugsError(f"{source}: field 'entries': expected a list but got {raw_entries!r:.80}")
    entries, seen = [], {}
    for index, raw in enumerate(raw_entries):
        bug = _entry(raw, index, source)
        pattern = (bug.issue, bug.mechanism, bug.message)
        if pattern in seen:
            raise KnownBugsError(f"{source}: entry {index} (pytorch#{bug.issue}): field 'issue': already used by entry {seen[pattern]} "
                                 "with the same mechanism and message")
        seen[pattern] = index
        entries.append(bug)
    return KnownBugs(tuple(entries), source)


def load_known_bugs(path: Path | None = None) -> KnownBugs:
    """Read and validate the known-bugs file (default: the repository's corpus/known-bugs.json).
    A missing file, a link or a folder, bad UTF-8 or bad JSON raises KnownBugsError naming the path."""
    path = Path(path) if path is not None else DEFAULT_PATH
    if path.is_symlink() or not path.is_file():
        raise KnownBugsError(f"{path}: not a regular file (a known-bugs file must be a plain JSON file)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise KnownBugsError(f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start})") from None
    except OSError as e:
        raise KnownBugsError(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise KnownBugsError(f"{path}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise KnownBugsError(f"{path}: JSON nested too deeply") from None
    return parse_known_bugs(data, source=str(path))


@functools.lru_cache(maxsize=1)
def default_known_bugs() -> KnownBugs:
    """The repository's file, loaded and validated once per process."""
    return load_known_bugs()
