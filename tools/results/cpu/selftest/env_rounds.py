"""Do a quick suite's env figures tell the truth about their spread when their samples are taken
back to back? In one process, N runs of the quick suite's env phase (the cpu profile's envs and
threads, 3 samples of 1 s each, every sample through the quick suite's speed gate) two ways,
alternating A B A B:

- by step: a metric's 3 samples back to back, then the next metric's (the suite until 2026-11-28);
- in rounds: the first sample of every metric, then the second of every metric, then the third,
  so a metric's samples lie about a third of the phase apart.

Every pair of runs of one way is compared metric by metric as `compare` compares a metric ("beyond
5% and significant": the ratio more than 5% from 1 and its 95% interval excluding 1), and at
p < 0.05/16, the strictest level Holm's correction applies over the 16 speed metrics a quick
selftest judges together. Runs of one idle machine: figures whose spread is honest are rarely
called different.

    .venv/bin/python tools/results/cpu/selftest/env_rounds.py 8 > results/cpu/selftest/env_rounds.txt
"""

import statistics
import sys
import time

from appliance.bench.allocator import hold_freed_memory

hold_freed_memory()

from appliance.bench import envsps  # noqa: E402
from appliance.bench.report import machine_line  # noqa: E402
from appliance.config import resolve  # noqa: E402
from appliance.measure import noise  # noqa: E402
from appliance.measure.noise.gate import speed_check, spread_gate  # noqa: E402
from appliance.measure.stats import ratio_test  # noqa: E402
from appliance.sysinfo import fingerprint  # noqa: E402

REPEATS, THRESHOLD, HOLM_FLOOR = 3, 0.05, 0.05 / 16
ENVS = ["breakout", "pong", "squared", "snake"]


def phase(gate: noise.SpeedGate, metrics: list[tuple[str, int]], rounds: bool) -> dict[str, list[float]]:
    cfgs = {env: resolve(env=env, profile="cpu", overrides={}) for env in ENVS}

    def sample(env: str, t: int, r: int) -> float:
        cfg = cfgs[env]
        return gate.take(
            lambda: envsps.measure(env, int(cfg.vec.num_envs), t, seconds=1.0, seed=r, **dict(cfg.env))["sps"]
        )

    out: dict[str, list[float]] = {f"{e}/x{t}": [] for e, t in metrics}
    order = (
        [(e, t, r) for r in range(REPEATS) for e, t in metrics]
        if rounds
        else [(e, t, r) for e, t in metrics for r in range(REPEATS)]
    )
    for e, t, r in order:
        out[f"{e}/x{t}"].append(sample(e, t, r))
    return out


def judged(runs: list[dict[str, list[float]]], name: str) -> tuple[int, int, int, float, float]:
    series = [r[name] for r in runs]
    pairs = [(a, b) for i, a in enumerate(series) for b in series[i + 1 :]]
    beyond = holm = 0
    for a, b in pairs:
        ratio, ci, p = ratio_test(a, b)
        differs = abs(ratio - 1) > THRESHOLD and ci is not None and (ci[0] > 1 or ci[1] < 1)
        beyond += differs
        holm += differs and p is not None and p < HOLM_FLOOR
    medians = [statistics.median(s) for s in series]
    within = statistics.mean(statistics.stdev(s) / statistics.mean(s) for s in series)
    return len(pairs), beyond, holm, statistics.stdev(medians) / statistics.mean(medians), within


if __name__ == "__main__":
    n = int(sys.argv[1])
    fp = fingerprint(calibration=False)
    print(f"machine: {machine_line(fp)}; host {fp['host_hash']}; commit {fp['git']['commit'][:7]}")
    threads = [int(t) for t in resolve(profile="cpu").bench.threads]
    metrics = [(e, t) for e in ENVS for t in threads]
    gate = noise.SpeedGate(patience_s=5, budget_s=30)
    gate.use_floors(spread_gate([speed_check() for _ in range(5)]))
    runs: dict[bool, list[dict[str, list[float]]]] = {False: [], True: []}
    print(f"{n} runs each way, alternating; K agent-steps/s")
    for i in range(2 * n):
        rounds = bool(i % 2)
        start = time.perf_counter()
        runs[rounds].append(phase(gate, metrics, rounds))
        cells = " | ".join(" ".join(f"{x / 1e3:.0f}" for x in v) for v in runs[rounds][-1].values())
        print(
            f"| {i + 1} | {'rounds' if rounds else 'by step'} | {time.perf_counter() - start:.0f} s | {cells} |",
            flush=True,
        )
    print()
    print(
        "| metric | way | pairs | beyond 5% and significant | at p < 0.05/16 | run medians' CV | mean CV within a run |"
    )
    print("|---|---|---|---|---|---|---|")
    totals = {False: [0, 0, 0], True: [0, 0, 0]}
    for e, t in metrics:
        for rounds in (False, True):
            pairs, beyond, holm, between, within = judged(runs[rounds], f"{e}/x{t}")
            for k, v in enumerate((pairs, beyond, holm)):
                totals[rounds][k] += v
            print(
                f"| {e} x{t} | {'rounds' if rounds else 'by step'} | {pairs} | {beyond} | {holm} | "
                f"{between:.3f} | {within:.3f} |"
            )
    for rounds in (False, True):
        pairs, beyond, holm = totals[rounds]
        print(
            f"| all | {'rounds' if rounds else 'by step'} | {pairs} | {beyond} ({beyond / pairs:.2f}) | "
            f"{holm} ({holm / pairs:.2f}) | | |"
        )
    record = gate.end_step()
    print(
        f"gate: {record['samples']} samples, {len(record['retaken'])} retaken, {record['slow_kept']} kept slow, "
        f"waited {record.get('waited_s', 0)} s"
    )
