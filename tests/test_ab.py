"""puffer-bench ab: variants parse, run interleaved A B A B, and report B/A with an interval."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from click.testing import CliRunner

from appliance.cli import cli
from appliance.compare import ab, abvariants
from appliance.errors import ConfigError


def tiny_suite(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(
        yaml.safe_dump(
            {"name": "tiny", "seconds": 0.1, "gate": False, "env_sps": {"envs": ["squared"], "threads": [1]}}
        )
    )
    return path


def test_variants_parse_and_bad_ones_say_why(tmp_path):
    assert ab.parse_variant("base").kind == "config"
    v = ab.parse_variant("vec.num_envs=16,train.seed=2")
    assert v.overrides == {"vec": {"num_envs": "16"}, "train": {"seed": "2"}}
    assert ab.parse_variant("git:HEAD~1").ref == "HEAD~1"
    assert ab.parse_variant("image:puffer-bench:cpu").image == "puffer-bench:cpu"
    cfg = tmp_path / "c.yaml"
    cfg.write_text("vec: {num_envs: 8}\n")
    assert ab.parse_variant(str(cfg)).config_file == str(cfg)
    for bad, message in (("nonsense", "none of"), ("git:", "needs a commit"), ("x.yaml", "no such config")):
        with pytest.raises(ConfigError, match=message):
            ab.parse_variant(bad)


def test_ab_interleaves_configs_and_reports_the_ratio(tmp_path):
    out = tmp_path / "ab.json"
    result = CliRunner().invoke(
        cli,
        ["ab", "base", "vec.num_envs=4", "--suite", str(tiny_suite(tmp_path)), "--gpu", "cpu", "--rounds", "2",
         "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["schema"] == ab.SCHEMA and data["order"] == ["A1", "B1", "A2", "B2"]
    m = data["metrics"]["env_sps/squared/threads=1"]
    assert len(m["a"]) == len(m["b"]) == 2 and m["ratio"] > 0 and m["ci"][0] <= m["ratio"] <= m["ci"][1]
    assert m["verdict"] in (
        "B better", "B worse", "possibly B better", "possibly B worse", "no clear difference", ab.UNRELIABLE
    )  # fmt: skip
    assert "B / A" in out.with_suffix(".md").read_text()


def test_ab_judges_its_metrics_together():
    """Of 20 metrics one differs as one in 20 does by chance (p about 0.03 alone): "possibly B
    worse"; one that halved is "B worse" among 20 too."""

    def metric(name, a, b):
        return {"name": name, "a": a, "b": b}

    rows = [metric(f"env_sps/e{i}/threads=1", [100.0, 101, 99], [100.5, 99.5, 100]) for i in range(18)]
    rows += [metric("env_sps/chance/threads=1", [100.0, 104, 96], [90.0, 93.6, 86.4])]
    rows += [metric("env_sps/half/threads=1", [100.0, 100.5, 99.5], [50.0, 50.2, 49.8])]
    rounds_out = [
        {"side": side, "round": r, "report": {"metrics": {
            m["name"]: {"unit": "agent-steps/s", "better": "higher", "median": m["a" if side == "A" else "b"][r]}
            for m in rows
        }}}
        for r in range(3)
        for side in ("A", "B")
    ]  # fmt: skip
    result = ab.summarize_rounds({}, rounds_out, {"name": "tiny"}, {}, {"profile": "cpu"}, 3)
    verdicts = {name: m["verdict"] for name, m in result["metrics"].items()}
    assert verdicts["env_sps/chance/threads=1"] == "possibly B worse"
    assert verdicts["env_sps/half/threads=1"] == "B worse"
    assert set(verdicts.values()) == {"no clear difference", "possibly B worse", "B worse"}


def test_ab_refuses_mixed_kinds_and_one_round(tmp_path):
    runner = CliRunner()
    mixed = runner.invoke(cli, ["ab", "base", "git:HEAD", "--suite", str(tiny_suite(tmp_path))])
    assert mixed.exit_code == 2 and "like with like" in mixed.output
    one = runner.invoke(cli, ["ab", "base", "base", "--rounds", "1"])
    assert one.exit_code == 2 and "at least 2 rounds" in one.output


def test_git_variants_run_each_commit_in_its_worktree(tmp_path):
    """The commands a git: variant runs, with a fake executor standing in for git, the build and the run."""
    calls = []

    def fake(cmd, **kw):
        calls.append((cmd, kw))
        if abvariants.CLI_MAIN in cmd:  # the round: write the report the real `run` would
            from appliance.bench import report as rpt
            from appliance.sysinfo import fingerprint

            out = cmd[cmd.index("--out") + 1]
            r = rpt.Report(
                {"name": "tiny"}, {"name": "cpu"}, fingerprint(calibration=False), {}, seed=0, repeats=1
            )
            r.add("env_sps/squared/threads=1", [100.0 + len(calls)], "agent-steps/s")
            rpt.write(
                r.data, rpt.output_stem(out, "cpu", r.data["fingerprint"], r.data["created_utc"]), plots=False
            )
        return SimpleNamespace(returncode=0, stdout="", stderr="")

    options = {"profile": "cpu", "suite_arg": "tiny", "envs": None, "seconds": None}
    side = ab.Subprocess(ab.parse_variant("git:abc123"), options, execute=fake, root=tmp_path)
    side.prepare()
    data = side.round(0)
    side.close()
    prunes = [c for c in calls if c[0][-2:] == ["worktree", "prune"]]
    assert len(prunes) == 2  # before adding (what killed runs left) and after removing
    calls[:] = [c for c in calls if c not in prunes]
    assert calls[0][0][-3:-1] == ["--detach", str(side.tmp / "tree")] and calls[0][0][-1] == "abc123"
    assert (
        calls[1][0][1:] == ["setup.py", "build_ext", "--inplace"] and calls[1][1]["cwd"] == side.tmp / "tree"
    )
    run_cmd, kw = calls[2]
    assert run_cmd[1:4] == ["-c", abvariants.CLI_MAIN, "run"] and "--repeats" in run_cmd
    assert kw["env"]["PYTHONPATH"] == str(side.tmp / "tree")
    assert calls[3][0][-4:-1] == ["worktree", "remove", "--force"] and not side.tmp.exists()
    # the fake's value: 100 + its calls so far (prune, add, build, run)
    assert data["metrics"]["env_sps/squared/threads=1"]["median"] == 104.0


AB_PARENT = """
import os, subprocess, sys
from pathlib import Path
from appliance.compare import ab
out = Path(sys.argv[1])
sleeper = "import os, time; open(%r, 'w').write(str(os.getpid())); time.sleep(1000)" % str(out / "round.pid")

def execute(cmd, **kw):  # the round's command stands in for puffer-bench run, with the round's options
    return subprocess.run([sys.executable, "-c", sleeper], **{k: v for k, v in kw.items() if k != "env"})

side = ab.Subprocess(ab.parse_variant("git:abc123"), {"profile": "cpu", "suite_arg": "quick"}, execute=execute)
side.tree = out
side.round(0)
"""


def test_a_round_dies_with_an_ab_killed_outright(tmp_path):
    """A commit's round (puffer-bench run in a process of its own) ran on after SIGKILL to ab."""
    import sys
    import time

    import psutil

    parent = subprocess.Popen(
        [sys.executable, "-c", AB_PARENT, str(tmp_path)],
        cwd=Path(__file__).parents[1],
        env={**os.environ, "TMPDIR": str(tmp_path)},  # ab's own temp folder, which a SIGKILL leaves
    )
    pid_file, child = tmp_path / "round.pid", None
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            assert parent.poll() is None and time.monotonic() < deadline, "the round never started"
            time.sleep(0.05)
        child = psutil.Process(int(pid_file.read_text()))
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        _, alive = psutil.wait_procs([child], timeout=10)
        assert not alive, "the round outlived ab"
    finally:
        if child is not None and child.is_running():
            child.kill()
        if parent.poll() is None:
            parent.kill()


def test_the_command_a_git_round_runs_starts_the_cli():
    """The fake above stands in for the run; this runs the very command line (a commit's CLI, module or
    package), so a layout change cannot break git: rounds unseen."""
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", abvariants.CLI_MAIN, "run", "--help"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert "Usage: puffer-bench run" in result.stdout


def test_git_worktree_failure_is_one_line(tmp_path):
    def failing(cmd, **kw):
        return subprocess.CompletedProcess(cmd, 128, "", "fatal: invalid reference: nope")

    side = ab.Subprocess(ab.parse_variant("git:nope"), {"profile": "cpu"}, execute=failing, root=tmp_path)
    with pytest.raises(ConfigError, match="invalid reference"):
        side.prepare()
    side.close()


def test_a_machine_without_git_gets_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on it
    side = ab.Subprocess(ab.parse_variant("git:HEAD"), {"profile": "cpu"}, root=tmp_path)
    with pytest.raises(ConfigError, match="need git on PATH"):
        side.prepare()
    side.close()


def test_image_variants_run_the_suite_inside_the_image(tmp_path, monkeypatch):
    import appliance.container as container
    from appliance.bench import report as rpt
    from appliance.sysinfo import fingerprint

    seen = []

    def fake_run_in_container(image, args, results):
        seen.append((image, args))
        r = rpt.Report(
            {"name": "quick"}, {"name": "cpu"}, fingerprint(calibration=False), {}, seed=0, repeats=1
        )
        r.add("env_sps/squared/threads=1", [100.0 * len(seen)], "agent-steps/s")
        rpt.write(
            r.data, rpt.output_stem(results, "cpu", r.data["fingerprint"], r.data["created_utc"]), plots=False
        )
        return 0

    monkeypatch.setattr(container, "run_in_container", fake_run_in_container)
    options = {"profile": "cpu", "suite_arg": "quick", "envs": ["squared"], "seconds": 0.5}
    side = ab.Subprocess(ab.parse_variant("image:puffer-bench:cpu"), options)
    side.prepare()
    first, second = side.round(0), side.round(1)
    side.close()
    assert [s[0] for s in seen] == ["puffer-bench:cpu"] * 2
    args = seen[0][1]
    assert (
        args[:3] == ["run", "--suite", "quick"] and "--out" not in args and args[-2:] == ["--seconds", "0.5"]
    )
    assert first["metrics"]["env_sps/squared/threads=1"]["median"] == 100.0
    assert second["metrics"]["env_sps/squared/threads=1"]["median"] == 200.0


# ----------------------------------------------------------------------------- nothing lost,
# nothing left behind


@pytest.fixture
def no_default_stop():
    """A stop signal nobody handles fails the test instead of killing pytest."""

    def unhandled(signum, frame):
        raise AssertionError(f"{signal.Signals(signum).name} was not handled")

    previous = {s: signal.signal(s, unhandled) for s in (signal.SIGTERM, signal.SIGHUP)}
    yield
    for s, handler in previous.items():
        signal.signal(s, handler)


def test_an_unwritable_out_is_refused_before_the_first_round(tmp_path, monkeypatch):
    monkeypatch.setattr(ab.InProcess, "round", lambda *a: pytest.fail("measured before checking --out"))
    result = CliRunner().invoke(
        cli,
        ["ab", "base", "vec.num_envs=4", "--suite", str(tiny_suite(tmp_path)), "--out", "/proc/x/ab.json"],
    )
    assert result.exit_code == 2 and "--out /proc/x/ab.json: cannot write into /proc/x" in result.output, (
        result.output
    )


def test_ctrl_c_during_ab_is_one_line_and_keeps_the_rounds_measured(tmp_path, monkeypatch):
    real, calls = ab.InProcess.round, [0]

    def round_(self, index):
        calls[0] += 1
        if calls[0] == 3:  # A of round 2
            os.kill(os.getpid(), signal.SIGINT)
        return real(self, index)

    monkeypatch.setattr(ab.InProcess, "round", round_)
    out = tmp_path / "ab.json"
    result = CliRunner().invoke(
        cli, ["ab", "base", "vec.num_envs=4", "--suite", str(tiny_suite(tmp_path)), "--gpu", "cpu", "--rounds", "2",
              "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 128 + signal.SIGINT, result.output + result.stderr
    assert "Aborted!" not in result.output + result.stderr and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"interrupted (SIGINT) in round 2/2 (A): kept 2 of 4 runs in {out} (marked partial)"
    )
    data = json.loads(out.read_text())
    assert data["partial"]["signal"] == "SIGINT" and data["order"] == ["A1", "B1"]
    assert len(data["metrics"]["env_sps/squared/threads=1"]["a"]) == 1
    assert "partial" in out.with_suffix(".md").read_text()


def report_sigint(conn):
    conn.send(signal.getsignal(signal.SIGINT) == signal.SIG_IGN)


def test_processes_started_under_the_guard_ignore_ctrl_c_from_their_first_instruction():
    """A Ctrl-C reaches the whole process group; a spawned child still importing printed a
    KeyboardInterrupt traceback. Now it starts with SIGINT ignored, and the parent's Ctrl-C waits."""
    import multiprocessing

    from appliance.vector.mp import children_ignore_sigint

    got = []
    previous = signal.signal(signal.SIGINT, lambda s, f: got.append(s))
    try:
        ctx = multiprocessing.get_context("spawn")
        ours, theirs = ctx.Pipe(duplex=False)
        with children_ignore_sigint():
            proc = ctx.Process(target=report_sigint, args=(theirs,))
            proc.start()
            os.kill(proc.pid, signal.SIGINT)  # while it boots
            os.kill(os.getpid(), signal.SIGINT)  # the parent's own: delivered after the block
            assert not got
        assert ours.recv() is True
        proc.join(30)
        assert proc.exitcode == 0 and got == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, previous)


def _git_repo(path):
    path.mkdir()
    for args in (
        ["init", "-q"],
        ["-c", "user.email=a@b", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "x"],
    ):
        subprocess.run(["git", "-C", str(path), *args], check=True)
    return path


def _worktrees(repo):
    out = subprocess.run(
        ["git", "-C", str(repo), "worktree", "list", "--porcelain"], capture_output=True, text=True
    )
    return [line for line in out.stdout.splitlines() if line.startswith("worktree ")]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git on PATH for real worktrees")
def test_sigterm_during_a_git_ab_removes_and_prunes_both_worktrees(tmp_path, monkeypatch, no_default_stop):
    import tempfile

    import appliance.paths

    repo = _git_repo(tmp_path / "repo")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setattr(appliance.paths, "checkout_root", lambda: repo)
    # a worktree an ab run killed with SIGKILL left behind: its owner lock is free
    abandoned = Path(tempfile.mkdtemp(prefix=abvariants.TMP_PREFIX))
    (abandoned / abvariants.OWNER).write_text("")
    subprocess.run(
        ["git", "-C", str(repo), "worktree", "add", "-q", "--detach", str(abandoned / "tree")], check=True
    )
    assert len(_worktrees(repo)) == 2
    seen = []

    def execute(cmd, **kw):
        if cmd[0] == "git":
            return subprocess.run(cmd, **kw)
        if abvariants.CLI_MAIN in cmd:  # A's first round: a scheduler stops the job
            seen.append(len(_worktrees(repo)))
            os.kill(os.getpid(), signal.SIGTERM)
            raise AssertionError("SIGTERM was not raised here")
        return SimpleNamespace(returncode=0, stdout="", stderr="")  # the build

    monkeypatch.setattr(abvariants, "_read_round", lambda *a: pytest.fail("no round completes"))
    result = ab.run("git:HEAD", "git:HEAD", "quick", 2, "cpu", execute=execute)
    assert result["partial"] == {"signal": "SIGTERM", "where": "in round 1/2 (A)", "runs": 0, "planned": 4}
    assert seen[0] == 3, "A and B had their worktrees; the abandoned one was gone"
    assert _worktrees(repo) == [f"worktree {repo}"]
    assert list(scratch.iterdir()) == []


def test_config_rounds_train_on_the_variants_seed_plus_the_round(tmp_path):
    """A learning step's rounds drew the same seed (0) every round, whatever train.seed the variant
    set: round k now trains on the variant's train.seed + k, on both sides alike."""
    from appliance.sysinfo import fingerprint

    seen = []

    class Runner:  # stands in for the suite runner: records the seed the round's report carries
        def __init__(self, suite, profile, report, *rest):
            self.report = report

        def run_all(self):
            seen.append(self.report.data["seed"])

        def resolved_configs(self):
            return {}

    (tmp_path / "v.yaml").write_text("train:\n  seed: 5\n")
    (tmp_path / "bad.yaml").write_text("train:\n  seed: one\n")
    fp = fingerprint(calibration=False)
    for spec, want in (("base", [0, 1]), ("train.seed=7", [7, 8]), (str(tmp_path / "v.yaml"), [5, 6])):
        seen.clear()
        side = abvariants.InProcess(ab.parse_variant(spec), {"name": "tiny"}, fp, {"profile": "cpu"})
        side.cls = Runner
        side.round(0)
        side.round(1)
        assert seen == want, spec
    with pytest.raises(ConfigError, match="not an integer"):
        abvariants.InProcess(
            ab.parse_variant(str(tmp_path / "bad.yaml")), {"name": "tiny"}, fp, {"profile": "cpu"}
        )
