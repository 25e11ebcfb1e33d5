"""tools/*.py entry points are held to the CLI's contract (tools/tool_cli.py): a bad invocation is one
line and exit 2 before any work, and no --out replaces a run's own files."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ["pufferlib_peer", "pufferlib4_peer", "peer_crossplay", "breakout_scripted", "cpu_roofline",
         "ctrl_c_startup", "pool_overhead", "train_ab", "noise_guard_rates", "resume_variants", "protein_peer",
         "squared_cells", "perturb_run", "kind_caps_ab"]  # fmt: skip


def tool(name):
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture
def run_dir(tmp_path):
    """A run folder as train leaves it (its files' contents do not matter here)."""
    run = tmp_path / "experiments" / "run"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"global_step": 10, "uptime": 1.0, "env/perf": 0.5}\n')
    (run / "config.yaml").write_text("env_name: squared\n")
    (run / "model.pt").write_bytes(b"weights")
    return run


def before(folder):
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def exit_and_err(name, args, capsys):
    """(exit status, stderr) of ``tools/<name>.py ARGS`` run in this process."""
    try:
        code = tool(name).main(args)
    except SystemExit as stop:
        code = stop.code
    return code, capsys.readouterr().err


def one_line_error(code, err, says):
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    assert says in err, err


def no_work(monkeypatch, name):
    """Each tool's work (training, building, timing) fails the test if it starts."""
    for work in (
        "train",
        "speed",
        "build",
        "wheels",
        "play",
        "worker",
        "compare",
        "one",
        "window",
        "timed",
        "envs_of",
        "one_run",
        "sweep",
        "race",
        "ours",
        "cells",
        "install",
    ):
        for module in (tool(name), tool("pufferlib_peer")):
            if hasattr(module, work):
                monkeypatch.setattr(module, work, lambda *a, **k: pytest.fail("the work started"))


BAD = [
    ("pufferlib_peer", [], "the following arguments are required: cmd"),
    ("pufferlib_peer", ["nosuch"], "cmd: invalid choice"),
    ("pufferlib_peer", ["ours", "RUN", "--env", "squared", "--seed", "-1", "--out", "o.json"], "--seed: '-1' is out of range"),
    ("pufferlib_peer", ["ours", "RUN", "--env", "squared", "--target", "nan", "--out", "o.json"], "--target: 'nan' is not a finite"),
    ("pufferlib_peer", ["ours", "RUN", "--env", "squared", "--at", "30e6,", "--out", "o.json"], "--at: '30e6,'"),
    ("pufferlib_peer", ["ours", "RUN", "--env", "breakout", "--out", "o.json"], "is a run of squared; pass --env squared"),
    ("pufferlib_peer", ["ours", "RUN", "--env", "squared", "--out", ""], "--out: '' is empty"),
    ("pufferlib_peer", ["train", "breakout", "--stop-steps", "inf", "--out", "t.json"], "--stop-steps: 'inf' is not a finite"),
    ("pufferlib_peer", ["train", "breakout", "--device", "tpu", "--out", "t.json"], "--device: invalid choice"),
    ("pufferlib_peer", ["--cache", "", "train", "breakout", "--out", "t.json"], "--cache: '' is empty"),
    ("pufferlib_peer", ["table", "RUN/metrics.jsonl", "--target", "breakout=nan"], "expected NAME=NUMBER"),
    ("pufferlib_peer", ["table", "RUN/metrics.jsonl"], "not a learning-curve report"),
    ("pufferlib_peer", ["plot", "RUN/metrics.jsonl", "--out", "p.png"], "not a learning-curve report"),
    ("pufferlib_peer", ["plot", "DAMAGED", "--out", "p.png"], "its curves are damaged"),
    ("pufferlib_peer", ["speed", "breakout", "--rounds", "0", "--out", "s.json"], "--rounds: '0' is out of range"),
    ("pufferlib_peer", ["speed", "breakout", "--seconds", "10", "--warmup", "20", "--out", "s.json"], "more than --warmup"),
    ("pufferlib_peer", ["build", "--envs", ""], "--envs: '' is empty"),
    ("pufferlib_peer", ["build", "--envs", "breakout,,pong"], "has an empty name"),
    ("pufferlib_peer", ["build", "--wheels", "NOWHERE"], "no such folder"),
    ("pufferlib_peer", ["wheels", "--out", "w", "--python-version", "x"], "--python-version 'x'"),
    ("pufferlib4_peer", ["train", "breakout", "--seed", "1.5", "--out", "u.json"], "--seed: '1.5' is not an int"),
    ("pufferlib4_peer", ["build", "--envs", ","], "--envs: ',' is empty"),
    ("peer_crossplay", ["breakout", "--pufferlib-model", "x.pt", "--ours", "RUN", "--out", "c.json", "--games", "0"], "--games: '0'"),
    ("peer_crossplay", ["breakout", "--pufferlib-model", "x.pt", "--ours", "RUN", "--out", "c.json"], "--pufferlib-model x.pt: no such"),
    ("peer_crossplay", ["nosuch", "--pufferlib-model", "x.pt", "--ours", "RUN", "--out", "c.json"], "env: invalid choice"),
    ("breakout_scripted", ["play", "--side", "ours", "--json", "p.json", "--eps", "2"], "--eps: '2' is out of range"),
    ("breakout_scripted", ["play", "--side", "ours", "--json", "p.json", "--envs", "0"], "--envs: '0' is out of range"),
    ("cpu_roofline", ["--seconds", "0"], "--seconds: '0' is out of range; expected a number > 0"),
    ("cpu_roofline", ["--dtype", "int8"], "--dtype: invalid choice"),
    ("cpu_roofline", ["--hidden", "0"], "--hidden: '0' is out of range; expected an int >= 1"),
    ("cpu_roofline", ["--segments", "1.5"], "--segments: '1.5' is not an int"),
    ("cpu_roofline", ["--int16", "--dtype", "bfloat16"], "give --dtype float32 with it"),
    ("ctrl_c_startup", ["--runs", "0"], "--runs: '0' is out of range"),
    ("ctrl_c_startup", ["--puffer-bench", "NOWHERE"], "not a program that can be run"),
    ("pool_overhead", ["--rounds", "1"], "--rounds: '1' is out of range; expected an int >= 2"),
    ("pool_overhead", ["--gap-us", "x"], "--gap-us: 'x' is not an int"),
    ("train_ab", ["squared", "--stop-steps", "3M", "--out", "a.json"], "--stop-steps: '3M' is not an int"),
    ("train_ab", ["squared", "--rounds", "-1", "--out", "a.json"], "--rounds: '-1' is out of range"),
    ("train_ab", ["squared", "--a-rev", "no-such-rev", "--out", "a.json"], "--a-rev no-such-rev: "),  # not a commit, or no git
    # before the fix: stale_names took any argument and ran; mingru_bf16_ab printed a usage screen
    ("stale_names", ["--bogus"], "unrecognized arguments: --bogus"),
    ("mingru_bf16_ab", ["--reps", "nan"], "--reps: 'nan' is not"),
    ("mingru_bf16_ab", ["--batch", "1e12"], "--batch: '1e12' is out of range"),
    ("noise_guard_rates", ["--steps", "0"], "--steps: '0' is out of range"),
    ("noise_guard_rates", ["--conditions", "idle,nosuch"], "--conditions: unknown nosuch"),
    ("noise_guard_rates", ["--core", "4096", "--out", "r.json"], "--core 4096 is not a usable CPU"),
    ("noise_guard_rates", ["--rescore", "nosuch.json"], "nosuch.json is not a record of this tool"),
    ("pufferlib_peer", ["ours", "RUN", "--env", "squared", "--window", "0", "--out", "a.json"], "--window: '0' is out of range"),
    ("resume_variants", ["RUN", "--stop-steps", "0"], "--stop-steps: '0' is out of range"),
    ("resume_variants", ["RUN", "--stop-steps", "1e6", "--mode", "cold"], "--mode: invalid choice"),
    ("resume_variants", ["nosuch", "--stop-steps", "1e6"], "nosuch needs a model.pt and the run's config.yaml"),
    ("protein_peer", ["sweep", "squared", "--budget-seconds", "0", "--out", "x"], "--budget-seconds: '0' is out of range"),
    ("protein_peer", ["sweep", "squared", "--budget-seconds", "60", "--timesteps", "1,2", "--out", "x"], "MIN,MEAN,MAX"),
    ("protein_peer", ["sweep", "squared", "--budget-seconds", "60", "--out", "RUN"], "not empty; name a new folder"),
    ("protein_peer", ["race", "--protein", "RUN", "--ours", "RUN", "--out", "r.txt"], "a .md path"),
    ("protein_peer", ["race", "--protein", "RUN", "--ours", "RUN", "--out", "r.md", "--minutes", "0"], "positive numbers"),
    ("squared_cells", ["nosuch"], "no model.pt"),
    ("squared_cells", ["RUN", "--episodes", "0"], "--episodes: '0' is out of range"),
    ("squared_cells", ["RUN", "--show", "0"], "is not ROW,COL"),
    ("perturb_run", ["--at-epoch", "0", "--", "train", "squared"], "--at-epoch: '0' is out of range"),
    ("perturb_run", ["--at-epoch", "2", "--", "eval", "squared"], "after -- give a puffer-bench train command line"),
    ("perturb_run", ["--at-epoch", "2"], "after -- give a puffer-bench train command line"),
    ("kind_caps_ab", ["--kinds", "bf16"], "bf16: this CPU is of the"),
    ("kind_caps_ab", ["--seconds", "0"], "--seconds: '0' is out of range"),
    ("kind_caps_ab", ["--kinds", "avx2,,older"], "has an empty name"),
]  # fmt: skip


@pytest.mark.parametrize("name, args, says", BAD, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(BAD)])
def test_a_bad_invocation_of_a_tool_is_one_line_before_any_work(
    name, args, says, run_dir, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    damaged = tmp_path / "damaged.json"
    damaged.write_text(json.dumps({"analysis": {"learning_curves": {"breakout": {"runs": "x"}}}}))
    where = {"RUN": str(run_dir), "NOWHERE": str(tmp_path / "nowhere"), "DAMAGED": str(damaged)}
    args = [where.get(a.split("/")[0], a.split("/")[0]) + a[len(a.split("/")[0]) :] for a in args]
    no_work(monkeypatch, name)
    files = before(tmp_path)
    one_line_error(*exit_and_err(name, args, capsys), says)
    assert before(tmp_path) == files


RUN_OUTS = [
    ("pufferlib_peer", ["config", "breakout", "--out", "RUN/config.yaml"]),
    ("pufferlib4_peer", ["config", "breakout", "--out", "RUN/config.yaml"]),
    ("pufferlib_peer", ["ours", "RUN", "--env", "squared", "--out", "RUN/metrics.jsonl"]),
    ("pufferlib_peer", ["table", "REPORT", "--out", "RUN/model.pt"]),
    ("peer_crossplay", ["breakout", "--pufferlib-model", "RUN/model.pt", "--ours", "RUN", "--out", "RUN/config.yaml"]),
    ("breakout_scripted", ["play", "--side", "ours", "--json", "RUN/metrics.jsonl"]),
    ("cpu_roofline", ["--out", "RUN/metrics.jsonl"]),
    ("train_ab", ["squared", "--out", "RUN/config.yaml"]),
    ("train_ab", ["squared", "--out", "RUN"]),
    ("learning_seeds", ["squared", "--out", "RUN/metrics.jsonl"]),
    ("noise_guard_rates", ["--out", "RUN/metrics.jsonl"]),
    ("kind_caps_ab", ["--out", "RUN/metrics.jsonl"]),
]  # fmt: skip


ROWS = [{"steps": 1e6, "seconds": 1.0, "perf": 0.5}]


@pytest.mark.parametrize("name, args", RUN_OUTS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(RUN_OUTS)])
def test_no_tool_writes_its_output_over_a_runs_own_files(name, args, run_dir, tmp_path, capsys, monkeypatch):
    """``pufferlib_peer.py config breakout --out RUN/config.yaml`` replaced the run's config."""
    peer = tool("pufferlib_peer")
    report = tmp_path / "report.json"
    report.write_text(
        json.dumps(peer.make_report("puffer-bench", "breakout", "perf", 0.9, ROWS, {}, "t", 0, []))
    )
    args = [a.replace("RUN", str(run_dir)).replace("REPORT", str(report)) for a in args]
    no_work(monkeypatch, name)
    files = before(run_dir)
    code, err = exit_and_err(
        name,
        ["--cache", str(tmp_path / "cache"), *args] if "peer" in name and "crossplay" not in name else args,
        capsys,
    )
    assert code == 2 and err.count("\n") == 1 and str(run_dir) in err, err
    assert before(run_dir) == files


def test_a_damaged_curve_is_one_line_naming_its_line(tmp_path, run_dir, capsys):
    peer = tool("pufferlib_peer")
    curve = tmp_path / "c.jsonl"
    curve.write_text('{"agent_steps": 1, "seconds": 1.0}\n{"global_step": 2}\n')
    with pytest.raises(peer.PeerError, match=r"c.jsonl record 2 is not a line of a peer's curve"):
        peer.curve_rows(curve)
    (run_dir / "metrics.jsonl").write_text('{"global_step": 10, "uptime": 1.0}\n{"uptime": 2.0}\n')
    with pytest.raises(peer.PeerError, match=r"metrics.jsonl record 2 is not a line of our run's curve"):
        peer.our_rows(run_dir)
    (run_dir / "metrics.jsonl").write_text('{"global_step": 10, "uptime": 1.0}\n{"global_st')
    assert len(peer.our_rows(run_dir)[0]) == 1  # a line cut short by a kill: skipped, and said
    assert "skipped 1 damaged line" in capsys.readouterr().err
    (run_dir / "metrics.jsonl").write_text('{"global_step": 10, "uptime": 1.0}\n')
    (run_dir / "config.yaml").write_text("env_name: squared\nenv_name: breakout\n")
    with pytest.raises(peer.PeerError, match="key 'env_name' is given twice, on lines 1 and 2"):
        peer.our_rows(run_dir)


def test_noise_guard_rates_counts_flagged_steps_per_condition(tmp_path, capsys, monkeypatch):
    """The noise-guard tool on scripted checks: idle steps at the start's speed are not flagged, steps
    under a load (here one that makes every check 40 % slower) all are; the JSON has both rates."""
    import contextlib

    rates = tool("noise_guard_rates")
    loaded = []

    @contextlib.contextmanager
    def fake_load(condition, core, procs):
        loaded.append(condition != "idle")
        yield []
        loaded.append(False)

    base = {"int_mops": 10.0, "float_gflops": 3.0, "copy_gbs": 8.0}
    monkeypatch.setattr(rates, "load", fake_load)
    monkeypatch.setattr(
        rates.noise,
        "speed_check",
        lambda: {k: v * (0.6 if loaded and loaded[-1] else 1.0) for k, v in base.items()},
    )
    monkeypatch.setattr(
        rates.noise,
        "gate_check",
        lambda: [
            {k: base[k] * (0.6 if loaded and loaded[-1] else 1.0) for k in ("int_mops", "float_gflops")}
        ],
    )
    monkeypatch.setattr(rates, "machine", lambda: {"line": "test machine", "family/model/stepping": "x"})
    out = tmp_path / "rates.json"
    assert rates.main(["--runs", "1", "--steps", "3", "--conditions", "idle,cpu", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    idle, cpu = record["conditions"]["idle"], record["conditions"]["cpu"]
    assert (idle["flagged"], idle["steps"], idle["met"]) == (0, 3, True)
    assert (cpu["flagged"], cpu["steps"], cpu["met"]) == (3, 3, True)
    assert (idle["gate_flagged"], idle["gate_checks"], cpu["gate_flagged"], cpu["gate_checks"]) == (
        0,
        3,
        3,
        3,
    )
    assert record["settings"]["min_drop"] == rates.noise.MIN_DROP
    printed = capsys.readouterr().out
    assert "test machine" in printed and "wrote" in printed


def test_noise_guard_rates_rejudges_a_report_with_the_step_gate(tmp_path, capsys):
    """--rejudge: a report flagged under the old 85 %-of-best rule is judged by its steps' spread."""
    from appliance.bench import report as rpt

    r = rpt.Report({"name": "t", "definition": {}}, {"name": "cpu"}, {}, {}, seed=0, repeats=3)
    steps = r.data.setdefault("noise", {"steps": []})["steps"]
    for i, ratio in enumerate((1.0, 0.8, 0.82, 0.81, 0.5)):
        steps.append(
            {"step": f"s{i}", "speed": {"int_mops": 10 * ratio, "float_gflops": 3.0 * ratio, "copy_gbs": 8.0}}
        )
        steps[-1]["slow"] = "old" if ratio < 0.85 else None
    path = tmp_path / "r.json"
    path.write_text(json.dumps(r.data))
    assert tool("noise_guard_rates").main(["--rejudge", str(path)]) == 0
    out = capsys.readouterr().out
    assert "5 steps, 5 with a speed check; flagged then 4, now 1" in out, out
    code, err = exit_and_err("noise_guard_rates", ["--rejudge", str(tmp_path / "none.json")], capsys)
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err


def test_noise_guard_rates_rescores_a_record_with_the_two_loop_rule(tmp_path, capsys):
    """--rescore: a record's step checks judged again; one loop's dip no longer flags a step."""
    base = {"int_mops": 10.0, "float_gflops": 3.0, "copy_gbs": 8.0}
    steps = [base, {**base, "copy_gbs": 5.0}, {**base, "int_mops": 6.0, "copy_gbs": 5.0}]
    run = {"start_checks": [base] * 5, "step_checks": steps, "flagged": [[], ["copy_gbs"], ["copy_gbs", "int_mops"]],
           "others_cores_mean": 0.0, "steal_cores_mean": 0.0}  # fmt: skip
    record = {"machine": {"line": "m"}, "conditions": {"idle": {"runs": [run]}}}
    path = tmp_path / "rates.json"
    path.write_text(json.dumps(record))
    assert tool("noise_guard_rates").main(["--rescore", str(path)]) == 0
    out = capsys.readouterr().out
    assert "idle           1 of 3" in out, out


def test_squared_cells_counts_each_games_first_episodes_so_long_missed_ones_are_not_cut_off():
    # stopping at a total count kept the quick, reached targets and dropped the misses still running to
    # the time limit: a cell never reached showed no episodes at all (5,000 episodes over 1,024 games)
    tally = tool("squared_cells").Tally(size=3, games=2, per_game=2)
    targets, rewards = [0, 8], [1.0, -1.0]  # game 0: target in cell (0,0), reached; game 1: (2,2), missed
    for _ in range(3):  # game 0 ends an episode every step, game 1 one at its time limit
        tally.add([0], targets, rewards)
    assert not tally.done and tally.tries[0][0] == 2  # game 0's third episode is not counted
    tally.add([1], targets, rewards)
    assert not tally.done
    tally.add([0, 1], targets, rewards)
    assert tally.done and tally.tries.tolist() == [[2, 0, 0], [0, 0, 0], [0, 0, 2]]
    assert tally.wins.tolist() == [[2, 0, 0], [0, 0, 0], [0, 0, 0]]


def test_squared_cells_show_keeps_whole_episodes_of_one_target_cell():
    # the steps of an episode whose target sits in the cell asked for, from its first step to its end,
    # with the reward it ended on; other targets' episodes and steps are not kept
    paths = tool("squared_cells").Paths(cell=7, games=2, wanted=1)
    probs = [[0.9, 0.0, 0.0, 0.1, 0.0]] * 2
    paths.step(targets=[7, 3], positions=[60, 60], probs=probs, actions=[0, 4])
    paths.end([1], [0.0, 1.0])  # game 1 (target elsewhere) ended: nothing kept
    assert not paths.done and paths.kept == []
    paths.step(targets=[7, 5], positions=[59, 61], probs=probs, actions=[3, 4])
    paths.end([0], [-1.0, 0.0])
    assert paths.done and paths.kept == [(-1.0, [(60, probs[0], 0), (59, probs[0], 3)])]


def test_perturb_run_is_the_plain_run_to_its_epoch_and_another_after(tmp_path):
    # the resume experiment (docs/lab/learning.md) reads a perturbed run beside the plain one: that holds
    # only if the two are bit-identical up to the epoch and the seed change then reaches the update
    import subprocess

    import torch

    small = ["--vec.num-envs", "16", "--train.batch-size", "1024", "--train.minibatch-size", "512",
             "--train.max-minibatch-size", "512", "--train.checkpoint-interval", "1", "--stop-steps", "2048",
             "--train.data-dir", str(tmp_path)]  # fmt: skip
    cli = str(Path(sys.executable).parent / "puffer-bench")
    subprocess.run([cli, "train", "squared", "--run-id", "plain", *small], check=True, capture_output=True)
    tool_py = str(ROOT / "tools" / "perturb_run.py")
    out = subprocess.run([sys.executable, tool_py, "--at-epoch", "1", "--", "train", "squared", "--run-id", "pert",
                          *small], check=True, capture_output=True, text=True).stdout  # fmt: skip
    assert "after epoch 1 (1,024 agent-steps) actions and segments are drawn with seed 1000" in out

    def weights(run, epoch):
        return torch.load(tmp_path / run / f"model_{epoch:06d}.pt", weights_only=False)["model"]

    def same(epoch):
        a, b = weights("plain", epoch), weights("pert", epoch)
        return all(torch.equal(a[k], b[k]) for k in a)

    assert same(1) and not same(2)


def test_train_ab_calls_windows_with_the_hypervisors_steal_busy():
    """A window whose vCPUs the hypervisor gave away (0.37-0.50 cores of 2 in every window of one
    comparison) was reported idle, as only other processes' load was checked."""
    ab = tool("train_ab")
    quiet = {"others_cores": 0.0, "steal_cores": 0.0}
    assert ab.busy_reason({"A": [quiet], "B": [quiet]}) is None
    stolen = ab.busy_reason({"A": [quiet], "B": [{"others_cores": 0.01, "steal_cores": 0.46}]})
    assert stolen is not None and "the hypervisor stole" in stolen and "other processes" not in stolen
    both = ab.busy_reason({"A": [{"others_cores": 0.9, "steal_cores": 0.3}], "B": [{"others_cores": None}]})
    assert both is not None and "other processes were busy" in both and "the hypervisor stole" in both


def test_pufferlib_peer_speed_windows_warn_of_the_hypervisors_steal():
    peer = tool("pufferlib_peer")
    quiet = {"others_cores": 0.0, "steal_cores": 0.0}
    assert peer.busy_warnings([quiet, {"others_cores": None}], (0.25, 0.10)) == []
    warnings = peer.busy_warnings([quiet, {"others_cores": 0.01, "steal_cores": 0.5}], (0.25, 0.10))
    assert len(warnings) == 1 and warnings[0].startswith("the hypervisor stole up to 0.50 cores")


def test_train_ab_gives_each_variant_its_own_train_options_and_both_the_shared_ones(tmp_path, monkeypatch):
    """--a-arg/--b-arg reach their own side's windows alone (the rounds alternate sides, so a mix-up
    would time A's size as B's), --train-arg both, and the report names them. Without revisions no
    git is needed (the CPU image has none: its end-of-run worktree prune once failed the whole run)."""
    ab = tool("train_ab")
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools-here"))
    seen = []

    def window(env, variant, steps, train_args, scratch, tree):
        seen.append((variant.get("SIDE"), list(train_args)))
        return {"sps": 100.0 if variant.get("SIDE") == "a" else 150.0, "phases_s": {}, "others_cores": 0.0}

    monkeypatch.setattr(ab, "window", window)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the tool puts the repository first for its imports
    out = tmp_path / "ab.json"
    args = ["squared", "--a", "SIDE=a", "--b", "SIDE=b", "--rounds", "2", "--train-arg=--train.seed=3",
            "--a-arg=--policy.hidden-size=96", "--b-arg=--policy.hidden-size=64", "--out", str(out)]  # fmt: skip
    assert ab.main(args) == 0
    assert [side for side, _ in seen] == ["a", "b", "b", "a"]
    for side, train_args in seen:
        size = "96" if side == "a" else "64"
        assert train_args == ["--train.seed", "3", "--policy.hidden-size", size]
    report = json.loads(out.read_text())
    assert report["variant_args"] == {
        "A": ["--policy.hidden-size", "96"],
        "B": ["--policy.hidden-size", "64"],
    }
    assert report["median_ratio"] == 1.5
