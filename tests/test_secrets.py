"""No secret on disk or screen (docs/reliability.md): passwords in storage URLs, API keys and tokens
are redacted, by one function (``appliance.redact``), in locks, reports, errors and the process title,
and no file a sweep writes holds one."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from appliance.cli import cli
from appliance.errors import ConfigError
from appliance.redact import command_line, redact
from appliance.sweep import study as sweep_study
from appliance.train import runs

PASSWORD = "Sw0rdf1sh-62"
URL = f"postgresql://puffer:{PASSWORD}@127.0.0.1:9/puffer"
POSTGRES = os.environ.get("PUFFER_TEST_POSTGRES_URL")


@pytest.mark.parametrize(
    "text",
    [
        f"puffer-bench sweep squared --storage {URL} --out x",
        f"--storage={URL.replace('postgresql', 'postgresql+psycopg')}",
        f"--wandb-api-key {PASSWORD} --vec.num-envs 8",
        f"--train.api-key={PASSWORD}",
        f"host=db user=puffer password={PASSWORD} dbname=puffer",
        f"https://example.org/upload?token={PASSWORD}&x=1",
        f"wandb_api_key: {PASSWORD}",
        f"the key is {PASSWORD} (from the environment)",
    ],
)
def test_redact_hides_every_form_of_secret(text, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", PASSWORD)
    shown = redact(text)
    assert PASSWORD not in shown and "***" in shown, shown
    assert redact(shown) == shown  # redacting twice changes nothing


def test_redact_leaves_ordinary_text_alone():
    for text in [
        "tokens: 5",
        "--tokens 5",
        "author: me",
        "postgresql://puffer@host/db",
        "a:b@c",
        "--no-password --out x",
    ]:
        assert redact(text).replace("--no-password --out x", "") == text.replace("--no-password --out x", "")
    assert redact("--no-password --out x") == "--no-password --out x"


@pytest.mark.parametrize("kind", ["sweep", "run"])
def test_a_folders_lock_records_the_command_without_its_secrets(tmp_path, monkeypatch, kind):
    """The lock is on disk while the sweep or run holds it (and after a SIGKILL); a second process is
    refused naming the holder from it."""
    monkeypatch.setattr(
        sys, "argv", ["puffer-bench", "sweep", "squared", "--storage", URL, "--api-key", PASSWORD]
    )
    if kind == "sweep":
        hold, lock, error = sweep_study.locked, tmp_path / sweep_study.LOCK, ConfigError
    else:
        hold, lock, error = runs.locked, tmp_path / runs.LOCK, Exception
    with hold(tmp_path):
        held = lock.read_text()
        assert "puffer-bench sweep squared --storage postgresql://puffer:***@127.0.0.1:9/puffer" in held
        assert PASSWORD not in held
        with pytest.raises(error) as refused, hold(tmp_path):
            pass
        assert "in use by process" in str(refused.value) and PASSWORD not in str(refused.value)


def test_a_lock_written_with_a_secret_before_is_refused_without_showing_it(tmp_path):
    """A lock left by an older version (the password in it): the refusal that quotes it hides it."""
    import fcntl

    lock = tmp_path / sweep_study.LOCK
    lock.write_text(f"process 1 (puffer-bench sweep squared --storage {URL})\n")
    with open(lock) as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(ConfigError) as refused, sweep_study.locked(tmp_path):
            pass
    assert "in use by process 1" in str(refused.value) and PASSWORD not in str(refused.value)


def test_an_error_quoting_a_secret_is_shown_without_it(monkeypatch):
    """Every one-line error goes through redaction, whatever raised it and whatever it quotes."""
    from appliance.sweep import storage

    def refuse(url, heartbeat=None):
        raise ConfigError(f"cannot reach {url}: token={PASSWORD}")

    monkeypatch.setattr(storage, "parse", refuse)
    result = CliRunner().invoke(cli, ["sweep", "squared", "--storage", URL])
    assert result.exit_code == 2 and "error: cannot reach postgresql://puffer:***@" in result.output
    assert PASSWORD not in result.output, result.output


def test_the_process_title_hides_a_secret_on_the_command_line():
    """What ps and /proc/PID/cmdline show of the process, not only what it writes."""
    code = (
        "import sys; from appliance.redact import hide_in_process_title; hide_in_process_title(); "
        "print('ready', flush=True); sys.stdin.read()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "--storage", URL, "--wandb-api-key", PASSWORD],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout.readline().strip() == "ready"
        shown = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode()
    finally:
        proc.communicate("", timeout=10)
    assert PASSWORD not in shown and "postgresql://puffer:" in shown and "--wandb-api-key" in shown, shown


def _every_file(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and not p.is_symlink()}


@pytest.mark.slow
def test_a_sweep_on_a_password_url_writes_and_shows_no_secret(tmp_path):
    """A worker on a real PostgreSQL server, its URL's password on the command line and an API key in
    the environment: neither is in any file of its sweep folder (read while it runs and after), in its
    output, or in its process title."""
    if not POSTGRES:
        pytest.skip("no PostgreSQL server: set PUFFER_TEST_POSTGRES_URL (.ci/run starts one)")
    pytest.importorskip("psycopg", reason="the PostgreSQL driver: pip install 'puffer-bench[postgres]'")
    import sqlalchemy.engine

    from appliance.testing import tiny_sweep_args

    url = sqlalchemy.engine.make_url(POSTGRES)
    secret = url.password
    assert secret, "PUFFER_TEST_POSTGRES_URL has no password to look for"
    space = tmp_path / "space.yaml"
    space.write_text(
        yaml.safe_dump(
            {
                "objective": {"metric": "perf", "window": 2},
                "space": {"train.learning_rate": {"low": 0.001, "high": 0.05}},
            }
        )
    )
    out = tmp_path / "sweep"
    name = f"secrets_{os.getpid()}_{int(time.time())}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "appliance.cli", "sweep", "squared", "--gpu", "cpu", "--trials", "2",
         "--out", str(out), "--space", str(space), "--storage", POSTGRES, "--study-name", name,
         *tiny_sweep_args(10000)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "WANDB_API_KEY": "wandb-" + PASSWORD},
    )  # fmt: skip
    seen: dict[Path, bytes] = {}
    titles, locks = [], []
    try:
        deadline = time.time() + 120
        while proc.poll() is None and time.time() < deadline:
            if out.is_dir():
                now = _every_file(out)
                seen.update(now)
                locks.append(now.get(out / sweep_study.LOCK, b""))
                with contextlib.suppress(OSError):  # once it runs: Python's own start shows argv as given
                    titles.append(Path(f"/proc/{proc.pid}/cmdline").read_bytes())
            time.sleep(0.2)
        output = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, output
    seen.update(_every_file(out))
    for text in (secret, PASSWORD):
        leaks = [str(p) for p, data in seen.items() if text.encode() in data]
        assert not leaks, leaks
        assert text not in output, output
        assert titles and not [t for t in titles if text.encode() in t]
    assert any(b"--storage postgresql://puffer:***@" in lock for lock in locks), locks  # read while held
    assert not [lock for lock in locks if secret.encode() in lock]


def test_command_line_is_the_redacted_argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["x", "sweep", "--storage", URL])
    assert command_line() == "puffer-bench sweep --storage postgresql://puffer:***@127.0.0.1:9/puffer"


def keyed_env(api_key: str = "", size: int = 4):
    """A Gymnasium env made with an API key (as a hosted env's client would be)."""
    import gymnasium

    assert api_key == PASSWORD, "the env was not given its key"
    return gymnasium.make("CartPole-v1")


def test_a_runs_files_hold_no_secret_and_a_resume_asks_for_it_again(tmp_path):
    """An env parameter that is a secret (``--env.api-key``) reaches the env, but config.yaml, the
    report and every other file of the run hold ``***``; a resume says to give it again, in one line,
    and runs once it is given."""
    import conftest

    data = tmp_path / "exp"

    def train(*extra):
        return CliRunner().invoke(
            cli,
            ["train", *extra, "--no-dashboard", *conftest.SMALL, "--vec.backend", "serial",
             "--train.data-dir", str(data)],
        )  # fmt: skip

    report = tmp_path / "report.json"
    first = train("test_secrets:keyed_env", "--env.api-key", PASSWORD, "--run-id", "r1",
                  "--train.total-timesteps", "64", "--report", str(report))  # fmt: skip
    assert first.exit_code == 0, first.output
    files = {**_every_file(data), report: report.read_bytes()}
    assert not [str(p) for p, b in files.items() if PASSWORD.encode() in b]
    assert yaml.safe_load((data / "r1" / "config.yaml").read_text())["env"]["api_key"] == "***"
    again = train("--resume", "r1", "--train.total-timesteps", "128")
    assert again.exit_code == 2 and "Traceback" not in again.output, again.output
    assert "does not hold env.api_key (a secret is never written there): give it again (--env.api-key)" in (
        again.output
    )
    resumed = train("--resume", "r1", "--env.api-key", PASSWORD, "--train.total-timesteps", "128")
    assert resumed.exit_code == 0, resumed.output
    assert "env.api_key given again" in resumed.output and PASSWORD not in first.output + resumed.output
    assert not [str(p) for p, b in _every_file(data).items() if PASSWORD.encode() in b]


def instant(spec):
    """A trial that 'trains' at once: its score from its learning rate."""
    return {"state": "complete", "score": float(spec["cfg"].train.learning_rate), "seconds": 1.0, "steps": 64,
            "curve": [[64.0, 0.5]], "reason": "done", "error": None}  # fmt: skip


def test_a_sweeps_folder_its_study_included_holds_no_secret(tmp_path, monkeypatch):
    """A sweep over an env made with an API key: the study.db (its base config and overrides), the
    lock, trials.md and best.yaml hold ``***``, never the key."""
    from appliance import sweep as sw

    monkeypatch.setattr(
        sys, "argv", ["puffer-bench", "sweep", "test_secrets:keyed_env", "--env.api-key", PASSWORD]
    )
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({"space": {"train.learning_rate": {"low": 0.001, "high": 0.05}}}))
    out = tmp_path / "sweep"
    overrides = ["--env.api-key", PASSWORD, "--train.device", "cpu", "--vec.backend", "serial"]
    lines = list(sw.sweep("test_secrets:keyed_env", out, sw.Options(trials=2), str(space), overrides=overrides,
                          profile="cpu", trial=instant))  # fmt: skip
    assert any(line.startswith("wrote") and "best.yaml" in line for line in lines), lines
    assert not [str(p) for p, b in _every_file(out).items() if PASSWORD.encode() in b]
    assert yaml.safe_load((out / "best.yaml").read_text())["env"]["api_key"] == "***"
    again = list(sw.sweep("test_secrets:keyed_env", out, sw.Options(trials=3), str(space), overrides=overrides,
                          profile="cpu", trial=instant))  # fmt: skip
    assert any(line.startswith("resuming") for line in again), again  # the same config, its key unseen


@pytest.mark.parametrize("form", [[], ["--json"], ["--show-origin"]])
def test_config_prints_no_secret_given_as_a_flag(form):
    from click.testing import CliRunner

    from appliance.cli import cli

    url = "postgresql://user:hunter2pass@db.example/optuna"
    result = CliRunner().invoke(
        cli, ["config", "CartPole-v1", "--env.api-key", "sk-SECRET123", "--env.url", url, *form]
    )
    assert result.exit_code == 0, result.output
    assert "sk-SECRET123" not in result.output and "hunter2pass" not in result.output
    assert "api_key" in result.output  # the key is shown, its value hidden
