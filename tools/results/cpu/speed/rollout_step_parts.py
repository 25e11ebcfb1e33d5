#!/usr/bin/env python3
"""Where a float32 rollout step's time goes, part by part, at breakout's cpu profile: 4,096 agents
(one of two buffers of 8,192 envs), observations of 118 floats, an LSTM of 64, three actions. Each
part is the trainer's own call on the policy it builds: the observations made floats, the encoder's
linear layer, its GELU, the LSTM step (its products in int16 where the kind's profile says so, as
``train.rollout_int16`` sets), the action and value heads, and the action draws with their
log-probabilities. Run it under ``PUFFER_CPU_KIND=KIND`` to cap torch's libraries as
``puffer-bench`` does. docs/lab/cpu-speed.md, "The older kind against its ceiling".

    PUFFER_CPU_KIND=older python tools/results/cpu/speed/rollout_step_parts.py [--rounds 3] [--steps 400]
"""

from __future__ import annotations

import argparse
import time

from appliance.sysinfo.cpu import cap_torch, cpu_kind  # imports no torch

cap_torch()  # the emulated kind's caps, before torch loads its libraries

import numpy as np  # noqa: E402
import torch  # noqa: E402
from gymnasium import spaces  # noqa: E402

from appliance.gpu import kernels  # noqa: E402
from appliance.train.policy import Policy  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    agents = 4096
    policy = Policy(spaces.Box(0, 1, (118,), np.float32), spaces.Discrete(3), core="lstm", hidden_size=64)
    kind = cpu_kind()
    policy.core.rollout_int16 = kind in ("avx", "older")  # breakout's profiles.cpu.avx and .older
    obs = torch.rand(agents, 118)
    state = policy.initial_state(agents)
    ids = torch.arange(agents)
    clock = time.perf_counter

    def step() -> dict[str, float]:
        t: dict[str, float] = {}
        a = clock()
        f = policy.features(obs)
        t["features"] = clock() - a
        a = clock()
        e = policy.encoder[0](f)
        t["encoder linear"] = clock() - a
        a = clock()
        e = policy.encoder[1](e)
        t["gelu"] = clock() - a
        a = clock()
        x, _ = policy.core.step(e, state)
        t["lstm step"] = clock() - a
        a = clock()
        logits, value = policy.decoder(x), policy.value(x).squeeze(-1)
        t["heads"] = clock() - a
        a = clock()
        decoded = torch.cat([logits.float(), value.float()[:, None]], 1)
        kernels.sample_logits(decoded, policy.nvec, 0, 5, ids=ids)
        t["draws"] = clock() - a
        return t

    print(
        f"kind {kind}, torch {torch.backends.cpu.get_cpu_capability()}, {args.threads} threads, "
        f"int16 products {policy.core.rollout_int16}: ms a step of {agents} agents"
    )
    with torch.no_grad():
        for _ in range(50):
            step()
        for r in range(args.rounds):
            total: dict[str, float] = {}
            for _ in range(args.steps):
                for k, v in step().items():
                    total[k] = total.get(k, 0.0) + v
            parts = "  ".join(f"{k} {v / args.steps * 1e3:.3f}" for k, v in total.items())
            print(f"round {r + 1}: {parts}  whole {sum(total.values()) / args.steps * 1e3:.3f}", flush=True)


if __name__ == "__main__":
    main()
