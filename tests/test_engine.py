"""The rollout engine (appliance.train.engine, envs/engine.c): the plain loop's rollout in buffers.

Observations, actions, rewards, dones and masks must be equal bit for bit: sampling is keyed on
(seed, step, agent id), not on the order agents are stepped in, and rewards are scaled after the
horizon in the plain loop's order. Log-probabilities, values and recurrent states come from a forward
pass over a buffer's agents instead of all of them, and a BLAS may compute a small batch's matmul with
another kernel (on this CPU, 2 rows differ from 8 in the last bits): those are compared to 1e-5
relative, and the update's losses to 1e-4. A last-bit difference could in principle flip one sampled
action (a uniform draw within 1e-7 of a category boundary); the test would then say which tensor and
epoch first differed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from rich.console import Console

from appliance import _ocean, vector
from appliance.bench.bottleneck import diagnose_training
from appliance.config import resolve
from appliance.errors import ConfigError, DeviceError
from appliance.train import Trainer
from appliance.train.dashboard import Reporter
from appliance.train.engine import split_threads

TENSORS = ("obs", "actions", "logprobs", "values", "rewards", "dones", "masks")
# what the policy's arithmetic does not touch: equal bit for bit whatever the buffers
EXACT = ("obs", "actions", "rewards", "dones", "masks", "return_scale")


def tasks(expect: int | None = None) -> int:
    """OS threads of this process. With ``expect``, give exiting threads up to 2 s to be gone: a joined
    thread has run its last instruction, but the kernel removes its /proc/self/task entry a moment
    later (CI once saw one extra there right after a join)."""
    deadline = time.monotonic() + 2.0
    while True:
        count = len(os.listdir("/proc/self/task"))
        if expect is None or count <= expect or time.monotonic() > deadline:
            return count
        time.sleep(0.01)


def config(env: str, *extra: str):
    return resolve(
        env,
        profile="cpu",
        overrides=[
            "--vec.num-envs",
            "8",
            "--vec.num-threads",
            "2",
            "--policy.hidden-size",
            "32",
            "--train.bptt-horizon",
            "16",
            "--train.minibatch-size",
            "64",
            "--train.max-minibatch-size",
            "64",
            *extra,
        ],
    )


def epochs(
    cfg, count: int = 2, device_steps: bool = False
) -> list[tuple[dict[str, torch.Tensor], dict[str, float], int]]:
    """Per epoch: the rollout's tensors (and starting states), the update's losses, the step count;
    ``device_steps``: the engine steps RolloutGraphs' body (what CUDA captures), eagerly."""
    trainer = Trainer(cfg, vector.make_from_config(cfg))
    if device_steps:
        trainer.engine.use_device_steps()
    out = []
    try:
        for _ in range(count):
            trainer.evaluate()
            r = trainer.rollout
            snap = {k: getattr(r, k).clone() for k in TENSORS}
            for i, s in enumerate(r.initial_state):
                snap[f"initial_state{i}"] = s.clone()
            scale = trainer.return_scale.scale if trainer.return_scale else 1.0
            snap["return_scale"] = torch.tensor(scale, dtype=torch.float64)
            out.append((snap, trainer.train(), trainer.global_step))
    finally:
        trainer.close()
    return out


@pytest.mark.parametrize(
    "env,extra",
    [
        ("breakout", ()),
        # two passes per epoch (each agent fills two rows), mingru state
        ("breakout", ("--train.batch-size", "256", "--policy.core", "mingru")),
        # 8 agents per env, two action heads; 1.5 passes: the second pass writes only the first half
        ("target", ("--vec.num-envs", "4", "--train.batch-size", "768")),
    ],
    ids=["breakout", "two-passes", "target-partial-pass"],
)
def test_engine_gives_the_plain_loops_rollout_and_losses(env, extra):
    plain = epochs(config(env, "--train.engine", "off", *extra))
    for buffers in (1, 2, 4):
        engine = epochs(config(env, "--train.engine", "on", "--train.buffers", str(buffers), *extra))
        for epoch, ((a, la, sa), (b, lb, sb)) in enumerate(zip(plain, engine, strict=True)):
            where = f"{buffers} buffers, epoch {epoch}"
            for key in a:
                if a[key].is_floating_point() and key not in EXACT:
                    torch.testing.assert_close(b[key], a[key], rtol=1e-5, atol=1e-6, msg=f"{where}: {key}")
                else:
                    assert torch.equal(a[key], b[key]), f"{where}: {key} differs"
            assert la == pytest.approx(lb, rel=1e-4, abs=1e-6), f"{where}: losses differ"
            assert sa == sb


def test_reward_scaling_is_the_plain_loops():
    """g2048's returns exceed 1 within a few epochs: the scaled rewards come out as the plain loop's."""
    plain = epochs(config("g2048", "--train.engine", "off"), 3)
    engine = epochs(config("g2048", "--train.buffers", "4"), 3)
    assert plain[-1][0]["return_scale"] < 0.9  # the scale did act
    for (a, la, _), (b, lb, _) in zip(plain, engine, strict=True):
        for key in ("rewards", "return_scale"):
            assert torch.equal(a[key], b[key]), key
        assert la == pytest.approx(lb, rel=1e-4, abs=1e-6)


def test_auto_uses_the_engine_for_native_envs_only():
    native = Trainer(c := config("breakout"), vector.make_from_config(c))
    serial = Trainer(c := config("breakout", "--vec.backend", "serial"), vector.make_from_config(c))
    try:
        assert native.engine is not None and serial.engine is None
    finally:
        native.close()
        serial.close()
    c = config("breakout", "--vec.backend", "serial", "--train.engine", "on")
    vec = vector.make_from_config(c)
    try:
        with pytest.raises(ConfigError, match="native Ocean backend"):
            Trainer(c, vec)
    finally:
        vec.close()


@pytest.mark.parametrize("buffers", [3, 5, 16])
def test_buffers_must_divide_num_envs(buffers):
    with pytest.raises(ConfigError) as e:  # when the config is resolved, before any env starts
        config("breakout", "--train.buffers", str(buffers))
    message = str(e.value)
    assert (
        "\n" not in message and "must divide vec.num_envs (8)" in message and "valid: 1, 2, 4, 8" in message
    )
    config("breakout", "--train.buffers", str(buffers), "--train.engine", "off")  # no engine: no rule
    c = config("breakout")
    c.data["train"]["buffers"] = buffers  # a config made by other means: the trainer checks too
    vec = vector.make_from_config(c)
    try:
        with pytest.raises(ConfigError, match="must divide vec.num_envs"):
            Trainer(c, vec)
    finally:
        vec.close()


def test_buffers_out_of_range_is_a_config_error():
    with pytest.raises(ConfigError, match="train.buffers"):
        config("breakout", "--train.buffers", "0")
    with pytest.raises(ConfigError, match="not a valid choice"):
        config("breakout", "--train.engine", "maybe")


def test_threads_are_shared_out_over_buffers():
    assert split_threads(8, 3) == [3, 3, 2]
    assert split_threads(2, 4) == [1, 1, 1, 1]  # each buffer's own thread at least
    assert split_threads(16, 1) == [16]


# ------------------------------------------------------------------ the C engine itself


@pytest.fixture
def vec():
    v = vector.make("breakout", backend="native", num_envs=8, num_threads=2, seed=0)
    v.async_reset(0)
    yield v
    v.close()


def test_an_exception_in_a_buffer_surfaces_after_every_thread_ended(vec):
    before = tasks()
    engine = _ocean.Engine(vec._c, [1, 1])
    seen, failing = [], threading.Event()

    def callback(b, t):
        seen.append((b, t))
        if b == 1 and t == 2:
            failing.set()
            raise ZeroDivisionError("boom")
        if b == 0 and t == 10:  # let buffer 1 fail first
            failing.wait(5)
            time.sleep(0.05)
        vec.actions[b * 4 : (b + 1) * 4] = 0

    with pytest.raises(ZeroDivisionError, match="boom") as e:
        engine.run(50, callback)
    assert "in rollout buffer 1 at step 2" in e.value.__notes__[0]
    assert len([t for b, t in seen if b == 0]) < 50  # the other buffer stopped early too
    assert not engine.running
    engine.run(3, lambda b, t: None)  # and the engine runs again
    engine.close()
    assert tasks(before) == before


def test_an_action_out_of_range_is_a_value_error_naming_the_agent(vec):
    engine = _ocean.Engine(vec._c, [2])

    def callback(b, t):
        vec.actions[:] = 0
        vec.actions[5] = 9

    with pytest.raises(ValueError, match=r"action 9 for agent 5 \(env 5\) is out of range; valid: 0..2"):
        engine.run(4, callback)
    engine.close()


def test_close_during_and_after_a_run_leaves_no_threads(vec):
    before = tasks()
    engine = _ocean.Engine(vec._c, [2, 2])  # two env threads each: a worker thread per buffer
    assert tasks() == before + 2
    engine.run(5, lambda b, t: None)
    engine.close()
    assert engine.closed and tasks(before) == before
    engine.close()  # idempotent

    engine = _ocean.Engine(vec._c, [1, 1, 1, 1])

    def closer(b, t):
        if t == 3:
            engine.close()

    with pytest.raises(RuntimeError, match="closed during run"):
        engine.run(100, closer)
    assert engine.closed and tasks(before) == before
    with pytest.raises(RuntimeError, match="closed"):
        engine.run(1, closer)
    vec.step(np.zeros(8, np.int32))  # the vector is free again


def test_closing_the_vector_closes_its_engines():
    v = vector.make("breakout", backend="native", num_envs=4, num_threads=1)
    before = tasks()
    engine = _ocean.Engine(v._c, [1, 1])
    v.close()
    assert engine.closed and tasks() <= before
    with pytest.raises(RuntimeError, match="closed"):
        engine.run(1, lambda b, t: None)


def test_the_vector_cannot_be_stepped_or_closed_during_a_run(vec):
    engine = _ocean.Engine(vec._c, [1, 1])
    errors = []

    def callback(b, t):
        for call in (lambda: vec._c.step(), lambda: vec._c.close()):
            try:
                call()
            except RuntimeError as e:
                errors.append(str(e))

    engine.run(1, callback)
    assert len(errors) == 4 and all("another thread" in e for e in errors)
    engine.close()


def test_a_signal_stops_the_run_and_raises_in_the_caller(vec):
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    before = tasks()
    engine = _ocean.Engine(vec._c, [1, 1])
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:

        def callback(b, t):
            if b == 0 and t == 5:
                os.kill(os.getpid(), signal.SIGINT)

        with pytest.raises(KeyboardInterrupt):
            engine.run(10_000_000, callback)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert not engine.running
    engine.close()
    assert tasks(before) == before


def test_history_records_what_the_policy_saw(vec):
    engine = _ocean.Engine(vec._c, [1, 1])
    seen_rewards, seen_dones = [], []

    def callback(b, t):
        if b == 0:
            seen_rewards.append(vec.rewards.copy())
            seen_dones.append(vec.terminals | vec.truncations)
        vec.actions[b * 4 : (b + 1) * 4] = t % 3

    rewards, dones = np.full((30, 8), -5, np.float32), np.zeros((30, 8), np.bool_)
    engine.run(30, callback, rewards, dones)
    # buffer 0's own agents, as buffer 0's callback saw them
    np.testing.assert_array_equal(rewards[:, :4], np.array(seen_rewards)[:, :4])
    np.testing.assert_array_equal(dones[:, :4], np.array(seen_dones)[:, :4])
    assert (rewards[:, 4:] != -5).all()
    with pytest.raises(ValueError, match="wrong shape"):
        engine.run(31, callback, rewards, dones)
    engine.close()


# ------------------------------------------------------------------ timings and CUDA


def test_per_buffer_timings_reach_the_metrics_record():
    c = config("breakout", "--train.buffers", "2")
    trainer = Trainer(c, vector.make_from_config(c))
    try:
        trainer.evaluate()
        buffers = trainer.timings.buffers
        assert len(buffers) == 2 and all(b["env"] > 0 and b["policy"] > 0 for b in buffers)
        breakdown = trainer.timings.breakdown()
        assert breakdown["evaluate.forward"]["seconds"] > 0 and breakdown["evaluate.env"]["seconds"] > 0
        record = trainer.log_metrics()
        assert record["time/buffer1/env"] == buffers[1]["env"]
        assert {"time/buffer0/policy", "time/buffer0/gil"} <= set(record)
        assert record["host/steal_cores"] >= 0 and record["host/others_cores"] >= 0  # the machine's others
        reporter = Reporter(trainer, "breakout", live=False)
        assert "buffers policy/env s:" in reporter.line()
        console = Console(record=True, width=160)
        console.print(reporter._render())
        assert "rollout buffers" in console.export_text()
    finally:
        trainer.close()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a CUDA driver")
def test_without_cuda_the_extension_imports_and_graphs_fail_clearly(vec):
    why = _ocean.cuda_driver()
    assert why is not None and "libcuda.so.1" in why
    engine = _ocean.Engine(vec._c, [1])
    with pytest.raises(RuntimeError, match="libcuda.so.1"):
        engine.run_graphs(1, [1], [0])
    engine.close()
    c = config("breakout")
    trainer = Trainer(c, vector.make_from_config(c))
    try:
        with pytest.raises(DeviceError, match="cannot launch CUDA graphs.*libcuda"):
            trainer.engine.set_graphs([1], [0])
    finally:
        trainer.close()


def test_the_diagnosis_names_buffers_and_threads():
    vec, cpu, gpu = {"backend": "native", "num_threads": 4}, {"device": "cpu"}, {"device": "cuda"}
    env_bound = {"evaluate.env": 0.6, "evaluate.forward": 0.2}
    one = [{"policy": 0.25, "gil": 0.0, "env": 0.7}]
    advice = " ".join(
        diagnose_training("b", env_bound, 1e6, {"vec": vec, "train": cpu}, {"buffers": one})["suggestions"]
    )
    assert "raise train.buffers (now 1, e.g. 2)" in advice and "vec.num_threads (now 4" in advice
    forward_bound = {"evaluate.env": 0.1, "evaluate.forward": 0.7}
    two = [{"policy": 0.7, "gil": 0.01, "env": 0.2}] * 2
    advice = " ".join(
        diagnose_training("b", forward_bound, 1e6, {"vec": vec, "train": gpu}, {"buffers": two})[
            "suggestions"
        ]
    )
    assert "own CUDA stream" in advice and "now 2, e.g. 4" in advice
    gil = [{"policy": 0.4, "gil": 0.3, "env": 0.2}] * 4
    advice = " ".join(
        diagnose_training("b", forward_bound, 1e6, {"vec": vec, "train": cpu}, {"buffers": gil})[
            "suggestions"
        ]
    )
    assert "GIL-bound" in advice and "fewer train.buffers (now 4)" in advice
    plain = diagnose_training("b", env_bound, 1e6, {"vec": vec, "train": {"engine": "off"}}, {})
    assert "train.engine auto" in " ".join(plain["suggestions"])


@pytest.mark.parametrize("env", ["breakout", "target"])
def test_the_graphable_device_step_gives_the_plain_loops_rollout(env):
    """RolloutGraphs.body (device-held column and step, as captured on CUDA) run eagerly as the
    engine's callback: the same rollout and losses as the plain loop."""
    extra = ("--vec.num-envs", "4") if env == "target" else ()
    plain = epochs(config(env, "--train.engine", "off", *extra))
    for buffers in (1, 2):
        engine = epochs(config(env, "--train.buffers", str(buffers), *extra), device_steps=True)
        for epoch, ((a, la, sa), (b, lb, sb)) in enumerate(zip(plain, engine, strict=True)):
            where = f"{buffers} buffers, epoch {epoch}"
            for key in a:
                if a[key].is_floating_point() and key not in EXACT:
                    torch.testing.assert_close(b[key], a[key], rtol=1e-5, atol=1e-6, msg=f"{where}: {key}")
                else:
                    assert torch.equal(a[key], b[key]), f"{where}: {key} differs"
            assert la == pytest.approx(lb, rel=1e-4, abs=1e-6) and sa == sb


def test_device_steps_need_one_row_per_agent():
    c = config("breakout", "--train.batch-size", "256")
    trainer = Trainer(c, vector.make_from_config(c))
    try:
        with pytest.raises(ConfigError, match="several rows"):
            trainer.engine.use_device_steps()
    finally:
        trainer.close()


@pytest.mark.slow  # compiles and runs the harness twice; on the host in CI, not again in the image
@pytest.mark.parametrize("sanitize", ["address,undefined", "thread"])
def test_the_native_loop_under_sanitizers(tmp_path, sanitize):
    """envs/engine_debug.c drives the C loop without Python (every env, 1, 2 and 4 buffers, a
    failing buffer, an out-of-range action) built with ASan+UBSan, and with ThreadSanitizer."""
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed for the C-level tests"
    envs = Path(__file__).resolve().parent.parent / "envs"
    binary = tmp_path / "engine_debug"
    flags = [f"-fsanitize={sanitize}"] + (
        ["-fno-sanitize-recover=undefined"] if "undefined" in sanitize else []
    )
    sources = [str(envs / f) for f in ("engine_debug.c", "engine.c", "vecenv.c")]
    command = [cc, "-std=c11", "-O1", "-g", "-fno-omit-frame-pointer", *flags, f"-I{envs}", *sources]
    subprocess.run([*command, "-o", str(binary), "-lm", "-pthread", "-ldl"], check=True)
    result = subprocess.run([str(binary), "all", "200"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(" ok") == 3 * len(_ocean.names()) and "WARNING" not in result.stderr


def test_the_profile_trace_shows_the_buffer_threads(tmp_path):
    from click.testing import CliRunner

    from appliance.cli import cli

    trace = tmp_path / "trace.json"
    args = ["train", "squared", "--profile-trace", str(trace), "--train.device", "cpu", "--vec.num-envs", "8"]
    args += ["--train.bptt-horizon", "8", "--train.minibatch-size", "64", "--train.buffers", "2"]
    result = CliRunner().invoke(cli, [*args, "--train.data-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    events = json.loads(trace.read_text())["traceEvents"]
    names = {
        e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"
    }
    assert any("rollout-buf" in name for name in names.values())  # the C threads name themselves
    # torch ops from the main thread and from each epoch's two buffer threads (3 epochs)
    op_threads = {e["tid"] for e in events if e.get("ph") == "X" and e["name"].startswith("aten::")}
    assert len(op_threads) >= 3
