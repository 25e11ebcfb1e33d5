"""Does the probe's policy forward depend on what ran before it in the process? Per fresh process:
the breakout LSTM forward at the run's batch twice, at twice the batch once, at the run's batch twice
again (medians of 5 timed runs, K agent-steps/s), and after/before; processes alternate without and
with ``appliance.bench.allocator.hold_freed_memory`` (A B A B).

    .venv/bin/python tools/results/cpu/allocator/forward_order.py 4 > results/cpu/allocator/forward_order.txt
"""

import statistics
import subprocess
import sys

ONE = """
import statistics, sys
from appliance.bench.allocator import hold_freed_memory
if sys.argv[1] == "held":
    hold_freed_memory()
from appliance.bench import probe
from appliance.config import resolve
cfg = resolve(env="breakout", profile="cpu", overrides={})
n = int(cfg.vec.num_envs)
med = lambda b: statistics.median(probe.policy_forward(cfg, "cpu", 5, batch=b).samples) / 1e3
print(*[round(med(b)) for b in (n, n, 2 * n, n, n)])
"""

if __name__ == "__main__":
    from appliance.bench.report import machine_line
    from appliance.sysinfo import fingerprint

    fp = fingerprint(calibration=False)
    print(f"machine: {machine_line(fp)}; host {fp['host_hash']}; commit {fp['git']['commit'][:7]}")
    print("| process | memory | before, before | 2x batch | after, after | after/before |")
    print("|---|---|---|---|---|---|")
    ratios: dict[str, list[float]] = {"default": [], "held": []}
    for i in range(int(sys.argv[1])):
        for mode in ("default", "held"):
            out = subprocess.run([sys.executable, "-c", ONE, mode], capture_output=True, text=True, check=True)
            a = [int(x) for x in out.stdout.split()]
            ratio = (a[3] + a[4]) / (a[0] + a[1])
            ratios[mode].append(ratio)
            print(f"| {i + 1} | {mode} | {a[0]}, {a[1]} | {a[2]} | {a[3]}, {a[4]} | {ratio:.2f} |")
    for mode, r in ratios.items():
        print(f"{mode}: after/before {min(r):.2f}-{max(r):.2f}, median {statistics.median(r):.2f}")
