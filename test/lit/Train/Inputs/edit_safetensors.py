"""Writes a changed copy of a safetensors file, for --init-from's errors.

usage: edit_safetensors.py IN OUT MODE [NAME]
  extra NAME   add a tensor NAME (f32, shape [2])
  drop NAME    remove tensor NAME (the first in the file when NAME is 'first')
  f16 NAME     relabel tensor NAME as F16 (its data halved to fit)
  scale NAME   double the values of F32 tensor NAME (same shape)
Only the standard library: the layout is an 8-byte little-endian header
length, a JSON header, then the data.
"""
import json
import struct
import sys

src, dst, mode = sys.argv[1], sys.argv[2], sys.argv[3]
name = sys.argv[4] if len(sys.argv) > 4 else ""
raw = open(src, "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
meta = header.pop("__metadata__", None)
tensors = {k: (v, data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}
if name == "first":
    name = sorted(tensors)[0]
if mode == "extra":
    tensors[name] = ({"dtype": "F32", "shape": [2]}, struct.pack("<2f", 0.0, 1.0))
elif mode == "drop":
    del tensors[name]
elif mode == "f16":
    info, blob = tensors[name]
    tensors[name] = (dict(info, dtype="F16"), blob[:len(blob) // 2])
elif mode == "scale":
    info, blob = tensors[name]
    values = struct.unpack("<%df" % (len(blob) // 4), blob)
    tensors[name] = (info, struct.pack("<%df" % len(values), *(2 * v for v in values)))
else:
    sys.exit("unknown mode " + mode)
out_header = {} if meta is None else {"__metadata__": meta}
blobs, offset = [], 0
for k in sorted(tensors):
    info, blob = tensors[k]
    out_header[k] = {"dtype": info["dtype"], "shape": info["shape"],
                     "data_offsets": [offset, offset + len(blob)]}
    blobs.append(blob)
    offset += len(blob)
h = json.dumps(out_header).encode()
h += b" " * (-len(h) % 8)
with open(dst, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
print(name)
