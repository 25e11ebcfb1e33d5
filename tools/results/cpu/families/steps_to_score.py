"""One training run through the learn suite's rule (issue 63): train ENV under the cpu profile with
the given overrides until the mean of episode_return over the last 5 epochs that ended episodes
reaches TARGET (not before MIN_EPOCHS epochs) or STEPS agent-steps run out; prints one JSON line
(agent-steps at the target or null, the final 5-epoch mean, seconds) and writes the per-epoch curve
(agent-steps, episodes ended, mean return) to OUT.

    PYTHONPATH=. python tools/results/cpu/families/steps_to_score.py ENV TARGET STEPS MIN_EPOCHS OUT \
        [--family NAME] [--section.key value ...]
"""

import json
import sys
import time

from appliance import vector
from appliance.config import resolve
from appliance.train import Trainer, loop
from appliance.train.loop import Stop, recent

env, target, steps, min_epochs, out, *overrides = sys.argv[1:]
family = None
if overrides[:1] == ["--family"]:  # as `puffer-bench train ENV --family NAME`
    family, overrides = overrides[1], overrides[2:]
cfg = resolve(env=env, profile="cpu", overrides=overrides, family=family)
trainer = Trainer(cfg, vector.make_from_config(cfg))
curve = []


def record(t):
    if t.env_stats:
        curve.append({"step": t.global_step, "n": t.env_stats["n"], "return": t.env_stats["episode_return"]})


start = time.perf_counter()
stop = Stop(total_timesteps=int(float(steps)), target=("episode_return", float(target)), window=5,
            min_epochs=int(min_epochs))  # fmt: skip
try:
    result = loop.run(trainer, stop, on_epoch=[record])
finally:
    trainer.close()
with open(out, "w") as f:
    f.writelines(json.dumps(row) + "\n" for row in curve)
print(json.dumps({
    "env": env, "family": cfg.family.name if cfg.family else None, "seed": cfg.train.seed,
    "overrides": " ".join(overrides), "reason": result.reason,
    "steps_to_target": trainer.global_step if result.reached else None, "steps": trainer.global_step,
    "recent5": recent(result.history, "episode_return", 5), "s": round(time.perf_counter() - start, 1),
}))  # fmt: skip
