"""An unknown op is refused naming the file (or the stored case) and the node (issue 56): it said
only `error: unknown op 'os.system'; known ops: ...`, for `replay`, `corpus add` and
`minimize --pending` alike."""

from __future__ import annotations

import json

from click.testing import CliRunner

from divfuzz.fuzzer.cli.main import main
from test_spec_safety import base


def _invoke(*args) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, " ".join(result.output.split())


def _with_unknown_op() -> dict:
    spec = base()
    spec["nodes"][1]["op"] = "os.system"
    return spec


def test_replay_and_corpus_add_name_the_file_and_the_node_of_an_unknown_op(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(_with_unknown_op()))
    code, text = _invoke("replay", spec, "--device", "cpu")
    assert code == 2 and f"error: {spec}: node 'v2': unknown op 'os.system'; known ops: " in text, text
    corpus = tmp_path / "corpus"
    code, text = _invoke("corpus", "add", spec, "--corpus", corpus)
    assert code == 2 and f"{spec}: node 'v2': unknown op 'os.system'" in text, text
    assert not corpus.exists() or not any(corpus.rglob("*.json"))


def test_minimize_pending_names_the_store_the_case_and_the_node_of_an_unknown_op(tmp_path):
    from divfuzz.fuzzer.campaign.bucket_folders import Filing
    from divfuzz.fuzzer.store import STORE_NAME, Store
    from divfuzz.records.buckets import BucketKey

    campaign = tmp_path / "campaign"
    campaign.mkdir()
    store = Store(campaign / STORE_NAME)
    try:
        run_id, _ = store.start_run(seed=0, device="cpu", config={}, options={}, versions={})
        row = dict(run_id=run_id, slot=0, idx=0, spec_digest="d", spec_json=json.dumps(_with_unknown_op()), device="cpu",
                   config={"backend": "inductor", "dynamic": False, "mode": None, "inductor": {}},
                   verdict={"status": "diverged"}, score=1.0, wall_s=0.1, finding_kind="fp32-ulp")
        Filing(store, campaign, timeout_s=None).store_case(
            row, key=None, raw_key=BucketKey("fp32-ulp", "float32", "cpu", ("gelu",), rule="many-ulps"), triage="",
            severity=None, for_analysis=True)
        store.finish_run(run_id)
    finally:
        store.close()
    before = (campaign / STORE_NAME).read_bytes()
    code, text = _invoke("minimize", "--pending", "--out", campaign, "--device", "cpu")
    assert code == 2 and f"case 1 in {campaign / STORE_NAME}: node 'v2': unknown op 'os.system'" in text, text
    assert (campaign / STORE_NAME).read_bytes() == before
