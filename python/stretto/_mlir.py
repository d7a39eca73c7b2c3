"""Writes `train` dialect MLIR as text: one Builder per model.

Every method emits one `train` op (docs/TrainDialect.md has their
semantics and printed forms), computes its result shape the way the op's
verifier does, and returns the result as a `Val`. Nothing here knows about
PyTorch; stretto/_lower.py maps ATen ops onto these methods.
"""
import math
import re

import numpy as np

_BARE_SYMBOL = re.compile(r"^[A-Za-z_][A-Za-z0-9_$.]*$")


class Val:
    """An SSA value of the step: its name, shape, element type ("f32" or
    "i32") and whether it depends on a parameter (gets a gradient)."""
    __slots__ = ("name", "shape", "dtype", "varying")

    def __init__(self, name, shape, dtype, varying):
        self.name, self.shape, self.dtype, self.varying = name, tuple(shape), dtype, varying

    @property
    def rank(self):
        return len(self.shape)

    def __repr__(self):
        return "Val(%s: %s)" % (self.name, tensor_type(self.shape, self.dtype))


def tensor_type(shape, dtype):
    return "tensor<%s%s>" % ("".join("%dx" % d for d in shape), dtype)


def symbol(name):
    """@name, quoted where it is not a bare MLIR identifier (e.g. "0.weight")."""
    if _BARE_SYMBOL.match(name):
        return "@" + name
    return '@"%s"' % name.replace("\\", "\\\\").replace('"', '\\"')


def f64(x):
    """A float attribute MLIR parses back to the same double (MLIR float
    literals need a decimal point: 1e-05 is written 1.0e-05)."""
    x = float(x)
    if not math.isfinite(x):
        raise ValueError("non-finite attribute %r" % x)
    s = repr(x)
    if "." not in s:
        s = s.replace("e", ".0e") if "e" in s else s + ".0"
    return s


def string(s):
    return '"%s"' % s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def broadcast_shape(a, b):
    """NumPy broadcasting, as the element-wise ops' verifier applies it."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise ValueError("shapes %s and %s do not broadcast" % (a, b))
        out.append(max(x, y) if 1 in (x, y) else x)
    return tuple(out)


def dense(array, dtype):
    """The body of a dense<...> attribute: a splat value, or the raw
    little-endian bytes in hex (exact and compact)."""
    a = np.ascontiguousarray(array, dtype="<f4" if dtype == "f32" else "<i4")
    flat = a.reshape(-1)
    if flat.size and np.all(flat == flat[0]) and (dtype != "f32" or math.isfinite(flat[0])):
        v = flat[0]
        return f64(float(v)) if dtype == "f32" else str(int(v))
    return '"0x%s"' % a.tobytes().hex().upper()


class Builder:
    """Collects the ops of one `train.step`, the `train.param`s before it,
    and the model's attributes."""

    def __init__(self):
        self.lines = []       # the step's body
        self.params = []      # (symbol, shape, init text, attrs dict)
        self.count = 0
        self.loc = None       # loc(...) text appended to the next ops
        self.const_cache = {}

    # --- plumbing -------------------------------------------------------
    def _emit(self, text, shape, dtype, varying):
        name = "%%v%d" % self.count
        self.count += 1
        self.lines.append("%s = %s%s" % (name, text, self._loc()))
        return Val(name, shape, dtype, varying)

    def _loc(self):
        return " loc(%s)" % self.loc if self.loc else ""

    def set_location(self, file, line):
        self.loc = "%s:%d:0" % (string(file), line) if file else None

    @staticmethod
    def _ty(v):
        return tensor_type(v.shape, v.dtype)

    # --- state and inputs -----------------------------------------------
    def declare_param(self, name, shape, init, attrs):
        self.params.append((name, tuple(shape), init, attrs))

    def input(self, name, shape, dtype):
        return self._emit("train.input %s : %s" % (string(name), tensor_type(shape, dtype)),
                          shape, dtype, False)

    def read(self, name, shape):
        return self._emit("train.read %s : %s" % (symbol(name), tensor_type(shape, "f32")),
                          shape, "f32", True)

    def constant(self, array, dtype="f32"):
        a = np.asarray(array)
        key = (a.shape, dtype, a.astype("<f4" if dtype == "f32" else "<i4").tobytes())
        if key not in self.const_cache:
            self.const_cache[key] = self._emit(
                "train.constant dense<%s> : %s" % (dense(a, dtype), tensor_type(a.shape, dtype)),
                a.shape, dtype, False)
        return self.const_cache[key]

    def scalar(self, x):
        return self.constant(np.float32(x))

    # --- element-wise ----------------------------------------------------
    def binary(self, op, a, b):
        shape = broadcast_shape(a.shape, b.shape)
        if a.shape == b.shape:
            ty = self._ty(a)
        else:
            ty = "%s, %s -> %s" % (self._ty(a), self._ty(b), tensor_type(shape, "f32"))
        return self._emit("train.%s %s, %s : %s" % (op, a.name, b.name, ty), shape, "f32",
                          a.varying or b.varying)

    def unary(self, op, a):
        return self._emit("train.%s %s : %s" % (op, a.name, self._ty(a)), a.shape, "f32",
                          a.varying)

    # --- layout ------------------------------------------------------------
    def matmul(self, a, b):
        """a [..., M, K] x b [K, N], or equal batch dims."""
        if b.rank == 2:
            shape = a.shape[:-1] + (b.shape[1],)
        else:
            shape = a.shape[:-1] + (b.shape[-1],)
        return self._emit("train.matmul %s, %s : %s, %s -> %s" % (
            a.name, b.name, self._ty(a), self._ty(b), tensor_type(shape, "f32")), shape, "f32",
            a.varying or b.varying)

    def transpose(self, a, perm):
        perm = [int(p) for p in perm]
        if perm == list(range(a.rank)):
            return a
        shape = tuple(a.shape[p] for p in perm)
        return self._emit("train.transpose %s [%s] : %s -> %s" % (
            a.name, ", ".join(map(str, perm)), self._ty(a), tensor_type(shape, a.dtype)),
            shape, a.dtype, a.varying)

    def reshape(self, a, shape):
        shape = tuple(int(d) for d in shape)
        if shape == a.shape:
            return a
        return self._emit("train.reshape %s : %s -> %s" % (
            a.name, self._ty(a), tensor_type(shape, a.dtype)), shape, a.dtype, a.varying)

    def broadcast(self, a, shape):
        shape = tuple(int(d) for d in shape)
        if shape == a.shape:
            return a
        broadcast_shape(a.shape, shape)
        return self._emit("train.broadcast %s : %s -> %s" % (
            a.name, self._ty(a), tensor_type(shape, a.dtype)), shape, a.dtype, a.varying)

    def reduce_sum(self, a, dims):
        dims = sorted(set(int(d) for d in dims))
        if not dims:
            return a
        shape = tuple(d for i, d in enumerate(a.shape) if i not in dims)
        return self._emit("train.reduce_sum %s [%s] : %s -> %s" % (
            a.name, ", ".join(map(str, dims)), self._ty(a), tensor_type(shape, "f32")),
            shape, "f32", a.varying)

    def slice(self, a, axis, offset, size):
        if offset == 0 and size == a.shape[axis]:
            return a
        shape = a.shape[:axis] + (size,) + a.shape[axis + 1:]
        return self._emit("train.slice %s axis = %d offset = %d : %s -> %s" % (
            a.name, axis, offset, self._ty(a), tensor_type(shape, "f32")), shape, "f32",
            a.varying)

    def pad(self, a, axis, offset, size):
        if offset == 0 and size == a.shape[axis]:
            return a
        shape = a.shape[:axis] + (size,) + a.shape[axis + 1:]
        return self._emit("train.pad %s axis = %d offset = %d : %s -> %s" % (
            a.name, axis, offset, self._ty(a), tensor_type(shape, "f32")), shape, "f32",
            a.varying)

    # --- fused model ops ---------------------------------------------------
    def softmax(self, a, causal=False):
        return self._emit("train.softmax %s%s : %s" % (a.name, " causal" if causal else "",
                                                      self._ty(a)), a.shape, "f32", a.varying)

    def layer_norm(self, x, gamma, beta, eps):
        return self._emit("train.layer_norm %s, %s, %s {eps = %s : f64} : %s, %s, %s" % (
            x.name, gamma.name, beta.name, f64(eps), self._ty(x), self._ty(gamma),
            self._ty(beta)), x.shape, "f32", x.varying or gamma.varying or beta.varying)

    def rms_norm(self, x, gamma, eps):
        return self._emit("train.rms_norm %s, %s {eps = %s : f64} : %s, %s" % (
            x.name, gamma.name, f64(eps), self._ty(x), self._ty(gamma)), x.shape, "f32",
            x.varying or gamma.varying)

    def attention(self, q, k, v, scale, causal):
        return self._emit("train.attention %s, %s, %s%s {scale = %s : f64} : %s" % (
            q.name, k.name, v.name, " causal" if causal else "", f64(scale), self._ty(q)),
            q.shape, "f32", q.varying or k.varying or v.varying)

    def embedding(self, table, ids):
        shape = ids.shape + (table.shape[1],)
        return self._emit("train.embedding %s[%s] : %s, %s -> %s" % (
            table.name, ids.name, self._ty(table), self._ty(ids), tensor_type(shape, "f32")),
            shape, "f32", table.varying)

    def one_hot(self, ids, classes):
        shape = ids.shape + (classes,)
        return self._emit("train.one_hot %s : %s -> %s" % (
            ids.name, self._ty(ids), tensor_type(shape, "f32")), shape, "f32", False)

    def cross_entropy(self, logits, targets):
        return self._emit("train.cross_entropy %s, %s : %s, %s -> tensor<f32>" % (
            logits.name, targets.name, self._ty(logits), self._ty(targets)), (), "f32",
            logits.varying)

    def erf(self, a):
        return self.unary("erf", a)

    # --- the module ----------------------------------------------------------
    def live_lines(self, loss):
        """The step's lines without values nobody uses (e.g. a masked score
        whose softmax became `softmax causal`); inputs always stay."""
        uses = {}
        defs = []
        for line in self.lines:
            name, _, rest = line.partition(" = ")
            defs.append((name, rest))
            for u in re.findall(r"%v\d+", rest):
                uses[u] = uses.get(u, 0) + 1
        uses[loss.name] = uses.get(loss.name, 0) + 1
        dead = set()
        for name, rest in reversed(defs):
            if uses.get(name, 0) == 0 and not rest.startswith("train.input"):
                dead.add(name)
                for u in re.findall(r"%v\d+", rest):
                    uses[u] -= 1
        return [line for line, (name, _) in zip(self.lines, defs) if name not in dead]

    def module_text(self, model_name, loss, model_attrs, header):
        out = ["// " + line if line else "//" for line in header]
        attrs = ", ".join("%s = %s" % kv for kv in model_attrs)
        out.append("train.model %s%s {" % (symbol(model_name),
                                          " attributes {%s}" % attrs if attrs else ""))
        for name, shape, init, attrs in self.params:
            extra = ", ".join("%s = %s" % kv for kv in attrs)
            out.append("  train.param %s : %s = %s%s" % (
                symbol(name), tensor_type(shape, "f32"), init, " {%s}" % extra if extra else ""))
        out.append("  train.step {")
        out.extend("    " + line for line in self.live_lines(loss))
        out.append("    train.yield %s : tensor<f32>" % loss.name)
        out.append("  }")
        out.append("}")
        return "\n".join(out) + "\n"
