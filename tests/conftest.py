"""Markers: `gpu` tests are skipped without a CUDA device; `slow` ones still run in make test."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
from pathlib import Path
from typing import Any

import pytest

# `train` tunes itself on a machine it has not tuned for (about a minute, appliance.config.autotune):
# the suite runs with it off, the processes it starts too; tests/test_autotune_selftune.py turns it on.
os.environ["PUFFER_AUTOTUNE"] = "off"
# the suite runs on this CPU's own kind (a user's PUFFER_CPU_KIND would make the tests that fake a CPU
# contradict it); tests/test_cpu_kinds.py sets it where it is what is tested
os.environ.pop("PUFFER_CPU_KIND", None)

# importing the command line installs its SIGINT handler (appliance.signals.hold_during_imports): done
# here, before any test, every run sees the signal state the whole suite sees once a test module has
# imported it, so a test that imports it in its body also passes alone (signals_left_as_found below)
import appliance.cli  # noqa: F401

SMALL = (
    "--train.device",
    "cpu",
    "--vec.num-envs",
    "8",
    "--train.bptt-horizon",
    "8",
    "--train.minibatch-size",
    "64",
)


def small_config(env: str = "squared", *extra: str, **sections: dict[str, Any]) -> Any:
    """A config small enough for tests on 2 cores (the CPU, 8 envs, horizon 8, minibatch 64), then
    ``extra`` command-line overrides and ``sections`` as dicts, e.g. ``train={"seed": 1}``. Test
    files import it: ``from conftest import small_config``."""
    from appliance.config import resolve

    dicts = [
        f"--{section}.{key}={value}" for section, values in sections.items() for key, value in values.items()
    ]
    return resolve(env=env, overrides=[*SMALL, *extra, *dicts])


def parity_configs(pattern: str = "*.yaml") -> list[Path]:
    """bench/parity's train configs (its sweep-*.yaml are sweep spaces, for tools/protein_peer.py);
    ``**/*.yaml``: 4.0's in pufferlib4/ too."""
    folder = Path(__file__).resolve().parents[1] / "bench" / "parity"
    return sorted(p for p in folder.glob(pattern) if not p.name.startswith("sweep-"))


def fake_cpu_bf16(monkeypatch: pytest.MonkeyPatch, has_bf16: bool) -> None:
    """Make ``sysinfo.cpu_details`` say this CPU has (or lacks) bfloat16 units (AVX512-BF16/AMX)."""
    from appliance import sysinfo

    real = sysinfo.cpu_details()
    fake = {**real, "isa": {**real["isa"], "bf16": has_bf16}, "emulated_kind": None}
    monkeypatch.setattr(sysinfo, "cpu_details", lambda: fake)


@functools.cache
def cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="needs a CUDA device (none found)")
    for item in items:
        if "/tests/gpu/" in str(item.path):  # everything under tests/gpu/ is a GPU test
            item.add_marker(pytest.mark.gpu)
        if "gpu" in item.keywords and not cuda_available():
            item.add_marker(skip)


SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGCHLD")


def pytest_configure(config: pytest.Config) -> None:
    """A test run started in the background by a shell (``make test &``, nohup) inherits SIGINT
    ignored, and every process a test starts would inherit that too: the Ctrl-C tests need the
    usual handler, as in a terminal."""
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _signal_state() -> tuple:
    import signal

    blocked = frozenset(signal.pthread_sigmask(signal.SIG_BLOCK, []))
    return blocked, tuple(signal.getsignal(getattr(signal, name)) for name in SIGNALS)


@pytest.fixture(autouse=True)
def signals_left_as_found():
    """A test that leaves a signal blocked or its handler changed in the test process passes it on to
    every process the later tests start (an ignored or blocked SIGINT survives exec), so a later
    Ctrl-C test times out far from the cause: fail the test that did it, and put the state back."""
    import signal

    before = _signal_state()
    yield
    after = _signal_state()
    if after != before:
        signal.pthread_sigmask(signal.SIG_SETMASK, before[0])
        for name, handler in zip(SIGNALS, before[1], strict=True):
            signal.signal(getattr(signal, name), handler if handler is not None else signal.SIG_DFL)
        was, now = (dict(zip(SIGNALS, state[1], strict=True)) for state in (before, after))
        pytest.fail(
            f"the test left the signal state changed: blocked {set(before[0])} -> {set(after[0])}, "
            f"handlers {was} -> {now}"
        )


@pytest.fixture(autouse=True)
def sys_path_left_as_found():
    """A test that puts a folder holding another ``appliance`` in front of sys.path changes which
    ``appliance`` the workers spawned by every later test import (spawn hands them the parent's
    sys.path): in an image that installs the package and keeps its source tree for the tests, they
    then import the tree, which has no compiled extension. Fail the test that did it, and put
    sys.path back. A library's own folders (Ray puts ``ray/thirdparty_files`` first) shadow nothing."""
    import sys
    from pathlib import Path

    before = list(sys.path)
    yield
    first_old = sys.path.index(before[0]) if before and before[0] in sys.path else 0
    shadowing = [p for p in sys.path[:first_old] if (Path(p or ".") / "appliance").is_dir()]
    if shadowing:
        sys.path[:] = before
        pytest.fail(
            f"the test put {shadowing} before sys.path's old entries: spawned workers would import "
            "appliance from there"
        )


def one_line_error(result, *fragments: str) -> str:
    """The command failed with exit 2 and one line holding every fragment (no traceback)."""
    out = result.output.strip()
    assert result.exit_code == 2, out
    assert "Traceback" not in out and len(out.splitlines()) == 1, out
    for fragment in fragments:
        assert fragment in out, out
    return out


@contextlib.contextmanager
def bounded(seconds: int = 30):
    """A read or open that would block (a FIFO with no writer) fails the case instead of hanging it."""

    def hung(signum, frame):
        raise AssertionError(f"blocked for {seconds} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def trained_run(data: Path, *overrides: str, log: bool = True) -> Path:
    """One epoch of squared in run folder ``data/r1`` (a checkpoint, its config.yaml and, with ``log``,
    one metrics record) that ``data/latest`` names; returns ``data``."""
    from appliance import config, vector
    from appliance.train import Trainer

    cfg = config.resolve(env="squared", overrides=[*overrides, "--train.data-dir", str(data)])
    run = data / "r1"
    trainer = Trainer(cfg, vector.make_from_config(cfg), run_dir=run)
    trainer.latest_pointer = data / "latest"
    try:
        trainer.evaluate()
        trainer.train()
        if log:
            trainer.log_metrics()
        trainer.save_checkpoint()
    finally:
        trainer.close()
    (run / "config.yaml").write_text(cfg.to_yaml())
    return data


@pytest.fixture
def env_cache(tmp_path_factory, monkeypatch):
    """A built-env cache of the test's own ($PUFFER_ENV_CACHE): PufferLib-format builds never touch the
    user's, and a test sees only the builds it made."""
    cache = tmp_path_factory.mktemp("env-cache")
    monkeypatch.setenv("PUFFER_ENV_CACHE", str(cache))
    return cache
