"""`pip install .` (not only -e) works: the wheel carries the C extension, configs and data trees."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_installs_and_runs_outside_the_checkout(tmp_path):
    wheels, target, elsewhere = tmp_path / "wheels", tmp_path / "site", tmp_path / "cwd"
    elsewhere.mkdir()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(ROOT)], check=True
    )
    (wheel,) = wheels.glob("puffer_bench-*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True)
    env = {**os.environ, "PYTHONPATH": str(target)}
    probe = (
        "import appliance, appliance._ocean as o, json;"
        "from appliance.paths import data_dir;"
        "from appliance.config import resolve, profile_names;"
        "print(json.dumps({'file': appliance.__file__, 'bench': str(data_dir('bench')), 'envs': str(data_dir('envs')),"
        " 'kernels': str(data_dir('kernels')), 'ocean': o.names(), 'profiles': profile_names(),"
        " 'lr': resolve(env='squared').train.learning_rate}))"
    )
    out = json.loads(
        subprocess.run(
            [sys.executable, "-c", probe], cwd=elsewhere, env=env, check=True, capture_output=True, text=True
        ).stdout
    )
    for key in ("file", "bench", "envs", "kernels"):
        assert out[key].startswith(str(target)), (key, out[key])
    assert "squared" in out["ocean"] and "h100" in out["profiles"] and out["lr"] > 0
    assert (Path(out["envs"]) / "vecenv.h").is_file()
    assert (Path(out["envs"]) / "compat4" / "vecenv.h").is_file()  # what `envs build` compiles against
    info = subprocess.run(
        [sys.executable, "-c", "from appliance.cli import main; main()", "info", "--json"],
        cwd=elsewhere,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    assert json.loads(info.stdout)["git"] is None  # not a checkout: the package version stands in
