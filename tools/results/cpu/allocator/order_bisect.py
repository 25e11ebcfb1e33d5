"""Which of the quick suite's steps makes the policy forward probe read faster in a selftest's second
run? Per variant, a suite of quick's settings with the probe and the steps named, run by `puffer-bench
selftest` (two runs in one process, back to back) N times; printed: the 8,192-row forward's medians,
first and second run, K agent-steps/s, and second/first.

    .venv/bin/python tools/results/cpu/allocator/order_bisect.py 3 > results/cpu/allocator/order_bisect.txt
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from appliance.bench.report import machine_line
from appliance.bench.suite.definition import load
from appliance.sysinfo import fingerprint

VARIANTS = {"probe alone": [], "probe, train": ["train_sps"], "probe, env, vector": ["env_sps", "vector_sps"]}
FORWARD = "probe/cpu/policy_forward/breakout"

quick, _ = load("quick")
fp = fingerprint(calibration=False)
print(f"machine: {machine_line(fp)}; host {fp['host_hash']}; commit {fp['git']['commit'][:7]}")
print("| suite | try | first | second | second/first |")
print("|---|---|---|---|---|")
with tempfile.TemporaryDirectory() as tmp:
    for label, steps in VARIANTS.items():
        keys = ("seconds", "cv", "gate", "probe", *steps)
        suite = {"name": "bisect", "description": f"quick's {label}", **{k: quick[k] for k in keys}}
        path = Path(tmp) / f"{len(steps)}-{'-'.join(steps) or 'probe'}.yaml"
        path.write_text(yaml.safe_dump(suite))
        for i in range(int(sys.argv[1])):
            out = Path(tmp) / f"{path.stem}-{i}"
            cmd = [sys.executable, "-m", "appliance.cli", "selftest", "--suite", str(path), "--out", str(out)]
            subprocess.run(cmd, capture_output=True, text=True)  # exit 1 on disagreement: read the reports
            a, b = (json.loads(next((out / r).glob("*/*.json")).read_text())["metrics"][FORWARD]["median"] / 1e3
                    for r in ("first", "second"))  # fmt: skip
            print(f"| {label} | {i + 1} | {a:.0f} | {b:.0f} | {b / a:.2f} |", flush=True)
