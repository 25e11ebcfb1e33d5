"""Docker: docker.sh against a fake docker, lint of the Dockerfiles and the scripts, and (where a Docker
daemon is reachable and the CPU image is built: `make docker-test` does both) the image run for real."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCKER_SH = ROOT / "docker.sh"
BIN = Path(sys.executable).parent
RUN = "run --rm --init --network none --shm-size 1g"  # what every docker.sh container gets

FAKE = """#!/usr/bin/env bash
# fake docker: records its arguments, answers like a daemon configured by env variables
printf '%s\\n' "$*" >> "$FAKE_LOG"
case "$1" in
  info)
    [ "${FAKE_DAEMON:-up}" = up ] || exit 1
    if [ "${2:-}" = --format ]; then
      if [ "${FAKE_NVIDIA:-0}" = 1 ]; then echo '{"nvidia":{},"runc":{}}'; else echo '{"runc":{}}'; fi
    fi ;;
  image)
    [ "${FAKE_IMAGE:-present}" = present ] || exit 1
    case "$*" in *Labels*) echo "${FAKE_LABEL:-}" ;; esac ;;
esac
exit 0
"""

# stands in for images/wheelhouse.sh: prints the Python version the wheels are for
FAKE_WHEELHOUSE = """#!/usr/bin/env bash
echo "wheelhouse $*" >> "$FAKE_LOG"
echo 3.12 0123abcd
"""


@pytest.fixture
def fake(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE)
    (bin_dir / "docker").chmod(0o755)
    (bin_dir / "wheelhouse").write_text(FAKE_WHEELHOUSE)
    (bin_dir / "wheelhouse").chmod(0o755)
    log = tmp_path / "docker.log"

    def run(*args, daemon="up", nvidia=False, image="present", docker=True, **extra_env):
        log.write_text("")
        path = f"{bin_dir}:/usr/bin:/bin" if docker else "/usr/bin:/bin"
        env = {
            "PATH": path,
            "HOME": str(tmp_path),
            "FAKE_LOG": str(log),
            "FAKE_DAEMON": daemon,
            "FAKE_NVIDIA": "1" if nvidia else "0",
            "FAKE_IMAGE": image,
            "WHEELHOUSE": str(bin_dir / "wheelhouse"),
            "SHM_SIZE": "1g",
            "RESULTS": str(tmp_path / "results"),
            **extra_env,
        }
        if not docker:
            env["DOCKER"] = "docker-not-installed"
        proc = subprocess.run(
            ["bash", str(DOCKER_SH), *args], env=env, capture_output=True, text=True, cwd=tmp_path
        )
        calls = [line for line in log.read_text().splitlines()]
        return proc, calls

    return run


def last(calls, verb):
    found = [c for c in calls if c.split()[0] == verb]
    assert found, calls
    return found[-1]


def test_build_command_lines(fake):
    """The flavour's wheelhouse, made into an image of its own, then the build: host network only here."""
    proc, calls = fake("build")
    assert proc.returncode == 0, proc.stderr
    assert [c for c in calls if c.split()[0] in ("wheelhouse", "build")] == [
        "wheelhouse cuda12",
        "build -q --label puffer-bench.lock=0123abcd -t puffer-bench-wheels:cuda12 -f - images/wheelhouse/cuda12",
        "build --network host -f images/cuda.Dockerfile --build-arg CUDA_MAJOR=12 "
        "--build-arg WHEELS=puffer-bench-wheels:cuda12 -t puffer-bench:cuda12 .",
    ]
    _, calls = fake("build", "--cuda", "13", "--base", "python:3.12-slim")
    assert last(calls, "build") == (
        "build --network host -f images/cuda.Dockerfile --build-arg CUDA_MAJOR=13 "
        "--build-arg WHEELS=puffer-bench-wheels:cuda13 --build-arg BASE=python:3.12-slim -t puffer-bench:cuda13 ."
    )
    # the CPU image's default base is the slim Python image of the wheelhouse's Python
    _, calls = fake("build", "--cpu", "--tag", "me/pb:dev")
    assert last(calls, "build") == (
        "build --network host -f images/cpu.Dockerfile --build-arg WHEELS=puffer-bench-wheels:cpu "
        "--build-arg BASE=python:3.12-slim -t me/pb:dev ."
    )
    _, calls = fake("build", "--cpu", "--base=local/debian:12")
    assert last(calls, "build").endswith("--build-arg BASE=local/debian:12 -t puffer-bench:cpu .")
    # a wheels image made from the same lock is kept
    _, calls = fake("build", "--cpu", FAKE_LABEL="0123abcd")
    assert [c for c in calls if c.startswith("build")] == [last(calls, "build")]


def test_a_failed_wheelhouse_stops_the_build(fake, tmp_path):
    broken = tmp_path / "broken-wheelhouse"
    broken.write_text("#!/bin/sh\necho 'wheelhouse.sh: error: no pip' >&2\nexit 1\n")
    broken.chmod(0o755)
    proc, calls = fake("build", "--cpu", WHEELHOUSE=str(broken))
    assert proc.returncode != 0 and "could not be made" in proc.stderr.splitlines()[-1]
    assert not [c for c in calls if c.startswith("build")]


def test_test_verb_passes_the_gpu_when_the_runtime_is_there(fake):
    proc, calls = fake("test", nvidia=True)
    assert proc.returncode == 0 and "GPU tests will run" in proc.stderr
    assert last(calls, "run") == f"{RUN} --gpus all --entrypoint python puffer-bench:cuda12 -m pytest -rs"
    proc, calls = fake("test", "-k", "ocean")
    assert "will be reported skipped" in proc.stderr
    assert last(calls, "run") == f"{RUN} --entrypoint python puffer-bench:cuda12 -m pytest -rs -k ocean"
    proc, calls = fake("test", "--cpu", nvidia=True)
    assert last(calls, "run") == f"{RUN} --entrypoint python puffer-bench:cpu -m pytest -rs"


def test_shm_size_defaults_to_half_the_ram(fake):
    kib = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )
    _, calls = fake("test", "--cpu", SHM_SIZE="")
    assert f"--shm-size {kib // 2048}m " in last(calls, "run")


def test_bench_mounts_results_and_passes_arguments(fake, tmp_path):
    uid, gid = os.getuid(), os.getgid()
    results = tmp_path / "results"
    proc, calls = fake("bench", "--suite", "full", "--gpu", "h100", nvidia=True)
    assert proc.returncode == 0, proc.stderr
    assert last(calls, "run") == (
        f"{RUN} --gpus all --user {uid}:{gid} -v {results}:/opt/puffer-bench/results "
        "puffer-bench:cuda12 run --out results --suite full --gpu h100"
    )
    assert results.is_dir()
    _, calls = fake("bench", "--cpu", "--", "--repeats", "1")
    assert last(calls, "run") == (
        f"{RUN} --user {uid}:{gid} -v {results}:/opt/puffer-bench/results "
        "puffer-bench:cpu run --out results --repeats 1"
    )


def test_shell_and_push(fake, tmp_path):
    mount = f"-v {tmp_path}/results:/opt/puffer-bench/results"
    _, calls = fake("shell", "--cpu")  # stdin is not a terminal here: no -it
    assert last(calls, "run") == f"{RUN} {mount} --entrypoint bash puffer-bench:cpu"
    _, calls = fake("shell", "--cpu", "--", "puffer-bench", "info", "--json")
    assert last(calls, "run") == f"{RUN} {mount} --entrypoint puffer-bench puffer-bench:cpu info --json"
    _, calls = fake("push", "--tag", "registry.example/pb:1")
    assert last(calls, "push") == "push registry.example/pb:1"


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        (["build"], {"docker": False}, "docker is not installed"),
        (["test"], {"daemon": "down"}, "Docker daemon is not reachable"),
        (["bench"], {"nvidia": False}, "NVIDIA container runtime is missing"),
        (["test", "--cpu"], {"image": "absent"}, "not built yet; build it with: ./docker.sh build --cpu"),
        (["bench", "--cuda", "13"], {"image": "absent", "nvidia": True}, "./docker.sh build --cuda 13"),
        (["build", "--cuda", "11"], {}, "--cuda must be 12 or 13"),
        (["deploy"], {}, "unknown verb 'deploy'"),
        (["build", "--tag"], {}, "--tag needs an image name"),
        (["build", "--base"], {}, "--base needs an image"),
    ],
)
def test_errors_are_one_line(fake, args, kwargs, message):
    proc, calls = fake(*args, **kwargs)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert not [c for c in calls if c.split()[0] in ("build", "run", "push")]  # nothing was started


@pytest.mark.parametrize(
    "uid, reason",
    [
        ("1000", "no Docker daemon is reachable and, not being root, it cannot start one"),
        ("0", "no Docker daemon is reachable and there is neither dockerd nor apt-get to install it"),
    ],
)
def test_docker_test_skips_in_one_line_where_docker_cannot_be_had(tmp_path, uid, reason):
    """make docker-test passes (exit 0, one line) on a machine without Docker; DOCKER_TEST=require fails."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text("#!/bin/sh\nexit 1\n")  # installed, but no daemon answers
    (bin_dir / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    for name in ("docker", "id"):
        (bin_dir / name).chmod(0o755)
    (bin_dir / "dirname").symlink_to(shutil.which("dirname"))
    script = str(ROOT / "images" / "docker-test.sh")
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    proc = subprocess.run([shutil.which("bash"), script], env=env, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == f"docker-test: skipped: {reason}\n"
    proc = subprocess.run(
        [shutil.which("bash"), script], env={**env, "DOCKER_TEST": "require"}, capture_output=True, text=True
    )
    assert proc.returncode == 1 and reason in proc.stderr


def test_help_documents_every_verb(fake):
    proc, _ = fake("--help")
    assert proc.returncode == 0
    for verb in ("build", "test", "bench", "shell", "push", "--cpu", "--cuda", "--tag"):
        assert verb in proc.stdout


# ---------------------------------------------------------------------- lint and consistency


def tool(name):
    path = shutil.which(name, path=f"{BIN}:{os.environ.get('PATH', '')}")
    if path is None:
        pytest.skip(f"{name} is not installed (pip install 'puffer-bench[dev]')")
    return path


def test_wheelhouse_lock_is_read_into_the_fingerprint(tmp_path, monkeypatch):
    from appliance.sysinfo import WHEELS_ENV, fingerprint, image_wheels

    lock = tmp_path / "wheels.lock"
    lock.write_text(
        "numpy==2.4.6 --hash=sha256:" + "a" * 64 + "  # numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl\n"
        "torch==2.13.0+cpu --hash=sha256:" + "b" * 64 + "\n\n"
    )
    info = image_wheels(str(lock))
    assert info["wheels"] == {"numpy==2.4.6": "a" * 64, "torch==2.13.0+cpu": "b" * 64}
    assert info["lock"] == str(lock) and len(info["sha256"]) == 64
    monkeypatch.delenv(WHEELS_ENV, raising=False)
    assert image_wheels() is None  # not in an image
    monkeypatch.setenv(WHEELS_ENV, str(tmp_path / "gone.lock"))
    assert "FileNotFoundError" in image_wheels()["error"]
    monkeypatch.setenv(WHEELS_ENV, str(lock))
    assert fingerprint()["image"]["wheels"]["torch==2.13.0+cpu"] == "b" * 64


def test_dockerfiles_pass_hadolint():
    files = sorted(str(p) for p in (ROOT / "images").glob("*.Dockerfile"))
    assert len(files) == 2
    proc = subprocess.run(
        [tool("hadolint"), "--config", str(ROOT / ".hadolint.yaml"), *files], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_scripts_pass_shellcheck():
    scripts = [DOCKER_SH, *sorted((ROOT / "images").glob("*.sh"))]
    proc = subprocess.run([tool("shellcheck"), *map(str, scripts)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def pip_installs(dockerfile: Path) -> list[list[str]]:
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    installs = []
    for line in text.splitlines():
        if not line.startswith("RUN"):
            continue
        for part in re.split(r"&&", line[3:]):
            words = shlex.split(part)
            if len(words) > 1 and words[0].endswith("pip") and words[1] == "install":
                installs.append(words[2:])
    return installs


@pytest.mark.parametrize("name", ["cuda.Dockerfile", "cpu.Dockerfile"])
def test_dockerfiles_install_only_locked_wheels(name):
    """No index is reached from a build: the wheelhouse's lock, hash-checked, then the project's wheel."""
    installs = pip_installs(ROOT / "images" / name)
    assert installs and all("--no-index" in args for args in installs), installs
    assert any("--require-hashes" in args for args in installs)


def test_wheelhouse_asks_for_extras_that_pyproject_declares():
    """The wheelhouse downloads the project's own dependencies by extra: no second list to drift."""
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    named = re.findall(r"^\s*EXTRAS=(\S+)$", (ROOT / "images" / "wheelhouse.sh").read_text(), re.M)
    assert len(named) == 3  # cpu, cuda12, cuda13
    for value in named:
        assert set(value.split(",")) <= extras, value
    assert {"cuda12", "cuda13"} <= extras  # docker.sh --cuda 12|13 maps onto these


# ---------------------------------------------------------------------- the real image
# Run by `make docker-test` (images/docker-test.sh) after it built the CPU image; elsewhere they need
# a reachable daemon (DOCKER_HOST) and the image (./docker.sh build --cpu), and say so when skipped.

IMAGE = os.environ.get("PUFFER_IMAGE", "puffer-bench:cpu")


def unavailable(reason):
    """Skip, or fail where the caller said the daemon and image are there (make docker-test)."""
    if os.environ.get("PUFFER_DOCKER_TESTS") == "require":
        pytest.fail(reason)
    pytest.skip(reason)


def docker_daemon():
    try:
        import docker
    except ImportError:
        unavailable("the Docker SDK is not installed (pip install 'puffer-bench[docker]')")
    try:
        client = docker.from_env()
        client.ping()
        return client
    except Exception as e:  # no SDK, no socket, no permission
        unavailable(f"no Docker daemon reachable ({type(e).__name__}); the image is not exercised here")


@pytest.fixture(scope="module")
def client():
    client = docker_daemon()
    try:
        client.images.get(IMAGE)
    except Exception:
        unavailable(f"image {IMAGE} is not built here (./docker.sh build --cpu, or make docker-test)")
    return client


def docker_sh(*args, timeout=300):
    return subprocess.run(
        ["bash", str(DOCKER_SH), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.docker
def test_image_runs_as_a_user_under_an_init_with_room_in_shm(client):
    script = (
        "id -u; cat /proc/1/comm; df -k --output=size /dev/shm | tail -n 1; "
        "python -c 'import appliance, appliance._ocean; print(appliance.__file__)'"
    )
    proc = docker_sh("shell", "--tag", IMAGE, "--", "bash", "-c", script)
    assert proc.returncode == 0, proc.stderr
    uid, init, shm_kib, package = proc.stdout.split()
    assert uid == "1000"  # the image's user, not root
    assert init == "docker-init"  # PID 1 forwards docker stop's SIGTERM
    assert int(shm_kib) > 64 * 1024  # more than Docker's default 64 MB
    # from the image's source tree, Python imports the installed package with its extension
    assert package.startswith("/opt/venv/") and package.endswith("appliance/__init__.py")


@pytest.mark.docker
def test_info_in_the_image_shows_the_wheels_it_was_built_from(client):
    proc = docker_sh("shell", "--tag", IMAGE, "--", "puffer-bench", "info", "--json")
    assert proc.returncode == 0, proc.stderr
    image = json.loads(proc.stdout)["image"]
    torch = [k for k in image["wheels"] if k.startswith("torch==")]
    assert len(torch) == 1 and re.fullmatch(r"[0-9a-f]{64}", image["wheels"][torch[0]])
    lock = ROOT / "images" / "wheelhouse" / "cpu" / "requirements.lock"
    if lock.is_file() and IMAGE == "puffer-bench:cpu":  # built from this checkout's wheelhouse
        assert image["sha256"] == hashlib.sha256(lock.read_bytes()).hexdigest()


@pytest.mark.docker
def test_run_container_writes_a_valid_report_on_the_host(client, tmp_path):
    from appliance.bench.report import load
    from appliance.container import run_in_container

    before = {c.id for c in client.containers.list(all=True)}
    results = tmp_path / "results"
    results.mkdir()
    # a tiny suite, handed in through the mounted results folder (the image's results/)
    suite = {
        "name": "tiny",
        "seconds": 0.2,
        "gate": {"patience_s": 1, "budget_s": 2},  # bounded waits for a slowed CPU
        "env_sps": {"envs": ["squared"], "threads": [1]},
        "vector_sps": [{"env": "squared", "backends": ["native", "serial"], "num_envs": 16}],
        "train_sps": {"envs": ["squared"], "seconds": 0.3},
    }
    (results / "tiny.yaml").write_text(json.dumps(suite))  # JSON is YAML
    args = ["run", "--suite", "results/tiny.yaml", "--repeats", "1", "--no-plots", "--gpu", "cpu"]
    code = run_in_container(IMAGE, args, results, client)
    assert code == 0
    (report,) = (results / "cpu").glob("*.json")
    assert report.stat().st_uid == os.getuid()  # written as the host user
    assert load(report)["fingerprint"]["image"]["wheels"]  # the image's fingerprint, schema-valid
    assert {c.id for c in client.containers.list(all=True)} == before  # the container is gone


@pytest.mark.docker
def test_errors_against_the_real_daemon_are_one_line(client, tmp_path):
    from appliance.container import ContainerError, run_in_container

    proc = docker_sh("test", "--tag", "puffer-bench:no-such-image")
    assert proc.returncode == 1 and proc.stderr.strip().count("\n") == 0
    assert "image puffer-bench:no-such-image is not built yet" in proc.stderr
    with pytest.raises(ContainerError, match="not built yet"):
        run_in_container("puffer-bench:no-such-image", ["run"], tmp_path, client)
    if "nvidia" not in (client.info().get("Runtimes") or {}):
        proc = docker_sh("bench", "--tag", IMAGE)  # the GPU flavour's verb
        assert proc.returncode == 1 and "NVIDIA container runtime is missing" in proc.stderr
        assert proc.stderr.strip().count("\n") == 0


@pytest.mark.docker
def test_docker_stop_reaches_puffer_bench(client):
    """The image's init hands SIGTERM on: docker stop ends a run at once instead of killing it after
    the grace period (a Python process as PID 1 would ignore SIGTERM)."""
    container = client.containers.run(
        IMAGE,
        ["envs", "sps", "breakout", "--threads", "1", "--seconds", "300"],
        detach=True,
        network_mode="none",
    )
    try:
        deadline = time.monotonic() + 60
        while container.status != "running" and time.monotonic() < deadline:
            time.sleep(0.2)
            container.reload()
        time.sleep(3)  # puffer-bench is up and measuring
        start = time.monotonic()
        container.stop(timeout=30)
        elapsed = time.monotonic() - start
        status = container.wait(timeout=30)["StatusCode"]
    finally:
        container.remove(force=True)
    assert elapsed < 10, f"docker stop took {elapsed:.1f} s"
    assert status != 137, "killed after the grace period: SIGTERM never reached puffer-bench"


def test_container_option_parsing():
    from appliance.container import option_value, strip_host_options

    args = ["run", "--suite", "full", "--out", "/host/results", "--container=img", "--gpu", "h100"]
    assert strip_host_options(args) == ["--suite", "full", "--gpu", "h100"]
    assert option_value(args, "--gpu") == "h100" and option_value(["--gpu=cpu"], "--gpu") == "cpu"
    assert option_value(args, "--repeats") is None


# ---------------------------------------------------------------------- the container dies with its caller

WATCHED = """
import sys, time
sys.path.insert(0, sys.argv[1])
from appliance.lifeline import OnParentDeath
watcher = OnParentDeath("open(sys.argv[2], 'w').write('cleaned up')", sys.argv[2])
if sys.argv[3] == "done":
    watcher.done()
print("watching", flush=True)
time.sleep(1000)
"""


@pytest.mark.parametrize("done", [False, True])
def test_a_clean_up_runs_when_its_process_is_killed_outright_and_not_after_done(tmp_path, done):
    """lifeline.OnParentDeath, which removes an ab round's container: before it, SIGKILL to `ab`
    left the container running (it is the daemon's child; no parent-death signal reaches it)."""
    import signal

    marker = tmp_path / "cleaned"
    proc = subprocess.Popen(
        [sys.executable, "-c", WATCHED, str(ROOT), str(marker), "done" if done else "-"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline() == "watching\n"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while not marker.exists() and time.monotonic() < deadline and not done:
            time.sleep(0.05)
        time.sleep(0.3 if done else 0)
        assert marker.exists() != done
    finally:
        if proc.poll() is None:
            proc.kill()


KILLED_AB = """
import sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from appliance.container import run_in_container
run_in_container(sys.argv[2], ["run", "--suite", "results/long.yaml", "--repeats", "1", "--gpu", "cpu"], Path(sys.argv[3]))
"""


@pytest.mark.docker
def test_a_container_goes_when_its_caller_is_killed_outright(client, tmp_path):
    """`ab` with an image variant SIGKILLed mid-round: its container ran on to the round's end."""
    import signal

    results = tmp_path / "results"
    results.mkdir()
    suite = {"name": "long", "seconds": 60, "env_sps": {"envs": ["squared"], "threads": [1]}}
    (results / "long.yaml").write_text(json.dumps(suite))
    before = {c.id for c in client.containers.list(all=True)}
    proc = subprocess.Popen([sys.executable, "-c", KILLED_AB, str(ROOT), IMAGE, str(results)])
    try:
        deadline = time.monotonic() + 120
        while not ({c.id for c in client.containers.list()} - before):
            assert proc.poll() is None and time.monotonic() < deadline, "no container started"
            time.sleep(0.2)
        time.sleep(2)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 30
        while {c.id for c in client.containers.list(all=True)} - before and time.monotonic() < deadline:
            time.sleep(0.5)
        left = {c.id for c in client.containers.list(all=True)} - before
    finally:
        if proc.poll() is None:
            proc.kill()
    for cid in left:
        client.containers.get(cid).remove(force=True)
    assert not left, "the container outlived the process that started it"
