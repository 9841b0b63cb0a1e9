"""A check shared by the capture tests: a model's Dynamo-captured graphs come from its own source
file, and the largest one, lowered to aten, gives bit-identical outputs (logits included)."""

from __future__ import annotations

import torch


def assert_captured_and_lowered_bit_for_bit(model, args, kwargs, source_file: str, logits_width: int = 128) -> None:
    from divfuzz.fuzzer.triage.capture import ModelStep, capture_graphs, flatten_outputs, lower_to_aten

    graphs, _, _ = capture_graphs(ModelStep(model, args, kwargs, device="cpu", autocast=None, train=False))
    assert graphs and all(source_file in g.source for g in graphs), [g.describe() for g in graphs]
    biggest = max(graphs, key=lambda g: g.ops)
    aten, inputs = lower_to_aten(biggest, train=False)
    with torch.no_grad():
        want = [t for _, t in flatten_outputs(biggest.gm(*biggest.inputs))]
        got = list(aten(*inputs))
    assert any(t.dtype == torch.bfloat16 and t.shape[-1] == logits_width for t in want), "the logits come out of a captured graph"
    assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want))
