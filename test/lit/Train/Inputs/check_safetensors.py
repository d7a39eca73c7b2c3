"""Checks model.safetensors against the model IR and the checkpoint.

usage: check_safetensors.py MODEL.mlir RUN_DIR
Every train.param of the IR must be in the file under its own name, with its
shape and exactly the values of checkpoint.bin (f32); nothing else may be.
"""
import re
import struct
import sys

import numpy as np
from safetensors.numpy import load_file

ir, run = open(sys.argv[1]).read(), sys.argv[2]
params = {m.group(1): tuple(int(d) for d in m.group(2).split("x") if d)
          for m in re.finditer(r"train\.param @([\w.]+) : tensor<((?:\d+x)*)f32>", ir)}

# checkpoint.bin, layout documented in runtime/io/Checkpoint.cpp.
b = open(f"{run}/checkpoint.bin", "rb").read()
assert b[:12] in (b"STRETTOCKPT1", b"STRETTOCKPT2"), b[:12]
pos = 12
width, step, seed = struct.unpack_from("<IqQ", b, pos)
pos += 20
if b[:12] == b"STRETTOCKPT2":  # meta entries: key and value strings
    (entries,) = struct.unpack_from("<I", b, pos); pos += 4
    for _ in range(2 * entries):
        (n,) = struct.unpack_from("<I", b, pos); pos += 4 + n
(count,) = struct.unpack_from("<I", b, pos); pos += 4
ckpt = {}
for _ in range(count):
    (n,) = struct.unpack_from("<I", b, pos); pos += 4
    name = b[pos:pos + n].decode(); pos += n
    (rank,) = struct.unpack_from("<I", b, pos); pos += 4
    shape = struct.unpack_from(f"<{rank}q", b, pos); pos += 8 * rank
    size = int(np.prod(shape)) if rank else 1
    dt = "<f4" if width == 4 else "<f8"
    ckpt[name] = np.frombuffer(b, dt, size, pos).reshape(shape).astype(np.float32)
    pos += size * width

tensors = load_file(f"{run}/model.safetensors")
assert set(tensors) == set(params), (sorted(tensors), sorted(params))
for name, shape in params.items():
    t = tensors[name]
    assert t.dtype == np.float32, (name, t.dtype)
    assert t.shape == shape, (name, t.shape, shape)
    assert np.array_equal(t, ckpt[name]), name
    assert np.isfinite(t).all(), name
print(f"ok: {len(params)} tensors, step {step}")
