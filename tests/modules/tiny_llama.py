"""A tiny randomly initialised Llama from transformers (no download), as a user hands a Hugging Face
model to `divfuzz minimize --module`: keyword inputs, integer token ids, a `ModelOutput` result.
Its attention-mask code has data-dependent control flow that make_fx cannot trace."""

import torch


def make_case():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=128)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    ids = torch.randint(0, 128, (2, 16))
    return model, (), {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
