"""One small language model per supported ATen op, for the exporter's tests.

Each MODELS entry is (name, fn): `fn(x)` maps the token embedding x
[B, T, D] to features [B, T, D] through the op under test (parameters it
needs come from `p`, a dict of nn.Parameters made by `params`). `build(name)`
wraps it into embedding -> fn -> linear head -> cross-entropy, the shape of
model `python3 -m stretto.export` expects. check_ops.py exports every model,
FileChecks its MLIR (ops.test) and trains it two SGD steps in Stretto and
in PyTorch, in f64, comparing losses and parameters.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

B, T, D, V = 2, 4, 8, 256
H = 2  # heads of the attention cases


def _causal():
    return torch.tril(torch.ones(T, T, dtype=torch.bool))


def _sdpa_heads(x):
    return x.view(B, T, H, D // H).transpose(1, 2)


def _sdpa_merge(y):
    return y.transpose(1, 2).reshape(B, T, D)


# Grouped-query attention: 4 query heads of 2 dims, 2 K/V heads (K/V head j
# serves query heads 2j and 2j + 1, repeat_interleave's order).
def _gqa_qkv(x, p):
    q = (x @ p["w"]).view(B, T, 4, 2).transpose(1, 2)
    k = (x @ p["wk"]).view(B, T, 2, 2).transpose(1, 2)
    v = (x @ p["wv"]).view(B, T, 2, 2).transpose(1, 2)
    return q, k, v


def _gqa(x, p):
    q, k, v = _gqa_qkv(x, p)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    return y.transpose(1, 2).reshape(B, T, D)


def _repeat_kv(x, p):
    q, k, v = _gqa_qkv(x, p)
    k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return y.transpose(1, 2).reshape(B, T, D)


def _manual_attention(x, p):
    q, k, v = _sdpa_heads(x), _sdpa_heads(x @ p["w"]), _sdpa_heads(x)
    s = (q @ k.transpose(-2, -1)) / math.sqrt(D // H)
    s = s.masked_fill(~_causal(), float("-inf"))
    return _sdpa_merge(F.softmax(s, dim=-1) @ v)


def _rotary(x, p):
    pos = torch.arange(T, dtype=torch.float32)
    inv = 1.0 / 10000 ** (torch.arange(0, D, 2, dtype=torch.float32) / D)
    ang = torch.outer(pos, inv)
    ang = torch.cat((ang, ang), dim=-1)
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return x * ang.cos() + torch.cat((-x2, x1), dim=-1) * ang.sin()


MODELS = [
    # contractions
    ("linear", lambda x, p: F.linear(x, p["w"], p["b"])),
    ("matmul", lambda x, p: x @ p["w"]),
    ("mm", lambda x, p: torch.mm(x.reshape(B * T, D), p["w"]).view(B, T, D)),
    ("bmm", lambda x, p: torch.bmm(torch.bmm(x, x.transpose(1, 2)), x)),
    ("addmm", lambda x, p: torch.addmm(p["b"], x.reshape(B * T, D), p["w"]).view(B, T, D)),
    # element-wise
    ("add", lambda x, p: x + p["b"] + 1.5),
    ("sub", lambda x, p: x - p["b"] - 0.5),
    ("rsub", lambda x, p: 1.0 - x),
    ("mul", lambda x, p: x * p["b"] * 3.0),
    ("div", lambda x, p: x / (p["b"] * p["b"] + 1.0) / 2.0),
    ("neg", lambda x, p: -x),
    ("pow", lambda x, p: x.pow(3) + x ** 2),
    ("sqrt", lambda x, p: torch.sqrt(x * x + 1.0)),
    ("rsqrt", lambda x, p: torch.rsqrt(x * x + 1.0)),
    ("exp", lambda x, p: torch.exp(x)),
    ("log", lambda x, p: torch.log(x * x + 1.0)),
    ("tanh", lambda x, p: torch.tanh(x)),
    ("sin", lambda x, p: torch.sin(x)),
    ("cos", lambda x, p: torch.cos(x)),
    ("sigmoid", lambda x, p: torch.sigmoid(x)),
    ("abs", lambda x, p: torch.abs(x - 0.01)),
    ("reciprocal", lambda x, p: torch.reciprocal(x * x + 1.0)),
    ("clamp", lambda x, p: torch.clamp(x, -0.02, 0.03) + torch.maximum(x, p["b"])),
    ("gelu", lambda x, p: F.gelu(x * 30.0)),
    ("gelu_tanh", lambda x, p: F.gelu(x * 30.0, approximate="tanh")),
    ("silu", lambda x, p: F.silu(x * 30.0)),
    ("relu", lambda x, p: F.relu(x - 0.001)),
    # normalisation, softmax
    ("softmax", lambda x, p: F.softmax(x * 30.0, dim=-1)),
    ("softmax_dim1", lambda x, p: F.softmax(x * 30.0, dim=1)),
    ("log_softmax", lambda x, p: F.log_softmax(x * 30.0, dim=-1)),
    ("layer_norm", lambda x, p: F.layer_norm(x, (D,), p["g"], p["b"], 1e-5)),
    ("layer_norm_no_affine", lambda x, p: F.layer_norm(x, (D,))),
    ("rms_norm", lambda x, p: F.rms_norm(x, (D,), p["g"], eps=1e-6)),
    ("rms_norm_by_hand", lambda x, p: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)),
    # attention
    ("sdpa", lambda x, p: _sdpa_merge(F.scaled_dot_product_attention(
        _sdpa_heads(x), _sdpa_heads(x @ p["w"]), _sdpa_heads(x), is_causal=True))),
    ("sdpa_scale", lambda x, p: _sdpa_merge(F.scaled_dot_product_attention(
        _sdpa_heads(x), _sdpa_heads(x), _sdpa_heads(x), is_causal=True, scale=3.0))),
    ("sdpa_mask", lambda x, p: _sdpa_merge(F.scaled_dot_product_attention(
        _sdpa_heads(x), _sdpa_heads(x @ p["w"]), _sdpa_heads(x), attn_mask=_causal()))),
    ("sdpa_gqa", _gqa),
    ("repeat_interleave_kv", _repeat_kv),
    ("masked_fill_attention", _manual_attention),
    ("where", lambda x, p: torch.where(torch.ones(T, D, dtype=torch.bool).tril() | (torch.arange(D) == 7),
                                       x, x * 2.0)),
    ("masked_fill", lambda x, p: x.masked_fill(torch.arange(D) % 3 == 0, 0.25)),
    # layout
    ("view", lambda x, p: x.view(B, T * D).view(B, T, D)),
    ("reshape_transpose", lambda x, p: x.transpose(1, 2).reshape(B, T, D)),
    ("permute", lambda x, p: x.permute(2, 0, 1).permute(1, 2, 0) @ p["w"]),
    ("expand", lambda x, p: x + p["b"].view(1, 1, D).expand(B, T, D)),
    ("unsqueeze_squeeze", lambda x, p: x.unsqueeze(2).squeeze(2) * x.sum(-1).unsqueeze(-1)),
    ("flatten", lambda x, p: x.flatten(1).view(B, T, D)),
    ("cat", lambda x, p: torch.cat((x[..., :3] * 2.0, x[..., 3:]), dim=-1)),
    ("slice", lambda x, p: torch.cat((x[:, :1], x[:, 1:3] * x[:, 2:4], x[:, -1:]), dim=1)
     + torch.cat((x[..., ::2], x[..., 1::2]), dim=-1)),
    ("select", lambda x, p: x * x[:, -1:, :] + x.select(1, 0).unsqueeze(1)),
    ("split", lambda x, p: torch.cat(list(reversed(x.split(3, dim=-1))), dim=-1)),
    ("chunk", lambda x, p: torch.cat([c * (i + 1) for i, c in enumerate(x.chunk(2, dim=-1))], -1)),
    ("rotary", _rotary),
    # reductions
    ("sum", lambda x, p: x * x.sum(dim=-1, keepdim=True) + x.sum()),
    ("mean", lambda x, p: x - x.mean(dim=(0, 2), keepdim=True) + x.mean()),
    ("var", lambda x, p: x * x.var(-1, keepdim=True) + x.var(-1, unbiased=False, keepdim=True)),
    # misc
    ("dropout_zero", lambda x, p: F.dropout(x, 0.0, training=True)),
]


class OpModel(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.p = nn.ParameterDict({
            "w": nn.Parameter(torch.randn(D, D) * 0.3),
            "b": nn.Parameter(torch.randn(D) * 0.3),
            "g": nn.Parameter(1 + torch.randn(D) * 0.1),
            "wk": nn.Parameter(torch.randn(D, D // H) * 0.3),
            "wv": nn.Parameter(torch.randn(D, D // H) * 0.3),
        })
        self.head = nn.Linear(D, V, bias=False)
        self.fn = fn

    def forward(self, idx, targets):
        x = self.emb(idx)
        y = self.fn(x, self.p)
        logits = self.head(y)
        return F.cross_entropy(logits.view(-1, V), targets.view(-1))


class CrossEntropySum(nn.Module):
    """cross_entropy over [B, V, T] (classes at dim 1), reduction sum."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.head = nn.Linear(D, V)

    def forward(self, idx, targets):
        logits = self.head(self.emb(idx)).transpose(1, 2)
        return F.cross_entropy(logits, targets, reduction="sum") / (B * T)


class IdsToInt(OpModel):
    """int32 token ids (a _to_copy of the inputs), as some models cast them."""

    def __init__(self):
        super().__init__(lambda x, p: x)

    def forward(self, idx, targets):
        return super().forward(idx.int(), targets.int().long())


def build(name):
    torch.manual_seed(0)
    if name == "cross_entropy_sum":
        model = CrossEntropySum()
    elif name == "ids_to_int":
        model = IdsToInt()
    else:
        model = OpModel(dict(MODELS)[name])
    idx = torch.zeros(B, T, dtype=torch.long)
    return model, (idx, idx.clone())


NAMES = [n for n, _ in MODELS] + ["cross_entropy_sum", "ids_to_int"]
