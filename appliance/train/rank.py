"""The trainer of one rank: a :class:`Trainer` that keeps step with the other ranks (the scheme is
described in :mod:`appliance.train.distributed`), and the merge of the ranks' episode stats."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from appliance.train import loop, runs
from appliance.train.launcher import RankStop
from appliance.train.trainer import Trainer


class RankTrainer(Trainer):
    """A :class:`Trainer` that keeps step in step with the other ranks (see :mod:`appliance.train.distributed`)."""

    def __init__(self, *args: Any, stop: RankStop | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stop = stop or RankStop(None)
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self._params = list({id(p): p for p in self.policy.parameters()}.values())
        self.local_steps = 0
        self.rank_sps: list[float] = []
        self.allreduce_seconds = 0.0
        self.broadcast_weights()

    def broadcast_weights(self) -> None:
        """Every rank takes rank 0's weights (after a start, a resume or --load-model-path)."""
        with torch.no_grad():
            for t in self.policy.state_dict().values():
                dist.broadcast(t, 0)

    def reseed(self) -> None:
        """Give each rank its own action and sampling streams (a resumed checkpoint holds rank 0's)."""
        seed = self.hp.seed + 7919 * self.epoch
        torch.manual_seed(seed)
        self.generator.manual_seed(seed)

    # hooks called by Trainer.train

    def _advantage_stats(self, adv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and (unbiased) std of the minibatch advantages of all ranks together."""
        moments = torch.stack(
            [adv.sum(), (adv * adv).sum(), torch.tensor(float(adv.numel()), device=adv.device)]
        )
        dist.all_reduce(moments)
        total, squares, n = moments.double().unbind()
        mean = total / n
        var = (squares - total * mean) / (n - 1).clamp_min(1.0)
        return mean.float(), var.clamp_min(0.0).sqrt().float()

    def _reduce_gradients(self) -> None:
        """Average the gradients over the ranks: one all-reduce of all of them, flattened."""
        start = time.perf_counter()
        for p in self._params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        grads = [p.grad for p in self._params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat /= self.world
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()
        self.allreduce_seconds += time.perf_counter() - start

    # the rollout, then one exchange of counts and stats

    def evaluate(self) -> None:
        """The rollout, then the exchange, where the ranks also agree on a stop (see :class:`RankStop`)."""
        before = self.global_step
        stop = self.stop.requested()
        if stop is None:
            try:
                with self.stop.rollout():
                    super().evaluate()
            except loop.Interrupted as e:
                stop = e.signum
        steps = self.global_step - before
        mine = {
            "steps": steps,
            "sps": (self.local_steps + steps) / max(1e-9, time.time() - self.start_time),
            "stats": self.env_stats,
            "stop": stop,
        }
        every: list[Any] = [None] * self.world
        dist.all_gather_object(every, mine)
        stops = [r["stop"] for r in every if r["stop"]]
        if stops:  # every rank drops its rollout here and the loop saves and ends the run
            self.global_step = before
            raise loop.Interrupted(stops[0])
        self.local_steps += steps
        self.global_step = before + sum(r["steps"] for r in every)
        self.rank_sps = [r["sps"] for r in every]
        self.env_stats = merge_stats([r["stats"] for r in every])

    def log_metrics(self) -> dict[str, Any]:
        """The trainer's record plus each rank's SPS and this rank's all-reduce seconds."""
        run_dir, self.run_dir = self.run_dir, None  # the record is written below, with the extra keys
        try:
            record = super().log_metrics()
        finally:
            self.run_dir = run_dir
        record.pop("host/others_cores", None)  # it would count the other ranks on this machine
        record.update({f"sps/rank{i}": s for i, s in enumerate(self.rank_sps)})
        record["time/allreduce"] = self.allreduce_seconds
        if run_dir is not None:
            self.note(runs.append_metrics(run_dir, json.dumps(record) + "\n"))
        return record

    def save_checkpoint(self) -> Path | None:
        return super().save_checkpoint() if self.rank == 0 else None


def merge_stats(per_rank: list[dict[str, float]]) -> dict[str, float]:
    """Episode stats of all ranks as one: means weighted by each rank's episode count ``n``."""
    reported = [s for s in per_rank if s]
    if not reported:
        return {}
    keys = [k for k in reported[0] if all(k in s for s in reported)]
    weights = [float(s.get("n", 1.0)) or 1.0 for s in reported]
    total = sum(weights)
    merged = {k: sum(w * s[k] for w, s in zip(weights, reported, strict=True)) / total for k in keys}
    if all("n" in s for s in reported):
        merged["n"] = total
    return merged
