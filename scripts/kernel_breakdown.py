#!/usr/bin/env python3
"""Per-kernel time of one prefill and one decode step, measured by Nsight Compute.

Runs a g4 command under `ncu` (kernel durations only; clocks and caches left alone, as a real
run has them), splits its launches into forward calls at each greedy pick (`g4_argmax_merge`
ends every forward call), and prints, for the prefill and for the median decode step, each
kernel's launches and GPU time.

    python3 scripts/kernel_breakdown.py OUT.csv -- G4 bench --tests pp512,tg16 --decode eager ...
    python3 scripts/kernel_breakdown.py OUT.csv            (re-read an earlier CSV)
    python3 scripts/kernel_breakdown.py OUT.csv --window SKIP,COUNT -- G4 bench --tests tg8 ...
        (profiles launches SKIP+1 .. SKIP+COUNT only, for a large model whose every launch
        would take too long under ncu; the calls cut by the window are dropped, and every
        whole call in it is taken for a decode step)

The sum of kernel time is what the GPU spends computing; a step's wall time (g4 bench, graph
decode) minus this sum is launch gaps and host work.
"""

import csv
import shutil
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

STEP_END = "g4_argmax_merge"


def ncu_binary():
    found = shutil.which("ncu")
    if found:
        return found
    candidates = sorted(Path("/opt/nvidia").glob("nsight-compute/*/ncu")) + sorted(
        Path("/usr/local").glob("cuda*/bin/ncu"))
    if not candidates:
        sys.exit("kernel_breakdown: no ncu on this machine")
    return str(candidates[-1])


def profile(csv_path, command, window):
    args = [ncu_binary(), "--clock-control", "none", "--cache-control", "none",
            "--metrics", "gpu__time_duration.sum",
            "--csv", "--page", "raw", "--print-units", "base", "--log-file", str(csv_path)]
    if window:
        args += ["--launch-skip", str(window[0]), "--launch-count", str(window[1])]
    args += command
    result = subprocess.run(args)
    if result.returncode != 0:
        sys.exit(f"kernel_breakdown: the profiled command exited {result.returncode}")


def launches(csv_path):
    """(kernel name, ns) per launch, in launch order."""
    rows = []
    with open(csv_path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    reader = csv.DictReader(lines)
    for row in reader:
        value = row.get("gpu__time_duration.sum", "")
        try:
            ns = float(value.replace(",", ""))
        except ValueError:
            continue  # the units row
        rows.append((row["Kernel Name"], ns))
    return rows


def short(name):
    name = name.split("(")[0]
    return name if len(name) <= 70 else name[:67] + "..."


def split_steps(rows):
    steps, current = [], []
    for name, ns in rows:
        current.append((name, ns))
        if STEP_END in name:
            steps.append(current)
            current = []
    return steps


def table(title, step):
    by_name = defaultdict(lambda: [0, 0.0])
    for name, ns in step:
        by_name[short(name)][0] += 1
        by_name[short(name)][1] += ns
    total = sum(ns for _, ns in step)
    print(f"\n## {title}: {len(step)} launches, {total / 1e3:.1f} µs of kernel time")
    print("| kernel | launches | µs | share |")
    print("|---|---:|---:|---:|")
    for name, (count, ns) in sorted(by_name.items(), key=lambda kv: -kv[1][1]):
        print(f"| {name} | {count} | {ns / 1e3:.1f} | {100 * ns / total:.1f}% |")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    csv_path = Path(sys.argv[1])
    ours = sys.argv[2:sys.argv.index("--")] if "--" in sys.argv else sys.argv[2:]
    window = None
    if ours[:1] == ["--window"] and len(ours) == 2:
        window = [int(v) for v in ours[1].split(",")]
    elif ours:
        sys.exit(__doc__)
    if "--" in sys.argv:
        profile(csv_path, sys.argv[sys.argv.index("--") + 1:], window)
    steps = split_steps(launches(csv_path))
    if window:
        steps = steps[1:]  # the first was cut by the window's start
    elif steps:
        table("prefill (the first forward call)", steps[0])
        steps = steps[1:]
    if not steps:
        sys.exit(f"kernel_breakdown: no whole decode step in {csv_path}")
    decode = steps
    totals = [sum(ns for _, ns in s) for s in decode]
    median = decode[totals.index(statistics.median_low(totals))]
    print(f"\ndecode steps: {len(decode)}, kernel time per step µs: " + ", ".join(f"{t / 1e3:.0f}" for t in totals))
    table("decode (the median step)", median)


if __name__ == "__main__":
    main()
