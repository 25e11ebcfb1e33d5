"""The per-sample speed gate's rates judged again, start-anchored and rebased, from the checks
`tools/noise_guard_rates.py` kept: each run's start checks and its gate checks (one per step, on
the tool's CPU) replayed through `SpeedGate` as a suite's gate judges them, with `use_floors(gate)`
(floors from the start checks alone, the rule until 4c0c8fd) and `use_floors(gate, start checks)`
(rebased on every check of the run since, never below 75 % of the start's median). Measures nothing
new. In these records the load starts after the start checks and lasts the whole run: the case
where rebasing moves its median most.

    .venv/bin/python tools/results/cpu/noise/rebased_rates.py results/cpu/noise/guard-rates-zen3-gate.json \
        results/cpu/noise/guard-rates-zen3-gate-idle.json
"""

import json
import sys
from pathlib import Path

from appliance.measure import noise


def flags(run: dict, rebased: bool) -> list[bool]:
    replay = iter(run["gate_checks"])
    gate = noise.SpeedGate(check=lambda: next(replay))
    gate.use_floors(run["gate"], run["start_checks"] if rebased else None)
    return [gate.judge()[1] for _ in run["gate_checks"]]


print("| record | condition | checks | flagged, start floors | flagged, rebased | target |")
print("|---|---|---|---|---|---|")
for path in sys.argv[1:]:
    record = json.loads(Path(path).read_text())
    for condition, result in record["conditions"].items():
        runs = result["runs"]
        total = sum(len(r["gate_checks"]) for r in runs)
        start = sum(sum(flags(r, False)) for r in runs)
        rebased = sum(sum(flags(r, True)) for r in runs)
        target = "at most 5 %" if condition == "idle" else "at least 90 %"
        print(f"| {path.split('/')[-1]} | {condition} | {total} | {start} | {rebased} | {target} |")
