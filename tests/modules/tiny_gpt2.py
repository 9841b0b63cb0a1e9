"""A tiny randomly initialised GPT-2 (`GPT2LMHeadModel`, no download) in bf16, for the H100 model
table (`scripts/gpu_models.sh`): learned positions, tanh GELU, tied embeddings, no KV cache.
The model is built on the CPU; `minimize --module --device` moves it and its inputs."""

import torch


def make_case():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_embd=64, n_layer=2, n_head=4, n_inner=128, vocab_size=128, n_positions=64, use_cache=False,
                        bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config).to(torch.bfloat16).eval()  # no dropout: steps repeat
    ids = torch.randint(0, 128, (2, 16))
    return model, (), {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
