"""Does the probe's policy forward read faster later in a process, and after what? Per fresh process
(glibc's thresholds held, as a suite holds them): the breakout LSTM forward at the run's batch
(median of 5 timed runs, K agent-steps/s) twice at the start, twice after a minute of sleep, twice
after a training window (one trainer, one warm-up epoch and one timed window of the quick suite's
settings), as the selftest's second run follows the first's training step.

    .venv/bin/python tools/results/cpu/allocator/forward_age.py 3 > results/cpu/allocator/forward_age.txt
"""

import subprocess
import sys

ONE = """
import statistics, time
from appliance.bench.allocator import hold_freed_memory
hold_freed_memory()
from appliance.bench import probe
from appliance.bench.suite.training import training_speed
from appliance.config import resolve
cfg = resolve(env="breakout", profile="cpu", overrides={})
med = lambda: round(statistics.median(probe.policy_forward(cfg, "cpu", 5).samples) / 1e3)
start = [med(), med()]
time.sleep(60)
slept = [med(), med()]
training_speed(cfg, 6.0)
trained = [med(), med()]
print(*start, *slept, *trained)
"""

if __name__ == "__main__":
    from appliance.bench.report import machine_line
    from appliance.sysinfo import fingerprint

    fp = fingerprint(calibration=False)
    print(f"machine: {machine_line(fp)}; host {fp['host_hash']}; commit {fp['git']['commit'][:7]}")
    print("| process | at the start | after 60 s asleep | after a training window | trained/start |")
    print("|---|---|---|---|---|")
    for i in range(int(sys.argv[1])):
        out = subprocess.run([sys.executable, "-c", ONE], capture_output=True, text=True, check=True)
        a = [int(x) for x in out.stdout.split()]
        print(
            f"| {i + 1} | {a[0]}, {a[1]} | {a[2]}, {a[3]} | {a[4]}, {a[5]} | {(a[4] + a[5]) / (a[0] + a[1]):.2f} |"
        )
