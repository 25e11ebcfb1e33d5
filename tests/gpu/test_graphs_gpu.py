"""The training update as a CUDA graph: replaying the captured minibatch gives what calling its
function gives, from the same state, and a captured epoch allocates no new memory. Runs only with a
GPU (`pytest -m gpu tests/gpu`)."""

from __future__ import annotations

import pytest
import torch

from appliance import vector
from appliance.config import resolve
from appliance.train import Trainer
from appliance.train.graphs import restore, update_state

pytestmark = pytest.mark.gpu


# PufferLib 4.0's switches: segments drawn with replacement and its Muon inside the captured update
PUFFERLIB4 = ("--train.prio-replacement", "true", "--train.muon-ns", "pufferlib4", "--policy.init", "torch",
              "--policy.encoder-activation", "none")  # fmt: skip


def _trainer(*extra: str) -> Trainer:
    cfg = resolve(
        env="breakout",
        overrides=[
            "--train.device", "cuda", "--train.graphs", "true", "--vec.num-envs", "256",
            "--train.bptt-horizon", "16", "--train.minibatch-size", "1024", "--train.max-minibatch-size", "512",
            "--train.update-epochs", "2", *extra,
        ],
    )  # fmt: skip
    return Trainer(cfg, vector.make_from_config(cfg))


@pytest.mark.parametrize("extra", [(), PUFFERLIB4], ids=["defaults", "pufferlib4"])
def test_graphed_update_matches_the_called_one_and_does_not_allocate(extra: tuple[str, ...]) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    trainer = _trainer(*extra)
    try:
        assert trainer.update_step.capture
        for _ in range(2):  # 8 minibatches an epoch: warm-up, capture, replays
            trainer.evaluate()
            trainer.train()
        assert trainer.update_step.captured
        trainer.evaluate()
        saved, epoch = update_state(trainer), trainer.epoch
        replayed = trainer.train()
        weights = [p.detach().clone() for p in trainer.policy.parameters()]
        restore(saved)
        trainer.epoch = epoch
        trainer.update_step.replay = False
        called = trainer.train()
        trainer.update_step.replay = True
        for k in ("policy_loss", "value_loss", "entropy"):
            assert replayed[k] == pytest.approx(called[k], rel=1e-4, abs=1e-6), k
        for p, q in zip(trainer.policy.parameters(), weights, strict=True):
            torch.testing.assert_close(p.detach(), q, rtol=1e-5, atol=1e-6)
        restore(saved)
        torch.cuda.synchronize()
        before = torch.cuda.memory_stats()["segment.all.allocated"]
        trainer.train()
        torch.cuda.synchronize()
        assert torch.cuda.memory_stats()["segment.all.allocated"] == before, (
            "no new cudaMalloc in a captured epoch"
        )
    finally:
        trainer.close()


def test_graphed_rollout_and_update_are_timed_as_wholes() -> None:
    """A replay runs none of the eager sections: the update's replays are timed by CUDA events
    (train.graphed), the engine's graphed policy steps by its C clock (evaluate.graphed), so neither
    is read as overhead by the bottleneck diagnosis."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    trainer = _trainer()
    try:
        for _ in range(2):  # warm-up, capture (the update's minibatches, the engine's policy steps)
            trainer.evaluate()
            trainer.train()
        trainer.timings.reset()
        for _ in range(2):
            trainer.evaluate()
            trainer.train()
        t, phases = trainer.timings.totals, trainer.timings.phase_totals
        assert t["train.graphed"] > 0.5 * phases["train"], (t, phases)
        assert t["train.forward"] == t["train.learn"] == t["train.copy"] == 0
        if trainer.engine is not None and trainer.engine.graphs is not None:
            assert t["evaluate.graphed"] > 0 and t["evaluate.forward"] == 0
    finally:
        trainer.close()
