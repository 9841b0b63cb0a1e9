"""One judgement of a run, for every command: a verdict in; its finding, severity reason, mechanism
and raw bucket key out.

The campaign (`divfuzz.fuzzer.campaign.case_steps`), the gate and `replay`
(`divfuzz.fuzzer.gate.replay`, `divfuzz.fuzzer.cli.replay_command`), `minimize SPEC`
(`divfuzz.fuzzer.cli.minimize_command`), the analyses (`divfuzz.fuzzer.triage.analysis`,
`divfuzz.fuzzer.triage.shrink`) and `minimize --module` (`divfuzz.fuzzer.triage.capture` for the
whole model, `divfuzz.fuzzer.triage.user_module` for each graph and each cause) call `judge` and
nothing else: one graph on one input gets one severity, rule, mechanism and key whichever command
ran it. The policy itself is `divfuzz.oracles.severity_policy`; this module composes it
(`severity_of` -> `case_finding` -> `bucket_key`) and is the only caller of those three above the
oracles and the engine.

Invariants:
- the severity is judged once per call, under the culprit's switch and subsystem when given;
- the finding is the one on the output the severity reason names (`case_finding`);
- the key exists only for a run with a spec and a device (a user module's graph has none) and
  names the mechanism only where it explains the reason's rule.
"""

from __future__ import annotations

from dataclasses import dataclass

from divfuzz.fuzzer.engine.bucketing import bucket_key
from divfuzz.generators.spec import GraphSpec
from divfuzz.oracles.findings import finding_of
from divfuzz.oracles.severity_policy import case_finding, explaining_mechanism, severity_of
from divfuzz.records.buckets import BucketKey
from divfuzz.records.severity import Severity, SeverityReason
from divfuzz.records.verdict import Finding, Verdict


@dataclass(frozen=True)
class Judgement:
    """What a run means: its finding (None when nothing diverges enough to be one), the severity
    reason (None when nothing diverges), the mechanism that explains that reason ("" for none) and
    the raw bucket key (None without a finding, or without a spec to key it by)."""

    finding: Finding | None
    reason: SeverityReason | None
    mechanism: str
    key: BucketKey | None

    @property
    def severity(self) -> Severity | None:
        return self.reason.severity if self.reason is not None else None

    @property
    def worth_reducing(self) -> bool:
        """What `minimize --module` reduces and attributes: `suspect` or worse."""
        return self.reason is not None and self.reason.severity.at_least(Severity.SUSPECT)


def judge(verdict: Verdict, *, spec: GraphSpec | None = None, device: str | None = None, strict: bool = False,
          switch: str | None = None, subsystem: str | None = None, findings_only: bool = False) -> Judgement:
    """The one judgement of `verdict` (see the module docstring). `switch` and `subsystem` are the
    culprit's (`CulpritKey`) where attribution ran: a precision knob or a decomposition at fault
    changes the severity, never the finding; `strict` counts any bit difference as a finding;
    `findings_only` (a campaign's cases) judges no severity where there is no finding at all."""
    if findings_only and finding_of(verdict, strict=strict) is None:
        return Judgement(None, None, "", None)
    reason = severity_of(verdict, switch=switch, subsystem=subsystem)
    finding = case_finding(verdict, strict=strict, reason=reason)
    key = None
    if finding is not None and spec is not None and device is not None:
        key = bucket_key(finding, spec, device, reason=reason, against=verdict.against, explanation=verdict.explanation)
    return Judgement(finding, reason, explaining_mechanism(verdict, reason), key)


def worth_reducing(verdict: Verdict) -> bool:
    """`judge(verdict).worth_reducing`: the predicate `minimize --module` reduces by."""
    return judge(verdict).worth_reducing
