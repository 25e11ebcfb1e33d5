"""The training update as a CUDA graph: the same results as the eager update (train.graphs false) and
no allocation once captured. Runs only with a GPU (`pytest -m gpu tests/gpu`)."""

from __future__ import annotations

import pytest
import torch

from appliance import vector
from appliance.config import resolve
from appliance.train import Trainer

pytestmark = pytest.mark.gpu


def _trainer(graphs: bool) -> Trainer:
    cfg = resolve(
        env="breakout",
        overrides=[
            "--train.device", "cuda", "--train.graphs", str(graphs).lower(), "--vec.num-envs", "256",
            "--train.bptt-horizon", "16", "--train.minibatch-size", "1024", "--train.max-minibatch-size", "512",
            "--train.update-epochs", "2",
        ],
    )  # fmt: skip
    return Trainer(cfg, vector.make_from_config(cfg))


def test_graphed_update_matches_the_eager_one_and_does_not_allocate() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    graphed, eager = _trainer(True), _trainer(False)
    try:
        assert graphed.update_step.capture and not eager.update_step.capture
        for _ in range(3):  # 2 update epochs x 8 minibatches: warm-up, capture, replays
            graphed.evaluate()
            eager.evaluate()
            lg, le = graphed.train(), eager.train()
            for k in ("policy_loss", "value_loss", "entropy"):
                assert lg[k] == pytest.approx(le[k], rel=1e-3, abs=1e-5), k
        assert graphed.update_step.captured
        for p, q in zip(graphed.policy.parameters(), eager.policy.parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=1e-3, atol=1e-4)
        graphed.evaluate()
        torch.cuda.synchronize()
        stats = torch.cuda.memory_stats()
        before = (stats["allocation.all.allocated"], stats["segment.all.allocated"])
        graphed.train()
        torch.cuda.synchronize()
        stats = torch.cuda.memory_stats()
        after_alloc = stats["allocation.all.allocated"]
        # only the epoch's read-back and the explained-variance reductions remain outside the graph
        assert after_alloc - before[0] < 32, after_alloc - before[0]
        assert stats["segment.all.allocated"] == before[1], "no new cudaMalloc segments in a captured epoch"
    finally:
        graphed.close()
        eager.close()
