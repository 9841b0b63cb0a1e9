"""A tiny randomly initialised Qwen2 from transformers (no download) in bf16, for the H100 model
table (`scripts/gpu_models.sh`): keyword inputs, integer token ids, a `ModelOutput` result (no
KV cache: `use_cache=False`, one forward has nothing to reuse).
The model is built on the CPU; `minimize --module --device` moves it and its inputs."""

import torch


def make_case():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=128, max_position_embeddings=64, use_cache=False)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16).eval()  # no dropout: steps repeat
    ids = torch.randint(0, 128, (2, 16))
    return model, (), {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
