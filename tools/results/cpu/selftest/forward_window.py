"""Is the policy forward probe's spread honest? In one process (glibc's thresholds held, as a suite
holds them), N runs of the breakout forward probe at the run's batch, a pause between runs; per run
the probe two ways:

- back to back: 5 timed runs of about 50 ms each with nothing between them (the probe before
  2026-11-28, `probe.timed`), all inside a fraction of a second;
- gated: 5 samples of about `probe.FORWARD_SAMPLE_S` through the quick suite's speed gate (its
  floors from 5 start checks), as `probe.policy_forward` takes them now.

Every pair of runs is then compared as `compare` compares a metric: "beyond 5% and significant"
(the ratio more than 5% from 1 and its 95% interval excluding 1), and that at p < 0.05/16, the
strictest level Holm's correction applies over the 16 speed metrics a quick selftest judges
together. Runs of one machine minutes apart: a probe whose spread is honest is rarely called
different at the Holm level.

    .venv/bin/python tools/results/cpu/selftest/forward_window.py 12 8 > results/cpu/selftest/forward_window.txt
"""

import statistics
import sys
import time

import torch

from appliance.bench.allocator import hold_freed_memory

hold_freed_memory()

from appliance.bench import probe  # noqa: E402
from appliance.bench.report import machine_line  # noqa: E402
from appliance.config import resolve  # noqa: E402
from appliance.measure import noise  # noqa: E402
from appliance.measure.noise.gate import speed_check, spread_gate  # noqa: E402
from appliance.measure.stats import ratio_test  # noqa: E402
from appliance.sysinfo import fingerprint  # noqa: E402
from appliance.train.make import make_policy  # noqa: E402
from appliance.vector import native  # noqa: E402

RUNS, THRESHOLD, HOLM_FLOOR = 5, 0.05, 0.05 / 16


def back_to_back(cfg) -> list[float]:
    with native.make(cfg.env_name, num_envs=1, seed=0, **dict(cfg.env)) as vec:
        policy = make_policy(cfg, vec).eval()
        rows = int(cfg.vec.num_envs) * vec.num_agents
        obs = torch.as_tensor(probe._random_obs(vec, rows))
    state = policy.initial_state(rows, "cpu")

    def step() -> None:
        with torch.no_grad():
            out, _, _ = policy.step(obs, state)
            policy.sample(out.float())

    return [rows / s for s in probe.timed(step, RUNS, cuda=False, target_s=0.05)]


def judged(runs: list[list[float]]) -> str:
    pairs = [(a, b) for i, a in enumerate(runs) for b in runs[i + 1 :]]
    beyond = holm = 0
    for a, b in pairs:
        ratio, ci, p = ratio_test(a, b)
        differs = abs(ratio - 1) > THRESHOLD and ci is not None and (ci[0] > 1 or ci[1] < 1)
        beyond += differs
        holm += differs and p is not None and p < HOLM_FLOOR
    medians = [statistics.median(r) for r in runs]
    within = statistics.mean(statistics.stdev(r) / statistics.mean(r) for r in runs)
    return (
        f"run medians' CV {statistics.stdev(medians) / statistics.mean(medians):.3f} | "
        f"mean CV within a run {within:.3f} | {beyond} of {len(pairs)} ({beyond / len(pairs):.2f}) | "
        f"{holm} of {len(pairs)} ({holm / len(pairs):.2f})"
    )


if __name__ == "__main__":
    n, pause = int(sys.argv[1]), float(sys.argv[2])
    fp = fingerprint(calibration=False)
    print(f"machine: {machine_line(fp)}; host {fp['host_hash']}; commit {fp['git']['commit'][:7]}")
    cfg = resolve(env="breakout", profile="cpu", overrides={})
    gate = noise.SpeedGate(patience_s=5, budget_s=30)
    gate.use_floors(spread_gate([speed_check() for _ in range(5)]))
    old: list[list[float]] = []
    new: list[list[float]] = []
    print(f"{n} runs, {pause:g} s apart; K agent-steps/s")
    print("| run | back to back | gated |")
    print("|---|---|---|")
    for i in range(n):
        if i:
            time.sleep(pause)
        old.append(back_to_back(cfg))
        new.append(probe.policy_forward(cfg, "cpu", RUNS, take=gate.take).samples)
        row = [" ".join(f"{x / 1e3:.0f}" for x in r) for r in (old[-1], new[-1])]
        print(f"| {i + 1} | {row[0]} | {row[1]} |", flush=True)
    print()
    print(
        "| probe | spread between runs | spread within a run | pairs beyond 5% and significant | of those at p < 0.05/16 |"
    )
    print("|---|---|---|---|---|")
    print(f"| back to back | {judged(old)} |")
    print(f"| gated | {judged(new)} |")
    print(f"gate over the gated samples: {gate.end_step()}")
