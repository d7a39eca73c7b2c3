"""A Llama-style model in plain PyTorch: RMSNorm, rotary position
embeddings, a SwiGLU MLP, grouped-query attention, an untied head.

Written the way such models usually are (Meta's llama reference, nanoGPT
forks): rotary tables as non-persistent buffers, rotate-half RoPE, K/V
heads repeated with repeat_interleave, causal scaled_dot_product_attention.

With its defaults it is the PyTorch twin of examples/llama-tiny.toml
(`kind = "llama"`): the same function, the same parameter names and
layouts, so the two load each other's safetensors.

    PYTHONPATH=python python3 -m stretto.export examples/pytorch/llama.py:build --out runs/llama
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    """Hand-written (x * rsqrt(mean(x^2) + eps)) * w; nn.RMSNorm works too."""

    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, d, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
        self.wq = nn.Linear(d, heads * self.hd, bias=False)
        self.wk = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.wv = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.wo = nn.Linear(heads * self.hd, d, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.heads, self.hd).transpose(1, 2)
        k = self.wk(x).view(B, T, self.kv_heads, self.hd).transpose(1, 2)
        v = self.wv(x).view(B, T, self.kv_heads, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.heads // self.kv_heads
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))


class FeedForward(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.w1 = nn.Linear(d, hidden, bias=False)  # gate
        self.w3 = nn.Linear(d, hidden, bias=False)  # up
        self.w2 = nn.Linear(hidden, d, bias=False)  # down

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, d, heads, kv_heads, hidden):
        super().__init__()
        self.attention_norm = RMSNorm(d)
        self.attention = Attention(d, heads, kv_heads)
        self.ffn_norm = RMSNorm(d)
        self.feed_forward = FeedForward(d, hidden)

    def forward(self, x, cos, sin):
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(nn.Module):
    def __init__(self, vocab=256, d=128, layers=2, heads=4, kv_heads=2, hidden=341, seq=64,
                 theta=10000.0, tie=False):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Block(d, heads, kv_heads, hidden) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.output = nn.Linear(d, vocab, bias=False)
        if tie:
            self.output.weight = self.tok_embeddings.weight
        hd = d // heads
        inv = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)
        ang = torch.outer(torch.arange(seq, dtype=torch.float32), inv)
        ang = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)
        # As kind = "llama" initialises: normal(0.02), the residual
        # projections (wo, w2) at 0.02 / sqrt(2 * layers).
        for name, p in self.named_parameters():
            if p.dim() == 2:
                resid = name.endswith(("wo.weight", "w2.weight"))
                nn.init.normal_(p, std=0.02 / (2 * layers) ** 0.5 if resid else 0.02)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.tok_embeddings(idx)
        cos, sin = self.cos[:T], self.sin[:T]
        for layer in self.layers:
            x = layer(x, cos, sin)
        logits = self.output(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def build(batch=16, seq=64, seed=0):
    torch.manual_seed(seed)
    model = Llama(seq=seq)
    idx = torch.zeros(batch, seq, dtype=torch.long)
    return model, (idx, idx.clone())


def build_tied(batch=16, seq=64, seed=0):
    """The same model with the head tied to the token embedding."""
    torch.manual_seed(seed)
    model = Llama(seq=seq, tie=True)
    idx = torch.zeros(batch, seq, dtype=torch.long)
    return model, (idx, idx.clone())
