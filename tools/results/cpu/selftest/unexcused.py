"""A selftest comparison read without the noise guard's excuses (docs/lab/noise.md): the metrics whose 95%
interval of the second/first ratio lies wholly outside [1 - t, 1 + t], t the threshold (5 %).

    python tools/results/cpu/selftest/unexcused.py results/cpu/selftest/try3/compare.md
"""

import re
import sys
from pathlib import Path

THRESHOLD = 0.05

rows = [line for line in Path(sys.argv[1]).read_text().splitlines() if line.startswith("| `")]
judged, beyond = 0, []
for line in rows:
    m = re.search(r"\| ([0-9.]+) \(([0-9.]+)-([0-9.]+)\)", line)
    if not m:
        continue
    ratio, lo, hi = map(float, m.groups())
    judged += 1
    if lo > 1 + THRESHOLD or hi < 1 - THRESHOLD:
        beyond.append((line.split("|")[1].strip(), ratio, lo, hi))
for name, ratio, lo, hi in beyond:
    print(f"{name}: second/first {ratio:.3f} ({lo:.3f}-{hi:.3f})")
print(f"{len(beyond)} of {judged} metrics beyond {100 * THRESHOLD:g}% by their intervals")
