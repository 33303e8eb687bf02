#!/usr/bin/env python3
"""gemv_bench's output, one line a shape: g4's GEMV (or the packed GeGLU GEMV) and a plain read
in µs, then every even-split variant with its µs, GB/s and largest relative difference from g4.
Usage: gemv_table.py GEMV_BENCH_OUTPUT"""
import re
import sys

for line in open(sys.argv[1]):
    if "|" not in line or line.startswith("shape"):
        print(line.rstrip()[:160])
        continue
    shape, rest = line.split("|", 1)
    cells = dict((m.group(1), m.group(2)) for m in re.finditer(r" (\S+) ([\d.]+) \(", rest))
    print(
        shape.split()[0],
        " ".join(f"{k}={cells[k]}" for k in ("g4", "packed", "read") if k in cells),
        " ".join(re.findall(r"(\S*even\S* [\d.]+ \(\d+\) \[[^\]]*\])", rest)),
    )
