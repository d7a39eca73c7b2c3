"""The reference GPT of examples/gpt-tiny.toml, written in plain PyTorch.

Pre-norm blocks (LayerNorm, eps 1e-5), learned token and position
embeddings, causal attention with a fused QKV projection, a tanh-GELU MLP
of width 4d, biases in every linear layer but the untied head, mean
cross-entropy. The same function as `kind = "gpt"` in lib/Frontend/Import.cpp
(names and layouts differ: nn.Linear keeps its weight [out, in]).

    PYTHONPATH=python python3 -m stretto.export examples/pytorch/gpt.py:build --out runs/gpt
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads, layers):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)
        # GPT-2: residual projections at 0.02 / sqrt(2 * layers).
        for lin in (self.proj, self.out):
            nn.init.normal_(lin.weight, std=0.02 / math.sqrt(2 * layers))

    def forward(self, x):
        B, T, D = x.shape
        H = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
        q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab=256, d=128, layers=2, heads=4, seq=64):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Parameter(torch.zeros(seq, d))
        self.blocks = nn.ModuleList(Block(d, heads, layers) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2 and not name.endswith(("proj.weight", "out.weight")):
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def build(batch=16, seq=64, seed=0):
    torch.manual_seed(seed)
    model = GPT(seq=seq)
    idx = torch.zeros(batch, seq, dtype=torch.long)
    return model, (idx, idx.clone())
