"""ATen (torch.export's decomposed graph) to `train` ops.

`Lowering` walks an ExportedProgram's graph once, in order. Every value is
one of:
  - `Val`: an SSA value of the step (stretto/_mlir.py);
  - `Const`: a tensor known at export time (buffers, lifted constants, and
    every node whose inputs are all known: arange, tril, RoPE tables, masks
    are folded by running the ATen op on real tensors);
  - `Param`: a parameter, read on first use;
  - a Python value (int, float, list, None) or a list of the above.
Each supported ATen op has a handler in HANDLERS; an op without one is an
ExportError naming the op and the line of the user's model it came from.
"""
import math
import operator
import os
import re

import numpy as np
import torch

from ._mlir import Val

A = torch.ops.aten


class ExportError(Exception):
    """An error in the user's model, with the location it came from."""


class Const:
    __slots__ = ("tensor",)

    def __init__(self, tensor):
        self.tensor = tensor.detach()


class Param:
    """A trainable tensor: `name` is its Stretto symbol (the PyTorch FQN;
    for tied weights, the FQN the graph uses), `aliases` the other FQNs of
    the same tensor."""

    def __init__(self, name, tensor):
        self.name, self.tensor, self.aliases = name, tensor, []
        self.val = None          # the train.read, once emitted
        self.used_as = set()     # "embedding", "norm", "linear", "other"
        self.first_use = None    # index of the first node that used it


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)')
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def user_frame(node):
    """(file, line, function, code) of the user's line that made `node`:
    the innermost frame of its stack trace outside torch itself (nn.Linear's
    forward is not the user's line; torch.export keeps the trace through
    decompositions), or None."""
    trace = node.meta.get("stack_trace") or ""
    frames = [f for f in _FRAME.findall(trace) if not os.path.abspath(f[0]).startswith(_TORCH_DIR)]
    if not frames:
        return None
    f, line, fn, code = frames[-1]
    return os.path.normpath(f), int(line), fn, code.strip()


def op_name(target):
    if isinstance(target, torch._ops.OpOverload):
        return "aten.%s.%s" % (target._schema.name.split("::")[-1], target._overloadname)
    return getattr(target, "__name__", str(target))


def _dim(d, rank):
    d = int(d)
    return d + rank if d < 0 else d


def _floating(t):
    return t.is_floating_point()


class Lowering:
    """Lowers one ExportedProgram into a stretto._mlir.Builder."""

    def __init__(self, ep, builder, params, user_inputs, constants):
        self.ep, self.b = ep, builder
        self.params = params            # placeholder name -> Param
        self.user_inputs = user_inputs  # placeholder name -> Stretto input name
        self.constants = constants      # placeholder name -> Const (buffers, constants)
        self.env = {}
        self.node = None
        self.index = 0
        self.causal_masked = {}         # Val name -> Val before a causal -inf mask
        self.vocab = None               # rows of the table the tokens index
        self.input_shape = None         # [batch, seq] of the inputs
        self.loss = None

    # --- errors and locations ----------------------------------------------
    def where(self, node=None):
        frame = user_frame(node or self.node)
        if not frame:
            return "in forward (graph node %s)" % (node or self.node).name
        return "%s:%d" % frame[:2]

    def fail(self, message, note=None):
        """Raises 'FILE:LINE: error: message', then the user's line."""
        frame = user_frame(self.node)
        text = "%s: error: %s" % (self.where(), message)
        if frame:
            text += "\n    %s" % frame[3]
        if note:
            text += "\nnote: " + note
        raise ExportError(text)

    # --- values ----------------------------------------------------------------
    def val(self, x):
        """`x` as a step value: constants and parameters are emitted here."""
        if isinstance(x, Val):
            return x
        if isinstance(x, Param):
            x.first_use = self.index if x.first_use is None else x.first_use
            if x.val is None:
                x.val = self.b.read(x.name, tuple(x.tensor.shape))
            return x.val
        if isinstance(x, Const):
            t = x.tensor
            if t.is_floating_point() or t.dtype == torch.bool:
                return self.b.constant(t.to(torch.float32).cpu().numpy(), "f32")
            self.fail("an integer constant tensor of shape %s is used in arithmetic; Stretto "
                      "computes in floating point (only the token and target inputs are "
                      "integers)" % list(t.shape))
        if isinstance(x, (int, float)):
            return self.b.scalar(float(x))
        self.fail("expected a tensor, got %r" % (x,))

    def fval(self, x):
        """A floating-point step value (token ids are refused with a message)."""
        v = self.val(x)
        if v.dtype != "f32":
            self.fail("the integer inputs (token ids) can only be reshaped and used by "
                      "embedding or cross_entropy here; this op computes with them")
        return v

    def ids(self, x):
        v = self.val(x) if not isinstance(x, Const) else None
        if v is None or v.dtype != "i32":
            self.fail("expected token ids derived from the model's inputs (reshaped at most)")
        return v

    def mark(self, x, how):
        if isinstance(x, Param):
            x.used_as.add(how)

    # --- the walk ----------------------------------------------------------------
    def run(self):
        for self.index, node in enumerate(self.ep.graph.nodes):
            self.node = node
            frame = user_frame(node)
            self.b.set_location(frame[0] if frame else None, frame[1] if frame else 0)
            if node.op == "placeholder":
                self.env[node] = self.placeholder(node)
            elif node.op == "call_function":
                self.env[node] = self.call(node)
            elif node.op == "output":
                self.output(node)
            else:
                self.fail("unexpected graph node kind %r" % node.op)
        return self.loss

    def placeholder(self, node):
        if node.name in self.params:
            return self.params[node.name]
        if node.name in self.user_inputs:
            name = self.user_inputs[node.name]
            meta = node.meta["val"]
            if meta.dtype.is_floating_point or len(meta.shape) != 2:
                raise ExportError(
                    "error: forward's input %r (%s %s) must be an integer tensor [batch, seq] of "
                    "token ids: Stretto feeds its inputs as %r"
                    % (node.name, meta.dtype, list(meta.shape), name))
            self.input_shape = tuple(meta.shape)
            return self.b.input(name, tuple(meta.shape), "i32")
        return self.constants[node.name]

    def output(self, node):
        outs = node.args[0]
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        scalars = [self.env[o] for o in outs
                   if hasattr(o, "meta") and isinstance(self.env.get(o), Val)
                   and self.env[o].rank == 0 and self.env[o].dtype == "f32"]
        if len(scalars) != 1:
            raise ExportError(
                "error: forward must return the scalar training loss (one 0-d float tensor "
                "among its outputs); it returns %d outputs, %d of them scalar losses"
                % (len(outs), len(scalars)))
        if not scalars[0].varying:
            raise ExportError("error: the loss forward returns does not depend on any parameter")
        self.loss = scalars[0]

    def bind(self, node):
        """The op's arguments by schema name, defaults filled in, each
        mapped to its value (FX drops defaulted arguments)."""
        schema = node.target._schema
        out = {}
        for i, arg in enumerate(schema.arguments):
            if i < len(node.args) and not arg.kwarg_only:
                v = node.args[i]
            elif arg.name in node.kwargs:
                v = node.kwargs[arg.name]
            elif arg.has_default_value():
                v = arg.default_value
            else:
                v = None
            out[arg.name] = self.resolve(v)
        return out

    def resolve(self, v):
        if isinstance(v, torch.fx.Node):
            return self.env[v]
        if isinstance(v, (list, tuple)):
            return [self.resolve(x) for x in v]
        return v

    def call(self, node):
        target = node.target
        if target is operator.getitem:
            src, i = self.env[node.args[0]], node.args[1]
            if src[i] is None:
                self.fail("this result of %s is not supported (only its first output is)"
                          % op_name(node.args[0].target))
            return src[i]
        if not isinstance(target, torch._ops.OpOverload):
            self.fail("unsupported operation %s: the exported graph should hold ATen ops only"
                      % op_name(target))
        if target in DROPPED:
            return None
        if self.foldable(node):
            return self.fold(node)
        handler = HANDLERS.get(target)
        if handler is None:
            fn = node.meta.get("torch_fn")
            called = " (from %s)" % fn[1].split(".")[-1] if fn and len(fn) > 1 else ""
            self.fail("unsupported operation %s%s" % (op_name(target), called),
                      note="Stretto's exporter supports %s (docs/guide/own-models.md)"
                      % supported_summary())
        result = handler(self, node, self.bind(node))
        self.check_shape(node, result)
        return result

    def check_shape(self, node, result):
        """A lowering must give the shape torch.export recorded."""
        meta = node.meta.get("val")
        if isinstance(result, Val) and isinstance(meta, torch.Tensor):
            if tuple(meta.shape) != result.shape:
                raise AssertionError("internal error: %s lowered to %s, torch says %s (at %s)" % (
                    op_name(node.target), list(result.shape), list(meta.shape), self.where()))

    # --- constant folding ----------------------------------------------------
    def foldable(self, node):
        if torch.Tag.nondeterministic_seeded in node.target.tags:
            return False
        found_const = []

        def known(v):
            if isinstance(v, (list, tuple)):
                return all(known(x) for x in v)
            if isinstance(v, torch.fx.Node):
                e = self.env.get(v)
                if isinstance(e, Const):
                    found_const.append(v)
                    return True
                return False
            return True

        return known(list(node.args)) and known(list(node.kwargs.values())) and (
            bool(found_const) or not any(isinstance(a, torch.fx.Node) for a in node.args))

    def fold(self, node):
        def real(v):
            if isinstance(v, torch.fx.Node):
                return self.env[v].tensor
            if isinstance(v, (list, tuple)):
                return type(v)(real(x) for x in v)
            return v

        kwargs = {k: real(v) for k, v in node.kwargs.items()}
        kwargs.pop("device", None)
        out = node.target(*real(node.args), **kwargs)
        if isinstance(out, (list, tuple)):
            return [Const(t) if isinstance(t, torch.Tensor) else t for t in out]
        return Const(out) if isinstance(out, torch.Tensor) else out


# ---------------------------------------------------------------------------
# Handlers: (lowering, node, bound arguments) -> value. Grouped by kind.
# ---------------------------------------------------------------------------

DROPPED = {A._assert_tensor_metadata.default}


def _meta_shape(node):
    return tuple(node.meta["val"].shape)


def _identity(L, node, a):
    x = a["self"]
    return x


def _detach(L, node, a):
    x = a["self"]
    if isinstance(x, (Val, Param)) and L.val(x).varying:
        L.fail("detach() of a value that depends on parameters (a stop-gradient) is not "
               "supported by Stretto's train dialect")
    return x


def _to_copy(L, node, a):
    x, dtype = a["self"], a.get("dtype")
    if dtype is None:
        return x
    src = L.val(x)
    if src.dtype == "i32" and not dtype.is_floating_point:
        return src  # ids stay ids (idx.long(), .int())
    if src.dtype == "f32" and dtype == torch.float32:
        return src
    L.fail("a cast to %s: the exported model computes in float32 (cast the model with "
           ".float() before exporting)" % dtype)


def _reshape(L, node, a):
    return L.b.reshape(L.val(a["self"]), _meta_shape(node))


def _expand(L, node, a):
    x = L.fval(a["self"])
    return L.b.broadcast(x, _meta_shape(node))


def _permute(L, node, a):
    x = L.fval(a["self"])
    return L.b.transpose(x, [_dim(d, x.rank) for d in a["dims"]])


def _transpose(L, node, a):
    x = L.fval(a["self"])
    perm = list(range(x.rank))
    i, j = _dim(a["dim0"], x.rank), _dim(a["dim1"], x.rank)
    perm[i], perm[j] = perm[j], perm[i]
    return L.b.transpose(x, perm)


def _t(L, node, a):
    x = L.fval(a["self"])
    return L.b.transpose(x, [1, 0]) if x.rank == 2 else x


def _slice_val(L, x, dim, start, end, step):
    """x[start:end:step] along dim: a window; for step > 1, the window
    (zero-padded to count·step) reshaped to [..., count, step, ...] and the
    first of each `step`."""
    size = x.shape[dim]
    start = 0 if start is None else int(start)
    end = size if end is None else int(end)
    start = max(0, min(size, start + size if start < 0 else start))
    end = max(start, min(size, end + size if end < 0 else end))
    step = int(step)
    count = (end - start + step - 1) // step
    if step == 1:
        return L.b.slice(x, dim, start, count)
    length = min(count * step, size - start)
    w = L.b.pad(L.b.slice(x, dim, start, length), dim, 0, count * step)
    w = L.b.reshape(w, x.shape[:dim] + (count, step) + x.shape[dim + 1:])
    w = L.b.slice(w, dim + 1, 0, 1)
    return L.b.reshape(w, x.shape[:dim] + (count,) + x.shape[dim + 1:])


def _slice(L, node, a):
    x = L.fval(a["self"])
    return _slice_val(L, x, _dim(a["dim"], x.rank), a["start"], a["end"], a["step"])


def _select(L, node, a):
    x = L.fval(a["self"])
    d = _dim(a["dim"], x.rank)
    i = int(a["index"])
    i = i + x.shape[d] if i < 0 else i
    return L.b.reshape(L.b.slice(x, d, i, 1), x.shape[:d] + x.shape[d + 1:])


def _cat(L, node, a):
    parts = [L.fval(t) for t in a["tensors"]]
    out = _meta_shape(node)
    d = _dim(a["dim"], len(out))
    acc, offset = None, 0
    for p in parts:
        if p.shape[d] == 0:
            continue
        padded = L.b.pad(p, d, offset, out[d])
        offset += p.shape[d]
        acc = padded if acc is None else L.b.binary("add", acc, padded)
    return acc


def _split_sizes(L, x, sizes, dim):
    out, offset = [], 0
    for s in sizes:
        out.append(L.b.slice(x, dim, offset, int(s)))
        offset += int(s)
    return out


def _split_with_sizes(L, node, a):
    x = L.fval(a["self"])
    return _split_sizes(L, x, a["split_sizes"], _dim(a["dim"], x.rank))


def _split(L, node, a):
    x = L.fval(a["self"])
    d = _dim(a["dim"], x.rank)
    n, size = x.shape[d], int(a["split_size"])
    return _split_sizes(L, x, [min(size, n - i) for i in range(0, n, size)], d)


def _unbind(L, node, a):
    x = L.fval(a["self"])
    d = _dim(a["dim"], x.rank)
    return [L.b.reshape(L.b.slice(x, d, i, 1), x.shape[:d] + x.shape[d + 1:])
            for i in range(x.shape[d])]


# --- element-wise -------------------------------------------------------------

def _binary(op):
    def lower(L, node, a):
        x, y = a["self"], a["other"]
        if a.get("alpha", 1) != 1:
            y = L.b.binary("mul", L.fval(y), L.b.scalar(a["alpha"]))
        return L.b.binary(op, L.fval(x), L.fval(y))
    return lower


def _rsub(L, node, a):
    y = L.fval(a["self"])
    if a.get("alpha", 1) != 1:
        y = L.b.binary("mul", y, L.b.scalar(a["alpha"]))
    return L.b.binary("sub", L.fval(a["other"]), y)


def _div_mode(L, node, a):
    if a["rounding_mode"] is not None:
        L.fail("division with rounding_mode=%r is not differentiable; Stretto does not "
               "support it" % a["rounding_mode"])
    return L.b.binary("div", L.fval(a["self"]), L.fval(a["other"]))


def _pow_scalar(L, node, a):
    x, e = L.fval(a["self"]), float(a["exponent"])
    if e == 1:
        return x
    if e == 2:
        return L.b.binary("mul", x, x)
    if e == 0.5:
        return L.b.unary("sqrt", x)
    if e == -0.5:
        return L.b.unary("rsqrt", x)
    if e == -1:
        return L.b.binary("div", L.b.scalar(1.0), x)
    return L.b.binary("pow", x, L.b.scalar(e))


def _pow_tensor(L, node, a):
    return L.b.binary("pow", L.fval(a["self"]), L.fval(a["exponent"]))


def _unary(op):
    def lower(L, node, a):
        return L.b.unary(op, L.fval(a["self"]))
    return lower


def _sin(L, node, a):
    x = L.fval(a["self"])
    return L.b.unary("cos", L.b.binary("sub", x, L.b.scalar(math.pi / 2)))


def _sigmoid_val(L, x):
    e = L.b.unary("exp", L.b.unary("neg", x))
    return L.b.binary("div", L.b.scalar(1.0), L.b.binary("add", L.b.scalar(1.0), e))


def _sigmoid(L, node, a):
    return _sigmoid_val(L, L.fval(a["self"]))


def _abs(L, node, a):
    x = L.fval(a["self"])
    return L.b.binary("max", x, L.b.unary("neg", x))


def _reciprocal(L, node, a):
    return L.b.binary("div", L.b.scalar(1.0), L.fval(a["self"]))


def _gelu(L, node, a):
    x = L.fval(a["self"])
    if a["approximate"] == "tanh":
        return L.b.unary("gelu", x)
    # erf form: x/2 (1 + erf(x / sqrt 2)).
    e = L.b.erf(L.b.binary("mul", x, L.b.scalar(1.0 / math.sqrt(2.0))))
    half = L.b.binary("mul", x, L.b.scalar(0.5))
    return L.b.binary("mul", half, L.b.binary("add", e, L.b.scalar(1.0)))


def _clamp(L, node, a):
    x = L.fval(a["self"])
    if a.get("min") is not None:
        x = L.b.binary("max", x, L.fval(a["min"]))
    if a.get("max") is not None:
        x = L.b.binary("min", x, L.fval(a["max"]))
    return x


def _minmax(op):
    def lower(L, node, a):
        return L.b.binary(op, L.fval(a["self"]), L.fval(a["other"]))
    return lower


# --- masks: masked_fill / where with a constant condition -----------------------

def _mask_array(L, mask, what):
    if not isinstance(mask, Const):
        L.fail("%s with a condition computed from the model's values: Stretto supports "
               "constant masks only (built from arange/ones/tril/buffers)" % what)
    return mask.tensor.to(torch.bool).cpu().numpy()


FLT_MAX = float(np.finfo(np.float32).max)


def _is_causal_mask(m, shape):
    """True where m (broadcast to shape) masks exactly the entries above the
    diagonal of the last two dims."""
    if len(shape) < 2 or shape[-1] != shape[-2]:
        return False
    T = shape[-1]
    upper = np.triu(np.ones((T, T), bool), 1)
    try:
        return bool(np.all(np.broadcast_to(m, shape) == np.broadcast_to(upper, shape)))
    except ValueError:
        return False


def _select_const(L, cond, x, y, out_shape):
    """where(cond, x, y) for a constant boolean cond and x, y values,
    constants or scalars: x·c + y·(1−c), with the constant parts folded
    into one constant of the smallest shape they broadcast to."""
    def as_const(v):
        if isinstance(v, Const):
            return v.tensor.to(torch.float32).cpu().numpy()
        if isinstance(v, (int, float)):
            return np.float32(v)
        return None

    xc, yc = as_const(x), as_const(y)
    small = np.broadcast_shapes(cond.shape, *[np.shape(v) for v in (xc, yc) if v is not None])
    # ±inf fills become ±FLT_MAX: the same after a softmax, and x·keep + fill
    # stays free of inf·0.
    c = np.broadcast_to(cond, small).astype(np.float32)
    fill = np.zeros(small, np.float32)
    terms = []
    for v, vc, keep in ((x, xc, c), (y, yc, 1 - c)):
        if vc is not None:
            clipped = np.clip(np.broadcast_to(vc, small), -FLT_MAX, FLT_MAX)
            fill = fill + np.where(keep > 0, clipped, 0).astype(np.float32)
        elif np.all(keep == 1):
            terms.append(L.fval(v))
        elif np.any(keep):
            terms.append(L.b.binary("mul", L.fval(v), L.b.constant(keep)))
    acc = None
    for t in terms:
        acc = t if acc is None else L.b.binary("add", acc, t)
    if np.any(fill) or acc is None:
        acc = L.b.constant(fill) if acc is None else L.b.binary("add", acc, L.b.constant(fill))
    return L.b.broadcast(acc, out_shape) if acc.shape != tuple(out_shape) else acc


def _scalar_of(v):
    if isinstance(v, Const) and v.tensor.numel() == 1:
        return float(v.tensor)
    return v if isinstance(v, (int, float)) else None


def _note_causal(L, result, cond, filled, other, out):
    """Records `result` = `other` with -inf where `cond`, if that is exactly
    the causal mask: a softmax of it becomes `train.softmax causal`."""
    fill = _scalar_of(filled)
    if (fill is not None and fill <= -FLT_MAX and isinstance(other, Val)
            and _is_causal_mask(cond, out)):
        L.causal_masked[result.name] = other


def _masked_fill(L, node, a):
    m = _mask_array(L, a["mask"], "masked_fill")
    x, value = a["self"], a["value"]
    if isinstance(value, Const):
        value = float(value.tensor)
    out = _meta_shape(node)
    result = _select_const(L, m, value, x, out)
    _note_causal(L, result, m, value, x, out)
    return result


def _where(L, node, a):
    cond = _mask_array(L, a["condition"], "where")
    out = _meta_shape(node)
    result = _select_const(L, cond, a["self"], a["other"], out)
    _note_causal(L, result, cond, a["self"], a["other"], out)
    _note_causal(L, result, ~cond, a["other"], a["self"], out)
    return result


# --- reductions -------------------------------------------------------------------

def _reduce_dims(x, dims):
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(x.rank))
    if isinstance(dims, int):
        dims = [dims]
    return sorted(_dim(d, x.rank) for d in dims)


def _sum(L, node, a):
    x = L.fval(a["self"])
    s = L.b.reduce_sum(x, _reduce_dims(x, a.get("dim")))
    return L.b.reshape(s, _meta_shape(node))


def _mean(L, node, a):
    x = L.fval(a["self"])
    dims = _reduce_dims(x, a.get("dim"))
    n = int(np.prod([x.shape[d] for d in dims])) if dims else 1
    s = L.b.binary("mul", L.b.reduce_sum(x, dims), L.b.scalar(1.0 / n))
    return L.b.reshape(s, _meta_shape(node))


def _var(L, node, a):
    x = L.fval(a["self"])
    dims = _reduce_dims(x, a.get("dim"))
    n = int(np.prod([x.shape[d] for d in dims]))
    corr = 1.0 if a.get("correction") is None else float(a["correction"])
    keep = tuple(1 if i in dims else s for i, s in enumerate(x.shape))
    mean = L.b.reshape(L.b.binary("mul", L.b.reduce_sum(x, dims), L.b.scalar(1.0 / n)), keep)
    dev = L.b.binary("sub", x, mean)
    s = L.b.reduce_sum(L.b.binary("mul", dev, dev), dims)
    return L.b.reshape(L.b.binary("mul", s, L.b.scalar(1.0 / max(n - corr, 1e-30))),
                       _meta_shape(node))


# --- contractions ------------------------------------------------------------------

def _matmul_vals(L, x, y):
    """torch.matmul's semantics over train.matmul."""
    if x.rank == 1 and y.rank == 1:
        return L.b.reduce_sum(L.b.binary("mul", x, y), [0])
    if x.rank == 1:
        r = _matmul_vals(L, L.b.reshape(x, (1, x.shape[0])), y)
        return L.b.reshape(r, r.shape[:-2] + r.shape[-1:])
    if y.rank == 1:
        r = _matmul_vals(L, x, L.b.reshape(y, (y.shape[0], 1)))
        return L.b.reshape(r, r.shape[:-1])
    if y.rank == 2:
        return L.b.matmul(x, y)
    batch = np.broadcast_shapes(x.shape[:-2], y.shape[:-2])
    x = L.b.broadcast(x, tuple(batch) + x.shape[-2:])
    y = L.b.broadcast(y, tuple(batch) + y.shape[-2:])
    return L.b.matmul(x, y)


def _linear(L, node, a):
    L.mark(a["weight"], "linear")
    x, w = L.fval(a["input"]), L.fval(a["weight"])
    y = _matmul_vals(L, x, L.b.transpose(w, [1, 0]))
    if a["bias"] is not None:
        L.mark(a["bias"], "bias")
        y = L.b.binary("add", y, L.fval(a["bias"]))
    return y


def _matmul(L, node, a):
    return _matmul_vals(L, L.fval(a["self"]), L.fval(a["other"]))


def _mm(L, node, a):
    return _matmul_vals(L, L.fval(a["self"]), L.fval(a["mat2"]))


def _addmm(L, node, a):
    y = _matmul_vals(L, L.fval(a["mat1"]), L.fval(a["mat2"]))
    if a["alpha"] != 1:
        y = L.b.binary("mul", y, L.b.scalar(a["alpha"]))
    bias = L.fval(a["self"])
    if a["beta"] != 1:
        bias = L.b.binary("mul", bias, L.b.scalar(a["beta"]))
    return L.b.binary("add", bias, y)


# --- fused model ops -------------------------------------------------------------------

def _embedding(L, node, a):
    if a["padding_idx"] not in (None, -1) or a["scale_grad_by_freq"] or a["sparse"]:
        L.fail("embedding with padding_idx, scale_grad_by_freq or sparse is not supported")
    L.mark(a["weight"], "embedding")
    table = L.fval(a["weight"])
    if table.rank != 2:
        L.fail("embedding: the table must be 2-D, got %s" % list(table.shape))
    if isinstance(a["indices"], Const):  # positions: torch.arange(T) and the like
        return _embedding_const(L, table, a["indices"].tensor)
    ids = L.ids(a["indices"])
    if L.vocab is None:
        L.vocab = table.shape[0]
    return L.b.embedding(table, ids)


def _embedding_const(L, table, idx):
    """Rows of `table` at constant indices: a window where they are
    consecutive (positions), else a constant one-hot matrix times the table."""
    flat = idx.reshape(-1).to(torch.int64).tolist()
    V, D = table.shape
    if any(i < 0 or i >= V for i in flat):
        L.fail("embedding: a constant index is outside the table's %d rows" % V)
    if flat == list(range(flat[0], flat[0] + len(flat))):
        rows = L.b.slice(table, 0, flat[0], len(flat))
    else:
        hot = np.zeros((len(flat), V), np.float32)
        hot[np.arange(len(flat)), flat] = 1
        rows = L.b.matmul(L.b.constant(hot), table)
    return L.b.reshape(rows, tuple(idx.shape) + (D,))


def _last_dim_op(L, x, dim, fn):
    """fn over the last dim, transposing `dim` there and back."""
    d = _dim(dim, x.rank)
    if d == x.rank - 1:
        return fn(x)
    perm = list(range(x.rank))
    perm[d], perm[-1] = perm[-1], perm[d]
    return L.b.transpose(fn(L.b.transpose(x, perm)), perm)


def _softmax(L, node, a):
    x = L.fval(a["self"])
    base = L.causal_masked.get(x.name)
    if base is not None and _dim(a["dim"], x.rank) == x.rank - 1:
        return L.b.softmax(base, causal=True)
    return _last_dim_op(L, x, a["dim"], L.b.softmax)


def _log_softmax(L, node, a):
    x = L.fval(a["self"])
    return _last_dim_op(L, x, a["dim"], lambda v: L.b.unary("log", L.b.softmax(v)))


def _norm_operands(L, a, x, what):
    shape = [int(s) for s in a["normalized_shape"]]
    if shape != [x.shape[-1]]:
        L.fail("%s over the last %d dims %s: Stretto normalises over the last dim only"
               % (what, len(shape), shape))
    d = x.shape[-1]
    gamma = L.fval(a["weight"]) if a["weight"] is not None else L.b.constant(np.ones(d, np.float32))
    L.mark(a["weight"], "norm")
    return gamma


def _layer_norm(L, node, a):
    x = L.fval(a["input"])
    gamma = _norm_operands(L, a, x, "layer_norm")
    L.mark(a["bias"], "bias")
    beta = L.fval(a["bias"]) if a["bias"] is not None else L.b.constant(
        np.zeros(x.shape[-1], np.float32))
    return L.b.layer_norm(x, gamma, beta, a["eps"])


def _native_layer_norm(L, node, a):
    return [_layer_norm(L, node, a), None, None]


def _rms_norm(L, node, a):
    x = L.fval(a["input"])
    gamma = _norm_operands(L, a, x, "rms_norm")
    eps = a["eps"] if a["eps"] is not None else float(torch.finfo(torch.float32).eps)
    return L.b.rms_norm(x, gamma, eps)


def _sdpa(L, node, a):
    if a["dropout_p"]:
        L.fail("scaled_dot_product_attention with dropout_p=%g: Stretto has no attention "
               "dropout (export with dropout_p=0 or model.eval())" % a["dropout_p"])
    q, k, v = (L.fval(a[n]) for n in ("query", "key", "value"))
    causal = bool(a["is_causal"])
    if a["attn_mask"] is not None:
        m = a["attn_mask"]
        if not isinstance(m, Const):
            L.fail("scaled_dot_product_attention with an attn_mask computed from the model's "
                   "values: Stretto supports is_causal=True or a constant causal mask")
        t = m.tensor
        lower = np.tril(np.ones((q.shape[-2], k.shape[-2]), bool))
        ok = (np.all(np.broadcast_to(t.cpu().numpy(), t.shape) ==
                     np.broadcast_to(lower, t.shape)) if t.dtype == torch.bool else
              np.all(np.where(np.broadcast_to(lower, t.shape), t.cpu().numpy() == 0,
                              t.cpu().numpy() <= -FLT_MAX)))
        if not ok or causal:
            L.fail("scaled_dot_product_attention with an attn_mask that is not the causal mask: "
                   "Stretto's attention is causal or unmasked")
        causal = True
    if q.rank < 3 or k.shape[-2] != q.shape[-2] or v.shape[-1] != q.shape[-1]:
        L.fail("scaled_dot_product_attention over q %s, k %s, v %s: Stretto's attention needs "
               "[..., heads, T, D] with equal T and D for q, k and v"
               % (list(q.shape), list(k.shape), list(v.shape)))
    hq, hk = q.shape[-3], k.shape[-3]
    if hq != hk:  # grouped-query attention: K/V head h serves query heads h·g..h·g+g-1
        g = hq // hk
        k, v = (L.b.reshape(L.b.broadcast(L.b.reshape(t, t.shape[:-3] + (hk, 1) + t.shape[-2:]),
                                          t.shape[:-3] + (hk, g) + t.shape[-2:]),
                            t.shape[:-3] + (hq,) + t.shape[-2:]) for t in (k, v))
    scale = a["scale"] if a["scale"] is not None else 1.0 / math.sqrt(q.shape[-1])
    shape4 = (int(np.prod(q.shape[:-3])),) + q.shape[-3:]
    q4, k4, v4 = (L.b.reshape(t, shape4) for t in (q, k, v))
    return L.b.reshape(L.b.attention(q4, k4, v4, scale, causal), q.shape)


def _cross_entropy(L, node, a):
    if a["weight"] is not None:
        L.fail("cross_entropy with class weights is not supported")
    if a["label_smoothing"]:
        L.fail("cross_entropy with label_smoothing is not supported")
    if a["ignore_index"] is not None and int(a["ignore_index"]) >= 0:
        L.fail("cross_entropy with ignore_index=%d: Stretto's loss averages over every target "
               "(a negative ignore_index, which no token id matches, is fine)"
               % int(a["ignore_index"]))
    x, t = L.fval(a["self"]), L.ids(a["target"])
    if x.rank < 2:
        L.fail("cross_entropy of a %d-D input: expected [N, C] or [N, C, ...]" % x.rank)
    if x.rank > 2:  # classes at dim 1: move them last
        perm = [0] + list(range(2, x.rank)) + [1]
        x = L.b.transpose(x, perm)
    if x.shape[:-1] != t.shape:
        L.fail("cross_entropy: targets %s do not match the input %s"
               % (list(t.shape), list(x.shape)))
    loss = L.b.cross_entropy(x, t)
    reduction = int(a["reduction"])
    if reduction == 2:  # sum
        return L.b.binary("mul", loss, L.b.scalar(float(np.prod(t.shape))))
    if reduction != 1:
        L.fail("cross_entropy with reduction='none': Stretto's loss is a mean (or a sum)")
    return loss


def _dropout(L, node, a):
    p, train = float(a.get("p", 0.0)), a.get("train", True)
    if p != 0.0 and train:
        L.fail("dropout with p=%g in training mode: Stretto has no dropout (export with p=0 or "
               "model.eval())" % p)
    x = a.get("input", a.get("self"))
    return [x, None] if node.target == A.native_dropout.default else x


def _unsupported_hint(what):
    def lower(L, node, a):
        L.fail(what)
    return lower


HANDLERS = {
    # layout (views are values here)
    A.view.default: _reshape, A._unsafe_view.default: _reshape, A.reshape.default: _reshape,
    A.unsqueeze.default: _reshape, A.squeeze.default: _reshape, A.squeeze.dim: _reshape,
    A.squeeze.dims: _reshape, A.flatten.using_ints: _reshape,
    A.expand.default: _expand, A.permute.default: _permute, A.transpose.int: _transpose,
    A.t.default: _t, A.clone.default: _identity, A.alias.default: _identity,
    A.contiguous.default: _identity, A.lift_fresh_copy.default: _identity,
    A.detach.default: _detach, A._to_copy.default: _to_copy,
    A.slice.Tensor: _slice, A.select.int: _select, A.cat.default: _cat,
    A.split_with_sizes.default: _split_with_sizes, A.split.Tensor: _split,
    A.unbind.int: _unbind,
    # element-wise
    A.add.Tensor: _binary("add"), A.add.Scalar: _binary("add"),
    A.sub.Tensor: _binary("sub"), A.sub.Scalar: _binary("sub"), A.rsub.Scalar: _rsub,
    A.mul.Tensor: _binary("mul"), A.mul.Scalar: _binary("mul"),
    A.div.Tensor: _binary("div"), A.div.Scalar: _binary("div"), A.div.Tensor_mode: _div_mode,
    A.pow.Tensor_Scalar: _pow_scalar, A.pow.Tensor_Tensor: _pow_tensor,
    A.neg.default: _unary("neg"), A.exp.default: _unary("exp"), A.log.default: _unary("log"),
    A.sqrt.default: _unary("sqrt"), A.rsqrt.default: _unary("rsqrt"),
    A.tanh.default: _unary("tanh"), A.cos.default: _unary("cos"), A.sin.default: _sin,
    A.relu.default: _unary("relu"), A.silu.default: _unary("silu"),
    A.erf.default: _unary("erf"), A.gelu.default: _gelu, A.sigmoid.default: _sigmoid,
    A.abs.default: _abs, A.reciprocal.default: _reciprocal,
    A.clamp.default: _clamp, A.clamp_min.default: lambda L, n, a: L.b.binary(
        "max", L.fval(a["self"]), L.fval(a["min"])),
    A.maximum.default: _minmax("max"), A.minimum.default: _minmax("min"),
    A.masked_fill.Scalar: _masked_fill, A.masked_fill.Tensor: _masked_fill,
    A.where.self: _where,
    # reductions
    A.sum.dim_IntList: _sum, A.sum.default: _sum, A.mean.dim: _mean, A.mean.default: _mean,
    A.var.correction: _var,
    # contractions
    A.linear.default: _linear, A.matmul.default: _matmul, A.mm.default: _mm,
    A.bmm.default: _mm, A.addmm.default: _addmm,
    # fused model ops
    A.embedding.default: _embedding,
    A._softmax.default: _softmax, A.softmax.int: _softmax,
    A._log_softmax.default: _log_softmax, A.log_softmax.int: _log_softmax,
    A.layer_norm.default: _layer_norm, A.native_layer_norm.default: _native_layer_norm,
    A.rms_norm.default: _rms_norm,
    A.scaled_dot_product_attention.default: _sdpa,
    A.cross_entropy_loss.default: _cross_entropy,
    A.native_dropout.default: _dropout, A.dropout.default: _dropout,
}


def supported_summary():
    return ("embedding, linear/matmul/mm/bmm/addmm, element-wise arithmetic, pow, "
            "exp/log/sqrt/rsqrt/tanh/sin/cos/erf/sigmoid/abs, gelu, silu, relu, "
            "softmax/log_softmax, layer_norm, rms_norm, scaled_dot_product_attention, "
            "view/reshape/permute/transpose/expand/unsqueeze/squeeze/cat/slice/select/split, "
            "sum/mean/var, masked_fill/where with constant masks, cross_entropy")
