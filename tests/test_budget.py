"""`--budget` is a deadline: a campaign with minimization on ends within its budget plus the grace."""

from __future__ import annotations

import time

import pytest

from fuzzer.campaign.loop import BUDGET_GRACE_S, Campaign, CampaignOptions
from records.config import CompileConfig


@pytest.mark.slow
def test_a_60s_campaign_with_minimization_ends_within_budget_plus_grace(tmp_path):
    # The planted backend bumps one bf16 ULP, so every case is a finding and minimization (which
    # alone may take minutes per bucket) runs into the deadline.
    opts = CampaignOptions(device="cpu", out_dir=tmp_path, budget_s=60.0, seed=5, dtypes=("bfloat16",), minimize=True,
                           minimize_budget_s=600.0, config=CompileConfig(backend="fuzzer.engine.planted:ulp_bump"))
    t0 = time.monotonic()
    campaign = Campaign(opts)
    result = campaign.run()
    elapsed = time.monotonic() - t0
    campaign.store.close()
    # _interrupt waits up to 30 s for the slots to wind down after the grace.
    assert elapsed < 60.0 + BUDGET_GRACE_S + 30.0, elapsed
    assert not result.interrupted
