"""Every rule id a severity can name, as one closed vocabulary (`Rule`).

A rule id is the name of the judgement that gave a finding its severity: it is stored in a
bucket's key and its severity reason, printed in every report, and matched by the known-bug list
and the mechanism table. `Rule` is a `str` enum, so a stored or printed id is the plain string
and `Rule("nan-inf-lost") == "nan-inf-lost"`. Invariant (tests/test_rule_vocabulary.py): the
severity table (`divfuzz.oracles.severity_policy.RULE_SEVERITY`) has one entry per member, and
every rule id written as a literal in the package (a reason's rule, a `rule=` argument, a
comparison with a rule, a `*_RULES` set) is a member. The compiler-failure rules are the finding
kinds of `divfuzz.records.outcomes.COMPILER_FAILURES`. Torch-free.
"""

from __future__ import annotations

import enum


class Rule(str, enum.Enum):
    COMPILE_ERROR = "compile-error"
    COMPILED_CLOSER = "compiled-closer"
    COMPILED_FP64_CORRECT = "compiled-fp64-correct"
    CRASH = "crash"
    EAGER_GROSS_WORSE = "eager-gross-worse"
    FEW_ULPS = "few-ulps"
    FEW_ULPS_UNREFERENCED = "few-ulps-unreferenced"
    FLOAT_GROSS_WORSE = "float-gross-worse"
    GROSS_WORSE_ILL_CONDITIONED = "gross-worse-ill-conditioned"
    HANG = "hang"
    INT_BOUNDARY = "int-boundary"
    INT_EAGER_INEXACT = "int-eager-inexact"
    INT_FLIP = "int-flip"
    INT_GROSS = "int-gross"
    INT_ILL_CONDITIONED = "int-ill-conditioned"
    INT_VALUED_BOUNDARY = "int-valued-boundary"
    INT_VALUED_ILL_CONDITIONED = "int-valued-ill-conditioned"
    INT_VALUED_WRONG = "int-valued-wrong"
    MANY_ULPS = "many-ulps"
    MANY_ULPS_WORSE = "many-ulps-worse"
    NAN_INF_ILL_CONDITIONED = "nan-inf-ill-conditioned"
    NAN_INF_LOST = "nan-inf-lost"
    NAN_INF_MOVED = "nan-inf-moved"
    NAN_INF_NEW = "nan-inf-new"
    NAN_INF_RANGE_EDGE = "nan-inf-range-edge"
    NAN_INF_WRONG = "nan-inf-wrong"
    OUTPUT_TYPE_MISMATCH = "output-type-mismatch"
    PRECISION_KNOB = "precision-knob"
    RECOMPILE = "recompile"
    RMSE_WORSE = "rmse-worse"
    RUNTIME_ERROR = "runtime-error"
    SLOWER_BEYOND_NOISE = "slower-beyond-noise"
    SLOWER_WITHIN_NOISE = "slower-within-noise"
    STRIDE_MISMATCH = "stride-mismatch"
    UNDEFINED_CAST = "undefined-cast"
    UNREFERENCED = "unreferenced"
    WITHIN_SAME = "within-same"
    WRAPPER_OVERHEAD = "wrapper-overhead"
    ZERO_SIGN_WRONG = "zero-sign-wrong"

    def __str__(self) -> str:
        return self.value


RULE_IDS = frozenset(r.value for r in Rule)
