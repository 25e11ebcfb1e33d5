"""Run folders and --nproc: one claim and lock for every entry point, default run
ids that never collide, nothing left behind by a run that trains nothing, ranks that stop like one
process, and every numeric option of every command checked before any work."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from appliance.cli import cli
from appliance.errors import ConfigError
from appliance.train import checkpoint, launcher, runs

SMALL = [
    "--no-dashboard", "--train.device", "cpu", "--vec.num-envs", "8", "--train.bptt-horizon", "8",
    "--train.minibatch-size", "64", "--policy.hidden-size", "32", "--train.total-timesteps", "128",
]  # fmt: skip
SAFE = re.compile(r"[A-Za-z0-9._-]+")


def cli_run(*args):
    return CliRunner().invoke(cli, list(args))


def train(data, *extra, env="squared"):
    return cli_run("train", env, *SMALL, "--train.data-dir", str(data), *extra)


def one_line(result) -> str:
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def metric_steps(run) -> list[int]:
    return [json.loads(line)["global_step"] for line in (run / runs.METRICS).read_text().splitlines()]


def folders(data) -> list[str]:
    return sorted(p.name for p in data.iterdir() if p.is_dir()) if data.exists() else []


# ----------------------------------------------------------------------------- run folders


def test_a_named_run_folder_that_holds_a_run_is_refused_and_left_as_it_was(tmp_path):
    data = tmp_path / "exp"
    assert train(data, "--run-id", "r1").exit_code == 0
    run = data / "r1"
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.name != runs.LOCK}
    result = train(data, "--run-id", "r1")
    assert result.exit_code == 2
    assert one_line(result) == (
        f"error: {run} holds a run (epoch 2); pass --resume r1 to continue it or another --run-id"
    )
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.name != runs.LOCK} == before
    assert train(data, "--resume", "r1", "--train.total-timesteps", "192").exit_code == 0  # as it says


def test_a_named_folder_with_metrics_but_no_checkpoint_is_refused_too(tmp_path):
    run = tmp_path / "exp" / "r1"
    run.mkdir(parents=True)
    (run / runs.METRICS).write_text('{"epoch": 1}\n')
    result = train(tmp_path / "exp", "--run-id", "r1")
    assert result.exit_code == 2
    assert "holds a run that wrote no checkpoint (metrics.jsonl)" in one_line(result)
    assert (run / runs.METRICS).read_text() == '{"epoch": 1}\n'


def test_a_run_records_each_sessions_machine_with_the_cpu_kind_it_emulated(tmp_path, monkeypatch):
    # a report read from the folder later, on another machine or without PUFFER_CPU_KIND, must still
    # say where and as which kind the run trained: the reader's own fingerprint said neither
    from appliance.sysinfo.cpu import TORCH_CAPS

    monkeypatch.setenv("PUFFER_CPU_KIND", "older")
    for variable, caps in TORCH_CAPS.items():  # as the command line sets them, restored after the test
        monkeypatch.setenv(variable, caps["older"])
    data = tmp_path / "exp"
    assert train(data, "--run-id", "r1").exit_code == 0
    assert train(data, "--resume", "r1", "--train.total-timesteps", "192").exit_code == 0
    sessions = runs.machines(data / "r1")
    assert [s["global_step"] for s in sessions] == [0, 128]  # the resumed session from its checkpoint
    for s in sessions:
        cpu = s["fingerprint"]["cpu"]
        assert s["fingerprint"]["host_hash"] and cpu["kind"] and cpu["emulated_kind"] in ("older", None)
        assert (
            cpu["library_caps"]["MKL_ENABLE_INSTRUCTIONS"] == TORCH_CAPS["MKL_ENABLE_INSTRUCTIONS"]["older"]
        )
    if sessions[0]["fingerprint"]["cpu"]["kind"] != "older":  # None only on a CPU of that kind itself
        assert sessions[0]["fingerprint"]["cpu"]["emulated_kind"] == "older"


def test_the_machine_record_is_read_before_the_runs_clock_starts(tmp_path, monkeypatch):
    # py-cpuinfo takes about a second: read after the trainer was built, it counted in the run's uptime,
    # the seconds every time-to-score figure is read from
    import appliance.sysinfo as sysinfo
    from appliance.train.trainer import Trainer

    calls, at_init = [], []
    real, init = sysinfo.fingerprint, Trainer.__init__
    monkeypatch.setattr(sysinfo, "fingerprint", lambda *a, **k: calls.append(k) or real(*a, **k))

    def spy(self, *args, **kwargs):
        at_init.append(len(calls))
        init(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "__init__", spy)
    assert train(tmp_path / "exp", "--run-id", "r1").exit_code == 0
    assert at_init == [1] and calls == [{"calibration": False}]  # read once, before the trainer
    [session] = runs.machines(tmp_path / "exp" / "r1")
    assert session["fingerprint"]["versions"]["torch_threads"] >= 1  # as chosen for the run


def test_a_machine_read_that_failed_ahead_is_read_again_and_a_foreign_record_file_is_refused(
    tmp_path, monkeypatch
):
    import appliance.sysinfo as sysinfo

    real, calls = sysinfo.fingerprint, []

    def flaky(*args, **kwargs):  # fails on the thread that reads ahead, works when read again
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("no counters")
        return real(*args, **kwargs)

    monkeypatch.setattr(sysinfo, "fingerprint", flaky)
    data = tmp_path / "exp"
    assert train(data, "--run-id", "r1").exit_code == 0
    assert len(calls) == 2 and len(runs.machines(data / "r1")) == 1
    (data / "r1" / runs.MACHINES).write_text("not a record\n")  # not ours: never appended to
    result = train(data, "--resume", "r1", "--train.total-timesteps", "192")
    assert result.exit_code == 2 and "machines.jsonl is not a JSON-lines file" in one_line(result)
    assert (data / "r1" / runs.MACHINES).read_text() == "not a record\n"


def test_a_run_folder_without_a_machines_record_reads_as_none_and_a_torn_line_is_skipped(tmp_path):
    assert runs.machines(tmp_path) == []  # a run from before the trainer wrote it
    (tmp_path / runs.MACHINES).write_text('{"global_step": 0, "fingerprint": {"host_hash": "a"}}\n{"glob')
    assert [s["fingerprint"]["host_hash"] for s in runs.machines(tmp_path)] == ["a"]


@pytest.mark.parametrize("run_id", ["a/b", "../up", "latest", ".hidden", "x:y"])
def test_a_run_id_that_is_not_one_safe_folder_name_is_refused(tmp_path, run_id):
    result = train(tmp_path / "exp", "--run-id", run_id)
    assert result.exit_code == 2 and "is not a run folder name" in one_line(result)
    assert folders(tmp_path / "exp") == [] and not (tmp_path / "up").exists()


@pytest.fixture
def same_second(monkeypatch):
    """Every default run id made in the test gets the same UTC second."""
    monkeypatch.setattr(runs.time, "strftime", lambda fmt, t=None: "20260101-000000")


def test_runs_started_in_the_same_second_get_their_own_folders(tmp_path, same_second):
    data = tmp_path / "exp"
    with runs.locked(data / "squared-20260101-000000"):  # a run that is still starting
        second = train(data)
        assert second.exit_code == 0, second.output
        third = train(data)
        assert third.exit_code == 0, third.output
    assert folders(data) == [f"squared-20260101-000000{n}" for n in ("", "-2", "-3")]
    for name in folders(data)[1:]:  # one run each: steps never go back (two runs in one file would)
        steps = metric_steps(data / name)
        assert steps == sorted(steps) and steps[-1] == 128, steps


def test_a_run_that_fails_before_training_leaves_no_folder(tmp_path):
    data = tmp_path / "exp"
    for extra in ([], ["--run-id", "named"]):
        result = train(data, "--train.minibatch-size", "7", *extra)  # refused when the trainer is built
        assert result.exit_code == 2 and "minibatch_size" in one_line(result)
    assert folders(data) == []


def test_a_named_empty_folder_is_used_and_tidied_when_nothing_trained(tmp_path):
    run = tmp_path / "exp" / "mine"
    run.mkdir(parents=True)
    assert train(tmp_path / "exp", "--run-id", "mine", "--train.minibatch-size", "7").exit_code == 2
    assert run.is_dir() and list(run.iterdir()) == []  # the user's folder stays, empty as it was
    assert train(tmp_path / "exp", "--run-id", "mine").exit_code == 0
    assert (run / runs.MODEL).is_file()


def test_run_folders_named_from_env_specs_are_safe_in_a_shell(tmp_path):
    assert runs.run_name("spread:make") == "spread-make"
    assert runs.run_name("ALE/Pong-v5") == "ALE-Pong-v5"
    data = tmp_path / "exp"
    result = train(
        data, "--vec.backend", "serial", "--vec.num-envs", "2", "--train.minibatch-size", "16",
        "--train.total-timesteps", "16", env="appliance.testing:ColourBandit",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (name,) = folders(data)
    assert SAFE.fullmatch(name) and name.startswith("appliance.testing-ColourBandit-"), name
    assert (data / "latest").read_text() == name


# ----------------------------------------------------------------------------- numeric options

# The arguments a command needs before its options are looked at.
ARGUMENTS = {
    "envs show": ["squared"],
    "envs build": ["ocean/NAME"],
    "history": ["env_sps/breakout/threads=1"],
    "publish": ["reports", "--out", "site"],
    "share": ["a.json", "--to", "shared"],
    "autotune": ["squared"],
    "compare": ["a.json", "b.json"],
    "ab": ["a", "b"],
}
# Options where 0 is a value with a meaning (the rest must refuse it).
ZERO_MEANS = {
    "--node-rank": "the first machine",
    "--master-port": "a free port",
    "--seed": "seed 0",
    "--step-us": "steps that do not wait",
    "--forward-ms": "no simulated policy time",
    "--wait-quiet": "one look at the load, no wait",
}
BAD = ["-1", "nan", "inf", "-inf", "1e300", "1" + "0" * 30, "ten"]


def commands(group=cli, prefix=()):
    import click

    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from commands(command, (*prefix, name))
        yield (*prefix, name), command


def numeric_options():
    """(command, option, type) of every option that takes a number, whatever its type."""
    import click

    from appliance.cli.common import IntList, Number

    numeric = (Number, IntList, click.types.IntParamType, click.types.FloatParamType)
    return [
        (" ".join(path), param.opts[0], param.type)
        for path, command in commands()
        for param in command.params
        if isinstance(param, click.Option) and not param.is_flag and isinstance(param.type, numeric)
    ]


def test_every_numeric_option_has_a_checked_type():
    from appliance.cli.common import IntList, Number

    options = numeric_options()
    unchecked = [f"{c} {o}" for c, o, kind in options if not isinstance(kind, Number | IntList)]
    assert not unchecked, f"use common.Number or IntList for {unchecked}"
    names = {(c, o) for c, o, _ in options}
    for expected in [("autotune", "--seconds"), ("vector-bench", "--seconds"), ("train", "--nproc"),
                     ("train", "--master-port"), ("envs sps", "--threads"), ("sweep", "--parallel")]:  # fmt: skip
        assert expected in names
    assert len(names) >= 30, sorted(names)


@pytest.mark.parametrize("command,option,kind", numeric_options(), ids=lambda v: str(v).replace(" ", "-"))
def test_bad_numbers_are_one_line_and_exit_2_before_any_work(command, option, kind, tmp_path, monkeypatch):
    from appliance.cli.common import Number

    monkeypatch.chdir(tmp_path)  # anything a command wrote would land here

    values = [*BAD, "0"] if option not in ZERO_MEANS else BAD
    if option in ZERO_MEANS:  # and it is a value the option takes
        assert isinstance(kind, Number) and kind.convert("0", None, None) == 0
    for value in values:
        result = CliRunner().invoke(cli, [*command.split(), *ARGUMENTS.get(command, []), f"{option}={value}"])
        assert result.exit_code == 2, (command, option, value, result.output)
        assert one_line(result).startswith(f"error: {option}: "), (command, option, value)
    assert list(tmp_path.iterdir()) == []


def options_of_type(kind):
    """(command, option) of every option or argument of type ``kind``, as ``cli ...`` would take it."""
    import click

    return [
        (" ".join(path), param.opts[0] if isinstance(param, click.Option) else None)
        for path, command in commands()
        for param in command.params
        if isinstance(param.type, kind)
    ]


def invoke(command, option, value):
    words = [*command.split(), *ARGUMENTS.get(command, [])]
    return cli_run(*words, *([f"{option}={value}"] if option else [value]))


def test_every_list_of_names_refuses_empty_blank_and_twice(tmp_path, monkeypatch):
    """``run --envs ''`` ran the whole suite, ``envs sps ''`` every env."""
    from appliance.cli.common import NameList

    monkeypatch.chdir(tmp_path)
    options = options_of_type(NameList)
    assert {("run", "--envs"), ("ab", "--envs"), ("envs sps", None)} <= set(options)
    for command, option in options:
        for value, says in [("", "is empty"), (",", "is empty"), ("squared,,go", "empty name"),
                            ("squared,squared", "names squared twice")]:  # fmt: skip
            result = invoke(command, option, value)
            assert result.exit_code == 2 and says in one_line(result), (command, option, value, result.output)
    assert list(tmp_path.iterdir()) == []


def test_every_gpu_option_refuses_an_empty_or_unknown_profile_before_any_work(tmp_path, monkeypatch):
    """``--gpu ''`` was taken as "detect" by every command."""
    from appliance.cli.common import ProfileName

    monkeypatch.chdir(tmp_path)
    options = options_of_type(ProfileName)
    assert len(options) >= 8 and ("train", "--gpu") in options and ("config", "--gpu") in options
    for command, option in options:
        for value in ["", "nosuch", " cpu"]:
            result = invoke(command, option, value)
            assert result.exit_code == 2, (command, value, result.output)
            assert one_line(result).startswith("error: --gpu: unknown hardware profile"), (command, value)
    assert list(tmp_path.iterdir()) == []


def test_every_option_and_argument_refuses_an_empty_value_before_any_work(tmp_path, monkeypatch):
    """``train --resume ''`` started a new run, ``run --container ''`` ran here, ``envs show --gif ''``
    wrote no GIF: an empty value was taken as the option left out."""
    import click

    monkeypatch.chdir(tmp_path)
    tried = 0
    for path, command in commands():
        name = " ".join(path)
        if isinstance(command, click.Group):
            continue
        arguments = [p for p in command.params if isinstance(p, click.Argument)]
        for param in command.params:
            if getattr(param, "is_flag", False) or isinstance(param.type, click.types.UnprocessedParamType):
                continue
            words = list(ARGUMENTS.get(name, []))
            if isinstance(param, click.Option) and param.nargs > 1:  # --pair BASE NEW: the first empty
                words += [param.opts[0], "", *["x.json"] * (param.nargs - 1)]
            elif isinstance(param, click.Option):
                words.append(f"{param.opts[0]}=")
            else:
                words[arguments.index(param) : arguments.index(param) + 1] = [""]
            result = cli_run(*path, *words)
            assert result.exit_code == 2, (name, param.name, result.output)
            shown = param.opts[0] if isinstance(param, click.Option) else (param.name or "").upper()
            line = one_line(result)
            assert line.startswith(f"error: {shown}: ") and "''" in line, (name, line)
            tried += 1
    assert tried >= 60
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", ["0", "1,0", "257", "", "1,,2", "auto,1"])
def test_autotune_buffers_are_refused_before_any_candidate_is_timed(value):
    result = cli_run("autotune", "squared", "--buffers", value)
    assert result.exit_code == 2 and one_line(result).startswith("error: --buffers: "), result.output


def test_options_a_command_would_ignore_or_oversubscribe_are_refused_in_one_line():
    from appliance.vector.sizes import usable_cores

    cores = usable_cores()
    result = cli_run("envs", "sps", "squared", "--threads", f"1,{cores + 1}")
    assert result.exit_code == 2 and f"'{cores + 1}' is out of range" in one_line(result)
    result = cli_run("vector-bench", "--env", "breakout", "--step-us", "5")
    assert result.exit_code == 2 and "--step-us times a test env of its own" in one_line(result)
    result = cli_run("vector-bench", "--env", "ocean:nosuch")
    assert result.exit_code == 2 and "unknown Ocean env 'nosuch'" in one_line(result)


@pytest.mark.parametrize(
    "args, says",
    [
        (["--node-rank", "5"], "--node-rank 5: --nnodes 1 numbers the machines 0..0"),
        (["--nnodes", "2", "--node-rank", "2", "--master-port", "29500"], "--node-rank 2: --nnodes 2"),
        (["--master-port", "29500"], "--master-port 29500 is for a job of several ranks"),
        (["--nnodes", "2", "--master-port", "29500", "--master-addr", " "], "--master-addr: ' ' is empty"),
    ],
)
def test_launch_options_one_process_would_ignore_are_refused_before_training(tmp_path, args, says):
    """``train --node-rank 5`` on one process trained silently."""
    result = train(tmp_path / "exp", *args)
    assert result.exit_code == 2 and says in one_line(result)
    assert folders(tmp_path / "exp") == []


# ----------------------------------------------------------------------------- stop signals


def send_sigint_while(monkeypatch, module, name):
    """Ctrl-C arrives while ``module.name`` runs (e.g. while the envs start)."""
    real = getattr(module, name)

    def interrupted(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, interrupted)


def test_ctrl_c_while_the_envs_start_is_one_line_and_keeps_nothing(tmp_path, monkeypatch):
    from appliance import vector

    send_sigint_while(monkeypatch, vector, "make_from_config")
    result = train(tmp_path / "exp")
    assert result.exit_code == 130
    assert one_line(result) == (
        "error: interrupted (SIGINT) before the first epoch ended: nothing was trained; nothing was kept"
    )
    assert folders(tmp_path / "exp") == []


def test_ctrl_c_in_the_first_rollout_of_a_resumed_run_keeps_its_checkpoint_as_it_was(tmp_path, monkeypatch):
    from appliance.train import Trainer

    data = tmp_path / "exp"
    assert train(data, "--run-id", "r1").exit_code == 0
    before = {p.name: p.read_bytes() for p in (data / "r1").glob("model*.pt")}
    send_sigint_while(monkeypatch, Trainer, "evaluate")
    result = train(data, "--resume", "r1", "--train.total-timesteps", "256")
    assert result.exit_code == 130 and "Traceback" not in result.output
    assert result.output.strip().splitlines()[-1] == (
        "error: interrupted (SIGINT) before the first epoch ended: nothing was trained; "
        f"{data / 'r1' / 'model.pt'} is kept as it was"
    )
    assert {p.name: p.read_bytes() for p in (data / "r1").glob("model*.pt")} == before  # no epoch-2 copy


def test_ctrl_c_before_any_epoch_of_a_new_run_writes_no_untrained_checkpoint(tmp_path, monkeypatch):
    from appliance.train import Trainer

    data = tmp_path / "exp"
    assert train(data, "--run-id", "good").exit_code == 0
    send_sigint_while(monkeypatch, Trainer, "evaluate")
    assert train(data, "--run-id", "r2").exit_code == 130
    assert folders(data) == ["good"] and (data / "latest").read_text() == "good"


# ----------------------------------------------------------------------------- --nproc

PUFFER = [str(Path(sys.executable).parent / "puffer-bench")]
RANKS = [
    "--nproc", "2", "--policy.core", "mlp", "--train.optimizer", "adam", "--vec.num-envs", "8",
    "--train.bptt-horizon", "8", "--train.minibatch-size", "64", "--policy.hidden-size", "32",
]  # fmt: skip
needs_two_cores = pytest.mark.skipif(launcher.local_rank_cap()[0] < 2, reason="needs 2 usable cores")


def test_more_ranks_than_this_machine_can_run_is_refused_naming_the_cap():
    cap, _per = launcher.local_rank_cap()
    with pytest.raises(
        ConfigError, match=rf"--nproc {cap + 1}: at most {cap} ranks on this machine, one per"
    ):
        launcher.Launch(nproc=cap + 1).check()
    result = cli_run("train", "squared", "--nproc", "100000")
    assert result.exit_code == 2 and f"pass --nproc {cap} or fewer" in one_line(result)


def test_a_master_port_in_use_is_refused_before_any_rank_starts(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(
            ConfigError, match=rf"--master-port {port} cannot be used here .*or 0 for a free one"
        ):
            launcher.Launch(nproc=1, master_port=port).check()
        with pytest.raises(ConfigError, match="another port, the same on every machine"):
            launcher.Launch(nproc=1, nnodes=2, master_port=port).check()
        if launcher.local_rank_cap()[0] >= 2:
            result = train(tmp_path / "exp", *RANKS, "--master-port", str(port))
            assert result.exit_code == 2 and f"--master-port {port} cannot be used" in one_line(result)
            assert folders(tmp_path / "exp") == []


@needs_two_cores
def test_ranks_take_the_same_run_folder_lock_as_one_process(tmp_path):
    data = tmp_path / "exp"
    assert train(data, "--run-id", "shared").exit_code == 0
    with runs.locked(data / "shared"):  # a single-process --resume shared, training
        result = train(data, *RANKS, "--resume", "shared", "--train.total-timesteps", "256")
    assert result.exit_code == 2 and f"run folder {data / 'shared'} is in use by process" in one_line(result)


def start_ranks(data, *extra):
    return subprocess.Popen(
        [*PUFFER, "train", "squared", "--no-dashboard", "--train.device", "cpu", *RANKS,
         "--train.data-dir", str(data), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip


def stop_after(proc, seconds_or_file, sig, group=True):
    """Send ``sig`` to the process group (Ctrl-C) or the launcher alone once ``seconds_or_file`` has
    passed or exists; returns (seconds to exit, stdout, stderr)."""
    deadline = time.time() + 180
    if isinstance(seconds_or_file, Path):
        while not seconds_or_file.exists():
            assert proc.poll() is None and time.time() < deadline, proc.communicate()
            time.sleep(0.1)
    else:
        time.sleep(seconds_or_file)
    (os.killpg if group else os.kill)(proc.pid, sig)
    start = time.time()
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    return time.time() - start, out, err


def left_behind(pgid, scratch_before):
    """Processes of the session still alive after a few seconds, and new rank scratch folders."""
    import psutil

    deadline = time.time() + 10
    while time.time() < deadline:
        alive = [p for p in psutil.process_iter() if _session(p) == pgid]
        if not alive:
            break
        time.sleep(0.2)
    scratch = {p.name for p in Path(tempfile.gettempdir()).glob("puffer-bench-ranks-*")} - scratch_before
    return alive, scratch


def _session(p):
    try:
        return os.getsid(p.pid)
    except OSError:
        return None


def scratch_folders():
    return {p.name for p in Path(tempfile.gettempdir()).glob("puffer-bench-ranks-*")}


def last_metrics_epoch(run):
    return json.loads((run / runs.METRICS).read_text().splitlines()[-1])["epoch"]


@pytest.mark.slow
@needs_two_cores
@pytest.mark.parametrize("how", ["ctrl-c to the group", "sigterm to the launcher"])
def test_a_stop_signal_to_ranks_saves_like_one_process_and_exits_0_promptly(tmp_path, how):
    data, before = tmp_path / "exp", scratch_folders()
    proc = start_ranks(data, "--run-id", "dp", "--train.total-timesteps", "1e9")
    group = how.startswith("ctrl-c")
    seconds, out, err = stop_after(
        proc, data / "dp" / runs.METRICS, signal.SIGINT if group else signal.SIGTERM, group
    )
    name = "SIGINT" if group else "SIGTERM"
    assert proc.returncode == 0, err
    assert seconds < 25, seconds  # the update in progress, a checkpoint, torch exiting (was 31 s: killed)
    assert f"interrupted ({name}): saved a checkpoint" in err and "Traceback" not in err, err
    saved = checkpoint.read(data / "dp" / runs.MODEL)["state"]
    assert saved["epoch"] >= 1 and saved["epoch"] == last_metrics_epoch(
        data / "dp"
    )  # nothing trained is lost
    assert re.search(rf"[\d,]+ steps in \d+ s on 2 ranks .*; saved {data / 'dp' / 'model.pt'}", out), out
    assert (data / "latest").read_text() == "dp"
    alive, scratch = left_behind(proc.pid, before)
    assert not alive and not scratch, (alive, scratch)


@pytest.mark.slow
@needs_two_cores
def test_ranks_write_the_report_and_move_latest_like_one_process(tmp_path):
    data = tmp_path / "exp"
    assert train(data, "--run-id", "older").exit_code == 0
    proc = start_ranks(
        data, "--run-id", "dp", "--train.total-timesteps", "256", "--report", str(tmp_path / "r.json")
    )
    _out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["kind"] == "train" and report["global_step"] >= 256 and report["stopped"] == "timesteps"
    assert (data / "latest").read_text() == "dp"  # eval and --resume latest now take this run


EARLY = (
    r"error: interrupted \(SIGINT\) before (the first epoch ended: nothing was trained; nothing was kept"
    r"|train started: nothing was done)"
)


CTRL_C_IN_AN_IMPORT = """
import os, signal, sys

class SendsCtrlC:  # Ctrl-C in the middle of the command line's imports, as on a slow machine
    def find_spec(self, name, path=None, target=None):
        if name == "appliance.cli.bench":
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, SendsCtrlC())
sys.argv = ["puffer-bench", *sys.argv[1:]]
from appliance.cli import main
main()
"""


def test_ctrl_c_while_the_command_line_is_imported_is_one_line(tmp_path):
    """A Ctrl-C 0.5 s after ``train`` started landed in the imports of appliance.cli on a slow host,
    before the command line had its handler: a KeyboardInterrupt traceback. Now it is held until the
    imports are done and answered in one line."""
    proc = subprocess.run(
        [sys.executable, "-c", CTRL_C_IN_AN_IMPORT, "train", "squared", "--no-dashboard",
         "--train.data-dir", str(tmp_path), "--train.total-timesteps", "1e9"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "Traceback" not in proc.stderr and "Aborted" not in proc.stderr, proc.stderr
    assert proc.returncode == 130, (proc.returncode, proc.stderr)
    last = proc.stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        EARLY + r"|error: interrupted \(SIGINT\) before the command started: nothing was done", last
    ), proc.stderr


@pytest.mark.slow
@needs_two_cores
@pytest.mark.parametrize("delay", [0.5, 2.0, 5.0])
def test_ctrl_c_while_ranks_start_is_one_line_and_leaves_nothing(tmp_path, delay):
    data, before = tmp_path / "exp", scratch_folders()
    proc = start_ranks(data, "--train.total-timesteps", "1e9")
    _seconds, _out, err = stop_after(proc, delay, signal.SIGINT)
    assert "Traceback" not in err and "Aborted" not in err, err
    if proc.returncode == 130:  # before the first epoch ended (or before train had parsed its options)
        assert re.fullmatch(EARLY, err.strip().splitlines()[-1]), err
        assert folders(data) == []
    else:  # the machine was quick: an epoch was trained and saved
        assert proc.returncode == 0 and "interrupted (SIGINT): saved a checkpoint" in err, err
    alive, scratch = left_behind(proc.pid, before)
    assert not alive and not scratch, (alive, scratch)


# ----------------------------------------------------------------------------- Ctrl-C while train starts

SPAWN_WINDOW = """
import json, os, signal
from multiprocessing import context

from appliance import vector
from appliance.config import resolve

started = []


def start(self):
    real(self)
    status = open(f"/proc/{self.pid}/status").read()  # the mask the worker started with
    mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigBlk")), 16)
    started.append(bool(mask & (1 << (signal.SIGINT - 1))))
    if len(started) == 1:
        os.killpg(0, signal.SIGINT)  # Ctrl-C to the process group while the workers start


if __name__ == "__main__":
    real, context.SpawnProcess.start = context.SpawnProcess.start, start
    cfg = resolve(env="squared", overrides=["--vec.backend", "multiprocessing", "--vec.num-workers", "2",
                                            "--vec.num-envs", "4"])
    try:
        vector.make_from_config(cfg)
    except KeyboardInterrupt:
        print(json.dumps({"interrupted": True, "sigint_blocked_in_workers": started}))
"""


def test_a_ctrl_c_while_workers_start_waits_until_all_started_and_none_gets_it(tmp_path):
    """A worker that gets Ctrl-C while it imports prints a traceback; one the main process leaves
    between its start and its arguments fails with EOFError. So the workers start with SIGINT
    blocked (they ignore it once running), and the main process takes it after the last start."""
    (tmp_path / "start.py").write_text(SPAWN_WINDOW)
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "start.py")],
        capture_output=True, text=True, start_new_session=True, timeout=120,
    )  # fmt: skip
    assert json.loads(proc.stdout) == {"interrupted": True, "sigint_blocked_in_workers": [True, True]}, (
        proc.stderr
    )
    assert "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.5, 1.5, 3.0])
def test_ctrl_c_in_the_first_seconds_of_train_is_one_line_and_leaves_nothing(tmp_path, delay):
    data = tmp_path / "exp"
    proc = subprocess.Popen(
        [*PUFFER, "train", "squared", *SMALL, "--vec.backend", "multiprocessing", "--vec.num-workers", "2",
         "--train.data-dir", str(data), "--train.total-timesteps", "1e9"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    _, _, err = stop_after(proc, delay, signal.SIGINT)
    assert "Traceback" not in err and "Aborted" not in err, err
    if proc.returncode == 130:
        assert re.fullmatch(EARLY, err.strip().splitlines()[-1]), err
        assert folders(data) == []
    else:
        assert proc.returncode == 0 and "interrupted (SIGINT): saved a checkpoint" in err, err
    alive, _ = left_behind(proc.pid, set())
    assert not alive, alive
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"puffer_{proc.pid}_")]
