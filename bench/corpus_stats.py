#!/usr/bin/env python3
"""Byte unigram entropy of a corpus: the loss a model that ignores context
would reach. README compares gpt-tiny's validation loss against it.

    python3 bench/corpus_stats.py data/kjv.txt
    python3 bench/corpus_stats.py --smoke     # checks the formula on corpora of known entropy

--smoke writes two small corpora into a scratch folder ($STRETTO_SMOKE_DIR/
corpus_stats or a temporary one) whose entropies are known (one byte
repeated: 0; "ab" repeated: ln 2; all 256 bytes once: ln 256), runs the
same code on each and on data/kjv.txt, and exits 1 unless they come out
right (kjv.txt: between 0 and ln 256).
"""
import collections
import math
import os
import sys


def entropy(path):
    """(bytes, distinct bytes, unigram entropy in nats)."""
    data = open(path, "rb").read()
    counts = collections.Counter(data)
    n = len(data)
    h = 0.0 - sum(c / n * math.log(c / n) for c in counts.values())
    return n, len(counts), h


def report(path):
    n, distinct, h = entropy(path)
    print(f"{path}: {n} bytes, {distinct} distinct, unigram entropy {h:.4f} nats "
          f"({h / math.log(2):.4f} bits)")
    return h


def smoke():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import benchutil
    work = benchutil.scratch("corpus_stats")
    cases = [("one-byte.txt", b"a" * 1000, 0.0), ("two-bytes.txt", b"ab" * 500, math.log(2)),
             ("all-bytes.bin", bytes(range(256)), math.log(256))]
    for name, data, want in cases:
        path = os.path.join(work, name)
        with open(path, "wb") as f:
            f.write(data)
        got = report(path)
        benchutil.check(abs(got - want) < 1e-12, f"{name}: entropy {got:.6f} = {want:.6f} nats")
    h = report(os.path.join(benchutil.ROOT, "data", "kjv.txt"))
    benchutil.check(0 < h < math.log(256), "data/kjv.txt: an entropy between 0 and ln 256")
    return 0


def main():
    if sys.argv[1:] == ["--smoke"]:
        return smoke()
    report(sys.argv[1] if len(sys.argv) > 1 else "data/kjv.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
