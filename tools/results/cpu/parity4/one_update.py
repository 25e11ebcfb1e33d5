"""One epoch's update from one state: ours against PufferLib 4.0's own ``PuffeRL.train`` (docs/lab/results.md).

Our trainer, at a config of ours (default: the 4.0 breakout parity config), loads a checkpoint (weights,
Muon momentum, step counters) and plays one rollout. PufferLib 4.0's ``train()`` (its torch_pufferl.py at
the pinned commit, the one its CPU build runs) then gets the same rollout, the same weights and the same
momentum buffers, with each minibatch's segments the ones ours drew (its ``torch.multinomial`` answered
with them) and its learning rate and prioritized-sampling beta set to ours. Both run their epoch; per
minibatch this prints how far apart the advantages, the importance weights, the clipped gradients and
the parameters after the step are (largest absolute difference over the largest value). Two trainers
that do the same thing agree to float32 rounding (about 1e-6 on the first minibatch, growing slowly);
a difference in what they do shows as a jump.

    PYTHONPATH=.:$HOME/.cache/puffer-bench/peers/pufferlib-4.0.0-41dc40bb2825/envs/breakout \
      .venv/bin/python tools/results/cpu/parity4/one_update.py experiments/p4-breakout-all4-s0/model_000200.pt

(``python tools/pufferlib4_peer.py build --envs breakout`` builds that folder.) Extra arguments are
config overrides of ours, e.g. ``--train.vtrace-rho-on reward``; ``--beta pufferlib`` gives its
``train()`` its own beta formula instead of ours.
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

import torch

# its torch_pufferl imports pufferlib.pufferl for the dashboard alone (and that wants rich_argparse)
sys.modules.setdefault("pufferlib.pufferl", types.ModuleType("pufferlib.pufferl"))

from appliance import vector  # noqa: E402
from appliance.config import resolve  # noqa: E402
from appliance.gpu import kernels  # noqa: E402
from appliance.train import advantage as our_advantage  # noqa: E402
from appliance.train.trainer import Trainer  # noqa: E402

# our parameter name -> its (pufferlib/models.py Policy with DefaultEncoder, MinGRU, DefaultDecoder)
NAMES = {
    "encoder.0.weight": "encoder.encoder.weight",
    "encoder.0.bias": "encoder.encoder.bias",
    "decoder.weight": "decoder.decoder.weight",
    "decoder.bias": "decoder.decoder.bias",
    "value.weight": "decoder.value_function.weight",
    "value.bias": "decoder.value_function.bias",
}


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest absolute difference over the largest absolute value of either."""
    scale = max(float(a.abs().max()), float(b.abs().max()), 1e-12)
    return float((a.float() - b.float()).abs().max()) / scale


def its_name(ours: str) -> str:
    if ours.startswith("core.layers."):
        return "network." + ours.removeprefix("core.")
    return NAMES[ours]


def its_layout(name: str, t: torch.Tensor) -> torch.Tensor:
    """Our tensor ``name`` in its layout: a MinGRU layer's rows are [gate, hidden, proj] in ours and
    [hidden, gate, proj] in its (``.chunk(3)``); the rest is the same."""
    if not name.startswith("core.layers."):
        return t
    k, v, p = t.chunk(3, dim=0)
    return torch.cat([v, k, p], dim=0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint", help="a checkpoint of ours (model_NNNNNN.pt) at the config")
    ap.add_argument("--config", default="bench/parity/pufferlib4/breakout.yaml")
    ap.add_argument("--env", default="breakout")
    ap.add_argument("--beta", choices=("ours", "pufferlib"), default="ours")
    ap.add_argument("--seed", type=int, default=0)
    args, overrides = ap.parse_known_args()
    torch.manual_seed(args.seed)

    import pufferlib.models as pm
    import pufferlib.torch_pufferl as tp

    cfg = resolve(env=args.env, config_file=args.config, overrides=[f"--train.seed={args.seed}", *overrides])
    hp = cfg.train
    trainer = Trainer(cfg, vector.make_from_config(cfg))
    with trainer:
        trainer.load_checkpoint(Path(args.checkpoint), resume=True)
        trainer.evaluate()
        b = trainer.rollout
        assert b.values.shape[1] == hp.bptt_horizon, "one segment a row: horizon = bptt_horizon"
        start = {n: p.detach().clone() for n, p in trainer.policy.named_parameters()}
        muon = trainer.optimizer.optimizers[0]
        momentum = {n: muon.state[p]["momentum_buffer"].clone() for n, p in trainer.policy.named_parameters()}
        data = {
            k: getattr(b, k).clone() for k in ("obs", "actions", "logprobs", "values", "rewards", "dones")
        }

        # ours, recording each minibatch
        ours: list[dict] = []
        real_compute, real_sample, real_step = our_advantage.compute, kernels.prio_sample, muon.step

        def compute(*a, **k):
            adv = real_compute(*a, **k)
            ours.append({"adv": adv.clone()})
            return adv

        def sample(*a, **k):
            idx, w = real_sample(*a, **k)
            ours[-1].update(idx=idx.clone(), w=w.clone(), beta=float(a[2]))
            return idx, w

        def step():
            ours[-1]["grad"] = {n: p.grad.clone() for n, p in trainer.policy.named_parameters()}
            ours[-1]["lr"] = float(muon.param_groups[0]["lr"])
            real_step()
            ours[-1]["param"] = {n: p.detach().clone() for n, p in trainer.policy.named_parameters()}

        our_advantage.compute, kernels.prio_sample, muon.step = compute, sample, step
        try:
            trainer.train()
        finally:
            our_advantage.compute, kernels.prio_sample, muon.step = real_compute, real_sample, real_step

    # its policy with our starting weights, its trainer with our rollout
    obs_size, nvec = data["obs"].shape[-1], trainer.policy.nvec
    network = pm.MinGRU(cfg.policy.hidden_size, num_layers=cfg.policy.num_layers)
    policy = pm.Policy(
        pm.DefaultEncoder(obs_size, cfg.policy.hidden_size),
        pm.DefaultDecoder(nvec, cfg.policy.hidden_size),
        network,
    )
    its_params = dict(policy.named_parameters())
    with torch.no_grad():
        for n, t in start.items():
            its_params[its_name(n)].copy_(its_layout(n, t))
    segments, horizon = data["values"].shape
    rl = tp.PuffeRL.__new__(tp.PuffeRL)
    rl.device, rl.total_agents, rl.policy = "cpu", segments, policy
    rl.observations = data["obs"].transpose(0, 1).contiguous().float()
    rl.actions = data["actions"].reshape(segments, horizon, -1).transpose(0, 1).float().contiguous()
    rl.values = data["values"].T.contiguous()
    rl.logprobs = data["logprobs"].T.contiguous()
    rl.rewards = data["rewards"].T.contiguous()
    rl.terminals = data["dones"].T.contiguous()
    rl.ratio = torch.ones(segments, horizon)
    rl.batch_size = segments * horizon
    rl.minibatch_segments = hp.minibatch_size // horizon
    rl.profile = tp.Profile(gpu=False)
    beta = ours[0]["beta"]
    # its beta is b0 + (1 - b0) * alpha * epoch / total_epochs: an epoch count that gives ours' beta, or its own
    rl.total_epochs = 1_000_000
    progress = (beta - hp.prio_beta0) / (1 - hp.prio_beta0)
    if args.beta == "ours":
        rl.epoch = round(progress / hp.prio_alpha * rl.total_epochs)
    else:
        rl.epoch = round(progress * rl.total_epochs)
    rl.config = {
        "prio_beta0": hp.prio_beta0, "prio_alpha": hp.prio_alpha, "clip_coef": hp.clip_coef,
        "vf_clip_coef": hp.vf_clip_coef, "learning_rate": ours[0]["lr"], "anneal_lr": False,
        "min_lr_ratio": hp.min_lr_ratio, "replay_ratio": hp.replay_ratio, "minibatch_size": hp.minibatch_size,
        "gamma": hp.gamma, "gae_lambda": hp.gae_lambda, "vtrace_rho_clip": hp.vtrace_rho_clip,
        "vtrace_c_clip": hp.vtrace_c_clip, "vf_coef": hp.vf_coef, "ent_coef": hp.ent_coef,
        "max_grad_norm": hp.max_grad_norm,
    }  # fmt: skip
    rl.optimizer = tp.Muon(policy.parameters(), lr=ours[0]["lr"], momentum=hp.adam_beta1)
    for n, p in policy.named_parameters():
        ours_name = next(k for k in start if its_name(k) == n)
        rl.optimizer.state[p]["momentum_buffer"] = its_layout(ours_name, momentum[ours_name]).clone()

    theirs: list[dict] = []
    real_adv, real_multinomial, real_its_step = (
        tp.compute_puff_advantage,
        torch.multinomial,
        rl.optimizer.step,
    )

    def its_adv(*a, **k):
        adv = real_adv(*a, **k)
        theirs.append({"adv": adv.clone()})
        return adv

    def multinomial(probs, n, replacement=False):
        k = len(theirs) - 1
        theirs[k]["w"] = (rl.total_agents * probs[ours[k]["idx"]]) ** -(
            hp.prio_beta0 + (1 - hp.prio_beta0) * hp.prio_alpha * rl.epoch / rl.total_epochs
        )
        return ours[k]["idx"].clone()

    def its_step():
        theirs[-1]["grad"] = {n: p.grad.clone() for n, p in policy.named_parameters()}
        real_its_step()
        theirs[-1]["param"] = {n: p.detach().clone() for n, p in policy.named_parameters()}

    tp.compute_puff_advantage, torch.multinomial, rl.optimizer.step = its_adv, multinomial, its_step
    try:
        rl.train()
    finally:
        tp.compute_puff_advantage, torch.multinomial, rl.optimizer.step = (
            real_adv,
            real_multinomial,
            real_its_step,
        )

    print(
        f"checkpoint {args.checkpoint}, step {trainer.global_step:,}; config {args.config} {' '.join(overrides)}"
    )
    print(
        f"lr {ours[0]['lr']:.5f}, beta ours {beta:.4f}, its {rl.config['prio_beta0'] + (1 - rl.config['prio_beta0']) * rl.config['prio_alpha'] * rl.epoch / rl.total_epochs:.4f}"
    )
    print(
        "minibatch | advantages | importance | gradient (worst tensor) | parameters after the step (worst tensor)"
    )
    for k, (o, t) in enumerate(zip(ours, theirs, strict=True)):
        adv = rel(o["adv"], t["adv"])
        w = rel(o["w"], t["w"].reshape(-1))
        grads = {n: rel(its_layout(n, o["grad"][n]), t["grad"][its_name(n)]) for n in start}
        params = {
            n: rel(its_layout(n, o["param"][n] - start[n]), t["param"][its_name(n)] - its_layout(n, start[n]))
            for n in start
        }
        g, p = max(grads, key=grads.get), max(params, key=params.get)
        print(f"{k} | {adv:.2e} | {w:.2e} | {grads[g]:.2e} ({g}) | {params[p]:.2e} ({p}, of the change)")


if __name__ == "__main__":
    main()
