"""The quick suite's probe section alone, three times in a row in one process (``run_suite`` on a
suite of quick's probe and gate settings): the policy forward's samples at the run's batch and at
twice it, K agent-steps/s, per run.

    .venv/bin/python tools/results/cpu/allocator/probe_in_a_row.py > results/cpu/allocator/probe_in_a_row.txt
"""

import tempfile
from pathlib import Path

import yaml

from appliance.bench.report import machine_line
from appliance.bench.suite.definition import load
from appliance.bench.suite.session import run_suite

quick, _ = load("quick")
suite = {k: quick[k] for k in ("seconds", "cv", "gate", "probe")}
with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp) / "probe-only.yaml"
    path.write_text(yaml.safe_dump({"name": "probe-only", "description": "quick's probe alone", **suite}))
    for i in range(3):
        data, _ = run_suite(str(path), out_dir=Path(tmp) / "out", plots=False)
        if i == 0:
            fp = data["fingerprint"]
            print(f"machine: {machine_line(fp)}; host {fp['host_hash']}; commit {fp['git']['commit'][:7]}")
        for name, m in data["metrics"].items():
            if "policy_forward" in name:
                print(f"run {i + 1} {name}: {' '.join(str(round(x / 1e3)) for x in m['samples'])}")
