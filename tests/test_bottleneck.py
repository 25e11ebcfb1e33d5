"""The training diagnosis names what the time went to, graphed work included, and advises only knobs
that exist on the machine the run trained on and are not already set: one test per advice branch, the
committed H100 engine report (a graphed run) and CPU reports as fixtures, and the trainer's timing of
graphed work as a whole."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import small_config

from appliance import vector
from appliance.bench.bottleneck import diagnose_training, diagnosis_from_report, graphed_shares
from appliance.config import Config, resolve
from appliance.train import Trainer
from appliance.train.graphs import ReplayClock

RESULTS = Path(__file__).parent.parent / "results"
GPU_KNOBS = ("train.graphs", "train.compile", "CUDA", "pinned", "cpu_offload", "minibatch_size (now")


def applied(cfg: dict) -> list[str]:
    """Advice that would turn on what ``cfg`` already has (or go below a minimum)."""
    train, vec = cfg.get("train", {}), cfg.get("vec", {})
    out = []
    if train.get("graphs"):
        out += ["train.graphs true", "CUDA graphs remove"]
    if train.get("compile"):
        out.append("train.compile true")
    if train.get("precision") in ("auto", "bfloat16"):
        out.append("train.precision")
    if train.get("cpu_offload"):
        out.append("cpu_offload true")
    if train.get("engine") in ("auto", "on"):
        out.append("train.engine auto")
    if vec.get("zero_copy", True):
        out.append("zero_copy true")
    if train.get("update_epochs") == 1:
        out.append("fewer train.update_epochs")
    if vec.get("num_threads") == "auto":
        out.append("raise vec.num_threads")
    return out


def advice(d: dict) -> str:
    return " ".join(d["suggestions"])


def assert_fits(d: dict, cfg: dict, gpu: bool) -> None:
    text = advice(d)
    for knob in applied(cfg):
        assert knob not in text, f"advises {knob!r}, already set: {text}"
    if not gpu:
        for knob in GPU_KNOBS:
            assert knob not in text, f"a GPU knob ({knob!r}) for a CPU run: {text}"


CPU = {"device": "cpu", "precision": "float32", "update_epochs": 1, "graphs": True, "compile": False}
GPU = {"device": "cuda", "precision": "float32", "update_epochs": 1, "graphs": False, "compile": False}
BRANCHES = [
    # (shares, train, vec, figures, bottleneck, words the advice must hold)
    ({"evaluate.env": 0.6}, CPU, {"num_threads": 1}, {"usable_cores": 2}, "env", ["raise vec.num_threads (now 1"]),
    ({"evaluate.env": 0.6}, CPU, {"num_threads": "auto"}, {"usable_cores": 2}, "env", ["every usable core (2)"]),
    ({"evaluate.forward": 0.6}, CPU, {"num_envs": 256}, {}, "forward", ["vec.num_envs (now 256)"]),
    ({"evaluate.forward": 0.6}, CPU, {}, {"cpu_bf16": True}, "forward", ["precision auto (bfloat16: this CPU"]),
    ({"evaluate.forward": 0.6}, GPU, {}, {}, "forward", ["train.graphs true", "precision auto"]),
    ({"evaluate.copy": 0.6}, CPU, {"zero_copy": False}, {"obs_dtype": "float32"}, "copy", ["vec.zero_copy true", "uint8"]),
    ({"evaluate.copy": 0.6}, GPU, {}, {"obs_dtype": "uint8"}, "copy", ["pinned host memory"]),
    ({"train.learn": 0.6}, CPU, {}, {}, "learn", ["train.replay_ratio below 1"]),
    ({"train.learn": 0.6}, {**CPU, "update_epochs": 4}, {}, {}, "learn", ["fewer train.update_epochs (now 4)"]),
    ({"train.learn": 0.6}, {**CPU, "replay_ratio": 2.0}, {}, {}, "learn", ["lower train.replay_ratio (now 2"]),
    ({"train.learn": 0.6}, {**GPU, "minibatch_size": 1024}, {"num_envs": 64}, {}, "learn", ["train.graphs true", "minibatch_size (now 1024"]),
    ({"train.graphed": 0.6}, {**GPU, "graphs": True}, {}, {}, "graphed update", ["train.replay_ratio below 1"]),
    ({"evaluate.graphed": 0.6}, {**GPU, "graphs": True}, {"num_envs": 4096}, {}, "graphed rollout", ["vec.num_envs (now 4096)"]),
    ({"train.misc": 0.6}, CPU, {}, {}, "overhead", ["amortize"]),
    ({"train.misc": 0.6}, GPU, {}, {}, "overhead", ["train.graphs true"]),
    ({"train.misc": 0.6}, {**GPU, "graphs": True}, {}, {}, "overhead", ["amortize"]),
]  # fmt: skip


@pytest.mark.parametrize("shares, train, vec, figures, top, words", BRANCHES)
def test_each_branch_advises_what_fits_the_machine_and_is_not_set(shares, train, vec, figures, top, words):
    cfg = {
        "vec": {"backend": "native", **vec},
        "train": {"engine": "auto", **train},
        "policy": {"hidden_size": 128},
    }
    d = diagnose_training(
        "breakout", {**shares, "evaluate.env": shares.get("evaluate.env", 0.05)}, 1e6, cfg, figures
    )
    assert d["bottleneck"] == top
    for word in words:
        assert word in advice(d), advice(d)
    assert_fits(d, cfg, gpu=train["device"] == "cuda")


def test_forward_bound_advises_more_envs_only_where_twice_the_batch_ran_faster():
    """On the 2-core Zen 3 machine the LSTM forward ran no faster per agent-step at 16,384 rows than
    at 8,192 (docs/benchmarks.md), so "raise vec.num_envs for bigger batches" was advice that could
    not help; the probe's figure at twice the batch decides it."""
    cfg = {"vec": {"num_envs": 8192}, "train": CPU, "policy": {"hidden_size": 128}}
    shares = {"evaluate.forward": 0.3, "train.forward": 0.25, "train.learn": 0.4}
    flat = diagnose_training("b", shares, 5e4, cfg, {"forward_sps": 1.8e5, "forward_sps_2x": 1.7e5})
    assert flat["bottleneck"] == "forward"
    assert "vec.num_envs" not in advice(flat) and "policy.hidden_size now 128" in advice(flat)
    assert "170K at twice the batch (a bigger batch does not make it faster here)" in advice(flat)
    faster = diagnose_training("b", shares, 5e4, cfg, {"forward_sps": 1.8e5, "forward_sps_2x": 2.5e5})
    assert "raise vec.num_envs (now 8192): twice the batch ran faster" in advice(faster)
    unknown = diagnose_training("b", shares, 5e4, cfg, {"forward_sps": 1.8e5})  # older reports
    assert "raise vec.num_envs (now 8192) for bigger batches" in advice(unknown)


def test_memory_bound_never_advises_an_offload_that_is_on():
    figures = {"memory_peak": 79 * 2**30, "memory_total": 80 * 2**30}
    on = diagnose_training("b", {"train.learn": 0.5}, 1e6, {"train": {**GPU, "cpu_offload": True}}, figures)
    assert on["bottleneck"] == "memory" and "cpu_offload" not in advice(on) and "minibatch_size" in advice(on)
    off = diagnose_training("b", {"train.learn": 0.5}, 1e6, {"train": GPU}, figures)
    assert "train.cpu_offload true" in advice(off)


def report_config(report: dict, env: str = "breakout") -> Config:
    """The config a committed report recorded for ``env``."""
    c = report["config"]["envs"][env]
    return Config({k: c[k] for k in ("vec", "train", "policy", "env", "bench")}, env_name=env)


def committed(path: str) -> dict:
    file = RESULTS / path
    if not file.is_file():  # the Docker image's build context leaves results/ out
        pytest.skip(f"the committed report {path} is not in this tree (results/ not shipped)")
    return json.loads(file.read_text())


def test_the_h100_engine_reports_graphed_update_is_named_and_its_advice_is_not_applied():
    """The engine report of 2026-11-26 (rollout and update as CUDA graphs) read "overhead 63% ... CUDA
    graphs remove it": its graphed update's time sat in train.misc."""
    report = committed("h100/engine/2026-11-26-60549f7ac30d.json")
    cfg = report_config(report)
    d = diagnosis_from_report("breakout", cfg, report, {})
    assert d["bottleneck"] == "graphed update" and "The bottleneck is the graphed update" in d["summary"]
    assert d["categories"]["graphed update"] == pytest.approx(0.569, abs=0.01)
    assert d["categories"]["graphed rollout"] == pytest.approx(0.196, abs=0.01)
    assert d["categories"]["overhead"] < 0.1 and "overhead-bound" not in advice(d)
    assert_fits(d, cfg.to_dict(), gpu=True)
    assert "train.compile" not in advice(d)  # it would turn the graphs off


@pytest.mark.parametrize("path", ["cpu/2026-11-25-7a14253ab53b.json", "cpu/2026-11-23-5afad08017fd.json"])
def test_cpu_reports_get_no_gpu_knob_whatever_the_bottleneck(path):
    """The 2-core CPU reports: forward-bound advice once said "or train.compile true" and learn-bound
    "train.compile true on a GPU, fewer train.update_epochs" at 1 epoch."""
    report = committed(path)
    cfg = report_config(report)
    d = diagnosis_from_report("breakout", cfg, report, {})
    assert d["bottleneck"] == "forward"
    assert_fits(d, cfg.to_dict(), gpu=False)
    # the same run had its update dominate: learn-bound advice for this CPU
    shares = {
        n.rsplit("/", 1)[1]: m["median"]
        for n, m in report["metrics"].items()
        if n.startswith("train_phase/breakout/")
    }
    shares["train.learn"] = 0.9
    fp = report["fingerprint"]
    figures = {"usable_cores": 2, "cpu_bf16": bool(fp["cpu"]["isa"].get("bf16"))}
    learn = diagnose_training("breakout", shares, 1e5, cfg.to_dict(), figures)
    assert learn["bottleneck"] == "learn" and "train.replay_ratio below 1" in advice(learn)
    assert_fits(learn, cfg.to_dict(), gpu=False)
    if cfg.train.precision == "float32":  # 2026-11-23: a Zen 3 without bf16 units: no bf16 advice
        assert "precision" not in advice(learn)


def test_graphed_shares_only_where_the_eager_sections_did_not_run():
    graphed = {"device": "cuda", "graphs": True, "compile": False}
    old = {"train.misc": 0.5, "train.forward": 0.0, "train.learn": 0.0, "evaluate.forward": 0.2}
    buffers = [{"policy": 0.2, "copy": 0.0, "gil": 0.0, "env": 0.2}]
    out = graphed_shares(old, graphed, buffers)
    assert out["train.graphed"] == 0.5 and out["train.misc"] == 0.0 and out["evaluate.graphed"] == 0.2
    eager = {**old, "train.learn": 0.3}  # an eager update on CUDA times its sections: misc is overhead
    assert "train.graphed" not in graphed_shares(eager, graphed, [{**buffers[0], "copy": 0.01}])
    assert graphed_shares(old, {**graphed, "device": "cpu"}, buffers) == old
    assert graphed_shares(old, {**graphed, "graphs": False}, buffers) == old
    new = {**old, "train.graphed": 0.1}  # timed by the trainer: taken as it is
    assert graphed_shares(new, graphed, buffers) == new


# ---------------------------------------------------------------------- timing graphed work as a whole


class WallEvent:
    """A stand-in for a CUDA timing event (the host clock) so the replay timing runs on a CPU."""

    def record(self) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: WallEvent) -> float:
        return 1000 * (end.t - self.t)


class EagerGraph:
    """A 'captured graph' whose replay runs the minibatch eagerly (a CPU cannot capture)."""

    def __init__(self, fn):
        self.fn = fn

    def replay(self) -> None:
        self.fn()


def test_a_replayed_update_is_timed_as_a_whole_under_train_graphed():
    trainer = Trainer(small_config("squared"), vector.make_from_config(small_config("squared")))
    try:
        trainer.evaluate()
        trainer.train()
        eager = trainer.timings.breakdown()
        assert eager["train.graphed"]["seconds"] == 0 and eager["train.learn"]["seconds"] > 0  # the CPU path
        step = trainer.update_step
        step.capture, step.graph, step.clock = True, EagerGraph(step.fn), ReplayClock(event=WallEvent)
        trainer.timings.reset()
        trainer.evaluate()
        trainer.train()
        seconds = trainer.timings.totals["train.graphed"]
        assert 0 < seconds <= trainer.timings.phase_totals["train"] and step.clock.pairs == []
    finally:
        trainer.close()


class GraphLaunches:
    """The engine's C object with ``run_graphs`` run as the eager policy step (no CUDA here)."""

    def __init__(self, real, step):
        self.real, self.step = real, step

    def run_graphs(self, steps, execs, streams, rewards, dones):
        return self.real.run(steps, self.step, rewards, dones)

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_a_graphed_rollout_step_is_timed_as_a_whole_under_evaluate_graphed():
    cfg = resolve("breakout", profile="cpu", overrides=["--vec.num-envs", "8", "--vec.num-threads", "1", "--train.bptt-horizon", "8", "--train.minibatch-size", "64", "--policy.hidden-size", "32"])  # fmt: skip
    trainer = Trainer(cfg, vector.make_from_config(cfg))
    try:
        engine = trainer.engine
        engine._c = GraphLaunches(engine._c, engine._step)
        engine.graphs = ([0], [0])
        trainer.evaluate()
        t = trainer.timings.totals
        assert t["evaluate.graphed"] > 0 and t["evaluate.env"] > 0
        assert t["evaluate.forward"] == 0 and t["evaluate.copy"] == 0
    finally:
        trainer.close()
