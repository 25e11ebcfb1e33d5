#!/usr/bin/env python3
"""How far the bf16 CPU rollout's log-probabilities are from the update's, for the lstm core's step
as it runs now and for ``nn.LSTMCell`` under autocast as it ran until 2026-12-01.

A breakout checkpoint's policy plays ``--agents`` agents for ``--burn-in`` steps and then
``--steps`` more with the rollout's bf16 copy of the weights under CPU autocast, as
``Trainer.policy_step`` does. Those last steps' observations and actions are then replayed from the
same start state through each rollout step, and through ``Policy.sequence`` (the update's forward,
under bf16 autocast, and in float32); printed is the mean and 99th percentile of
``|log pi_rollout - log pi_update|`` over every agent-step: the log-ratio PPO's first minibatch sees
before any weight has moved. docs/lab/cpu-speed.md, "The bf16 rollout's LSTM step".

    python tools/results/cpu/speed/bf16_step_logratio.py experiments/RUN/model.pt [--agents 1024]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from appliance import vector
from appliance.config import resolve
from appliance.train import checkpoint
from appliance.train.cores.lstm import LSTM
from appliance.train.make import make_policy
from appliance.train.policy import inference_copy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path, help="a breakout run's model.pt (the lstm core)")
    parser.add_argument("--agents", type=int, default=1024)
    parser.add_argument("--burn-in", type=int, default=200)
    parser.add_argument("--steps", type=int, default=64, help="the replayed steps (a segment's horizon)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    cfg = resolve(env="breakout", profile="cpu", overrides=["--vec.num-envs", str(args.agents)])
    vec = vector.make_from_config(cfg)
    try:
        policy = make_policy(cfg, vec)
        checkpoint.load_weights(policy, args.checkpoint, checkpoint.read(args.checkpoint)["model"])
        policy.eval()
        twin = inference_copy(policy, torch.bfloat16)
        obs, _ = vec.reset(args.seed)
        state = policy.initial_state(vec.num_agents)
        seen, actions = [], []
        with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
            for i in range(args.burn_in + args.steps):
                if i == args.burn_in:
                    start = tuple(s.float().clone() for s in state)
                o = torch.as_tensor(obs).clone()
                out, _, state = twin.step(o, state)
                action = policy.sample(out.float())[0]
                if i >= args.burn_in:
                    seen.append(o)
                    actions.append(action)
                obs, *_ = vec.step(policy.env_actions(action).numpy())
    finally:
        vec.close()

    def rollout(step=None) -> torch.Tensor:
        """The replayed steps' log-probs through the core's step, or with ``step`` in its place."""
        original = LSTM._bf16_step
        if step is not None:
            LSTM._bf16_step = step
        try:
            s, logprobs = start, []
            with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
                for o, a in zip(seen, actions, strict=True):
                    out, _, s = twin.step(o, s)
                    logprobs.append(policy.evaluate_actions(out.float(), a)[0])
            return torch.stack(logprobs, 1)
        finally:
            LSTM._bf16_step = original

    obs_seq, act_seq = torch.stack(seen, 1), torch.stack(actions, 1)
    with torch.no_grad():
        with torch.autocast("cpu", torch.bfloat16):
            update = policy.evaluate_actions(policy.sequence(obs_seq, start)[0].float(), act_seq)[0]
        float32 = policy.evaluate_actions(policy.sequence(obs_seq, start)[0], act_seq)[0]
    print(
        f"{args.checkpoint}: {args.agents} agents, {args.steps} steps after {args.burn_in}, "
        f"torch {torch.__version__}"
    )
    variants = {
        "core step (one product, host gates)": rollout(),
        "nn.LSTMCell under autocast (before)": rollout(lambda self, x, s: self.cell(x, s)),
    }
    for name, logprob in variants.items():
        gap = (logprob - update).abs()
        print(
            f"{name:<38} |log-ratio| to the update (bf16): mean {gap.mean():.5f}, "
            f"p99 {gap.quantile(0.99):.5f}; to the float32 sequence: mean {(logprob - float32).abs().mean():.5f}"
        )
    print(
        f"{'the update (bf16) itself':<38} to the float32 sequence: mean {(update - float32).abs().mean():.5f}"
    )


if __name__ == "__main__":
    main()
