"""Models the exporter must refuse, each with a message naming the ATen op
(or the problem) and the line of this file it came from (unsupported.test).
Line numbers matter: unsupported.test checks them."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Base(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(256, 8)
        self.head = nn.Linear(8, 256)

    def loss(self, x, targets):
        return F.cross_entropy(self.head(x).view(-1, 256), targets.view(-1))


class Cumsum(Base):
    def forward(self, idx, targets):
        x = self.emb(idx)
        x = torch.cumsum(x, dim=1)
        return self.loss(x, targets)


class Dropout(Base):
    def forward(self, idx, targets):
        x = F.dropout(self.emb(idx), 0.1, training=True)
        return self.loss(x, targets)


class MaskFromValues(Base):
    def forward(self, idx, targets):
        x = self.emb(idx)
        x = x.masked_fill(x > 0, 0.0)
        return self.loss(x, targets)


class NoGrad(Base):
    def forward(self, idx, targets):
        x = self.emb(idx)
        with torch.no_grad():
            y = x * 2
        return self.loss(x + y, targets)


class Logits(Base):
    def forward(self, idx, targets):
        return self.head(self.emb(idx))


class IgnoreIndex(Base):
    def forward(self, idx, targets):
        logits = self.head(self.emb(idx))
        return F.cross_entropy(logits.view(-1, 256), targets.view(-1), ignore_index=0)


class Half(Base):
    def forward(self, idx, targets):
        return self.loss(self.emb(idx), targets)


def _build(cls, dtype=None):
    torch.manual_seed(0)
    m = cls()
    if dtype is not None:
        m = m.to(dtype)
    idx = torch.zeros(2, 4, dtype=torch.long)
    return m, (idx, idx.clone())


def cumsum():
    return _build(Cumsum)


def dropout():
    return _build(Dropout)


def mask_from_values():
    return _build(MaskFromValues)


def no_grad():
    return _build(NoGrad)


def logits():
    return _build(Logits)


def ignore_index():
    return _build(IgnoreIndex)


def half():
    return _build(Half, torch.bfloat16)
