#!/usr/bin/env python3
"""gemv_bench's or fp8_gemv_bench's output, one line a shape: the variants whose names match
NAME_PATTERN (a regular expression; default: g4's kernels and the reads, with and without load
hints), each as name=µs, with its check in brackets where the bench printed one.
Usage: gemv_table.py BENCH_OUTPUT [NAME_PATTERN]"""
import re
import sys

pattern = re.compile(sys.argv[2] if len(sys.argv) > 2 else r"^(g4|packed|read)")
cell = re.compile(r" (\S+) ([\d.]+) \(\d+\)( \[[^\]]*\])?;")
for line in open(sys.argv[1]):
    if "|" not in line or line.startswith("shape"):
        print(line.rstrip()[:160])
        continue
    shape, rest = line.split("|", 1)
    print(
        shape.split()[0],
        " ".join(f"{m.group(1)}={m.group(2)}{m.group(3) or ''}" for m in cell.finditer(rest) if pattern.search(m.group(1))),
    )
