"""A tiny randomly initialised BERT (`BertForMaskedLM`, no download) in bf16, for the H100 model
table (`scripts/gpu_models.sh`): token type ids, a padding mask, erf GELU, LayerNorm.
The model is built on the CPU; `minimize --module --device` moves it and its inputs."""

import torch


def make_case():
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    config = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                        vocab_size=128, max_position_embeddings=64)
    model = BertForMaskedLM(config).to(torch.bfloat16).eval()  # no dropout: steps repeat
    ids = torch.randint(0, 128, (2, 16))
    mask = torch.ones_like(ids)
    mask[1, 12:] = 0  # the second sequence is padded: the mask takes part in attention
    return model, (), {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
