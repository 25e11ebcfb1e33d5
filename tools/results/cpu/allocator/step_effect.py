"""What the quick suite's env and vector steps leave behind in the process, as the policy forward
probe sees it. Per fresh process (glibc's thresholds held, as a suite holds them) and variant: the
breakout forward probe at the run's batch three times (median of 5 samples each, K agent-steps/s),
then the variant's work, then the probe three times again; printed: before, after, after/before,
the variant's seconds, torch's threads and the process's threads (with their CPU affinity) before
and after.

Variants: `sleep` (8 s, nothing), `env` (the env step's measurements: breakout, pong, squared and
snake at 1 and 2 threads, 1 s each), `vec-<backend>` (breakout vectorized by that backend, 1 s),
`cp-<backend>` (CartPole-v1, 16 envs, 1 s; `gymnasium-sync` is Gymnasium's own vector env).

    .venv/bin/python tools/results/cpu/allocator/step_effect.py 2 > results/cpu/allocator/step_effect.txt
"""

import json
import subprocess
import sys

VARIANTS = ["sleep", "env", "vec-native", "vec-serial", "vec-multiprocessing", "cp-serial", "cp-multiprocessing",
            "cp-gymnasium-sync"]  # fmt: skip

ONE = r"""
import json, os, statistics, sys, time
from appliance.bench.allocator import hold_freed_memory
hold_freed_memory()
import torch
from appliance import vector
from appliance.bench import envsps, probe, vecsps
from appliance.config import resolve

cfg = resolve(env="breakout", profile="cpu", overrides={})
med = lambda: round(statistics.median(probe.policy_forward(cfg, "cpu", 5).samples) / 1e3)

def threads():
    out = []
    for t in sorted(os.listdir("/proc/self/task")):
        status = open(f"/proc/self/task/{t}/status").read().splitlines()
        out.append(next(line.split()[1] for line in status if line.startswith("Cpus_allowed_list")))
    return out

variant = sys.argv[1]
before, tb = [med() for _ in range(3)], threads()
t0 = time.perf_counter()
if variant == "env":
    for env in ["breakout", "pong", "squared", "snake"]:
        c = resolve(env=env, profile="cpu", overrides={})
        for n in (1, 2):
            envsps.measure(env, int(c.vec.num_envs), n, seconds=1.0, seed=0, **dict(c.env))
elif variant.startswith(("vec-", "cp-")):
    kind, backend = variant.split("-", 1)
    if backend.startswith("gymnasium-"):
        from appliance.emulation import make_factory
        vec = vecsps.GymnasiumVector(backend.split("-")[1], make_factory("CartPole-v1"), 16)
    elif kind == "cp":
        vec = vector.make("CartPole-v1", backend=backend, num_envs=16, seed=0)
    else:
        vec = vector.make("breakout", backend=backend, num_envs=int(cfg.vec.num_envs), seed=0, **dict(cfg.env))
    try:
        vecsps.measure(vec, seconds=1.0, seed=0)
    finally:
        vec.close()
else:
    time.sleep(8)
seconds = time.perf_counter() - t0
after, ta = [med() for _ in range(3)], threads()
print(json.dumps({"before": before, "after": after, "seconds": seconds, "torch": torch.get_num_threads(),
                  "threads_before": tb, "threads_after": ta}))
"""

if __name__ == "__main__":
    from appliance.bench.report import machine_line
    from appliance.sysinfo import fingerprint

    fp = fingerprint(calibration=False)
    print(f"machine: {machine_line(fp)}; host {fp['host_hash']}; commit {fp['git']['commit'][:7]}")
    print(
        "| try | variant | before | after | after/before | its seconds | torch threads | threads (CPUs) before | after |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for i in range(int(sys.argv[1])):
        for variant in VARIANTS:
            out = subprocess.run(
                [sys.executable, "-c", ONE, variant], capture_output=True, text=True, check=True
            )
            d = json.loads(out.stdout.strip().splitlines()[-1])
            ratio = sum(d["after"]) / sum(d["before"])
            cells = [", ".join(map(str, d["before"])), ", ".join(map(str, d["after"])), f"{ratio:.2f}",
                     f"{d['seconds']:.1f}", str(d["torch"]), " ".join(d["threads_before"]), " ".join(d["threads_after"])]  # fmt: skip
            print(f"| {i + 1} | {variant} | {' | '.join(cells)} |", flush=True)
