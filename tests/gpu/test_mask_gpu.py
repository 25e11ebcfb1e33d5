"""An action-masked env trained on a GPU (the rollout engine, the fused kernels and the update captured
as a CUDA graph, the GPU profiles' path): the policy never samples an action the step's mask forbids.
keyhole (tests/data/pufferlib4/ocean/keyhole, PufferLib 4.0's format) forbids a random half of its 6
actions every step and counts each one taken. Runs only with a GPU (`pytest -m gpu tests/gpu`)."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from test_pufferlib_envs import KEYHOLE, KEYHOLE_KEYS, variant

from appliance.cli import cli

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("env_cache")]


@pytest.mark.parametrize("fused_optimizer", ["false", "true"])
def test_an_action_masked_env_on_the_gpu_never_takes_a_forbidden_action(tmp_path, fused_optimizer) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    folder = variant(tmp_path, "keyhole_gpu", KEYHOLE_KEYS, source=KEYHOLE)
    runner = CliRunner()
    built = runner.invoke(cli, ["envs", "build", str(folder)])
    assert built.exit_code == 0, built.output
    trained = runner.invoke(
        cli,
        [
            "train", "pufferlib:keyhole_gpu", "--no-dashboard", "--autotune", "off", "--stop-steps", "200000",
            "--run-id", "mask", "--train.data-dir", str(tmp_path / "runs"), "--train.device", "cuda",
            "--train.graphs", "true", "--train.fused-optimizer", fused_optimizer, "--vec.num-envs", "512",
            "--train.minibatch-size", "8192", "--train.max-minibatch-size", "8192",
        ],
    )  # fmt: skip
    assert trained.exit_code == 0, trained.output
    lines = (tmp_path / "runs" / "mask" / "metrics.jsonl").read_text().splitlines()
    records = [r for r in map(json.loads, lines) if r.get("env/n")]
    assert records and records[-1]["global_step"] >= 200000
    assert all(r["env/forbidden"] == 0 for r in records), [r["env/forbidden"] for r in records]
