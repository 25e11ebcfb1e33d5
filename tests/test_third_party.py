"""Third-party failures translated at the boundary (docs/reliability.md): W&B without an API key,
a Ray address nobody answers, NaN or infinite scores in the peer tables: one line saying what to do,
never the library's traceback."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import conftest
import pytest

from appliance.errors import ConfigError
from appliance.vector.ray_backend import connect_ray

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wandb_without_an_api_key_is_one_line_before_training(tmp_path):
    pytest.importorskip("wandb", reason="--wandb needs wandb: pip install 'puffer-bench[logging]'")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(HOME=str(tmp_path / "home"), WANDB_DIR=str(tmp_path / "wandb"), WANDB_SILENT="true")
    data = tmp_path / "exp"
    proc = subprocess.run(
        [sys.executable, "-m", "appliance.cli", "train", "squared", "--wandb", "--no-dashboard",
         *conftest.SMALL, "--train.data-dir", str(data), "--run-id", "r1", "--train.total-timesteps", "128"],
        capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    err = proc.stderr.strip()
    assert proc.returncode == 2 and "Traceback" not in err, err
    assert err.splitlines()[-1].startswith("error: --wandb: Weights & Biases did not start (")
    assert "wandb login" in err and "WANDB_API_KEY" in err
    assert not (data / "r1" / "metrics.jsonl").exists()  # refused before training


class _Ray:
    def __init__(self, fails=None):
        self.calls, self.fails = [], fails

    def init(self, **kwargs):
        self.calls.append(kwargs)
        if self.fails:
            raise self.fails


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nobody listens there


@pytest.mark.parametrize("option", ["vec.ray_address", "--ray-address"])
def test_a_ray_address_nobody_answers_is_one_line_before_ray_waits_on_it(option):
    ray = _Ray()
    with pytest.raises(ConfigError, match=rf"^{option} 127.0.0.1:\d+: no Ray cluster answers there \("):
        connect_ray(ray, f"127.0.0.1:{_closed_port()}", option)
    assert not ray.calls  # Ray itself would warn for a minute, then raise its traceback
    with pytest.raises(ConfigError, match="not a Ray address"):
        connect_ray(ray, "nohost", option)
    with pytest.raises(ConfigError, match=r"Ray did not start or connect \(no GCS\)"):
        connect_ray(_Ray(ConnectionError("no GCS\nmore lines")), "local", option)
    local = _Ray()
    connect_ray(local, "local", option, log_to_driver=False)
    assert local.calls == [{"address": None, "log_to_driver": False}]


def test_peer_table_means_over_nan_or_infinite_scores_leaves_them_out_and_says_so(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("pufferlib_peer", ROOT / "tools" / "pufferlib_peer.py")
    peer = importlib.util.module_from_spec(spec)
    sys.modules["pufferlib_peer"] = peer
    spec.loader.exec_module(peer)

    def report(name, system, scores):
        rows = [{"steps": (i + 1) * 1e6, "seconds": 10.0 * (i + 1), "perf": s} for i, s in enumerate(scores)]
        path = tmp_path / f"{name}.json"
        path.write_text(
            json.dumps(peer.make_report(system, "breakout", "perf", 0.9, rows, {}, "test", 0, [2e6]))
        )
        return str(path)

    reports = [
        report("ours-breakout-s0", "puffer-bench", [float("nan")] * 8),
        report("ours-breakout-s1", "puffer-bench", [0.4] * 8),
        report("pufferlib-breakout-s1", "pufferlib-3.0.0", [float("inf")] * 8),
        report("pufferlib-breakout-s2", "pufferlib-3.0.0", [0.5] * 8),
    ]
    assert peer.main(["table", *reports[:3], "--at", "3e6"]) == 2  # no finite PufferLib score: no target
    assert "final score is NaN or infinite; give --target breakout=VALUE" in capsys.readouterr().err
    assert peer.main(["table", *reports, "--at", "3e6", "--means"]) == 0
    out = capsys.readouterr().out
    assert "| breakout | perf 0.5 |" in out, out  # the target: the lowest finite PufferLib final score
    assert "| breakout | ours-breakout | 2 |" in out and "(0.400-0.400, n=1)" in out, out
    # with rliable (the stats extra) the mean carries its interval, "0.500 [0.500, 0.500] (...)"
    assert "| breakout | pufferlib-breakout | 2 | 0.500 " in out and "(0.500-0.500, n=1) |" in out, out
    assert "2 scores that are NaN or infinite left out" in out
    means = out.split("\n\n", 1)[1]  # the runs' own table shows their final score as it is (nan, inf)
    assert "nan |" not in means and "inf |" not in means, means
