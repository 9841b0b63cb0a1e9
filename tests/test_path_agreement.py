"""One graph on one input gets one answer: drawn specs judged as a campaign's case and as a user
module's captured aten graph (`scripts/path_agreement.py`) read the same bug / not-bug, and, where
neither path's own experiments differ (no in-place op, which a user module's make_fx reads as a
functional graph), the same severity and rule (issue 50, item 4)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "path_agreement.py"


def _rows(specs: int, seed: int):
    spec = importlib.util.spec_from_file_location("path_agreement", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.judged_both_ways(specs=specs, seed_value=seed, max_ops=3, device="cpu")


def _check(rows):
    assert rows
    for spec, campaign, module, error in rows:
        assert not error, (spec.op_names, error)
        c = campaign.severity.value if campaign else "none"
        m = module.severity.value if module else "none"
        assert (c == "bug") == (m == "bug"), (spec.op_names, campaign, module)
        if not any(op.endswith("_") for op in spec.op_names):
            assert c == m, (spec.op_names, campaign, module)


def test_a_few_drawn_graphs_read_the_same_on_both_paths():
    _check(_rows(3, 5))


@pytest.mark.slow
def test_many_drawn_graphs_read_the_same_on_both_paths():
    _check(_rows(30, 11))
