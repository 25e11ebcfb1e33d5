"""tools/pufferlib_peer.py's reading of curves (no PufferLib needed: the reports are made here)."""

import contextlib
import importlib.util
import io
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from conftest import parity_configs

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def peer():
    spec = importlib.util.spec_from_file_location("pufferlib_peer", ROOT / "tools" / "pufferlib_peer.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["pufferlib_peer"] = module
    spec.loader.exec_module(module)
    return module


def _report(peer, tmp_path, name, system, scores):
    rows = [{"steps": (i + 1) * 1e6, "seconds": 10.0 * (i + 1), "perf": s} for i, s in enumerate(scores)]
    data = peer.make_report(system, "breakout", "perf", 0.9, rows, {}, "test", 0, [2e6])
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def test_the_table_reads_steps_to_pufferlibs_lowest_final_score(peer, tmp_path):
    # windowed over 5 epochs: PufferLib's two runs end at 0.5 and 0.7, so the target is 0.5
    a = _report(peer, tmp_path, "pl-a", "pufferlib-3.0.0", [0.5] * 8)
    b = _report(peer, tmp_path, "pl-b", "pufferlib-3.0.0", [0.7] * 8)
    ours = _report(peer, tmp_path, "ours", "puffer-bench", [0.1, 0.1, 0.1, 1.0, 1.0, 1.0, 1.0, 1.0])
    slow = _report(peer, tmp_path, "slow", "puffer-bench", [0.1] * 8)
    lines = peer.table([a, b, ours, slow], {}).splitlines()
    assert all("perf 0.5" in line for line in lines[2:])
    rows = {line.split("|")[3].strip(): [c.strip() for c in line.split("|")[4:6]] for line in lines[2:]}
    assert rows["[pl-a](pl-a.json)"] == ["1.0 M", "10"]
    # windowed: 0.1, 0.1, 0.1, 0.325, 0.46, then (0.2 + 3 * 1.0) / 5 = 0.64 at the 6th epoch
    assert rows["[ours](ours.json)"] == ["6.0 M", "60"]
    assert rows["[slow](slow.json)"] == ["not reached", "-"]
    assert "perf 0.9" in peer.table([a, ours], {"breakout": 0.9}).splitlines()[2]
    at = peer.table([a, ours], {}, at=(4e6, 9e6)).splitlines()
    assert at[0].endswith("score at 4 M | score at 9 M |") and at[3].endswith(" 0.325 | - |")


def test_the_table_refuses_a_file_that_is_not_a_curve_and_an_env_without_a_peer(peer, tmp_path):
    other = tmp_path / "other.json"
    other.write_text("{}")
    with pytest.raises(peer.PeerError, match="not a learning-curve report"):
        peer.table([other], {})
    ours = _report(peer, tmp_path, "ours", "puffer-bench", [0.1] * 3)
    with pytest.raises(peer.PeerError, match="no PufferLib report"):
        peer.table([ours], {})
    assert peer.main(["table", str(ours), "--target", "breakout"]) == 2


def test_the_parity_configs_count_the_envs_pufferlibs_serial_backend_steps(peer):
    """pufferlib.vector.make: batch_size auto is half of num_envs (1 for one env), and Serial makes only
    batch_size envs; measured: breakout.ini's 8 x 1,024 games ran 4,096 agents, 262,144 steps a batch."""
    auto = {"num_workers": "auto", "batch_size": "auto"}
    assert peer.serial_vec_envs({"num_envs": 8, **auto}) == 4
    assert peer.serial_vec_envs({"num_envs": 1, **auto}) == 1
    assert peer.serial_vec_envs({"num_envs": 8, "num_workers": 2, "batch_size": 8}) == 8
    assert peer.serial_vec_envs({"num_envs": 8}) == 8
    text = (ROOT / "bench" / "parity" / "breakout.yaml").read_text()
    assert "num_envs: 4096" in text


def test_the_parity_configs_zero_the_recurrent_state_at_each_rollout_as_pufferlib():
    """PufferLib 3.0's trainer starts every rollout (and every trained segment) from a zero LSTM state;
    the configs its runs are compared with (made by the harness's config command) say so."""
    for path in parity_configs():
        assert yaml.safe_load(path.read_text())["train"]["reset_state"] is True, path


def test_the_parity_configs_feed_the_raw_observation_floats_as_pufferlibs_default_policy():
    """PufferLib's Default policy reads the observation floats as they are; ours divides by the
    declared bounds unless policy.obs_scale is none (go's captures: bound 147)."""
    paths = parity_configs()
    assert paths
    for path in paths:
        assert yaml.safe_load(path.read_text())["policy"]["obs_scale"] == "none", path


def test_pufferlibs_rollouts_after_training_are_not_on_the_curve(peer, tmp_path):
    """pufferl.train logs 32 rollouts without updates after its last epoch; the curve stops before."""
    path = tmp_path / "curve.jsonl"
    steps = [262144 * i for i in range(1, 6)] + [262144 * 5 + 32 * 262144]
    path.write_text(
        "".join(json.dumps({"agent_steps": s, "seconds": 1.0, "environment/perf": 0.5}) + "\n" for s in steps)
    )
    config = {"env": {"num_envs": 1024}, "vec": {"num_envs": 8, "num_workers": "auto", "batch_size": "auto"},
              "train": {"total_timesteps": 1_200_000, "bptt_horizon": 64}}  # fmt: skip
    assert [r["steps"] for r in peer.peer_rows(path, config)] == steps[:5]
    assert len(peer.peer_rows(path, {})) == 6  # without a config nothing is cut


def test_the_tables_show_three_significant_digits_of_small_scores(peer):
    """target's stars per agent-step (about 0.007) read 0.007 at three fixed decimals, which hid a
    25 % gap between two setups; perf near 1 keeps its three decimals, and NaN does not break it."""
    assert peer.decimals([0.0072, 0.0061, float("nan"), 0.0]) == 5
    assert peer.decimals([0.92, 0.31]) == 3
    assert peer.decimals([5.61, -3.8]) == 3
    assert peer.decimals([]) == 3


def test_the_means_average_each_setups_seeds_at_each_step_count(peer, tmp_path):
    pytest.importorskip("rliable", reason="the IQM needs rliable: pip install 'puffer-bench[stats]'")
    a = _report(peer, tmp_path, "ours-4096-breakout-s0", "puffer-bench", [0.2] * 8)
    b = _report(peer, tmp_path, "ours-4096-breakout-s1", "puffer-bench", [0.4] * 4)
    c = _report(peer, tmp_path, "pufferlib-breakout-s42", "pufferlib-3.0.0", [0.5] * 8)
    first, versus = peer.means([a, b, c], (3e6, 6e6)).split("\n\n")
    lines = first.splitlines()
    rows = {line.split("|")[2].strip(): [cell.strip() for cell in line.split("|")[3:6]] for line in lines[2:]}
    # seed 1 stopped at 4 M: it counts at 3 M and not at 6 M; the IQM of two runs is their mean, and
    # the bootstrap of two runs spans them
    assert "IQM [95% CI] (min-max) at 3 M" in lines[0]
    assert rows["ours-4096-breakout"] == [
        "2",
        "0.300 [0.200, 0.400] (0.200-0.400, n=2)",
        "0.200 [0.200, 0.200] (0.200-0.200, n=1)",
    ]
    assert rows["pufferlib-breakout"] == [
        "1",
        "0.500 [0.500, 0.500] (0.500-0.500, n=1)",
        "0.500 [0.500, 0.500] (0.500-0.500, n=1)",
    ]
    # 2 vs 1 at 3 M: the pooled 0.2, 0.4, 0.5 split three ways (-0.2, -0.05, +0.25): two as far from 0
    assert versus.splitlines()[2].endswith("| 2 vs 1 | -0.200 (0.67) | -0.300 (1.00) |")
    with pytest.raises(peer.PeerError, match="needs --at"):
        peer.means([a], ())
    assert peer.main(["table", str(a), str(c), "--at", "3e6", "--means"]) == 0


def test_the_seed_table_takes_the_iqm_of_five_seeds_and_says_when_rliable_is_missing(
    peer, tmp_path, monkeypatch
):
    """Five seeds 0.1, 0.2, 0.3, 0.4, 0.9: the IQM (rliable's: scipy's 25 % trimmed mean, one run cut
    at each end) is 0.3 where the mean is 0.38; without rliable the table keeps the mean and says why."""
    reports = [
        _report(peer, tmp_path, f"ours-4096-breakout-s{i}", "puffer-bench", [v] * 8)
        for i, v in enumerate((0.1, 0.2, 0.3, 0.4, 0.9))
    ]
    from appliance.measure import stats

    if stats.iqm_intervals({"x": [1.0]}) is not None:
        row = peer.means(reports, (3e6,)).splitlines()[2]
        mid, low, high = (float(x) for x in re.findall(r"\| ([\d.]+) \[([\d.]+), ([\d.]+)\]", row)[0])
        assert mid == pytest.approx(0.3) and low < mid < high and low >= 0.1 and high <= 0.9
    monkeypatch.setitem(sys.modules, "rliable", None)  # as if not installed
    text = peer.means(reports, (3e6,))
    assert "| 0.380 (0.100-0.900, n=5) |" in text and "mean (min-max) at 3 M" in text
    assert "install rliable" in text


def test_the_permutation_p_counts_every_split_of_the_pooled_runs(peer, tmp_path):
    # 3 vs 3 far apart: only the observed split and its mirror are as extreme, 2 of C(6, 3) = 20
    assert peer.permutation_p([0.1, 0.11, 0.12], [0.9, 0.91, 0.92]) == 2 / 20
    assert peer.permutation_p([0.5, 0.6], [0.5, 0.6]) == 1.0
    a = _report(peer, tmp_path, "ours-4096-breakout-s0", "puffer-bench", [0.2] * 8)
    b = _report(peer, tmp_path, "pufferlib-breakout-s1", "pufferlib-3.0.0", [0.5] * 8)
    lines = peer.means([a, b], (3e6,)).splitlines()
    assert lines[-1] == "| breakout | ours-4096-breakout | pufferlib-breakout | 1 vs 1 | -0.300 (1.00) |"


def test_stars_per_step_of_pufferlibs_trainer_on_our_target_reads_our_logged_window(peer):
    """A train --our-env run logs our target's windows (stars eaten per log_ticks steps), but its
    config is PufferLib's ini, which has no such key (the derivation failed with "needs 'max_ticks'"
    after a 30 M-step run): the window's length is read from the log itself, which also holds for
    runs from before the key's rename (their episode_length was max_ticks)."""
    ini = {"env": {"num_envs": 512, "num_agents": 8, "num_goals": 4}, "train": {}}
    rows = [{"steps": 1e6, "seconds": 1.0, "score": 2.56, "episode_length": 512.0},
            {"steps": 2e6, "seconds": 2.0, "score": 8.0, "episode_length": 2048.0}]  # fmt: skip
    derived = peer.derive([dict(r) for r in rows], "stars_per_step", "ours", ini)
    assert [r["stars_per_step"] for r in derived] == [2.56 / 512, 8.0 / 2048]
    config = peer.on_our_env(ini, "target")
    assert config["env"]["log_ticks"] == 512 and config["env"]["num_agents"] == 8


def test_crossplay_counts_reward_per_agent_step_per_game_after_the_warmup_and_zeroes_state_each_horizon(peer):
    """peer_crossplay.py's yardstick for two envs whose logs differ: reward per agent-step from the
    rewards themselves, per game (agents of a game are one row group), the warm-up left out."""
    spec = importlib.util.spec_from_file_location("peer_crossplay", ROOT / "tools" / "peer_crossplay.py")
    crossplay = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(crossplay)
    t = {"now": 0, "zeroed": []}

    def reset():
        t["now"] = 0
        return [0.0] * 4

    def step(actions):
        t["now"] += 1
        # game 0 (rows 0-1): a reward on every step of its first agent, 10 during the warm-up;
        # game 1 (rows 2-3): one reward every fourth step on each agent
        first = 10.0 if t["now"] <= 3 else 1.0
        every4 = 1.0 if t["now"] % 4 == 0 else 0.0
        return [0.0] * 4, [first, 0.0, every4, every4]

    cell = crossplay.play(step, reset, lambda obs: [0] * 4, lambda: t["zeroed"].append(t["now"]),
                          agents_per_game=2, steps=8, warmup=3, reset_every=4)  # fmt: skip
    assert cell["games"] == 2
    assert cell["mean"] == pytest.approx(((8 / 16) + (4 / 16)) / 2)  # game 0: 8 of 16 agent-steps
    assert cell["stderr"] == pytest.approx(0.125)
    assert t["zeroed"] == [0, 4, 8]  # before the steps 0, 4 and 8 of the 11 played


def test_train_builds_the_env_it_is_asked_for_where_its_binding_is_missing(peer, tmp_path, monkeypatch):
    # `build` with no --envs compiles breakout only; `train go` then failed deep inside PufferLib's
    # import of go's binding instead of compiling it
    calls = []

    class Built(Exception):
        pass

    def fake_build(cache, envs, **options):
        calls.append((cache, envs))
        raise Built

    monkeypatch.setattr(peer, "build", fake_build)
    folder = tmp_path / f"pufferlib-{peer.VERSION}" / "pufferlib" / "ocean"
    (folder / "breakout").mkdir(parents=True)
    (folder / "breakout" / "binding.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").write_text("")
    assert peer.built(tmp_path, "breakout") and not peer.built(tmp_path, "go")
    with pytest.raises(Built):
        peer.train(tmp_path, "go", 1e6, 60, None, [], tmp_path / "go.jsonl")
    assert calls == [(tmp_path, ["go"])]
    with pytest.raises(peer.PeerError, match="no PufferLib counterpart known for nosuchenv"):
        peer.train(tmp_path, "nosuchenv", 1e6, 60, None, [], tmp_path / "x.jsonl")


def test_train_on_our_env_takes_our_env_params_checked_before_anything_starts(peer, tmp_path, monkeypatch):
    """`--our-env-param` sets one of our env's params for PufferLib's trainer on our env (go's
    terminal_at_game_end=0 shows our go as PufferLib's does); an unknown name, a missing value or a
    param without --our-env stops with one line before the trainer starts."""
    seen = []

    class Started(Exception):
        pass

    def fake_train(cache, env, stop_steps, stop_seconds, seed, extra, jsonl, our_env, model, params, *device):
        seen.append(params)
        raise Started

    monkeypatch.setattr(peer, "train", fake_train)
    out = str(tmp_path / "r.json")
    with pytest.raises(Started):
        peer.main(["train", "go", "--our-env", "--our-env-param", "terminal_at_game_end=0", "--out", out])
    assert seen == [{"terminal_at_game_end": 0}] and type(seen[0]["terminal_at_game_end"]) is int
    for args in (["--our-env", "--our-env-param", "nope=1"], ["--our-env", "--our-env-param", "komi"],
                 ["--our-env-param", "komi=6.5"]):  # fmt: skip
        assert peer.main(["train", "go", *args, "--out", out]) != 0
    assert len(seen) == 1


def test_a_resumed_runs_seconds_go_on_from_its_checkpoint_and_retrained_epochs_replace_old(peer, tmp_path):
    # the first process logged 5 epochs and was stopped; --resume took the checkpoint of epoch 3,
    # so its process (uptime from 0 again) trained epochs 4 and 5 again and then 6
    first = [(e * 1e6, 10.0 * e, 0.1 * e) for e in range(1, 6)]
    again = [(e * 1e6, 2.0 + 10.0 * (e - 3), 0.2 * e) for e in range(4, 7)]
    lines = [json.dumps({"global_step": s, "uptime": u, "env/perf": p}) for s, u, p in first + again]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    rows, _ = peer.our_rows(tmp_path)
    assert [r["steps"] for r in rows] == [1e6, 2e6, 3e6, 4e6, 5e6, 6e6]
    assert [r["seconds"] for r in rows] == [10.0, 20.0, 30.0, 42.0, 52.0, 62.0]
    assert [r["perf"] for r in rows][3:] == pytest.approx([0.8, 1.0, 1.2])


def test_our_report_says_where_a_runs_seconds_went_a_million_agent_steps(peer, tmp_path):
    # time/ counters count from each process's start: a resumed run's phases are its last process's
    first = [{"global_step": e * 1e6, "uptime": 10.0 * e, "env/perf": 0.1 * e,
              "time/evaluate.forward": 4.0 * e, "time/train.learn": 2.0 * e} for e in range(1, 4)]  # fmt: skip
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in first) + "\n")
    assert peer.phase_seconds(tmp_path) == pytest.approx({"evaluate.forward": 4.0, "train.learn": 2.0})
    again = [{"global_step": s, "uptime": u, "env/perf": 0.5, "time/evaluate.forward": f, "time/train.learn": 1.0}
             for s, u, f in ((3e6, 5.0, 3.0), (5e6, 15.0, 9.0))]  # fmt: skip
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write("\n".join(json.dumps(r) for r in again) + "\n")
    assert peer.phase_seconds(tmp_path) == pytest.approx({"evaluate.forward": 3.0, "train.learn": 0.0})
    out = tmp_path / "r.json"
    assert peer.main(["ours", str(tmp_path), "--env", "breakout", "--target", "0.9", "--out", str(out)]) == 0
    metrics = json.loads(out.read_text())["metrics"]
    assert metrics["time_per_million/evaluate.forward"]["median"] == pytest.approx(3.0)
    assert metrics["time_per_million/evaluate.forward"]["unit"] == "s per million agent-steps"
    (tmp_path / "metrics.jsonl").write_text(
        json.dumps({"global_step": 1e6, "uptime": 1.0, "env/perf": 0.1}) + "\n"
    )
    assert peer.phase_seconds(tmp_path) == {}  # a run that logged no counters
    assert peer.host_load(tmp_path) == {}


def test_our_report_says_what_the_machines_others_took_from_the_run(peer, tmp_path):
    # each record's reading covers the seconds since the record before; a resume starts them again
    rows = [(1e6, 2.0, 0.5), (2e6, 4.0, 0.1), (3e6, 1.0, 0.1)]
    lines = [json.dumps({"global_step": s, "uptime": u, "env/perf": 0.1, "host/steal_cores": c,
                         "host/others_cores": 0.0}) for s, u, c in rows]  # fmt: skip
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    assert peer.host_load(tmp_path) == pytest.approx({"steal_cores": 1.3 / 5, "others_cores": 0.0})
    out = tmp_path / "r.json"
    assert peer.main(["ours", str(tmp_path), "--env", "breakout", "--target", "0.9", "--out", str(out)]) == 0
    metrics = json.loads(out.read_text())["metrics"]
    assert metrics["host_load/steal_cores"]["median"] == pytest.approx(0.26)
    assert metrics["host_load/steal_cores"]["unit"] == "cores"


def test_speed_runs_our_side_on_the_parity_config_or_on_our_defaults(peer, tmp_path, monkeypatch):
    # `speed --ours-defaults` times `puffer-bench train ENV` as a user runs it (no --config), so the
    # main job's speed can be put beside PufferLib's on its own settings
    commands = []

    class Done:
        def __init__(self, cmd, **kwargs):
            commands.append(cmd)
            run_dir = Path(cmd[cmd.index("--train.data-dir") + 1]) / cmd[cmd.index("--run-id") + 1]
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "metrics.jsonl").write_text('{"uptime": 1.0, "global_step": 10}\n')

        def wait(self, timeout=None):
            return 0

    monkeypatch.setattr(peer.subprocess, "Popen", Done)
    assert peer.ours_for(tmp_path, "breakout", 1.0, tmp_path / "a", ["--train.seed", "1"]) == [(1.0, 10.0)]
    assert peer.ours_for(tmp_path, "breakout", 1.0, tmp_path / "b", [], defaults=True) == [(1.0, 10.0)]
    parity, defaults = commands
    assert parity[parity.index("--config") + 1] == str(ROOT / "bench" / "parity" / "breakout.yaml")
    assert parity[-2:] == ["--train.seed", "1"]
    assert "--config" not in defaults and defaults[defaults.index("train") + 1] == "breakout"


def _fake_build_tree(peer, cache, extension=None):
    """A cache whose venv and breakout binding exist (what `built` looks for), with PufferLib's
    torch extension compiled for ``extension`` ("cpu", "cuda") or not stamped (None)."""
    folder = cache / f"pufferlib-{peer.VERSION}" / "pufferlib"
    (folder / "ocean" / "breakout").mkdir(parents=True)
    (folder / "ocean" / "breakout" / "binding.cpython-312-x86_64-linux-gnu.so").write_bytes(b"")
    (folder / "_C.cpython-312-x86_64-linux-gnu.so").write_bytes(b"")
    if extension:
        (folder / peer.EXTENSION_STAMP).write_text(extension)
    (cache / "venv" / "bin").mkdir(parents=True)
    (cache / "venv" / "bin" / "python").write_text("")


def test_train_on_a_gpu_needs_the_cuda_build_and_takes_the_configs_backend(peer, tmp_path, monkeypatch):
    # PufferLib on a GPU beside ours (same machine, same window): `train --device cuda` runs its
    # trainer on cuda with its config's vec backend, and refuses, in one line, a build without its
    # CUDA kernels (an extension from before the stamp was kept is the CPU one)
    _fake_build_tree(peer, tmp_path)
    assert peer.extension_kind(tmp_path) == "cpu"
    with pytest.raises(peer.PeerError, match="built without its CUDA kernels.*build --cuda"):
        peer.train(tmp_path, "breakout", 1e6, 60, None, [], tmp_path / "b.jsonl", device="cuda")
    (tmp_path / f"pufferlib-{peer.VERSION}" / "pufferlib" / peer.EXTENSION_STAMP).write_text("cuda")
    commands = []

    class Ran:
        def __init__(self, cmd, **kwargs):
            commands.append(cmd)
            self.stdout = io.StringIO('{"config": {}}\n')

        def wait(self, timeout=None):
            return 0

    monkeypatch.setattr(peer.subprocess, "Popen", Ran)
    peer.train(tmp_path, "breakout", 1e6, 60, 3, [], tmp_path / "g.jsonl", device="cuda")
    peer.train(tmp_path, "breakout", 1e6, 60, 3, [], tmp_path / "c.jsonl")
    gpu, cpu = commands
    assert gpu[gpu.index("--train.device") + 1] == "cuda" and "--vec.backend" not in gpu
    assert cpu[cpu.index("--train.device") + 1] == "cpu" and cpu[cpu.index("--vec.backend") + 1] == "Serial"
    with pytest.raises(SystemExit):  # argparse: a device other than cpu or cuda, in one line
        peer.main(["train", "breakout", "--device", "tpu", "--out", str(tmp_path / "x.json")])


def test_the_cuda_build_compiles_pufferlibs_kernels_and_needs_nvcc(peer, tmp_path, monkeypatch):
    cpu, gpu = peer.extension_setup(False), peer.extension_setup(True)
    for script in (cpu, gpu):
        compile(script, "setup", "exec")  # the script the venv's python runs is valid Python
    assert "CppExtension(" in cpu and ".cu" not in cpu
    assert "CUDAExtension(" in gpu and "pufferlib/extensions/cuda/pufferlib.cu" in gpu
    monkeypatch.setattr(peer.shutil, "which", lambda name: None)
    with pytest.raises(peer.PeerError, match="needs nvcc"):
        peer.build(tmp_path, ["breakout"], cuda=True)
    with pytest.raises(peer.PeerError, match="no such folder"):
        peer.build(tmp_path, ["breakout"], wheels=tmp_path / "missing")


def test_the_sources_that_travel_are_the_sdists_tree_without_its_art(peer, tmp_path):
    # a GPU machine has no package index and the working tree that travels is 64 MiB at most: the
    # sdist is 61 MB, 72 MB of it unpacked the envs' art under pufferlib/resources
    import tarfile

    sdist = tmp_path / "sdist.tar.gz"
    root = f"pufferlib-{peer.VERSION}"
    with tarfile.open(sdist, "w:gz") as tar:
        for name in ("setup.py", "pufferlib/ocean/breakout/binding.c", "pufferlib/resources/breakout/ball.png",
                     "pufferlib/resources_note.txt"):  # fmt: skip
            data = name.encode()
            info = tarfile.TarInfo(f"{root}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    peer.trim_sdist(sdist, tmp_path / "sources.tar.gz")
    with tarfile.open(tmp_path / "sources.tar.gz") as tar:
        kept = {m.name: tar.extractfile(m).read() for m in tar}
    assert kept == {f"{root}/{n}": n.encode() for n in ("setup.py", "pufferlib/ocean/breakout/binding.c",
                                                         "pufferlib/resources_note.txt")}  # fmt: skip


def test_a_system_torch_venv_imports_the_torch_of_the_python_running_the_harness(peer, tmp_path):
    # the GPU machine's python3 is itself a venv, where `venv --system-site-packages` would show the
    # base interpreter's packages (no torch) instead of that venv's
    import subprocess

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    assert subprocess.run([str(py), "-c", "import torch"], capture_output=True).returncode != 0
    peer.see_our_packages(py)
    import torch

    out = subprocess.check_output(
        [str(py), "-c", "import sys, torch; print(torch.__version__, sys.prefix)"], text=True
    )
    assert out.split() == [torch.__version__, str(venv)]


def test_out_never_overwrites_a_runs_own_files(peer, tmp_path, capsys, monkeypatch):
    """`--out x.json` writes x.jsonl and x.log beside the report: a train run refuses where they exist
    (another run's record), `ours` replaces only an earlier copy of the same metrics.jsonl, and an
    --out that is not a .json, or a file that is not a report, is refused; one line each."""
    monkeypatch.setattr(peer, "train", lambda *a, **k: pytest.fail("trained although --out was taken"))
    line = '{"agent_steps": 1, "seconds": 1.0, "environment/perf": 0.5}\n'
    curve = tmp_path / "pufferlib-breakout-s1.jsonl"
    curve.write_text(line)
    out = str(tmp_path / "pufferlib-breakout-s1.json")
    assert peer.main(["train", "breakout", "--stop-seconds", "1", "--out", out]) == 2
    assert "it is a run's record" in capsys.readouterr().err
    assert peer.main(["train", "breakout", "--out", str(tmp_path / "metrics.jsonl")]) == 2
    assert ".json file" in capsys.readouterr().err
    assert curve.read_text() == line
    run_dir = tmp_path / "experiments" / "run"
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text('{"global_step": 10, "uptime": 1.0, "env/perf": 0.5}\n')
    # `ours` with the name of PufferLib's run: its curve would be lost
    assert peer.main(["ours", str(run_dir), "--env", "breakout", "--out", out]) == 2
    assert "not an earlier copy" in capsys.readouterr().err and curve.read_text() == line
    copy = tmp_path / "ours-s0.jsonl"
    copy.write_text("")  # an earlier copy: the run has logged more since
    assert (
        peer.main(["ours", str(run_dir), "--env", "breakout", "--out", str(tmp_path / "ours-s0.json")]) == 0
    )
    assert copy.read_text() == (run_dir / "metrics.jsonl").read_text()
    assert peer.main(["ours", str(run_dir), "--env", "breakout", "--out", str(run_dir / "metrics.json")]) == 0
    assert (run_dir / "metrics.jsonl").read_text().count("\n") == 1  # its own file, never rewritten
    config = tmp_path / "config.json"
    config.write_text("{}")
    assert peer.main(["ours", str(run_dir), "--env", "breakout", "--out", str(config)]) == 2
    assert config.read_text() == "{}"
    for args in (["plot", out, "--out", str(run_dir / "metrics.jsonl")],
                 ["table", out, "--out", str(run_dir / "metrics.jsonl")]):  # fmt: skip
        assert peer.main(args) == 2
    assert (run_dir / "metrics.jsonl").read_text().count("\n") == 1


def test_bad_step_lists_are_usage_errors_not_tracebacks(peer, tmp_path):
    # `--at 30M` ended in a ValueError traceback after the arguments were taken
    with pytest.raises(SystemExit) as stop:
        peer.main(
            ["report", str(tmp_path / "c.jsonl"), "--env", "breakout", "--at", "30M", "--out", "r.json"]
        )
    assert stop.value.code == 2
    with pytest.raises(SystemExit):
        peer.main(["table", str(tmp_path / "r.json"), "--at", "-1"])
    assert peer.steps_list("30e6,65e6") == [30e6, 65e6] and peer.steps_list("") == []


HARNESS = """
import os, sys
from pathlib import Path
sys.path.insert(0, os.path.join(sys.argv[1], "tools"))
import pufferlib_peer
out = Path(sys.argv[2])
driver = "import os, time; open(%r, 'w').write(str(os.getpid())); print('{}', flush=True); time.sleep(1000)"
cmd = [sys.executable, "-c", driver % str(out / "driver.pid")]
if len(sys.argv) > 3:  # a trainer with a worker of its own, which arms nothing (PufferLib's do not)
    cmd = [sys.executable, "-c", sys.argv[3], str(out)]
pufferlib_peer.run_driver(cmd, out, dict(os.environ), out / "curve.jsonl", "the trainer")
"""

# the trainer starts a worker that starts one of its own and exits, leaving it orphaned; then sleeps
TRAINER_WITH_WORKERS = """
import os, subprocess, sys, time
from pathlib import Path
out = Path(sys.argv[1])
sleeper = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(1000)"
subprocess.Popen([sys.executable, "-c", sleeper, str(out / "worker.pid")])
spawn = "import subprocess, sys; subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2]])"
subprocess.run([sys.executable, "-c", spawn, sleeper, str(out / "orphan.pid")])
while not (out / "worker.pid").exists() or not (out / "orphan.pid").exists():
    time.sleep(0.01)
(out / "driver.pid").write_text(str(os.getpid()))
print('{}', flush=True)
if os.environ.get("TRAINER_ENDS"):
    sys.exit(3)
time.sleep(1000)
"""


def _wait_for(path, harness):
    import time

    deadline = time.monotonic() + 60
    while not path.exists() or not path.read_text():
        assert harness.poll() is None or path.exists(), "the harness ended before it started them"
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.05)
    return int(path.read_text())


@pytest.mark.parametrize("workers", [False, True])
def test_a_peers_trainer_dies_with_a_harness_killed_outright(tmp_path, workers):
    """The trainer run_driver starts (both peers' harnesses use it) went on training for its whole
    budget after SIGKILL to the harness; now the kernel kills it with its parent. Its own workers (a
    PufferLib trainer's arm nothing), and a worker's worker left orphaned, stayed alive after that fix
    until the trainer ran under appliance.lifeline's guard."""
    import signal
    import subprocess

    import psutil

    extra = [TRAINER_WITH_WORKERS] if workers else []
    harness = subprocess.Popen([sys.executable, "-c", HARNESS, str(ROOT), str(tmp_path), *extra])
    procs = []
    try:
        names = ["driver.pid", "worker.pid", "orphan.pid"] if workers else ["driver.pid"]
        procs = [psutil.Process(_wait_for(tmp_path / name, harness)) for name in names]
        harness.send_signal(signal.SIGKILL)
        harness.wait()
        _, alive = psutil.wait_procs(procs, timeout=10)
        assert not alive, f"outlived their harness: {alive}"
    finally:
        for proc in procs:
            if proc.is_running():
                proc.kill()
        if harness.poll() is None:
            harness.kill()


def test_what_a_peers_trainer_leaves_running_goes_when_it_ends(tmp_path, peer):
    import psutil

    cmd = [sys.executable, "-c", TRAINER_WITH_WORKERS, str(tmp_path)]
    env = {**os.environ, "TRAINER_ENDS": "1"}
    with pytest.raises(peer.PeerError, match="the trainer exited with code 3"):
        peer.run_driver(cmd, tmp_path, env, tmp_path / "curve.jsonl", "the trainer")
    procs = []
    for name in ("worker.pid", "orphan.pid"):
        with contextlib.suppress(psutil.NoSuchProcess):
            procs.append(psutil.Process(int((tmp_path / name).read_text())))
    _, alive = psutil.wait_procs(procs, timeout=10)
    for proc in alive:
        proc.kill()
    assert not alive, f"left running: {alive}"


# ---------------------------------------------------------------------- PufferLib 4.0 (tools/pufferlib4_peer.py)


@pytest.fixture(scope="module")
def peer4(peer):
    spec = importlib.util.spec_from_file_location("pufferlib4_peer", ROOT / "tools" / "pufferlib4_peer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fake_config_dir(path, breakout_ini="", total_timesteps="94_000_000"):
    """A 4.0 config folder: a cut-down default.ini and breakout.ini in its layout (no snapshot needed)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "default.ini").write_text(
        "[base]\nenv_name = None\nreset_state = True\nseed = 73\ncheckpoint_interval = 500\n"
        "[vec]\ntotal_agents = 4096\nnum_buffers = 2\nnum_threads = 16\n"
        "[selfplay]\nenabled = 0\n[env]\n"
        "[policy]\nhidden_size = 128\nnum_layers = 4\nexpansion_factor = 1\n"
        "[torch]\nnetwork = MinGRU\nencoder = DefaultEncoder\ndecoder = DefaultDecoder\n"
        "[train]\ngpus = 1\nseed = 42\ntotal_timesteps = 10_000_000\nlearning_rate = 0.015\nanneal_lr = 1\n"
        "min_lr_ratio = 0.0\ngamma = 0.995\ngae_lambda = 0.90\nreplay_ratio = 1.0\nclip_coef = 0.2\n"
        "vf_coef = 2.0\nvf_clip_coef = 0.2\nmax_grad_norm = 1.5\nent_coef = 0.001\nanneal_ent_coef = 0\n"
        "beta1 = 0.95\nbeta2 = 0.999\neps = 1e-12\nminibatch_size = 8192\nhorizon = 64\n"
        "vtrace_rho_clip = 1.0\nvtrace_c_clip = 1.0\nprio_alpha = 0.8\nprio_beta0 = 0.2\n"
        "[sweep]\nmethod = Protein\n[sweep.train.gamma]\nmin = 0.8\n"
    )
    (path / "breakout.ini").write_text(
        "[base]\nenv_name = breakout\n[vec]\ntotal_agents = 4096\nnum_buffers = 8\nnum_threads = 8\n"
        "[policy]\nnum_layers = 2\nhidden_size = 64\n[env]\nnum_agents = 1\nframeskip = 4\nwidth = 576\n"
        "[train]\ntotal_timesteps = "
        + total_timesteps
        + "\nbeta1 = 0.7279\nbeta2 = 0.9986\neps = 0.0000834\n"
        "learning_rate = 0.1\nminibatch_size = 65_536\nprio_alpha = 0.1\nreplay_ratio = 1.4242\n"
        + breakout_ini
    )
    (path / "pong.ini").write_text("[base]\nenv_name = pong\n[train]\nhorizon = 32\n")
    return path


def test_pufferlib4_config_puts_its_ini_on_our_keys_and_names_what_differs(peer4, tmp_path):
    """bench/parity/pufferlib4/<env>.yaml from 4.0's inis: its MinGRU, replay ratio, Muon momentum
    (beta1), horizon and total_agents on our keys; the header names what is left out and what means
    something else (segments drawn with replacement, beta's anneal, the unread beta2/eps)."""
    config = _fake_config_dir(tmp_path / "config")
    out = tmp_path / "breakout.yaml"
    peer4.write_config(config, "breakout", out)
    text = out.read_text()
    cfg = yaml.safe_load(text)
    assert cfg["vec"] == {"num_envs": 4096}  # total_agents / our breakout's 1 agent per env
    assert cfg["env"] == {"frameskip": 4}  # the [env] keys our breakout has
    assert cfg["policy"] == {"core": "mingru", "hidden_size": 64, "num_layers": 2, "expansion_factor": 1,
                             "encoder": "linear", "obs_scale": "none", "encoder_activation": "none",
                             "init": "torch"}  # fmt: skip
    t = cfg["train"]
    assert (t["adam_beta1"], t["adam_beta2"], t["adam_eps"]) == (0.7279, 0.9986, 0.0000834)
    assert (t["replay_ratio"], t["min_lr_ratio"], t["bptt_horizon"]) == (1.4242, 0.0, 64)
    assert t["minibatch_size"] == t["max_minibatch_size"] == 65536 and t["total_timesteps"] == 94_000_000
    assert t["reset_state"] is True and t["anneal_lr"] is True and t["learning_rate"] == 0.1
    assert "update_epochs" not in t  # replay_ratio stands for it
    header = " ".join(line[1:].strip() for line in text.splitlines() if line.startswith("#"))
    assert (
        "WITH replacement" in header
        and "int(replay_ratio x batch / minibatch_size) = 5 minibatches" in header
    )
    assert "b0 + (1 - b0) * prio_alpha * epoch / total_epochs" in header and "never reads them" in header
    # its beta anneal ends short of 1, at b0 + (1 - b0) * alpha: ours is told to end there too
    assert t["prio_beta1"] == pytest.approx(t["prio_beta0"] + (1 - t["prio_beta0"]) * t["prio_alpha"])
    assert t["prio_beta1"] < 1 and "anneals to train.prio_beta1" in header
    # each difference a switch of ours reproduces is named with the switch and its value, and set: the
    # recipe is 4.0's, not a mix of its keys and our defaults
    from appliance.config import defaults
    from appliance.config.schema import CHOICES

    for key, value in (("train.prio_replacement", "true"), ("train.muon_ns", "pufferlib4"),
                       ("train.vtrace_rho_on", "reward"), ("policy.encoder_activation", "none"),
                       ("policy.init", "torch")):  # fmt: skip
        assert f"ours: {key} {value}" in header, key
        section, name = key.split(".")
        assert name in defaults()[section] and value in CHOICES.get((section, name), ("true", "false"))
        assert str(cfg[section][name]).lower() == value and cfg[section][name] != defaults()[section][name]
    for left in ("env.width", "vec.num_threads", "vec.num_buffers", "train.seed", "train.anneal_ent_coef",
                 "base.checkpoint_interval", "[selfplay]", "[sweep]"):  # fmt: skip
        assert left in header, left
    # its pong pays nothing for a return (3.0's and ours' default pay 0.1): the config sets ours to its rule
    peer4.write_config(config, "pong", tmp_path / "pong.yaml")
    assert yaml.safe_load((tmp_path / "pong.yaml").read_text())["env"]["return_reward"] == 0.0
    # a policy this mapping does not know is refused in one line, not written wrong
    _fake_config_dir(tmp_path / "lstm", "[torch]\nnetwork = LSTM\n")
    with pytest.raises(peer4.PeerError, match="not the MinGRU"):
        peer4.write_config(tmp_path / "lstm", "breakout", tmp_path / "x.yaml")


def test_pufferlib4_reads_its_ini_values_as_its_load_config(peer4, tmp_path):
    # literal_eval with the text itself as a fallback, and the ini chosen by its [base] env_name
    assert peer4.ini_value("94_000_000") == 94_000_000 and peer4.ini_value("1e-12") == 1e-12
    assert peer4.ini_value("'None'") == "None" and peer4.ini_value("Protein") == "Protein"
    ini = peer4.ini_config(_fake_config_dir(tmp_path / "config"), "pong")
    assert ini["train"]["horizon"] == 32 and ini["train"]["minibatch_size"] == 8192
    with pytest.raises(peer4.PeerError, match="build"):
        peer4.ini_config(tmp_path / "missing", "pong")


def test_pufferlib4_knows_the_envs_of_the_learning_comparisons(peer4):
    # results/cpu/pufferlib4-envs/learning/: its trainer on these, ours on the same ocean/ folder
    for env in ("cartpole", "connect4", "trash_pickup", "double_pendulum", "hex"):
        assert peer4.known(env) == env
    with pytest.raises(peer4.PeerError, match="no PufferLib 4.0 counterpart known for go"):
        peer4.known("go")


def test_pufferlib4_build_runs_build_shs_cpu_steps_with_gcc_and_libgomp(peer4, tmp_path):
    """build.sh ENV --cpu: the binding as a static object (-O2 -DNDEBUG -mavx2 -mfma -fopenmp -fPIC),
    bindings_cpu.cpp with the float trainer and the env's tensor type, linked with raylib; here gcc for
    clang and -lgomp for LLVM's -lomp5."""
    binding = '#include "breakout.h"\n#define OBS_SIZE 118\n#define OBS_TENSOR_T FloatTensor\n'
    assert peer4.obs_tensor_t(binding) == "FloatTensor"
    with pytest.raises(peer4.PeerError, match="OBS_TENSOR_T"):
        peer4.obs_tensor_t("#define OBS_SIZE 8\n")
    ray = tmp_path / "raylib-5.5_linux_amd64"
    static, archive, trainer, link = peer4.compile_commands(
        "breakout", tmp_path, ray, tmp_path / "build", tmp_path / "_C.so", "FloatTensor", "/py", "/pybind"
    )
    assert static[0] == "gcc" and "ocean/breakout/binding.c" in static
    for flag in (
        "-O2",
        "-DNDEBUG",
        "-mavx2",
        "-mfma",
        "-fopenmp",
        "-fPIC",
        "-DPLATFORM_DESKTOP",
        f"-I{ray}/include",
    ):
        assert flag in static, flag
    assert archive[:2] == ["ar", "rcs"]
    assert trainer[0] == "g++" and "src/bindings_cpu.cpp" in trainer
    for flag in (
        "-DPRECISION_FLOAT",
        "-DOBS_TENSOR_T=FloatTensor",
        "-DENV_NAME=breakout",
        "-I/pybind",
        "-I/py",
    ):
        assert flag in trainer, flag
    assert "-lgomp" in link and "-lomp5" not in link and str(ray / "lib" / "libraylib.a") in link
    assert link[-2:] == ["-o", str(tmp_path / "_C.so")]


def _git(*args, cwd):
    import subprocess

    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "HOME": str(cwd), "PATH": "/usr/bin:/bin:/usr/local/bin"}  # fmt: skip
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git on PATH for a real repository")
def test_pufferlib4_takes_the_pinned_commit_of_its_source_and_refuses_another(
    peer4, tmp_path, monkeypatch, capsys
):
    repo = tmp_path / "repo"
    (repo / "resources" / "breakout").mkdir(parents=True)
    (repo / "pufferlib").mkdir()
    (repo / "pyproject.toml").write_text('[project]\nname = "pufferlib"\nversion = "4.0.0"\n')
    (repo / "pufferlib" / "pufferl.py").write_text("")
    (repo / "resources" / "breakout" / "ball.png").write_bytes(b"art")
    _git("init", "-q", cwd=repo)
    _git("add", ".", cwd=repo)
    _git("commit", "-q", "-m", "x", cwd=repo)
    sha = _git("rev-parse", "HEAD", cwd=repo).strip()
    peer4.checkout(str(repo), sha, tmp_path / "tree", tmp_path / "scratch")
    assert peer4.tree_version(tmp_path / "tree") == "4.0.0"
    assert (tmp_path / "tree" / "pufferlib" / "pufferl.py").exists()
    assert not (tmp_path / "tree" / "resources").exists()  # the art stays behind (partial mirrors lack it)
    with pytest.raises(peer4.PeerError, match="has no commit"):
        peer4.checkout(str(repo), peer4.COMMIT, tmp_path / "tree2", tmp_path / "scratch")
    # on the command line: one line each, before anything is fetched or compiled
    monkeypatch.setattr(peer4.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    cache = ["--cache", str(tmp_path / "cache")]
    capsys.readouterr()
    for args, why in (
        (["build", "--commit", sha], "not the pinned"),
        (["build", "--commit", "abc"], "40-hex-digit"),
        (["build", "--source", str(tmp_path / "nowhere")], "no such folder"),
        (["build", "--source", str(repo)], "has no commit"),
        (["build", "--envs", "go"], "no PufferLib 4.0 counterpart"),
    ):
        assert peer4.main(cache + args) == 2
        err = capsys.readouterr().err
        assert why in err and err.count("\n") == 1, (args, err)
    assert not (tmp_path / "cache" / "tree").exists()


def _curve_line(steps, seconds, perf, **more):
    return json.dumps({"agent_steps": steps, "seconds": seconds, "epoch": steps // 262144, "sps": 1.0,
                       "env/perf": perf, "loss/entropy": 1.0, **more}) + "\n"  # fmt: skip


def test_pufferlib4_report_is_a_learning_curve_report_the_table_reads(peer, peer4, tmp_path):
    cache = tmp_path / "cache"
    _fake_config_dir(cache / "tree" / "config", total_timesteps="1_000_000")  # 3 epochs of 262,144
    curve = tmp_path / "pufferlib4-breakout.jsonl"
    # three trained epochs, then a row of its evaluation rollouts, which is no part of the curve
    curve.write_text("".join(_curve_line(262144 * i, 30.0 * i, 0.3 * i) for i in (1, 2, 3, 4)))
    out = tmp_path / "pufferlib4-breakout.json"
    assert peer4.main(["--cache", str(cache), "report", str(curve), "--env", "breakout", "--at", "0.5e6",
                       "--target", "0.5", "--out", str(out)]) == 0  # fmt: skip
    data = json.loads(out.read_text())
    assert (
        data["schema"] == "puffer-bench/report/1"
        and data["analysis"]["system"] == "pufferlib-4.0.0-torch-cpu"
    )
    run = data["analysis"]["learning_curves"]["breakout"]["runs"][0]
    assert run["steps"] == [262144, 524288, 786432]
    assert data["metrics"]["time_to_score/breakout/perf>=0.5/steps"]["samples"] == [786432]
    assert data["metrics"]["score_at/breakout/perf/0.5M"]["samples"] == [pytest.approx(0.3)]
    assert data["analysis"]["peer"]["commit"] == peer4.COMMIT
    ours = _report(peer, tmp_path, "ours", "puffer-bench", [0.1] * 3)
    lines = peer.table([out, ours], {}).splitlines()  # counted as a PufferLib report: its final is the target
    assert all("perf 0.6" in line for line in lines[2:])


def test_pufferlib4_driver_logs_every_trained_epoch_and_stops_the_run(peer4, tmp_path):
    """The driver wraps PuffeRL.train of its torch backend (a stand-in package here): one JSON line
    after each trained epoch, the run stopped at --stop-steps or at the end of training."""
    import subprocess

    pkg = tmp_path / "fake" / "pufferlib"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("__version__ = 4.0\n")
    (pkg / "torch_pufferl.py").write_text(
        "class Opt:\n    param_groups = [{'lr': 0.1}]\n"
        "class PuffeRL:\n"
        "    def __init__(self, total_epochs):\n"
        "        self.global_step, self.epoch, self.total_epochs, self.optimizer = 0, 0, total_epochs, Opt()\n"
        "    def train(self):\n"
        "        self.epoch += 1\n        self.env_logs = {'perf': 0.5}\n        self.losses = {'entropy': 1.0}\n"
    )
    (pkg / "pufferl.py").write_text(
        "import sys\n"
        "def load_config(env):\n"
        "    return {'train': {'total_epochs': int(sys.argv[-1])}, 'sweep': {'x': 1}, 'env_name': env}\n"
        "def train(env, args):\n"
        "    from pufferlib.torch_pufferl import PuffeRL\n"
        "    p = PuffeRL(args['train']['total_epochs'])\n"
        "    for _ in range(100):\n"
        "        p.global_step += 100\n"
        "        PuffeRL.train(p)\n"
    )
    driver = tmp_path / "driver.py"
    driver.write_text(peer4.DRIVER)

    def run(stop_steps, total_epochs):
        out = tmp_path / f"curve-{stop_steps}-{total_epochs}.jsonl"
        env = {**os.environ, "PYTHONPATH": str(tmp_path / "fake"), "PEER_STOP_STEPS": str(stop_steps),
               "PEER_STOP_SECONDS": "inf", "PEER_OUT": str(out), "PEER_SEED": "3"}  # fmt: skip
        got = subprocess.run([sys.executable, str(driver), "breakout", "--slowly", str(total_epochs)],
                             env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
        assert got.returncode == 0, got.stderr
        head = json.loads(got.stdout.splitlines()[0])
        assert "sweep" not in head["config"] and head["runtime"]["pufferlib"] == "4.0"
        return [json.loads(line) for line in out.read_text().splitlines()]

    rows = run(300, 50)
    assert [r["agent_steps"] for r in rows] == [100, 200, 300]
    assert rows[0]["env/perf"] == 0.5 and rows[0]["loss/entropy"] == 1.0 and rows[0]["learning_rate"] == 0.1
    assert [r["epoch"] for r in run(1e9, 2)] == [1, 2]  # the end of training ends the run


def test_pufferlib4_refuses_bad_arguments_and_a_taken_out_in_one_line(peer4, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(
        peer4, "train", lambda *a, **k: pytest.fail("trained although the arguments were bad")
    )
    curve = tmp_path / "pufferlib4-breakout.jsonl"
    curve.write_text(_curve_line(1, 1.0, 0.5))
    cache = ["--cache", str(tmp_path / "cache")]
    for args, why in (
        (["train", "breakout", "--out", str(tmp_path / "pufferlib4-breakout.json")], "it is a run's record"),
        (["train", "breakout", "--out", str(tmp_path / "metrics.jsonl")], ".json file"),
        (["train", "go", "--out", str(tmp_path / "go.json")], "no PufferLib 4.0 counterpart"),
        (["report", str(tmp_path / "none.jsonl"), "--env", "breakout", "--out", str(tmp_path / "r.json")], "no such curve"),
        (["config", "breakout", "--out", str(tmp_path / "b.json")], "written to a .yaml or .yml file"),
        (["config", "breakout", "--out", str(tmp_path / "b.yaml")], "build` first"),
        (["config", "trash_pickup", "--out", str(tmp_path / "t.yaml")], "`puffer-bench envs build PATH/TO/ocean/trash_pickup` writes"),
    ):  # fmt: skip
        assert peer4.main(cache + args) == 2, args
        err = capsys.readouterr().err
        assert why in err and err.count("\n") == 1, (args, err)
    assert curve.read_text() == _curve_line(1, 1.0, 0.5)
    for args, why in (
        (["train", "breakout", "--at", "30M"], "--at: '30M': expected agent-step counts"),
        (["train", "breakout", "--stop-steps", "-1"], "--stop-steps: '-1' is out of range; expected a number > 0"),
        (["train", "breakout", "--seed", "x"], "--seed: 'x' is not an int"),
        (["--cache", "", "train", "breakout"], "--cache: '' is empty"),
        (["build", "--envs", ","], "--envs: ',' is empty"),
    ):  # fmt: skip
        with pytest.raises(SystemExit) as stop:
            peer4.main([*args, "--out", str(tmp_path / "b.json")] if "train" in args else args)
        err = capsys.readouterr().err
        assert stop.value.code == 2 and err.startswith(f"error: {why}") and err.count("\n") == 1, err


# ---------------------------------------------------------------------- PufferLib 4.0's CUDA trainer (no GPU needed)


def _fake_cuda(tmp_path, peer4, monkeypatch):
    """A CUDA toolkit without cuBLAS/NVML (as pip's nvcc wheels make one), a site folder with the
    nvidia-* wheels' layout (cu13, cudnn, nccl: libraries only as lib<name>.so.N) and the driver's NVML
    elsewhere; no system folder is looked at."""
    home, site, drv = tmp_path / "cuda", tmp_path / "site", tmp_path / "driver"
    files = ["cuda/include/cuda_runtime.h", "cuda/include/cuda_profiler_api.h", "cuda/include/cuda_bf16.h",
             "cuda/include/nvtx3/nvToolsExt.h", "cuda/bin/nvcc", "cuda/lib64/libcudart.so",
             "site/nvidia/cu13/include/cublas_v2.h", "site/nvidia/cu13/include/curand_kernel.h",
             "site/nvidia/cu13/include/nvml.h", "site/nvidia/cu13/lib/libcublas.so.13",
             "site/nvidia/cu13/lib/libcusolver.so.12", "site/nvidia/cu13/lib/libcurand.so.10",
             "site/nvidia/cudnn/include/cudnn.h", "site/nvidia/cudnn/lib/libcudnn.so.9",
             "site/nvidia/cudnn/lib/libcudnn_adv.so.9", "site/nvidia/nccl/include/nccl.h",
             "site/nvidia/nccl/lib/libnccl.so.2", "driver/libnvidia-ml.so.1"]  # fmt: skip
    for f in files:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("")
    monkeypatch.setattr(peer4, "CUDNN_SYSTEM", ((), ()))
    monkeypatch.setattr(peer4, "NCCL_SYSTEM", ((), ()))
    monkeypatch.setattr(peer4, "LIB_CANDIDATES", ())
    monkeypatch.setenv("LIBRARY_PATH", str(drv))
    paths = {"include": "/py/include", "pybind11": "/pybind", "numpy": "/numpy", "ext_suffix": ".so",
             "site": [str(site)], "cudnn": str(site / "nvidia/cudnn"), "nccl": str(site / "nvidia/nccl")}  # fmt: skip
    return home, site, drv, paths


def test_pufferlib4_cuda_build_runs_build_shs_default_steps_with_nvcc(peer4, tmp_path, monkeypatch):
    """build.sh ENV without --cpu: the same static binding object (plus -I$CUDA_HOME/include), nvcc on
    src/bindings.cu with its flags and defines (bf16: no -DPRECISION_FLOAT), the link against CUDA,
    NCCL, NVML, cuBLAS, cuSOLVER, cuRAND and cuDNN in its order; cuDNN's and NCCL's folders from the
    nvidia.cudnn / nvidia.nccl packages with a run path as build.sh; headers and libraries the toolkit
    lacks from the wheels or the driver, libraries found only as .so.N linked by a lib<name>.so link."""
    home, site, drv, paths = _fake_cuda(tmp_path, peer4, monkeypatch)
    cu13, cudnn, nccl = site / "nvidia/cu13", site / "nvidia/cudnn", site / "nvidia/nccl"
    includes = peer4.cuda_includes(home, paths)
    assert includes == [home / "include", cudnn / "include", nccl / "include", cu13 / "include"]
    shims = tmp_path / "build" / "lib"
    libdirs, rpaths = peer4.cuda_libs(home, paths, shims)
    assert libdirs == [home / "lib64", cudnn / "lib", nccl / "lib", shims]
    assert rpaths == [
        cudnn / "lib",
        nccl / "lib",
        drv,
        cu13 / "lib",
    ]  # in -l order; not the system's, never stubs/
    for name, target in (("cublas", cu13 / "lib/libcublas.so.13"), ("cudnn", cudnn / "lib/libcudnn.so.9"),
                         ("nccl", nccl / "lib/libnccl.so.2"), ("nvidia-ml", drv / "libnvidia-ml.so.1")):  # fmt: skip
        assert (shims / f"lib{name}.so").resolve() == target.resolve(), name
    assert not (shims / "libcudart.so").exists()  # the toolkit has it under its own name
    ray = tmp_path / "raylib-5.5_linux_amd64"
    out, build = tmp_path / "_C.so", tmp_path / "build"
    static, archive, nvcc, link = peer4.cuda_compile_commands(
        "breakout",
        ray,
        build,
        out,
        "FloatTensor",
        home / "bin/nvcc",
        home,
        paths,
        includes,
        libdirs,
        rpaths,
        "sm_90",
    )
    assert static[0] == "gcc" and f"-I{home}/include" in static and "ocean/breakout/binding.c" in static
    assert archive[:2] == ["ar", "rcs"]
    assert nvcc[:3] == [str(home / "bin/nvcc"), "-c", "-arch=sm_90"] and "src/bindings.cu" in nvcc
    for flag in ("-Xcompiler=-D_GLIBCXX_USE_CXX11_ABI=1", "-Xcompiler=-DNPY_NO_DEPRECATED_API=NPY_1_7_API_VERSION",
                 "-Xcompiler=-DPLATFORM_DESKTOP", "-Xcompiler=-fopenmp", "-std=c++17", "-I.", "-Isrc",
                 "-I/py/include", "-I/pybind", "-I/numpy", f"-I{cudnn}/include", f"-I{nccl}/include",
                 f"-I{cu13}/include", f"-I{ray}/include", "-DOBS_TENSOR_T=FloatTensor", "-DENV_NAME=breakout",
                 "-O2"):  # fmt: skip
        assert flag in nvcc, flag
    assert nvcc[nvcc.index("-Xcompiler") + 1] == "-fPIC" and nvcc[nvcc.index("--threads") + 1] == "0"
    assert "-DPRECISION_FLOAT" not in nvcc  # build.sh's default build: bf16
    assert link[:4] == ["g++", "-shared", "-fPIC", "-fopenmp"] and str(ray / "lib/libraylib.a") in link
    libs = [x for x in link if x.startswith("-l")]
    assert libs == [
        "-lcudart",
        "-lnccl",
        "-lnvidia-ml",
        "-lcublas",
        "-lcusolver",
        "-lcurand",
        "-lcudnn",
        "-lgomp",
    ]
    assert f"-Wl,-rpath,{cudnn}/lib" in link and f"-L{shims}" in link and link[-2:] == ["-o", str(out)]
    # what is missing is named in one line
    (cu13 / "include/nvml.h").unlink()
    with pytest.raises(peer4.PeerError, match=r"no nvml\.h in .*full toolkit"):
        peer4.cuda_includes(home, paths)
    (drv / "libnvidia-ml.so.1").unlink()
    with pytest.raises(
        peer4.PeerError, match=r"no libnvidia-ml\.so .*-lnvidia-ml \(NVML: the NVIDIA driver's\)"
    ):
        peer4.cuda_libs(home, paths, shims)


def _fake_cache(path):
    """A cache as `build` leaves it: 4.0's tree (a few files), raylib 5.5 and where it came from."""
    for f, text in (("tree/pyproject.toml", '[project]\nname = "pufferlib"\nversion = "4.0.0"\n'),
                    ("tree/build.sh", "#!/bin/bash\n"), ("tree/LICENSE", "MIT\n"),
                    ("tree/pufferlib/pufferl.py", ""), ("tree/pufferlib/__pycache__/pufferl.pyc", ""),
                    ("tree/src/bindings.cu", "// bindings\n"), ("tree/vendor/ini.h", ""),
                    ("tree/config/default.ini", "[base]\n"), ("tree/ocean/breakout/binding.c", ""),
                    ("tree/ocean/pong/binding.c", ""), ("tree/orbit-wars/big.bin", "x" * 1000),
                    ("raylib-5.5_linux_amd64/include/raylib.h", '#define RAYLIB_VERSION  "5.5"\n'),
                    ("raylib-5.5_linux_amd64/lib/libraylib.a", "!<arch>\n"),
                    ("SOURCE", "https://github.com/eig1n/PufferLib-OrbitWars 41dc40bb28258a82c8e4a27d20cafd0159a12072\n")):  # fmt: skip
        (path / f).parent.mkdir(parents=True, exist_ok=True)
        (path / f).write_text(text)
    return path


def _python_before_3_11_4(monkeypatch):
    """tarfile as Python 3.11.0-3.11.3 has it (the Docker base image's): no data_filter, and
    extract/extractall take no ``filter=``."""
    import tarfile

    monkeypatch.delattr(tarfile, "data_filter", raising=False)
    for name in ("extract", "extractall"):
        method = getattr(tarfile.TarFile, name)

        def without_filter(self, *a, _method=method, **kw):
            if "filter" in kw:
                raise TypeError(f"TarFile.{_method.__name__}() got an unexpected keyword argument 'filter'")
            return _method(self, *a, **kw)

        monkeypatch.setattr(tarfile.TarFile, name, without_filter)


@pytest.mark.parametrize("python", ["this", "before-3.11.4"])
def test_archives_unpack_inside_their_folder_on_every_python_311(peer, tmp_path, monkeypatch, python):
    """The peers' sources, raylib and packs unpack with the "data" filter's rules on this Python and on
    one without ``filter=`` (CI's Docker image failed on it): files, folders and links inside the folder
    unpack; a name or link leading out of it, or a device, is refused with the member named."""
    import io
    import tarfile

    if python != "this":
        _python_before_3_11_4(monkeypatch)

    def archive(*members):
        path = tmp_path / f"a{len(list(tmp_path.glob('a*.tar')))}.tar"
        with tarfile.open(path, "w") as tar:
            for name, kind, link in members:
                info = tarfile.TarInfo(name)
                info.type, info.linkname = kind, link
                data = b"x" if kind == tarfile.REGTYPE else b""
                info.size, info.mode = len(data), 0o4777 if kind == tarfile.REGTYPE else 0o755
                tar.addfile(info, io.BytesIO(data) if data else None)
        return path

    good = archive(
        ("t/d", tarfile.DIRTYPE, ""), ("t/d/f", tarfile.REGTYPE, ""), ("t/l", tarfile.SYMTYPE, "d/f")
    )
    dest = tmp_path / "out"
    dest.mkdir()
    with tarfile.open(good) as tar:
        peer.extract(tar, dest)
    assert (dest / "t/l").read_text() == "x" and (dest / "t/l").is_symlink()
    assert not (dest / "t/d/f").stat().st_mode & 0o7022  # no setuid, no group/other write
    with tarfile.open(good, "r|") as tar:  # streamed, as git archive's is read
        peer.extract(tar, tmp_path / "streamed")
    assert (tmp_path / "streamed/t/d/f").read_text() == "x"
    with tarfile.open(archive(("/abs/f", tarfile.REGTYPE, ""))) as tar:  # made relative, as the filter does
        peer.extract(tar, dest)
    assert (dest / "abs/f").read_text() == "x"
    for bad in (("../evil", tarfile.REGTYPE, ""),
                ("t/out", tarfile.SYMTYPE, "../../evil"), ("t/etc", tarfile.SYMTYPE, "/etc/passwd"),
                ("t/dev", tarfile.CHRTYPE, "")):  # fmt: skip
        with tarfile.open(archive(bad)) as tar, pytest.raises(Exception) as err:
            peer.extract(tar, dest)
        assert isinstance(err.value, (peer.PeerError, tarfile.TarError)), err.value
    assert not (tmp_path / "evil").exists() and not (dest / "t/out").exists()


@pytest.mark.parametrize("python", ["this", "before-3.11.4"])
def test_pufferlib4_pack_carries_the_tree_raylib_and_wheels_to_a_gpu_machine(
    peer4, tmp_path, monkeypatch, python
):
    """`pack` puts what the CUDA build reads (the tree's build files, the env's ocean/ folder, raylib)
    in one tarball in an ignored folder, a cache of its own (--cache .peer4) that the CUDA build
    unpacks, with the wheels of what pufferl.py imports and the GPU image lacks, unzipped on use."""
    import tarfile
    import zipfile

    if python != "this":
        _python_before_3_11_4(monkeypatch)

    cache = _fake_cache(tmp_path / "cache")

    def fetch_wheels(dest):
        dest.mkdir(parents=True)
        with zipfile.ZipFile(dest / "fake_pack_mod-1.0-py3-none-any.whl", "w") as z:
            z.writestr("fake_pack_mod/__init__.py", "")

    monkeypatch.setattr(peer4, "fetch_wheels", fetch_wheels)
    out = tmp_path / "repo" / ".peer4"
    assert peer4.main(["--cache", str(cache), "pack", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["PACKED", "SOURCE", "sources.tar.gz", "wheels"]
    with tarfile.open(out / "sources.tar.gz") as tar:
        names = set(tar.getnames())
    for name in ("tree/pyproject.toml", "tree/build.sh", "tree/src/bindings.cu", "tree/pufferlib/pufferl.py",
                 "tree/vendor/ini.h", "tree/config/default.ini", "tree/ocean/breakout/binding.c", "SOURCE",
                 "raylib-5.5_linux_amd64/lib/libraylib.a", "raylib-5.5_linux_amd64/include/raylib.h"):  # fmt: skip
        assert name in names, name
    assert not any("pong" in n or "orbit-wars" in n or "__pycache__" in n for n in names)  # breakout's only
    assert (out / "SOURCE").read_text() == (cache / "SOURCE").read_text()
    assert not (cache / "pack.part").exists() and not (out.parent / ".peer4.part").exists()
    # the CUDA build's cache: unpacked on first use
    assert peer4.packed_sources(out) == (out / "tree", out / "raylib-5.5_linux_amd64")
    assert (out / "tree/src/bindings.cu").read_text() == "// bindings\n"
    # a pack is replaced whole (a build made in it too); any other folder is refused
    (out / "build-cuda").mkdir()
    assert peer4.main(["--cache", str(cache), "pack", "--out", str(out), "--envs", "breakout,pong"]) == 0
    assert not (out / "build-cuda").exists() and not (out / "tree").exists()
    with tarfile.open(out / "sources.tar.gz") as tar:
        assert "tree/ocean/pong/binding.c" in tar.getnames()
    other = tmp_path / "mine"
    (other / "notes").mkdir(parents=True)
    assert (
        peer4.main(["--cache", str(cache), "pack", "--out", str(other)]) == 2 and (other / "notes").exists()
    )
    # the wheels go on the trainer's path only where the Python lacks the module
    monkeypatch.setattr(peer4, "PACK_IMPORTS", ("json", "fake_pack_mod"))
    assert peer4.cuda_site(out, sys.executable) == [out / "site"]
    assert (out / "site/fake_pack_mod/__init__.py").exists()
    monkeypatch.setattr(peer4, "PACK_IMPORTS", ("json", "no_such_module_here"))
    with pytest.raises(peer4.PeerError, match="no_such_module_here"):
        peer4.cuda_site(out, sys.executable)
    # the default pack folder is one git ignores and the device tool can carry
    assert peer4.PACK == ROOT / ".peer4" and "/.peer4/" in (ROOT / ".gitignore").read_text().splitlines()


def test_pufferlib4_cuda_refuses_in_one_line_without_nvcc_a_gpu_or_a_tree(
    peer4, tmp_path, capsys, monkeypatch
):
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    which = {"nvcc": None}
    monkeypatch.setattr(peer4.shutil, "which", lambda tool: which.get(tool, f"/usr/bin/{tool}"))
    monkeypatch.setattr(peer4, "gpu_present", lambda: False)
    empty, packed = ["--cache", str(tmp_path / "empty")], ["--cache", str(_fake_cache(tmp_path / "packed"))]
    out = ["--out", str(tmp_path / "r.json")]
    cases = [
        ([*empty, "build", "--cuda", "--arch", "sm_90"], "needs nvcc (CUDA's compiler): none on PATH and no CUDA_HOME"),
        ([*empty, "train", "breakout", "--device", "cuda", *out], "--device cuda: nvidia-smi finds no GPU here"),
    ]  # fmt: skip
    for args, why in cases:
        assert peer4.main(args) == 2, args
        err = capsys.readouterr().err
        assert why in err and err.count("\n") == 1, (args, err)
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("")
    monkeypatch.setenv("CUDA_HOME", str(nvcc.parent.parent))
    for args, why in (
        ([*empty, "build", "--cuda", "--arch", "sm_90"], "no PufferLib 4.0 source tree in"),
        ([*packed, "build", "--cuda"], "-arch=native (build.sh's default) compiles for this machine's GPU"),
        ([*packed, "build", "--arch", "sm_90"], "--arch and --compile-only are for build --cuda"),
        ([*packed, "build", "--cuda", "--system-torch"], "build --cuda takes the tree already in the cache"),
    ):
        assert peer4.main(args) == 2, args
        err = capsys.readouterr().err
        assert why in err and err.count("\n") == 1, (args, err)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "nowhere"))
    assert peer4.main([*packed, "build", "--cuda", "--arch", "sm_90"]) == 2
    assert "has no bin/nvcc" in capsys.readouterr().err
    assert not (tmp_path / "packed" / "build-cuda").exists()  # nothing compiled


def _fake_native_pufferlib(root):
    """A stand-in for 4.0's pufferlib with its native backend: a _C module (create_pufferl, rollouts,
    train, log in its shapes) and a pufferl.py whose train loops as its _train does, logging every epoch
    (its 0.6 s rate limit aside), its config's total epochs the last argument."""
    pkg = root / "pufferlib"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("__version__ = 4.0\n")
    (pkg / "_C.py").write_text(
        "env_name, gpu, precision_bytes, reads = 'breakout', 1, 2, []\n"
        "class P:\n    global_step = epoch = 0\n"
        "def create_pufferl(args):\n    return P()\n"
        "def rollouts(p):\n    p.global_step += 100\n"
        "def train(p):\n    p.epoch += 1\n    return {}\n"
        "def log(p):\n"
        "    reads.append(p.epoch)\n"
        "    return {'agent_steps': p.global_step, 'epoch': p.epoch, 'SPS': 9, 'env': {'perf': 0.1 * p.epoch},\n"
        "            'loss': {'policy': 0.5}, 'perf': {'rollout': 0.25}, 'util': {'gpu_percent': 80.0}}\n"
    )
    (pkg / "pufferl.py").write_text(
        "import json, sys\nfrom pufferlib import _C\n"
        "def load_config(env):\n"
        "    return {'train': {'total_timesteps': 100 * int(sys.argv[-1]), 'horizon': 10, 'learning_rate': 0.1,\n"
        "            'min_lr_ratio': 0.0, 'anneal_lr': 1}, 'vec': {'total_agents': 10}, 'sweep': {'x': 1},\n"
        "            'env_name': env, 'seed': 73}\n"
        "def train(env, args):\n"
        "    backend = _C\n    p = backend.create_pufferl(args)\n    backend.log(p)\n"
        "    for _ in range(100):\n"
        "        backend.rollouts(p)\n        backend.train(p)\n        logs = backend.log(p)\n"
        "        print(json.dumps({'its_log_epoch': logs['epoch'], 'reads': len(_C.reads)}), file=sys.stderr)\n"
    )


def test_pufferlib4_cuda_driver_logs_every_trained_epoch_through_its_own_log_and_stops(peer4, tmp_path):
    """The CUDA driver wraps the native backend (a stand-in _C here): after each _C.train it reads
    _C.log once and writes its row (the CPU curve's keys, its losses and profile seconds beside); its
    loop's own log calls get that epoch's logs, not a second read; the run stops at --stop-steps or at
    the end of training."""
    import subprocess

    _fake_native_pufferlib(tmp_path / "fake")
    driver = tmp_path / "driver_cuda.py"
    driver.write_text(peer4.CUDA_DRIVER)

    def run(stop_steps, total_epochs):
        out = tmp_path / f"curve-{stop_steps}-{total_epochs}.jsonl"
        env = {**os.environ, "PYTHONPATH": str(tmp_path / "fake"), "PEER_STOP_STEPS": str(stop_steps),
               "PEER_STOP_SECONDS": "inf", "PEER_OUT": str(out)}  # fmt: skip
        got = subprocess.run([sys.executable, str(driver), "breakout", str(total_epochs)],
                             env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
        assert got.returncode == 0, got.stderr
        head = json.loads(got.stdout.splitlines()[0])
        assert "sweep" not in head["config"] and head["runtime"]["precision_bytes"] == 2
        seen = [json.loads(line) for line in got.stderr.splitlines() if line.startswith("{")]
        return [json.loads(line) for line in out.read_text().splitlines()], seen

    rows, seen = run(300, 4)
    assert [r["agent_steps"] for r in rows] == [100, 200, 300] and [r["epoch"] for r in rows] == [1, 2, 3]
    assert rows[1]["env/perf"] == pytest.approx(0.2) and rows[0]["loss/policy"] == 0.5
    assert rows[0]["time/rollout"] == 0.25 and rows[0]["util/gpu_percent"] == 80.0
    assert {"agent_steps", "seconds", "epoch", "sps", "learning_rate"} <= set(rows[0])
    # its cosine schedule at the epoch each update trained: full rate first, then down over 4 epochs
    assert [r["learning_rate"] for r in rows] == pytest.approx([0.1, 0.1 * (1 + 0.5**0.5) / 2, 0.05])
    # one read of _C.log per epoch (after the one before its loop); its loop got that epoch's logs
    assert seen == [{"its_log_epoch": e, "reads": e + 1} for e in (1, 2)]
    rows, _ = run(1e9, 2)
    assert [r["epoch"] for r in rows] == [1, 2]  # the end of training ends the run


def test_pufferlib4_train_on_cuda_runs_its_native_trainer_in_this_python_and_reports_it(
    peer4, tmp_path, monkeypatch
):
    """train --device cuda (a stand-in native pufferlib where build --cuda puts one): this Python runs
    the CUDA driver on its env folder, no --slowly, and the report is the CUDA system's, with the
    build's record."""
    cache = tmp_path / "cache"
    pkg_root = cache / "envs-cuda" / "breakout"
    _fake_native_pufferlib(pkg_root)
    (pkg_root / "pufferlib" / "_C.stub.so").write_text("")  # what cuda_built looks for; not importable as _C
    (cache / "build-cuda" / "breakout").mkdir(parents=True)
    (cache / "build-cuda" / "breakout" / "build.json").write_text(
        json.dumps({"arch": "sm_90", "nvcc": "Build cuda_13.0", "python": "/py", "commands": ["nvcc ..."]})
    )
    monkeypatch.setattr(peer4, "gpu_present", lambda: True)
    monkeypatch.setattr(peer4, "PACK_IMPORTS", ("json",))
    out = tmp_path / "pufferlib4-cuda-breakout.json"
    args = ["--cache", str(cache), "train", "breakout", "--device", "cuda", "--set", "5", "--target", "0.2",
            "--at", "300", "--out", str(out)]  # fmt: skip
    assert peer4.main(args) == 0
    data = json.loads(out.read_text())
    peer_info = data["analysis"]["peer"]
    assert data["analysis"]["system"] == "pufferlib-4.0.0-cuda" and data["profile"]["name"] == "cuda"
    assert peer_info["build"] == {"arch": "sm_90", "nvcc": "Build cuda_13.0", "commands": ["nvcc ..."]}
    assert "driver_cuda.py breakout 5" in data["command"] and "--slowly" not in data["command"]
    assert data["command"].startswith(sys.executable)
    assert data["analysis"]["learning_curves"]["breakout"]["runs"][0]["steps"] == [100, 200, 300, 400, 500]
    assert data["metrics"]["time_to_score/breakout/perf>=0.2/steps"]["samples"] == [300]
    curve = [json.loads(line) for line in out.with_suffix(".jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in curve] == [1, 2, 3, 4, 5] and "time/rollout" in curve[0]


def test_pufferlib4_cuda_report_says_which_trainer_wrote_the_curve(peer4, tmp_path):
    cache = tmp_path / "cache"
    _fake_config_dir(cache / "tree" / "config", total_timesteps="1_000_000")
    curve = tmp_path / "pufferlib4-cuda-breakout.jsonl"
    curve.write_text(
        "".join(_curve_line(262144 * i, 3.0 * i, 0.3 * i, **{"time/rollout": 0.1}) for i in (1, 2, 3))
    )
    out = tmp_path / "pufferlib4-cuda-breakout.json"
    assert peer4.main(["--cache", str(cache), "report", str(curve), "--env", "breakout", "--device", "cuda",
                       "--target", "0.5", "--out", str(out)]) == 0  # fmt: skip
    data = json.loads(out.read_text())
    assert data["analysis"]["system"] == "pufferlib-4.0.0-cuda"
    assert data["analysis"]["peer"]["backend"].startswith("native CUDA") and data["profile"]["name"] == "cuda"
    assert any("_C.log after every trained epoch" in n for n in data["analysis"]["peer"]["notes"])
    assert data["metrics"]["time_to_score/breakout/perf>=0.5/seconds"]["samples"] == [9.0]


def test_every_parity_config_is_one_our_trainer_runs():
    """Each bench/parity config (3.0's and 4.0's inis on our keys) resolves on this trainer: every key
    exists and is in range, and 4.0's PufferNet, replay ratio and schedule floor arrive as written."""
    from appliance.config import resolve

    paths = parity_configs("**/*.yaml")
    assert any(p.parent.name == "pufferlib4" for p in paths)
    for path in paths:
        cfg = resolve(env=path.stem, config_file=path)
        written = yaml.safe_load(path.read_text())
        for section in ("train", "policy"):
            for key, value in written.get(section, {}).items():
                assert cfg[section][key] == value, (path, section, key)


def test_our_report_names_the_machine_and_kind_the_run_trained_on_not_the_readers(peer, tmp_path, capsys):
    # an emulated kind's run read later (no PUFFER_CPU_KIND in the reader) carried the reader's
    # fingerprint: kind bf16, not emulated; the run's machines.jsonl says what the trainer saw
    from appliance.sysinfo import fingerprint
    from appliance.train import runs

    (tmp_path / "metrics.jsonl").write_text(
        "\n".join(
            json.dumps({"global_step": e * 1e6, "uptime": 10.0 * e, "env/perf": 0.2 * e}) for e in range(1, 8)
        )
        + "\n"
    )
    out = tmp_path / "r.json"
    args = ["ours", str(tmp_path), "--env", "breakout", "--target", "0.9", "--out", str(out)]
    assert peer.main(args) == 0
    assert "has no machines.jsonl: the report carries this machine's fingerprint" in capsys.readouterr().err
    mine = fingerprint(calibration=False)
    assert json.loads(out.read_text())["fingerprint"]["host_hash"] == mine["host_hash"]

    def session(host, kind, step):
        fp = json.loads(json.dumps(mine))
        fp["host_hash"], fp["cpu"]["emulated_kind"] = host, kind
        fp["cpu"]["library_caps"] = {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}
        return json.dumps({"utc": "2026-12-02T06:00:00Z", "global_step": step, "fingerprint": fp}) + "\n"

    (tmp_path / runs.MACHINES).write_text(session("0123456789ab", "older", 0))
    assert peer.main(args) == 0
    err = capsys.readouterr().err
    assert err.startswith("[peer] wrote") and err.count("\n") == 1, err  # no warning beside it
    data = json.loads(out.read_text())
    assert data["fingerprint"]["host_hash"] == "0123456789ab"
    assert data["fingerprint"]["cpu"]["emulated_kind"] == "older"
    assert data["analysis"]["run_machines"][0]["kind"] == "older"
    assert data["analysis"]["run_machines"][0]["emulated"] is True
    with (tmp_path / runs.MACHINES).open("a") as f:  # resumed on another host
        f.write(session("ba9876543210", "older", 3e6))
    assert peer.main(args) == 0
    assert "trained on 2 machines or CPU kinds" in capsys.readouterr().err
    data = json.loads(out.read_text())
    assert data["fingerprint"]["host_hash"] == "0123456789ab"
    assert [m["host_hash"] for m in data["analysis"]["run_machines"]] == ["0123456789ab", "ba9876543210"]
