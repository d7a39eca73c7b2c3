"""Export a PyTorch model to Stretto: `train` dialect MLIR plus safetensors.

    python3 -m stretto.export my_model.py:build --out runs/mine [--data data/kjv.txt]
    build/bin/stretto-train runs/mine/model.mlir --init-from runs/mine/weights.safetensors \\
        data.path=data/kjv.txt train.optimizer=adamw train.lr=3e-3 train.steps=200

`build()` returns `(module, example_inputs)`; `module.forward(idx, targets)`
returns the scalar training loss. The exporter runs torch.export, lowers
the decomposed ATen graph to `train` ops (stretto/_lower.py) and writes

  DIR/model.mlir            the model: `train.param`s named by their PyTorch
                            names, inputs "tokens" and "targets" [batch, seq],
                            the loss; partition units from the module tree
  DIR/weights.safetensors   the initial weights, for --init-from

Training needs no Python: stretto-train reads these two files.
"""
import argparse
import importlib.util
import json
import os
import sys

import numpy as np
import torch
import torch.nn as nn

from . import _lower, _mlir
from ._lower import A, Const, ExportError, Lowering, Param, user_frame

# Ops kept whole through the decomposition (torch.export's core-ATen table
# would split them into many small ops; Stretto has fused forms of them).
KEEP = [A.linear.default, A.matmul.default, A.scaled_dot_product_attention.default,
        A.rms_norm.default, A.layer_norm.default, A.silu.default, A.cross_entropy_loss.default,
        A.detach.default, A.gelu.default]

INPUT_NAMES = ("tokens", "targets")  # what runtime/Data.cpp feeds a language model


def load_builder(spec):
    """FILE.py:FUNC -> the function (the file is imported as a module)."""
    path, sep, func = spec.rpartition(":")
    if not sep or not path.endswith(".py") or not func:
        raise ExportError("error: expected FILE.py:FUNC, got %r" % spec)
    if not os.path.isfile(path):
        raise ExportError("error: %s: no such file" % path)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    name = "stretto_user_" + os.path.splitext(os.path.basename(path))[0]
    mod_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(mod_spec)
    sys.modules[name] = module
    mod_spec.loader.exec_module(module)
    fn = getattr(module, func, None)
    if not callable(fn):
        raise ExportError("error: %s has no function %r" % (path, func))
    return fn


def find_blocks(module, override=None):
    """The prefix of the repeated blocks (partition units): `override`, or
    the ModuleList/Sequential of numbered children holding the most
    parameters (e.g. "layers", "transformer.h"). None if there is none."""
    if override:
        return override
    best, best_count = None, 0
    for name, m in module.named_modules():
        if not isinstance(m, (nn.ModuleList, nn.Sequential)):
            continue
        children = list(m.named_children())
        if not children or not all(c.isdigit() for c, _ in children):
            continue
        count = sum(p.numel() for p in m.parameters())
        if count > best_count:
            best, best_count = name, count
    return best


def block_of(name, prefix):
    """The block index of FQN `name` under `prefix`, or None."""
    if prefix is None:
        return None
    head = prefix + "." if prefix else ""
    if not name.startswith(head):
        return None
    index = name[len(head):].split(".", 1)[0]
    return int(index) if index.isdigit() else None


def reject_hops(ep):
    """torch.no_grad(), autocast and other higher-order ops are inlined by
    the decomposition without a trace; refuse them while they are visible."""
    for node in ep.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.HigherOrderOperator):
            frame = user_frame(node)
            where = "%s:%d" % frame[:2] if frame else "in forward"
            raise ExportError("%s: error: %s (torch.no_grad(), autocast or control flow) in "
                              "forward is not supported: Stretto differentiates the whole "
                              "forward" % (where, node.target.name()))


def graph_inputs(ep, module):
    """Params (tied FQNs grouped into one Param), constants and user inputs
    of the graph's placeholders, via the graph signature's InputSpecs."""
    kinds = torch.export.graph_signature.InputKind
    used = {n.name for n in ep.graph.nodes if n.op == "placeholder" and n.users}
    groups, params, constants, user = {}, {}, {}, {}
    specs = ep.graph_signature.input_specs
    for spec in specs:
        name = spec.arg.name
        if spec.kind == kinds.PARAMETER:
            t = ep.state_dict[spec.target]
            groups.setdefault(id(t), []).append((spec.target, name, t))
    order = [n for n, _ in module.named_parameters(remove_duplicate=False)]
    for members in groups.values():
        members.sort(key=lambda m: order.index(m[0]) if m[0] in order else len(order))
        main = next((m for m in members if m[1] in used), members[0])
        p = Param(main[0], main[2])
        p.aliases = [m[0] for m in members if m is not main]
        for _, ph, _ in members:
            params[ph] = p
    count = 0
    for spec in specs:
        name = spec.arg.name
        if spec.kind == kinds.BUFFER:
            src = ep.state_dict if spec.persistent else ep.constants
            constants[name] = Const(src[spec.target])
        elif spec.kind == kinds.CONSTANT_TENSOR:
            constants[name] = Const(ep.constants[spec.target])
        elif spec.kind == kinds.USER_INPUT:
            if count >= len(INPUT_NAMES):
                raise ExportError("error: forward takes %d tensor inputs; Stretto feeds a "
                                  "language model two: idx and targets [batch, seq]"
                                  % sum(s.kind == kinds.USER_INPUT for s in specs))
            user[name] = INPUT_NAMES[count]
            count += 1
    if count != 2:
        raise ExportError("error: forward takes %d tensor inputs; Stretto feeds a language model "
                          "two: idx and targets [batch, seq]" % count)
    for spec in ep.graph_signature.output_specs:
        if spec.kind != torch.export.graph_signature.OutputKind.USER_OUTPUT:
            raise ExportError("error: forward mutates %r (%s): Stretto's exported models keep no "
                              "state besides their parameters" % (spec.target, spec.kind.name))
    return params, constants, user


def param_attrs(p, prefix, first_block_node):
    """role, layer and layout of a parameter (what the optimizer and the
    partition pass read): blocks' matrices are "matrix", tensors used
    before the first block (embeddings) "embedding", the rest after the
    blocks "head"/"norm"/"bias"."""
    attrs = []
    rank = p.tensor.dim()
    layer = block_of(p.name, prefix)
    if layer is not None:
        role = "matrix" if rank >= 2 else ("bias" if p.name.endswith("bias") else "norm")
    elif "embedding" in p.used_as or (p.first_use is not None and first_block_node is not None
                                      and p.first_use < first_block_node):
        role = "embedding"
    elif rank >= 2:
        role = "head"
    else:
        role = "bias" if p.name.endswith("bias") else "norm"
    if "linear" in p.used_as and rank == 2:
        attrs.append(("layout", '"out_in"'))  # nn.Linear's [out, in] (Muon's fan scale)
    if layer is not None:
        attrs.append(("layer", "%d : i64" % layer))
    attrs.append(("role", '"%s"' % role))
    if p.aliases:
        attrs.append(("aliases", "[%s]" % ", ".join('"%s"' % a for a in p.aliases)))
    return attrs


def init_of(t):
    """The initializer the MLIR declares (used when training without
    --init-from): exact for constant tensors, else normal(std)."""
    t = t.detach().float()
    if torch.all(t == 0):
        return "zeros"
    if torch.all(t == 1):
        return "ones"
    return "normal(%s)" % _mlir.f64(float(t.std()) if t.numel() > 1 else abs(float(t)))


def first_block_node(ep, prefix):
    if prefix is None:
        return None
    for i, node in enumerate(ep.graph.nodes):
        stack = node.meta.get("nn_module_stack") or {}
        if any(block_of(fqn + ".", prefix) is not None for fqn, _ in stack.values()):
            return i
    return None


def write_safetensors(path, tensors, metadata):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name].detach().cpu().float().numpy(), dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        blobs.append(a.tobytes())
        offset += a.nbytes
    header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))


def export(module, example_inputs, out_dir, data=None, blocks=None, name=None, source=""):
    """Exports `module` (forward(idx, targets) -> loss) to out_dir/model.mlir
    and out_dir/weights.safetensors; returns a one-paragraph summary."""
    for pname, p in module.named_parameters():
        if p.dtype != torch.float32:
            raise ExportError("error: parameter %r is %s; export the model in float32 "
                              "(module.float())" % (pname, p.dtype))
    ep = torch.export.export(module, tuple(example_inputs))
    reject_hops(ep)
    table = torch.export.default_decompositions()
    for op in KEEP:
        table.pop(op, None)
    ep = ep.run_decompositions(table)
    params, constants, user = graph_inputs(ep, module)
    b = _mlir.Builder()
    lowering = Lowering(ep, b, params, user, constants)
    loss = lowering.run()

    prefix = find_blocks(module, blocks)
    first_block = first_block_node(ep, prefix)
    unique = list(dict.fromkeys(params.values()))
    order = [n for n, _ in module.named_parameters()]
    unique.sort(key=lambda p: order.index(p.name) if p.name in order else len(order))
    layers = set()
    for p in unique:
        b.declare_param(p.name, tuple(p.tensor.shape), init_of(p.tensor),
                        param_attrs(p, prefix, first_block))
        if block_of(p.name, prefix) is not None:
            layers.add(block_of(p.name, prefix))
    model_attrs = []
    if data:
        # Relative to model.mlir (as stretto-train reads it) when that is short.
        rel = os.path.relpath(os.path.abspath(data), os.path.abspath(out_dir))
        if rel.startswith(os.pardir + os.sep + os.pardir + os.sep + os.pardir):
            rel = os.path.abspath(data)
        model_attrs.append(("data", '{format = "text", path = %s, val_fraction = 1.000000e-01 '
                            ': f64}' % _mlir.string(rel)))
    if lowering.vocab:
        model_attrs.append(("vocab", "%d : i64" % lowering.vocab))
    sym = name or type(module).__name__
    header = ["Exported by stretto.export from %s (torch %s)." % (source or sym, torch.__version__),
              "Parameters keep their PyTorch names; inputs: tokens, targets %s."
              % list(lowering.input_shape),
              "Partition units: %s." % (("embed, block0..block%d (%s.N), head"
                                         % (max(layers), prefix)) if layers else "none")]
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "model.mlir"), "w") as f:
        f.write(b.module_text(sym, loss, model_attrs, header))
    weights = {}
    for p in unique:
        for n in [p.name] + p.aliases:
            weights[n] = p.tensor
    ties = [[p.name] + p.aliases for p in unique if p.aliases]
    write_safetensors(os.path.join(out_dir, "weights.safetensors"), weights,
                      {"format": "pt", "stretto.tied": json.dumps(ties)})
    buffers = [n for n, _ in module.named_buffers()
               if n in dict(module.state_dict())]
    count = sum(p.tensor.numel() for p in unique)
    lines = ["exported %s: %d parameters in %d tensors, %d block(s)%s" % (
        sym, count, len(unique), len(layers), " under '%s'" % prefix if layers else "")]
    if ties:
        lines.append("tied: %s (one parameter; model.safetensors names each)"
                     % "; ".join(" = ".join(t) for t in ties))
    if buffers:
        lines.append("note: persistent buffers %s are constants in model.mlir; Stretto's "
                     "model.safetensors holds parameters only, so load it with "
                     "load_state_dict(..., strict=False) or make them persistent=False"
                     % ", ".join(buffers))
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m stretto.export",
                                description=__doc__.split("\n")[0])
    p.add_argument("spec", metavar="FILE.py:FUNC",
                   help="FUNC() returns (module, example_inputs); forward(idx, targets) -> loss")
    p.add_argument("--out", required=True, help="folder for model.mlir and weights.safetensors")
    p.add_argument("--data", help="a byte corpus recorded in model.mlir (else pass data.path= "
                                  "to stretto-train)")
    p.add_argument("--blocks", help="the module holding the repeated blocks (partition units), "
                                    "e.g. transformer.h (default: found)")
    p.add_argument("--name", help="the train.model's name (default: the module's class)")
    a = p.parse_args(argv)
    try:
        fn = load_builder(a.spec)
        module, example_inputs = fn()
        print(export(module, example_inputs, a.out, data=a.data, blocks=a.blocks, name=a.name,
                     source=a.spec))
        print("wrote %s/model.mlir and %s/weights.safetensors" % (a.out, a.out))
    except ExportError as e:
        text = str(e)  # "FILE:LINE: error: ..." or "error: ..."
        print(("stretto.export: " if text.startswith("error:") else "") + text, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
