"""A compiler error's crash site (`divfuzz.fuzzer.engine.error_site`) and the bucket it keys.

The errors here are real: Inductor's own test fault (`_raise_error_for_testing`, an assertion in
`compile_fx`), Inductor's C++ backend fed code that does not compile (its `inject_relu_bug`
switch), and the planted backend's exception. Graphs of different ops that trip one site must
share one bucket; different sites must not.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch._inductor.config as inductor_config

from divfuzz.fuzzer.campaign.loop import CampaignOptions, run_campaign
from divfuzz.fuzzer.engine.bucketing import bucket_key
from divfuzz.fuzzer.engine.error_site import error_site, normalized_message
from divfuzz.fuzzer.engine.execute import execute_case
from divfuzz.fuzzer.store import STORE_NAME, Store
from divfuzz.generators.spec import GraphSpec, InputRecipe, Node, TensorSpec
from divfuzz.oracles.findings import finding_of
from divfuzz.oracles.severity_policy import severity_of
from divfuzz.records.config import CompileConfig
from divfuzz.records.outcomes import Status
from divfuzz.records.verdict import MAX_ERROR_MESSAGE_CHARS, MAX_ERROR_SITE_CHARS, Verdict
from divfuzz.reports.html import collect, render_html


def _graph(op: str) -> GraphSpec:
    return GraphSpec(inputs=(TensorSpec("x0", (8, 16), "float32"),), nodes=(Node("v1", op, ("x0",), (), "float32", (8, 16)),),
                     outputs=("v1",), recipe=InputRecipe("mixed_sign", 7))


def _raised(fn, patch: dict) -> BaseException:
    torch._dynamo.reset()
    try:
        with inductor_config.patch(patch):
            torch.compile(fn)(torch.randn(8, 16))
    except Exception as e:
        return e
    raise AssertionError(f"no error under {patch}")


def test_one_inductor_assertion_is_one_site_whatever_the_graph_and_another_fault_is_another():
    first = error_site(_raised(lambda x: (x.sin() + 1).sum(0), {"_raise_error_for_testing": True}))
    second = error_site(_raised(lambda x: torch.exp(x) * 3, {"_raise_error_for_testing": True}))
    assert first == second
    assert first.startswith("AssertionError in torch/_inductor/compile_fx.py:"), first
    assert "assert not config._raise_error_for_testing" in first
    cpp = error_site(_raised(lambda x: torch.relu(x.sin()), {"cpp.inject_relu_bug_TESTING_ONLY": "compile_error"}))
    assert cpp != first
    # The C++ compiler's own "error:" line names the site (the driver's frame is the same for every C++ error).
    assert "error:" in cpp and "torch/_inductor/cpp_builder.py" in cpp, cpp
    assert "/tmp" not in cpp and "torchinductor" not in cpp


def test_a_message_keeps_its_words_and_loses_numbers_paths_and_addresses():
    class Wrapped(RuntimeError):
        pass

    inner = ValueError("buf12 has size 128 at 0x7f3a2c, see /tmp/torchinductor_root/ab/cabc12.py\nmore")
    outer = Wrapped("wrapper")
    outer.inner_exception = inner
    assert normalized_message([outer, inner]) == "bufN has size N at <addr>, see <path>"
    # Only absolute paths of two or more parts are paths: a ratio or markup-looking text stays.
    assert normalized_message([ValueError("a/b over [/bold] from /home")]) == "a/b over [/bold] from /home"


def test_a_site_holds_no_culprit_separator_and_is_bounded():
    def deep():
        raise RuntimeError("a @ b " + "x" * 1000)

    try:
        deep()
    except RuntimeError as e:
        site = error_site(e)
    assert " @ " not in site and len(site) <= MAX_ERROR_SITE_CHARS
    assert "test_error_site.py:" in site and "deep" in site and "/work" not in site


def test_errors_at_one_site_share_a_key_and_other_findings_keep_the_graphs_ops():
    config = CompileConfig(backend="divfuzz.fuzzer.engine.planted:inductor_assertion")
    verdicts = [execute_case(_graph(op), "cpu", config) for op in ("tanh", "exp")]
    assert all(v.status is Status.COMPILE_ERROR and v.error_site for v in verdicts)
    keys = {bucket_key(finding_of(v), _graph(op), "cpu", reason=severity_of(v)) for v, op in zip(verdicts, ("tanh", "exp"))}
    assert len(keys) == 1
    (key,) = keys
    assert key.ops == () and key.site == verdicts[0].error_site and key.detail == "BackendCompilerFailed(AssertionError)"
    assert key.ops_text() == f"raised: {verdicts[0].error_site}" and key.rule == "compile-error"
    # The site survives the store's round trip; a verdict without one keys by the graph's ops.
    assert Verdict.from_dict(verdicts[0].to_dict()).error_site == verdicts[0].error_site
    no_site = Verdict(Status.COMPILE_ERROR, error_type="X")
    assert "error_site" not in no_site.to_dict()
    by_ops = bucket_key(finding_of(no_site), _graph("tanh"), "cpu", reason=severity_of(no_site))
    assert by_ops.ops == ("tanh",) and by_ops.site == "" and by_ops.ops_text() == "tanh"


def test_a_campaign_files_every_graph_that_trips_one_assertion_in_one_bucket(tmp_path):
    opts = CampaignOptions(device="cpu", out_dir=tmp_path, config=CompileConfig(backend="divfuzz.fuzzer.engine.planted:inductor_assertion"),
                           max_cases=8, seed=5, minimize=False)
    result = run_campaign(opts)
    store = Store(tmp_path / STORE_NAME)
    try:
        buckets = store.buckets(run_id=result.run_id)
        cases = store.db.execute("SELECT spec_json FROM cases").fetchall()
        page = render_html(collect(store), tmp_path / "report.html", plots="bug")
    finally:
        store.close()
    assert result.progress.cases == 8
    op_sets = {tuple(sorted(GraphSpec.from_json(row[0]).op_names)) for row in cases}
    assert len(op_sets) > 1  # graphs of different ops ...
    assert len(buckets) == 1 and buckets[0].count == 8  # ... in one bucket
    assert buckets[0].key.ops == () and buckets[0].key.site.startswith("AssertionError in torch/_inductor/compile_fx.py:")
    assert buckets[0].key.ops_text() == f"raised: {buckets[0].key.site}" and buckets[0].severity == "bug"
    assert "raised at <code>AssertionError in torch/_inductor/compile_fx.py:" in page


@pytest.mark.parametrize("site, kept", [(None, True), ("the input's site", True), ("another site", False)])
def test_the_minimizer_keeps_a_crash_at_its_site(site, kept):
    from divfuzz.fuzzer.engine.worker import Worker
    from divfuzz.fuzzer.triage.shrink import case_predicate

    spec = _graph("tanh")
    config = CompileConfig(backend="divfuzz.fuzzer.engine.planted:inductor_assertion")
    verdict = execute_case(spec, "cpu", config)
    wanted = {None: None, "the input's site": verdict.error_site, "another site": "AssertionError in elsewhere.py:f"}[site]
    predicate = case_predicate(Worker("cpu"), device="cpu", config=config, kind="compile-error",
                               known={(spec.digest(), config): verdict}, site=wanted)
    assert predicate(spec) is kept


def _from_a_subprocess(remote_traceback: str) -> BaseException:
    class SubprocException(RuntimeError):  # as Inductor's compile subprocesses hand an error back
        pass

    try:
        raise SubprocException("An exception occurred in a subprocess:\n\n" + remote_traceback)
    except SubprocException as e:
        return e


def test_an_error_from_a_compile_subprocess_is_sited_where_it_was_raised_there():
    torch_dir = Path(torch.__file__).parent

    def remote(where: str, line: str, last: str) -> str:
        return f'Traceback (most recent call last):\n  File "{torch_dir}/_inductor/{where}", line 7, in f\n    {line}\n{last}\n'

    one = error_site(_from_a_subprocess(remote("codegen/triton.py", "assert ok", "AssertionError: triton_poi_fused_add_mul_0 got 12")))
    same = error_site(_from_a_subprocess(remote("codegen/triton.py", "assert ok", "AssertionError: triton_red_fused_sum_3 got 99")))
    other = error_site(_from_a_subprocess(remote("lowering.py", "raise ValueError(v)", "ValueError: no lowering")))
    assert one == same == "AssertionError in torch/_inductor/codegen/triton.py:f: assert ok | <kernel> got N"
    assert other.startswith("ValueError in torch/_inductor/lowering.py:f") and other != one


def test_a_site_is_never_an_exception_of_its_own(monkeypatch):
    import divfuzz.fuzzer.engine.error_site as error_site_module

    def broken(e):
        raise FileNotFoundError("the working folder was deleted")

    monkeypatch.setattr(error_site_module, "site_frame", broken)
    assert error_site(_raised(lambda x: torch.exp(x) * 3, {"_raise_error_for_testing": True})) is None


def test_a_verdict_read_from_a_store_has_its_error_text_clipped():
    # A store divfuzz did not write may hold any string: the site and the message are clipped on load.
    stored = {"status": "compile-error", "error_type": "AssertionError", "error_message": "m" * 50_000,
              "error_site": "s" * 50_000}
    verdict = Verdict.from_dict(stored)
    assert len(verdict.error_site) == MAX_ERROR_SITE_CHARS and len(verdict.error_message) == MAX_ERROR_MESSAGE_CHARS
    assert Verdict.from_dict({"status": "compile-error", "error_site": 7}).error_site is None
