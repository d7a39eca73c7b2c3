#!/usr/bin/env python3
"""Byte unigram entropy of a corpus: the loss a model that ignores context
would reach. README compares gpt-tiny's validation loss against it.

    python3 bench/corpus_stats.py data/kjv.txt
"""
import collections
import math
import sys

path = sys.argv[1] if len(sys.argv) > 1 else "data/kjv.txt"
data = open(path, "rb").read()
counts = collections.Counter(data)
n = len(data)
h = -sum(c / n * math.log(c / n) for c in counts.values())
print(f"{path}: {n} bytes, {len(counts)} distinct, unigram entropy {h:.4f} nats ({h / math.log(2):.4f} bits)")
