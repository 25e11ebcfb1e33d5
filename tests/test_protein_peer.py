"""tools/protein_peer.py: PufferLib 3.0's sweep loop as the harness runs it, against a stand-in
PufferLib with its module names and calls (CI has no PufferLib), and the race table."""

import datetime
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def race_tool():
    sys.path.insert(0, str(ROOT / "tools"))
    spec = importlib.util.spec_from_file_location("protein_peer", ROOT / "tools" / "protein_peer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# A stand-in for the parts of pufferlib 3.0.0 the sweep loop calls: load_config, train (which logs through
# the logger it is given and returns the logs after 20% of its steps, then a final one), downsample, PuffeRL's
# evaluate/vecenv/utilization, and a sweep method with suggest(fill)/observe(hypers, score, cost).
FAKE_PUFFERL = """
import json, os, time
class _Closable:
    def close(self): pass
    def stop(self): pass
def load_config(env_name):
    return {"max_runs": int(os.environ.get("FAKE_MAX_RUNS", "3")), "train": {"total_timesteps": 400, "learning_rate": 0.5},
            "vec": {"num_envs": 1},
            "sweep": {"method": "Fake", "metric": "score", "goal": "maximize", "downsample": 2,
                      "train": {"learning_rate": {"distribution": "log_normal", "min": 0.1, "mean": 0.5, "max": 1.0},
                                "total_timesteps": {"distribution": "log_normal", "min": 5e7, "mean": 1e8, "max": 1e10}}}}
def downsample(xs, n):
    return [xs[0], xs[-1]] if n == 2 else xs
class PuffeRL:
    def __init__(self, config, logger):
        self.config, self.logger = config, logger
        self.vecenv, self.utilization = _Closable(), _Closable()
    def evaluate(self):
        time.sleep(float(os.environ.get("FAKE_EPOCH_SECONDS", "0")))
def train(env_name, args=None, logger=None):
    lr = args["train"]["learning_rate"]
    if lr > 0.95:
        raise RuntimeError("diverged")
    t = PuffeRL(args["train"], logger)
    logs, steps = [], 0
    while steps < args["train"]["total_timesteps"]:
        t.evaluate()
        steps += 100
        log = {"agent_steps": steps, "uptime": steps / 100.0, "environment/perf": lr * steps / 1000.0}
        logger.log(log, steps)
        if steps > 0.2 * args["train"]["total_timesteps"]:
            logs.append(log)
    return logs
"""
FAKE_SWEEP = """
import json, os
class Fake:
    def __init__(self, config):
        self.config = config
        self.order = [float(x) for x in os.environ["FAKE_LRS"].split(",")]
        with open(os.environ["FAKE_CALLS"], "a") as f:
            f.write(json.dumps({"init": config["train"]["total_timesteps"]}) + "\\n")
    def suggest(self, fill):
        fill["train"]["learning_rate"] = self.order.pop(0)
        return fill, {}
    def observe(self, hypers, score, cost, is_failure=False):
        with open(os.environ["FAKE_CALLS"], "a") as f:
            f.write(json.dumps({"lr": hypers["train"]["learning_rate"], "steps": hypers["train"]["total_timesteps"],
                                "score": score, "cost": cost}) + "\\n")
"""


def _fake_pufferlib(race_tool, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    pkg = cache / f"pufferlib-{race_tool.peer.VERSION}" / "pufferlib"
    (pkg / "ocean" / "squared").mkdir(parents=True)
    (pkg / "ocean" / "squared" / "binding.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    (pkg / "__init__.py").write_text("")
    (pkg / "pufferl.py").write_text(FAKE_PUFFERL)
    (pkg / "sweep.py").write_text(FAKE_SWEEP)
    (cache / "venv" / "bin").mkdir(parents=True)
    python = cache / "venv" / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_CALLS", str(calls))
    return cache, calls


def test_the_sweep_runs_pufferlibs_loop_and_observes_each_trials_downsampled_curve(
    race_tool, tmp_path, monkeypatch
):
    cache, calls = _fake_pufferlib(race_tool, tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_LRS", "0.5,0.2,0.9")
    out = tmp_path / "protein"
    data = race_tool.sweep(cache, "squared", 60, "perf", 7, {"min": 1e2, "mean": 4e2, "max": 1e3}, [], out)
    trials = data["trials"]
    assert [t["state"] for t in trials] == ["complete"] * 3 and [t["trial"] for t in trials] == [0, 1, 2]
    # the score: the mean of the last five logged values (perf = lr * steps / 1000 at steps 100..400)
    assert trials[0]["score"] == pytest.approx(0.5 * (0.1 + 0.2 + 0.3 + 0.4) / 4)
    assert trials[1]["settings"] == {"train.learning_rate": 0.2, "train.total_timesteps": 400}
    assert (
        all(t["ended_s"] >= t["started_s"] for t in trials) and trials[1]["started_s"] >= trials[0]["ended_s"]
    )
    rows = [json.loads(line) for line in calls.read_text().splitlines()]
    # the range it was told to search reaches the sweep method; each run is observed at its downsampled
    # points (the logs after 20 % of its steps), with total_timesteps set to each point's steps, then put back
    assert rows[0] == {"init": {"distribution": "log_normal", "min": 1e2, "mean": 4e2, "max": 1e3}}
    assert rows[1:3] == [
        {"lr": 0.5, "steps": 100, "score": pytest.approx(0.05), "cost": 1.0},
        {"lr": 0.5, "steps": 400, "score": pytest.approx(0.2), "cost": 4.0},
    ]
    assert len(rows) == 7 and "train.total_timesteps searched over" in " ".join(data["changed"])
    assert (out / "curve.jsonl").read_text().count("\n") == 12


def test_the_budget_stops_a_running_trial_and_a_failing_trial_ends_the_sweep_as_its_loop_does(
    race_tool, tmp_path, monkeypatch
):
    cache, _calls = _fake_pufferlib(race_tool, tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_LRS", "0.5,0.99,0.2")
    data = race_tool.sweep(cache, "squared", 60, "perf", 0, None, [], tmp_path / "a")
    assert [t["state"] for t in data["trials"]] == ["complete", "fail"]
    assert data["trials"][1]["error"] == "RuntimeError: diverged"
    monkeypatch.setenv("FAKE_LRS", "0.5,0.2,0.3")
    monkeypatch.setenv("FAKE_EPOCH_SECONDS", "0.5")
    data = race_tool.sweep(cache, "squared", 2.6, "perf", 0, None, [], tmp_path / "b")
    states = [t["state"] for t in data["trials"]]
    assert states == ["cut"] or states == ["complete", "cut"]
    assert data["trials"][-1]["ended_s"] < 2.6 + 1.0  # stopped at its next rollout, not at its end


def _our_study(folder, trials):
    import optuna
    from optuna.distributions import FloatDistribution

    folder.mkdir(parents=True)
    study = optuna.create_study(
        study_name="sweep", storage=f"sqlite:///{folder / 'study.db'}", directions=["maximize", "minimize"]
    )
    t0 = datetime.datetime(2026, 11, 27, 6, 0, 0)
    for n, (start, end, score) in enumerate(trials):
        study.add_trial(
            optuna.trial.FrozenTrial(
                number=n, state=optuna.trial.TrialState.COMPLETE, value=None, values=[score, end - start],
                datetime_start=t0 + datetime.timedelta(seconds=start),
                datetime_complete=t0 + datetime.timedelta(seconds=end),
                params={"train.learning_rate": 0.01}, distributions={"train.learning_rate": FloatDistribution(1e-4, 0.1)},
                user_attrs={"score": score, "seconds": end - start, "steps": 1000}, system_attrs={},
                intermediate_values={}, trial_id=n,
            )
        )  # fmt: skip


def test_the_race_shows_each_sides_best_score_so_far_at_each_minute(race_tool, tmp_path):
    protein = tmp_path / "protein"
    protein.mkdir()
    trials = [
        {"trial": 0, "state": "complete", "started_s": 1.0, "ended_s": 301.0, "steps": 10, "score": 0.4, "settings": {}},
        {"trial": 1, "state": "complete", "started_s": 301.0, "ended_s": 1100.0, "steps": 10, "score": 0.9, "settings": {}},
        {"trial": 2, "state": "fail", "started_s": 1100.0, "ended_s": 1101.0, "steps": 0, "score": None, "settings": {}},
    ]  # fmt: skip
    (protein / "sweep.json").write_text(
        json.dumps(
            {
                "system": "pufferlib-3.0.0 Protein",
                "budget_s": 1200,
                "machine": {},
                "command": "x",
                "trials": trials,
            }
        )
    )
    ours = tmp_path / "ours"
    _our_study(ours, [(0, 50, 0.6), (50, 130, 0.95), (130, 200, 0.7)])
    text = race_tool.race(protein, ours, tmp_path / "race.md", (1, 5, 10, 20))
    table = {line.split("|")[1].strip().split(":")[0]: line for line in text.splitlines() if "trials scored" not in line and line.startswith("| ")}  # fmt: skip
    assert "| 2 of 3 | - | 0.400 (trial 0) | 0.400 (trial 0) | 0.900 (trial 1) |" in table["Protein"]
    assert (
        "| 3 of 3 | 0.600 (trial 0) | 0.950 (trial 1) | 0.950 (trial 1) | 0.950 (trial 1) |" in table["ours"]
    )
    assert (tmp_path / "race.json").is_file() and (tmp_path / "race.png").stat().st_size > 0


def test_bad_arguments_are_one_line_errors(race_tool, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        race_tool.main(["sweep", "squared", "--budget-seconds", "60", "--timesteps", "5,2,9", "--out", str(tmp_path / "x")])  # fmt: skip
    assert stop.value.code == 2
    assert race_tool.main(["race", "--protein", str(tmp_path), "--ours", str(tmp_path), "--out", str(tmp_path / "r.md")]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "needs 0 < MIN <= MEAN <= MAX" in err and "no sweep.json" in err
    with pytest.raises(race_tool.RaceError, match="no PufferLib counterpart known for nosuch"):
        race_tool.sweep(tmp_path, "nosuch", 60, "perf", 0, None, [], tmp_path / "y")
