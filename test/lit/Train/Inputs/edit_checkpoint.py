"""Rewrites a Stretto checkpoint (format 2) and re-signs it, so that only
what the edit changed is wrong, never the checksum:
    python edit_checkpoint.py IN OUT shape NAME D0,D1,...   a state's shape
                                                            (values cut or
                                                            zero-padded)
    python edit_checkpoint.py IN OUT claim NAME DIM         a state claims a
                                                            first dimension
                                                            of DIM, values
                                                            unchanged
"""
import struct
import sys


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def main():
    src, dst, what, name, arg = sys.argv[1:]
    data = open(src, "rb").read()[:-8]
    assert data[:12] == b"STRETTOCKPT2", "not a format-2 checkpoint"
    pos = 12
    width, step, seed = struct.unpack_from("<Iqq", data, pos)
    pos += 20
    (entries,) = struct.unpack_from("<I", data, pos)
    pos += 4
    for _ in range(2 * entries):
        (n,) = struct.unpack_from("<I", data, pos)
        pos += 4 + n
    (count,) = struct.unpack_from("<I", data, pos)
    pos += 4
    out = bytearray(data[:pos])
    for _ in range(count):
        (n,) = struct.unpack_from("<I", data, pos)
        state = data[pos + 4 : pos + 4 + n]
        pos += 4 + n
        (rank,) = struct.unpack_from("<I", data, pos)
        dims = list(struct.unpack_from("<%dq" % rank, data, pos + 4))
        pos += 4 + 8 * rank
        size = 1
        for d in dims:
            size *= d
        values = data[pos : pos + size * width]
        pos += size * width
        if state.decode() == name:
            if what == "shape":
                dims = [int(d) for d in arg.split(",")]
                size = 1
                for d in dims:
                    size *= d
                values = (values + bytes(size * width))[: size * width]
            else:
                dims[0] = int(arg)
        out += struct.pack("<I", n) + state + struct.pack("<I", len(dims))
        out += struct.pack("<%dq" % len(dims), *dims) + values
    out += struct.pack("<Q", fnv1a64(bytes(out)))
    open(dst, "wb").write(bytes(out))


main()
