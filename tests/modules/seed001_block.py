"""Seed 001's model block (`../shared/seeds/001_*`): RMSNorm then the squared-leaky-ReLU MLP,
with the residual, as in the Parameter Golf transformer whose training step Inductor's
mix-order reduction made 6.3 ms slower on an H100. For `divfuzz minimize --module ... --oracle perf --train`.

`block()` is sized for a CPU test; `block_h100()` is the seed's own size (dim 512, 32 x 2048
tokens, bf16).
"""

import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    def __init__(self, dim, mult=4):
        super().__init__()
        self.fc = nn.Linear(dim, dim * mult, bias=False)
        self.proj = nn.Linear(dim * mult, dim, bias=False)

    def forward(self, x):
        return self.proj(F.leaky_relu(self.fc(x), negative_slope=0.5).square())


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.mlp = MLP(dim)

    def forward(self, x):
        return x + self.mlp(F.rms_norm(x, (x.size(-1),)))


def block():
    torch.manual_seed(0)
    return Block(128), (torch.randn(4, 256, 128),)


def block_h100():
    torch.manual_seed(0)
    return Block(512).bfloat16(), (torch.randn(32, 2048, 512, dtype=torch.bfloat16),)


class QKNormAttention(nn.Module):
    """Grouped-query causal attention with RMS-normalised queries and keys."""

    def __init__(self, dim, heads=8, kv_heads=4):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q = nn.Linear(dim, dim, bias=False)
        self.kv = nn.Linear(dim, 2 * kv_heads * self.head_dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q = self.q(x).view(b, t, self.heads, self.head_dim)
        k, v = self.kv(x).view(b, t, 2, self.kv_heads, self.head_dim).unbind(2)
        q, k = F.rms_norm(q, (self.head_dim,)), F.rms_norm(k, (self.head_dim,))
        rep = self.heads // self.kv_heads
        q, k, v = q.transpose(1, 2), k.transpose(1, 2).repeat_interleave(rep, 1), v.transpose(1, 2).repeat_interleave(rep, 1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class TinyLM(nn.Module):
    """The seed's shape of model: embedding, pre-norm blocks (attention, MLP), a final norm, a
    head and the cross-entropy loss (the output is the loss: `--train` backpropagates it)."""

    def __init__(self, vocab=4096, dim=512, layers=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.attn = nn.ModuleList(QKNormAttention(dim) for _ in range(layers))
        self.mlp = nn.ModuleList(MLP(dim) for _ in range(layers))
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens, targets):
        h = F.rms_norm(self.emb(tokens), (self.emb.embedding_dim,))
        for attn, mlp in zip(self.attn, self.mlp):
            h = h + attn(F.rms_norm(h, (h.size(-1),)))
            h = h + mlp(F.rms_norm(h, (h.size(-1),)))
        logits = self.head(F.rms_norm(h, (h.size(-1),)))
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))


def lm_h100():
    torch.manual_seed(0)
    tokens = torch.randint(0, 4096, (8, 2048))
    return TinyLM().bfloat16(), (tokens, torch.randint(0, 4096, (8, 2048)))
