"""`divfuzz.fuzzer.triage.fx_bypass`: removing nodes from the middle of an aten graph while a predicate holds,
without ever introducing an undefined float -> integer cast."""

from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from divfuzz.records.deadline import Deadline
from divfuzz.fuzzer.triage.fx_bypass import bypass_reduce, casts_out_of_range, count_ops, node_values


def _targets(gm) -> list[str]:
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def _has(name):
    return lambda gm, inputs: any(name in t for t in _targets(gm))


def test_middle_nodes_go_while_the_predicate_holds():
    gm = make_fx(lambda x: torch.relu(torch.sin(x * 2) + 1))(torch.randn(8))
    assert count_ops(gm) == 4
    small, inputs, calls = bypass_reduce(gm, [torch.randn(8)], _has("sin"), Deadline.after(60))
    assert _targets(small) == ["aten.sin.default"]
    assert calls >= 3 and len(inputs) == 1


def test_a_bypass_never_casts_out_of_range_values_to_an_integer():
    # Without `+ 127`, log2 of values under 1 is negative: undefined as uint8.
    fn = lambda x: (torch.log2(x) + 127).to(torch.uint8)  # noqa: E731
    x = torch.rand(64) + 1e-3
    gm = make_fx(fn)(x)
    assert not casts_out_of_range(gm, node_values(gm, [x]))
    keeps_log2_and_cast = lambda g, i: _has("log2")(g, i) and _has("_to_copy")(g, i)  # noqa: E731
    small, _, calls = bypass_reduce(gm, [x], keeps_log2_and_cast, Deadline.after(60))
    assert _targets(small) == ["aten.log2.default", "aten.add.Tensor", "aten._to_copy.default"]
    assert calls == 1  # only bypassing log2 reached the predicate: bypassing the add was refused first
    assert not casts_out_of_range(small, node_values(small, [x]))


def test_a_tuple_op_is_bypassed_through_its_getitem_and_unused_inputs_are_dropped():
    bn = torch.nn.BatchNorm1d(4).eval()
    with torch.no_grad():
        bn.running_mean.fill_(0.5)
        gm = make_fx(lambda x, y: torch.relu(bn(x)) * y)(torch.randn(3, 4), torch.randn(3, 4))
    before = [t for t in _targets(gm) if "getitem" not in t]
    assert before[-3:] == ["aten.native_batch_norm.default", "aten.relu.default", "aten.mul.Tensor"]
    assert count_ops(gm) == len(before)  # getitem is not counted
    small, inputs, _ = bypass_reduce(gm, [torch.randn(3, 4), torch.randn(3, 4)], _has("relu"), Deadline.after(60))
    assert _targets(small) == ["aten.relu.default"]
    assert len(inputs) == 1
    assert torch.equal(small(*inputs), torch.relu(inputs[0]))
