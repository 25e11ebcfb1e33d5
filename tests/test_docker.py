"""Docker: docker.sh against a fake docker, lint of the Dockerfiles and docker.sh, and (where a Docker
daemon is reachable) the CPU image built and run for real."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCKER_SH = ROOT / "docker.sh"
BIN = Path(sys.executable).parent

FAKE = """#!/usr/bin/env bash
# fake docker: records its arguments, answers like a daemon configured by env variables
printf '%s\\n' "$*" >> "$FAKE_LOG"
case "$1" in
  info)
    [ "${FAKE_DAEMON:-up}" = up ] || exit 1
    if [ "${2:-}" = --format ]; then
      if [ "${FAKE_NVIDIA:-0}" = 1 ]; then echo '{"nvidia":{},"runc":{}}'; else echo '{"runc":{}}'; fi
    fi ;;
  image) [ "${FAKE_IMAGE:-present}" = present ] || exit 1 ;;
esac
exit 0
"""


@pytest.fixture
def fake(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE)
    (bin_dir / "docker").chmod(0o755)
    log = tmp_path / "docker.log"

    def run(*args, daemon="up", nvidia=False, image="present", docker=True):
        log.write_text("")
        path = f"{bin_dir}:/usr/bin:/bin" if docker else "/usr/bin:/bin"
        env = {
            "PATH": path,
            "HOME": str(tmp_path),
            "FAKE_LOG": str(log),
            "FAKE_DAEMON": daemon,
            "FAKE_NVIDIA": "1" if nvidia else "0",
            "FAKE_IMAGE": image,
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
    proc, calls = fake("build")
    assert proc.returncode == 0, proc.stderr
    assert last(calls, "build") == (
        "build -f images/cuda.Dockerfile --build-arg CUDA_MAJOR=12 --build-arg CUDA_VERSION=12.8.1 "
        "--build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128 -t puffer-bench:cuda12 ."
    )
    _, calls = fake("build", "--cuda", "13")
    assert last(calls, "build") == (
        "build -f images/cuda.Dockerfile --build-arg CUDA_MAJOR=13 --build-arg CUDA_VERSION=13.0.1 "
        "--build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu130 -t puffer-bench:cuda13 ."
    )
    _, calls = fake("build", "--cpu", "--tag", "me/pb:dev")
    assert last(calls, "build") == "build -f images/cpu.Dockerfile -t me/pb:dev ."


def test_test_verb_passes_the_gpu_when_the_runtime_is_there(fake):
    proc, calls = fake("test", nvidia=True)
    assert proc.returncode == 0 and "GPU tests will run" in proc.stderr
    assert last(calls, "run") == "run --rm --gpus all --entrypoint python puffer-bench:cuda12 -m pytest -rs"
    proc, calls = fake("test", "-k", "ocean")
    assert "will be reported skipped" in proc.stderr
    assert last(calls, "run") == "run --rm --entrypoint python puffer-bench:cuda12 -m pytest -rs -k ocean"
    proc, calls = fake("test", "--cpu", nvidia=True)
    assert last(calls, "run") == "run --rm --entrypoint python puffer-bench:cpu -m pytest -rs"


def test_bench_mounts_results_and_passes_arguments(fake, tmp_path):
    uid, gid = os.getuid(), os.getgid()
    proc, calls = fake("bench", "--suite", "full", "--gpu", "h100", nvidia=True)
    assert proc.returncode == 0, proc.stderr
    assert last(calls, "run") == (
        f"run --rm --gpus all --user {uid}:{gid} -v {ROOT}/results:/opt/puffer-bench/results "
        "puffer-bench:cuda12 run --out results --suite full --gpu h100"
    )
    _, calls = fake("bench", "--cpu", "--", "--repeats", "1")
    assert last(calls, "run") == (
        f"run --rm --user {uid}:{gid} -v {ROOT}/results:/opt/puffer-bench/results "
        "puffer-bench:cpu run --out results --repeats 1"
    )


def test_shell_and_push(fake):
    _, calls = fake("shell", "--cpu")
    assert (
        last(calls, "run")
        == f"run --rm -it -v {ROOT}/results:/opt/puffer-bench/results --entrypoint bash puffer-bench:cpu"
    )
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
    ],
)
def test_errors_are_one_line(fake, args, kwargs, message):
    proc, calls = fake(*args, **kwargs)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert not [c for c in calls if c.split()[0] in ("build", "run", "push")]  # nothing was started


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


def test_dockerfiles_pass_hadolint():
    files = sorted(str(p) for p in (ROOT / "images").glob("*.Dockerfile"))
    assert len(files) == 2
    proc = subprocess.run(
        [tool("hadolint"), "--config", str(ROOT / ".hadolint.yaml"), *files], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_docker_sh_passes_shellcheck():
    proc = subprocess.run([tool("shellcheck"), str(DOCKER_SH)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def pip_installs(dockerfile: Path) -> list[list[str]]:
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    installs = []
    for line in text.splitlines():
        if not line.startswith("RUN"):
            continue
        for part in re.split(r"&&", line[3:]):
            words = shlex.split(part)
            if words[:2] == ["pip", "install"]:
                installs.append(words[2:])
    return installs


@pytest.mark.parametrize("name", ["cuda.Dockerfile", "cpu.Dockerfile"])
def test_dockerfiles_install_what_pyproject_declares(name):
    """The images install the project by its extras: no second list of dependencies to drift."""
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    project_installs = 0
    for args in pip_installs(ROOT / "images" / name):
        packages = [a for a in args if not a.startswith("-") and not a.startswith("${") and "://" not in a]
        for pkg in packages:
            match = re.fullmatch(r"\.\[([^\]]*)\]", pkg)
            if match:
                project_installs += 1
                named = {e.replace("${CUDA_MAJOR}", "12") for e in match.group(1).split(",")}
                assert named <= extras, f"{name} asks for extras {named - extras} that pyproject.toml lacks"
            else:
                # only the toolchain and torch (whose build the image's CUDA major chooses) are named
                assert pkg in ("pip", "setuptools", "wheel", "torch"), (
                    f"{name} installs {pkg!r} outside pyproject"
                )
    assert project_installs == 1
    cuda_extras = {f"cuda{m}" for m in (12, 13)}
    assert cuda_extras <= extras  # docker.sh --cuda 12|13 maps onto these


# ---------------------------------------------------------------------- the real image


def docker_daemon():
    try:
        import docker

        client = docker.from_env()
        client.ping()
        return client
    except Exception as e:  # no SDK, no socket, no permission
        pytest.skip(f"no Docker daemon reachable ({type(e).__name__}); the image build is not exercised here")


@pytest.mark.docker
def test_cpu_image_runs_info_and_the_quick_suite(tmp_path):
    client = docker_daemon()
    subprocess.run(["bash", str(DOCKER_SH), "build", "--cpu", "--tag", "puffer-bench:cpu-test"], check=True)
    out = client.containers.run("puffer-bench:cpu-test", ["info", "--json"], remove=True)
    assert b'"cpu"' in out
    from appliance.container import run_in_container

    code = run_in_container(
        "puffer-bench:cpu-test", ["run", "--repeats", "1", "--gpu", "cpu"], tmp_path, client
    )
    assert code == 0 and list((tmp_path / "cpu").glob("*.json"))


def test_container_option_parsing():
    from appliance.container import option_value, strip_host_options

    args = ["run", "--suite", "full", "--out", "/host/results", "--container=img", "--gpu", "h100"]
    assert strip_host_options(args) == ["--suite", "full", "--gpu", "h100"]
    assert option_value(args, "--gpu") == "h100" and option_value(["--gpu=cpu"], "--gpu") == "cpu"
    assert option_value(args, "--repeats") is None
