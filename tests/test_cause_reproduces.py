"""A cause folder is filed only if its repro.py exits 1 in a fresh interpreter (issue 20, item 8);
otherwise it says "not reproduced" and why. Real subprocesses, no compile."""

from types import SimpleNamespace

from divfuzz.fuzzer.triage.user_module import _check_reproduces
from divfuzz.records.deadline import Deadline


def _folder(tmp_path, body: str):
    (tmp_path / "repro.py").write_text("import sys\n" + body + "\n")
    return tmp_path


def test_exit_1_reproduces(tmp_path):
    assert _check_reproduces(_folder(tmp_path, "sys.exit(1)"), SimpleNamespace(removed=()), Deadline.after(30)) == (True, None)


def test_exit_0_is_not_reproduced_with_the_likely_reason(tmp_path):
    ok, why = _check_reproduces(_folder(tmp_path, "sys.exit(0)"), SimpleNamespace(removed=()), Deadline.after(30))
    assert not ok and "exits 0" in why and "fresh process" in why
    ok, why = _check_reproduces(_folder(tmp_path, "sys.exit(0)"), SimpleNamespace(removed=("aten.mean",)), Deadline.after(30))
    assert not ok and "aten.mean removed" in why


def test_a_crashing_repro_is_not_reproduced_and_names_its_error(tmp_path):
    ok, why = _check_reproduces(_folder(tmp_path, "raise ValueError('inputs.bin is missing')"), SimpleNamespace(removed=()),
                                Deadline.after(30))
    assert not ok and why.startswith("repro.py exited 1: ValueError: inputs.bin is missing")  # not a reproduction


def _cause(sev, rule="float-gross-worse", reproduced=True, folder="out/01-inductor"):
    return {"severity": {"severity": sev, "rule": rule}, "reproduced": reproduced, "folder": folder,
            "summary": "inductor lowering of amax"}


def test_one_answer_per_model_says_why_the_whole_model_and_its_cause_disagree():
    from divfuzz.fuzzer.cli.minimize_command import module_headline

    whole = {"severity": "bug", "rule": "float-gross-worse"}
    line = module_headline({"severity": whole, "causes": [_cause("by-design", "precision-knob")]})
    assert line.startswith("headline: by-design: the whole model reads bug (float-gross-worse)") and "01-inductor" in line
    assert module_headline({"severity": whole, "causes": [_cause("bug")]}) == "headline: bug"
    # a cause that did not reproduce is no evidence
    # ... and no bug headline without a repro: the model's bug is headlined suspect, with the reason
    line = module_headline({"severity": whole, "causes": [_cause("by-design", reproduced=False)]})
    assert line.startswith("headline: suspect: the whole model reads bug (float-gross-worse), but no repro shows it: "
                           "1 cause folder(s) did not reproduce"), line
    line = module_headline({"severity": whole, "causes": [], "phases": {"cut_by_budget": ["reduction cut"]}})
    assert line.startswith("headline: suspect:") and "--budget was spent first" in line
    # the whole model differs and no captured graph explains it: said so, with the graph breaks named
    line = module_headline({"severity": {"severity": "suspect", "rule": "many-ulps"}, "causes": []})
    assert "no captured graph reproduces it by itself" in line
    capture = {"graph_breaks": 1, "break_reasons": ["Tensor.item() at model.py:12"]}
    line = module_headline({"severity": whole, "causes": [], "capture": capture})
    assert line.startswith("headline: bug (the whole model only)") and "1 graph break(s)" in line
    assert "Tensor.item() at model.py:12" in line
    assert module_headline({"severity": None, "causes": []}) == "headline: none"


def test_a_whole_model_that_is_one_graph_takes_the_mechanism_that_explains_the_graph():
    """The whole model's Python run cannot run a mechanism's experiment; its one captured graph,
    with no graph break, is the whole model, and where a mechanism explains that graph (the flush of
    issue 125557 on CUDA) the headline is the graph's severity, never the whole model's bug."""
    from divfuzz.fuzzer.cli.minimize_command import module_headline

    whole = {"severity": "bug", "rule": "float-gross-worse"}
    explained = [{"graph": 1, "severity": "by-design", "rule": "float-gross-worse", "mechanism": "subnormal-flush"}]
    capture = {"graph_breaks": 0, "graphs": [{"index": 1}], "explained_graphs": explained, "severity": whole}
    line = module_headline({"severity": whole, "causes": [], "capture": capture})
    assert line.startswith("headline: by-design: the whole model reads bug") and "subnormal-flush" in line, line
    # with a graph break the graphs are not the whole model: the bug stays, placed between them
    broken = dict(capture, graph_breaks=1, break_reasons=["Tensor.item() at model.py:12"], graphs=[{"index": 1}, {"index": 2}])
    assert module_headline({"severity": whole, "causes": [], "capture": broken}).startswith("headline: bug (the whole model only)")
