"""Rollout and update seconds of breakout's profile settings (A) and the tuner's candidate (B) in turns:
how much of an epoch the tuned keys can act on (results/cpu/autotune/README.md).

    .venv/bin/python tools/results/cpu/autotune/split.py
"""

from __future__ import annotations

import time

from appliance.config.runs import run_config
from appliance.tune.selftune import build_trainer

cfg = run_config("breakout", None, None, [])
with build_trainer(cfg, {}) as a, build_trainer(cfg, {"vec.num_threads": 1, "train.buffers": 2}) as b:
    for i in range(3):
        for name, t in (("A", a), ("B", b)) if i % 2 == 0 else (("B", b), ("A", a)):
            t0 = time.perf_counter()
            t.evaluate()
            t1 = time.perf_counter()
            t.train()
            t2 = time.perf_counter()
            print(name, "rollout", round(t1 - t0, 2), "update", round(t2 - t1, 2), flush=True)
