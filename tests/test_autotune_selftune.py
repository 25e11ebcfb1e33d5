"""train's self-tuning (issue 60): the candidates, the rule, the store, and the hook in `train`.

The suite runs with PUFFER_AUTOTUNE=off (tests/conftest.py); these tests turn it on where they need it,
with a data folder of their own, mocked timings for the selection and a tiny budget for the real runs."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import SMALL, small_config

from appliance.cli import cli
from appliance.config import autotune
from appliance.errors import ConfigError
from appliance.tune import selftune


def test_the_suite_runs_with_autotune_off() -> None:
    assert autotune.mode(None) == "off"  # conftest's switch: no test pays a minute per train


def test_mode_from_the_option_then_the_environment_then_on() -> None:
    assert autotune.mode(None, {}) == "on"
    assert autotune.mode(None, {"PUFFER_AUTOTUNE": "REDO"}) == "redo"
    assert autotune.mode("off", {"PUFFER_AUTOTUNE": "redo"}) == "off"
    with pytest.raises(ConfigError, match=r"^--autotune 'sometimes': expected one of off, on, redo$"):
        autotune.mode("sometimes", {})
    with pytest.raises(ConfigError, match=r"^PUFFER_AUTOTUNE 'x': expected one of off, on, redo$"):
        autotune.mode(None, {"PUFFER_AUTOTUNE": "x"})


def test_an_unwritable_report_is_refused_before_the_tuning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PUFFER_AUTOTUNE", "on")
    monkeypatch.setattr(
        selftune, "autotune_run", lambda *a, **k: pytest.fail("tuned before the outputs were checked")
    )
    (tmp_path / "folder.json").mkdir()
    args = ["train", "squared", "--train.device", "cpu", "--report", str(tmp_path / "folder.json")]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code != 0 and "--report" in result.output, result.output


def test_a_bad_autotune_option_is_one_line() -> None:
    result = CliRunner().invoke(cli, ["train", "squared", "--autotune", "maybe"])
    assert result.exit_code != 0
    assert result.output.strip().splitlines() == ["error: --autotune 'maybe': expected one of off, on, redo"]


def test_the_axes_are_threads_then_buffers_within_the_cores_never_the_recipe() -> None:
    cfg = small_config("squared", "--vec.num-envs", "6")  # not 4: buffers must divide the envs
    assert cfg.data["vec"]["num_threads"] == "auto" and cfg.data["train"]["buffers"] == 1
    assert autotune.axes(cfg, cores=4) == [("vec.num_threads", [1, 2, 4]), ("train.buffers", [2])]
    assert autotune.axes(cfg, cores=2) == [("vec.num_threads", [1, 2]), ("train.buffers", [2])]
    odd = small_config("squared", "--vec.num-envs", "5")
    assert autotune.axes(odd, cores=8) == [("vec.num_threads", [1, 2, 4])]  # no buffer count divides 5


def test_keys_the_user_set_are_not_tuned() -> None:
    cfg = small_config("squared", "--vec.num-threads", "1")
    assert ("vec", "num_threads") not in autotune.tunable(cfg)
    assert autotune.axes(cfg, cores=4) == [("train.buffers", [2])]
    both = small_config("squared", "--vec.num-threads", "1", "--train.buffers", "1")
    assert autotune.axes(both, cores=4) == []


def test_a_serial_backend_has_nothing_to_tune() -> None:
    from appliance.config import resolve

    cfg = resolve(env="CartPole-v1", profile="cpu")
    assert cfg.data["vec"]["backend"] == "serial"
    assert autotune.axes(cfg, cores=2) == []
    assert selftune.tune(cfg, cores=2, build=_no_build, sample=_no_sample) is None


def _no_build(cfg: Any, choice: dict[str, Any]) -> Any:
    raise AssertionError("nothing is built where there is nothing to tune")


def _no_sample(trainer: Any, seconds: float) -> float:
    raise AssertionError("nothing is timed where there is nothing to tune")


@pytest.mark.parametrize(
    ("ratio", "interval", "busy", "kept"),
    [
        (1.2, [1.05, 1.3], False, True),
        (1.2, [0.95, 1.4], False, False),  # the interval reaches 1: not faster at the threshold
        (0.8, [0.7, 0.9], False, False),
        (1.2, [1.05, 1.3], True, False),  # measured busy: the profile stays
        (1.2, None, False, False),
    ],
)
def test_the_rule_keeps_a_candidate_only_when_faster_beyond_its_interval(
    ratio: float, interval: list[float] | None, busy: bool, kept: bool
) -> None:
    assert autotune.keep_candidate(ratio, interval, busy) is kept


class FakeRun:
    """Mocked builds and timings: each choice's speed from a table, with a small alternating wobble."""

    def __init__(self, speeds: dict[str, float], busy: bool = False, wobble: float = 0.01) -> None:
        self.speeds, self.busy, self.wobble = speeds, busy, wobble
        self.open: list[str] = []
        self.built: list[str] = []
        self.samples = 0

    @contextlib.contextmanager
    def build(self, cfg: Any, choice: dict[str, Any]) -> Any:
        name = autotune.describe(choice)
        self.open.append(name)
        self.built.append(name)
        try:
            yield name
        finally:
            self.open.remove(name)

    def sample(self, trainer: str, seconds: float) -> float:
        self.samples += 1
        return self.speeds.get(trainer, 80.0) * (1 + self.wobble * (-1) ** self.samples)

    def guard(self) -> tuple[Any, Any]:
        reasons = ["other processes used 1.00 cores on average"] if self.busy else []
        return contextlib.nullcontext(), lambda readings: {"busy": self.busy, "reasons": reasons}


def _tune(cfg: Any, run: FakeRun) -> dict[str, Any] | None:
    return selftune.tune(
        cfg, budget_s=1.0, cores=2, build=run.build, sample=run.sample, guard=run.guard, clock=lambda: 0.0
    )


PROFILE = "the profile's settings"
ONE_TWO = "vec.num_threads 1, train.buffers 2"


def _speeds(profile: float, one_two: float) -> dict[str, float]:
    """The screen: threads 1 beats threads 2 and the profile's, then two buffers on one thread."""
    return {PROFILE: profile, "vec.num_threads 1": profile * 1.02, ONE_TWO: one_two}


def test_the_screen_goes_one_key_at_a_time_from_the_fastest_so_far() -> None:
    run = FakeRun(_speeds(100.0, 130.0))
    result = _tune(small_config("squared"), run)
    assert result is not None
    assert run.built == [PROFILE, "vec.num_threads 1", "vec.num_threads 2", ONE_TWO]  # 4, not the 5 of a grid
    assert [autotune.describe(r["choice"]) for r in result["screen"]] == run.built


def test_a_candidate_faster_in_turns_is_chosen() -> None:
    run = FakeRun(_speeds(100.0, 130.0))
    result = _tune(small_config("squared"), run)
    assert result is not None and result["chosen"] == {"vec.num_threads": 1, "train.buffers": 2}
    assert len(result["profile_sps"]) >= selftune.MIN_PAIRS
    assert result["interval"][0] > 1
    assert not run.open  # every trainer closed
    line = selftune.result_line(small_config("squared"), result)
    assert line.startswith("autotune: chose vec.num_threads 1, train.buffers 2: ") and "ratio 1.30" in line


def test_a_setting_that_cannot_be_built_here_is_said_and_passed_over() -> None:
    run = FakeRun(_speeds(100.0, 130.0))
    built = run.build

    def build(cfg: Any, choice: dict[str, Any]) -> Any:
        if choice == {"vec.num_threads": 2}:
            raise ConfigError("vec.num_threads 2: not on this machine")
        return built(cfg, choice)

    lines: list[str] = []
    result = selftune.tune(
        small_config("squared"), 1.0, lines.append, 2, build=build, sample=run.sample, guard=run.guard,
        clock=lambda: 0.0,
    )  # fmt: skip
    assert "autotune: vec.num_threads 2: not usable here: vec.num_threads 2: not on this machine" in lines
    assert result is not None and result["chosen"] == {"vec.num_threads": 1, "train.buffers": 2}
    assert not run.open


def test_a_slower_or_equal_candidate_keeps_the_profile() -> None:
    run = FakeRun(_speeds(100.0, 99.0), wobble=0.05)
    result = _tune(small_config("squared"), run)
    assert result is not None and result["chosen"] == {}
    assert result["candidate"] == {"vec.num_threads": 1}  # the screen's best: 2 % ahead there
    assert "kept the profile's settings (the candidate was not faster" in selftune.result_line(None, result)


def test_a_faster_candidate_measured_busy_keeps_the_profile() -> None:
    result = _tune(small_config("squared"), FakeRun(_speeds(100.0, 130.0), busy=True))
    assert result is not None and result["chosen"] == {}
    assert "the machine was busy: other processes used 1.00 cores" in selftune.result_line(None, result)


def test_ctrl_c_while_tuning_closes_every_trainer_and_keeps_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = FakeRun(_speeds(100.0, 130.0))

    def interrupted(trainer: str, seconds: float) -> float:
        if run.samples == 6:  # in the confirmation (after four screen samples), two trainers open
            raise KeyboardInterrupt
        return FakeRun.sample(run, trainer, seconds)

    monkeypatch.setattr(selftune, "build_trainer", run.build)
    monkeypatch.setattr(selftune, "rollout_sps", interrupted)
    monkeypatch.setattr(selftune, "_guard", run.guard)
    environ = {"PUFFER_AUTOTUNE": "on", "PUFFER_BENCH_DATA": str(tmp_path)}
    lines: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        selftune.autotune_run(small_config("squared"), None, lines.append, budget_s=1.0, environ=environ)
    assert len(run.built) == 4 and not run.open  # four screened, two kept for the confirmation: all closed
    assert not list(tmp_path.rglob("*.json"))  # nothing kept: the next run tunes again
    assert lines[0].startswith("autotune: first run of squared")


def _store_file(root: Path) -> Path:
    files = list((root / "autotune").glob("*.json"))
    assert len(files) == 1, files
    return files[0]


@pytest.mark.slow
def test_a_real_tiny_tuning_is_kept_and_reused(tmp_path: Path, monkeypatch) -> None:
    from appliance.sysinfo import load

    # a shared host's steal (0.2-0.9 of 2 vCPUs on one CI-like host) made the tuning decide nothing;
    # what a busy tuning does is other tests here; this one is about keeping and reusing a real one
    monkeypatch.setattr(load, "STEAL_BUSY_CORES", float("inf"))
    environ = {"PUFFER_AUTOTUNE": "on", "PUFFER_BENCH_DATA": str(tmp_path)}
    lines: list[str] = []
    cfg = small_config("squared")
    selftune.autotune_run(cfg, None, lines.append, budget_s=1.0, environ=environ)
    assert lines[0].startswith("autotune: first run of squared on this machine")
    assert lines[-1].startswith(("autotune: chose ", "autotune: kept the profile's settings"))
    path = _store_file(tmp_path)
    store = json.loads(path.read_text())
    assert store["schema"] == autotune.SCHEMA and store["machine"]["usable_cores"] >= 1
    (entry,) = store["entries"].values()
    assert len(entry["measured"]["profile_sps"]) >= selftune.MIN_PAIRS
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left beside it
    again: list[str] = []
    cfg2 = small_config("squared", "--train.seed", "3")  # another seed: the same recipe for speed
    selftune.autotune_run(cfg2, None, again.append, budget_s=1.0, environ=environ)
    assert len(again) == 1 and again[0].startswith("autotune: reused ")
    assert f"tuned {entry['when']}" in again[0]
    for dotted, value in entry["chosen"].items():
        section, key = dotted.split(".")
        assert cfg2.data[section][key] == value


def _fake_tune(calls: list[int], chosen: dict[str, int], busy: list[bool] | None = None) -> Any:
    """A tuning that takes no time; ``busy`` says, call by call, whether it found the machine busy
    (busy: the profile's settings, as the rule keeps them)."""

    def tune(cfg: Any, budget_s: float, progress: Any, cores: int, **_: Any) -> dict[str, Any]:
        calls.append(1)
        was_busy = bool(busy and busy[len(calls) - 1])
        return {
            "chosen": {} if was_busy else chosen,
            "candidate": chosen,
            "screen": [],
            "profile_sps": [1.0, 1.0, 1.0],
            "candidate_sps": [2.0, 2.0, 2.0],
            "ratio": 2.0,
            "interval": [1.9, 2.1],
            "busy": was_busy,
            "busy_reasons": ["other processes used 1.02 cores on average"] if was_busy else [],
            "seconds": 0.0,
        }

    return tune


def test_a_bad_store_is_one_warning_and_tuned_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    environ = {"PUFFER_AUTOTUNE": "on", "PUFFER_BENCH_DATA": str(tmp_path)}
    calls: list[int] = []
    monkeypatch.setattr(selftune, "tune", _fake_tune(calls, {"vec.num_threads": 1}))
    cfg = small_config("squared")
    key, _facts = autotune.machine(selftune._cores(), cfg)
    path = autotune.store_path(key, environ)
    path.parent.mkdir(parents=True)
    for bad in (
        b"{not json",
        json.dumps(
            {"schema": autotune.SCHEMA, "entries": {"x": {"chosen": {"vec.num_envs": 9}, "when": "then"}}}
        ).encode(),
    ):
        path.write_bytes(bad)
        lines: list[str] = []
        selftune.autotune_run(small_config("squared"), None, lines.append, environ=environ)
        warnings = [line for line in lines if line.startswith("warning:")]
        assert len(warnings) == 1 and str(path) in warnings[0] and warnings[0].endswith("tuning again"), lines
        assert lines[-1].startswith("autotune: chose vec.num_threads 1")
        assert autotune.load(path)[1] is None  # written over with a good store
    assert len(calls) == 2


def test_redo_tunes_again_and_off_does_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    environ = {"PUFFER_AUTOTUNE": "on", "PUFFER_BENCH_DATA": str(tmp_path)}
    calls: list[int] = []
    monkeypatch.setattr(selftune, "tune", _fake_tune(calls, {"train.buffers": 2}))
    selftune.autotune_run(small_config("squared"), None, lambda _: None, environ=environ)
    selftune.autotune_run(small_config("squared"), None, lambda _: None, environ=environ)
    assert len(calls) == 1
    selftune.autotune_run(small_config("squared"), "redo", lambda _: None, environ=environ)
    assert len(calls) == 2
    lines: list[str] = []
    selftune.autotune_run(small_config("squared"), "off", lines.append, environ=environ)
    assert lines == [] and len(calls) == 2


def test_a_tuning_that_found_the_machine_busy_is_timed_again_by_the_next_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy tuning keeps the profile's settings without having compared them: it used to be kept
    for good, so one busy first run pinned the machine to the profile's settings. The next run times
    again; after BUSY_TRIES busy tunings in a row the last is reused (a machine always busy is not
    timed on every run), and a quiet tuning is reused at once."""
    environ = {"PUFFER_AUTOTUNE": "on", "PUFFER_BENCH_DATA": str(tmp_path)}
    calls: list[int] = []
    monkeypatch.setattr(selftune, "tune", _fake_tune(calls, {"train.buffers": 2}, busy=[True, False]))
    first: list[str] = []
    selftune.autotune_run(small_config("squared"), None, first.append, environ=environ)
    assert first[-1].startswith("autotune: kept the profile's settings (the machine was busy"), first
    second: list[str] = []
    cfg = small_config("squared")
    selftune.autotune_run(cfg, None, second.append, environ=environ)
    assert len(calls) == 2 and "found the machine busy, so it decided nothing: timing again" in second[0]
    assert second[-1].startswith("autotune: chose train.buffers 2") and cfg.data["train"]["buffers"] == 2
    third: list[str] = []
    selftune.autotune_run(small_config("squared"), None, third.append, environ=environ)
    assert len(calls) == 2 and len(third) == 1 and third[0].startswith("autotune: reused train.buffers 2")

    always: list[int] = []
    monkeypatch.setattr(selftune, "tune", _fake_tune(always, {"train.buffers": 2}, busy=[True] * 5))
    for _ in range(autotune.BUSY_TRIES + 2):
        lines: list[str] = []
        selftune.autotune_run(
            small_config("squared"), "redo" if not always else None, lines.append, environ=environ
        )
    assert len(always) == autotune.BUSY_TRIES
    assert lines == [lines[0]] and f"busy {autotune.BUSY_TRIES} times running" in lines[0], lines


def test_a_store_that_is_a_link_is_not_written_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    environ = {"PUFFER_AUTOTUNE": "on", "PUFFER_BENCH_DATA": str(tmp_path)}
    monkeypatch.setattr(selftune, "tune", _fake_tune([], {"train.buffers": 2}))
    cfg = small_config("squared")
    path = autotune.store_path(autotune.machine(selftune._cores(), cfg)[0], environ)
    path.parent.mkdir(parents=True)
    target = tmp_path / "elsewhere.json"
    target.write_text("keep me")
    path.symlink_to(target)
    lines: list[str] = []
    selftune.autotune_run(cfg, None, lines.append, environ=environ)
    assert target.read_text() == "keep me"
    assert any(line.startswith("warning: could not keep the tuning") for line in lines), lines
    assert cfg.data["train"]["buffers"] == 2  # the run still uses what it measured


def test_train_reuses_a_kept_tuning_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the command: a store written for this machine and recipe is used by `train` (its
    saved config holds the tuned env threads), in one line saying when it was tuned."""
    monkeypatch.setenv("PUFFER_AUTOTUNE", "on")
    monkeypatch.setenv("PUFFER_BENCH_DATA", str(tmp_path / "data"))
    monkeypatch.setattr(selftune, "_cores", lambda: 2)
    args = list(SMALL)
    cfg = small_config("squared")
    from appliance.config.runs import run_config

    cfg = run_config("squared", None, None, list(args))
    key, facts = autotune.machine(2, cfg)
    path = autotune.store_path(key, os.environ)
    entry = {
        "env": "squared",
        "when": "2026-11-29 01:00 UTC",
        "chosen": {"vec.num_threads": 1},
        "line": "",
        "measured": {},
    }
    assert autotune.save(path, {"entries": {}}, facts, autotune.recipe_key(cfg), entry) is None
    result = CliRunner().invoke(
        cli, ["train", "squared", *args, "--stop-steps", "64", "--train.data-dir", str(tmp_path / "runs")]
    )
    assert result.exit_code == 0, result.output
    reused = [line for line in result.output.splitlines() if line.startswith("autotune:")]
    assert reused == [
        f"autotune: reused vec.num_threads 1 for squared on this machine, tuned 2026-11-29 01:00 UTC "
        f"({path}; --autotune redo measures again, off skips it)"
    ]
    import yaml

    (saved,) = (tmp_path / "runs").glob("squared-*/config.yaml")
    assert yaml.safe_load(saved.read_text())["vec"]["num_threads"] == 1  # what the run used


def test_ctrl_c_while_train_tunes_is_one_line_and_keeps_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real SIGINT in the tuning's first timed rollout, through the command: the usual one line,
    exit 130, every trainer closed, no store written and no run folder."""
    import signal

    monkeypatch.setenv("PUFFER_AUTOTUNE", "on")
    monkeypatch.setenv("PUFFER_BENCH_DATA", str(tmp_path / "data"))
    real, closed = selftune.rollout_sps, []

    def interrupted(trainer: Any, seconds: float) -> float:
        real_close = trainer.close
        trainer.close = lambda: (closed.append(1), real_close())[1]
        os.kill(os.getpid(), signal.SIGINT)
        return real(trainer, seconds)

    monkeypatch.setattr(selftune, "rollout_sps", interrupted)
    args = list(SMALL)
    result = CliRunner().invoke(cli, ["train", "squared", *args, "--train.data-dir", str(tmp_path / "runs")])
    assert result.exit_code == 130, result.output
    assert result.output.strip().splitlines()[-1] == (
        "error: interrupted (SIGINT) before the first epoch ended: nothing was trained; nothing was kept"
    )
    assert "Traceback" not in result.output and closed == [1]
    assert not (tmp_path / "data").exists() or not list((tmp_path / "data").rglob("*.json"))
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())


def test_a_recipe_too_heavy_to_screen_in_the_budget_keeps_the_profile_after_one_sample() -> None:
    """A recipe whose profile build and one sample take a third of the budget or more (PufferLib's
    convert: 262 K agents a rollout) would take many budgets to screen: the tuner stops after the
    profile's sample and says so in one line; --autotune redo (patient) screens anyway."""
    ticks = iter([0.0, *[100.0] * 100])  # the profile's build and sample: 100 s, where 60 s is the budget
    run = FakeRun(_speeds(100.0, 130.0))
    result = selftune.tune(
        small_config("squared"), budget_s=1.0, cores=2, build=run.build, sample=run.sample, guard=run.guard,
        clock=lambda: next(ticks),
    )  # fmt: skip
    assert result is not None and result["chosen"] == {} and result["too_slow"] == 400.0
    assert run.built == [PROFILE] and not run.open
    line = selftune.result_line(small_config("squared"), result)
    assert "one setting took 100 s" in line and "the 4 would take about 400 s" in line and "redo" in line
    ticks = iter([0.0, *[100.0] * 100])
    patient = selftune.tune(
        small_config("squared"), budget_s=1.0, cores=2, build=run.build, sample=run.sample, guard=run.guard,
        clock=lambda: next(ticks), patient=True,
    )  # fmt: skip
    assert patient is not None and "too_slow" not in patient and len(patient["screen"]) == 4
