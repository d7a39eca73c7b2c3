"""Sets meta entries of a Stretto plan file and re-signs it (a valid
checksum), as an edited or hostile plan would be:
    python edit_plan.py IN OUT key=value [key=value ...]
"""
import sys


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def main():
    src, dst, *sets = sys.argv[1:]
    text = open(src, "rb").read()
    body = text[: text.rindex(b"checksum ")]
    lines = body.split(b"\n")
    for kv in sets:
        key, value = kv.split("=", 1)
        k, v = key.encode(), value.encode()
        line = b"meta %d:%s %d:%s" % (len(k), k, len(v), v)
        prefix = b"meta %d:%s " % (len(k), k)
        for i, old in enumerate(lines):
            if old.startswith(prefix):
                lines[i] = line
                break
        else:
            lines.insert(1, line)
    body = b"\n".join(lines)
    open(dst, "wb").write(body + b"checksum %016x\n" % fnv1a64(body))


main()
