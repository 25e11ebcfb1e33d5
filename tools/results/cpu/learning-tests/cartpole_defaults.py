"""tests/test_learning.py::test_cartpole_defaults_reach_475 as the test runs it (`puffer-bench train
CartPole-v1`'s config under the cpu profile, the same Stop), with ``train.seed`` set; prints one JSON
line: the agent-steps at which the 5-epoch mean return reached 475, against the 100 K budget.

    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 \\
        PYTHONPATH=. python tools/results/cpu/learning-tests/cartpole_defaults.py 0
(``-1``: the config's own seed, 0.) The caps are tools/learning_seeds.py's (docs/lab/learning-tests.md).
"""

import json
import sys
import time

import torch

from appliance import vector
from appliance.config import resolve
from appliance.train import Trainer, loop
from appliance.train.loop import Stop, recent

seed = int(sys.argv[1])
cfg = resolve(env="CartPole-v1", profile="cpu", overrides=[] if seed < 0 else ["--train.seed", str(seed)])
trainer = Trainer(cfg, vector.make_from_config(cfg))
start = time.perf_counter()
stop = Stop(
    total_timesteps=cfg.train.total_timesteps, target=("episode_return", 475), window=5, min_epochs=10
)
try:
    result = loop.run(trainer, stop)
finally:
    trainer.close()
print(json.dumps({
    "seed": cfg.train.seed, "isa": torch.backends.cpu.get_cpu_capability(), "reason": result.reason,
    "steps": result.steps, "budget": cfg.train.total_timesteps, "epochs": result.epochs,
    "recent5": recent(result.history, "episode_return", 5), "s": round(time.perf_counter() - start, 1),
}))  # fmt: skip
