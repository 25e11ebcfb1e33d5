#!/usr/bin/env python3
"""PufferLib 4.0 as a peer to measure against: its torch trainer on the CPU, built from a pinned commit.

    python tools/pufferlib4_peer.py build [--envs breakout,pong,squared] [--source PATH_OR_URL]
    python tools/pufferlib4_peer.py train breakout --stop-steps 94e6 --out results/cpu/parity4/pufferlib4-breakout-s0.json
    python tools/pufferlib4_peer.py config breakout       # -> bench/parity/pufferlib4/breakout.yaml
    python tools/pufferlib_peer.py table results/cpu/parity4/*.json results/cpu/parity/*-breakout-*.json

PufferLib 4.0.0 is not on the package index: ``build`` takes its source from a git repository
(``--source``: a local clone, bare or not, or a URL; by default the public fork
eig1n/PufferLib-OrbitWars, whose pyproject.toml says 4.0.0) at the pinned commit and no other unless
told (``--commit`` with ``--other-commit``), without its ``resources/`` (the envs' art, read only to
render). Its ``build.sh ENV --cpu`` downloads raylib from GitHub and compiles with clang and LLVM's
OpenMP; the harness runs the same steps with gcc/g++ and libgomp, against raylib 5.5 from the
sha256-checked pufferlib-3.0.0 source distribution that tools/pufferlib_peer.py already uses (the
release archive build.sh downloads, under the same name). One ``pufferlib._C`` per env (build.sh
links the env into it), each in a folder of its own whose ``pufferlib/`` links to the checkout's
Python files, so several envs can be built and trained side by side.

``train`` runs ``pufferlib.pufferl.train`` as ``puffer train ENV --slowly`` would (``--slowly``: its
torch backend, the one a CPU build has) with the env's own config (``config/default.ini`` under
``config/<env>.ini``), in a venv with this project's torch. A driver wraps ``PuffeRL.train`` to write
one JSON line after every trained epoch (agent steps, seconds, SPS, the env's logs of that rollout,
the losses and learning rate) and to stop at ``--stop-steps``/``--stop-seconds`` or at the end of
training; ``total_timesteps`` stays the ini's, so the schedules are its own. Nothing in PufferLib's
code or config is changed. The report has the shape tools/pufferlib_peer.py writes for 3.0, so its
``table`` and ``plot`` and ``puffer-bench compare`` read both. docs/peers.md.
"""

from __future__ import annotations

import argparse
import ast
import configparser
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pufferlib_peer as peer  # a sibling script, not a package
import tool_cli
from pufferlib_peer import POSITIVE, REPO, SEED, PeerError, check_out, check_suffix, log, run, steps_list

VERSION = "4.0.0"
SOURCE = "https://github.com/eig1n/PufferLib-OrbitWars"
COMMIT = "41dc40bb28258a82c8e4a27d20cafd0159a12072"
SYSTEM = f"pufferlib-{VERSION}-torch-cpu"
# our env name -> PufferLib 4.0's (its ocean/<name>/ folder, build.sh's ENV, its ini's env_name)
ENVS = {"breakout": "breakout", "pong": "pong", "squared": "squared"}
RAYLIB = "raylib-5.5_linux_amd64"
# what ``pufferl.train`` imports on its torch path (wandb, gpytorch, scikit-learn: only for --wandb
# and sweeps), pybind11 for the build; torch is this project's version (peer.torch_requirement)
REQUIREMENTS = ["numpy", "rich", "rich_argparse", "pybind11"]


def default_cache(commit: str = COMMIT) -> Path:
    return peer.cache_root() / f"pufferlib-{VERSION}-{commit[:12]}"


def known(env: str) -> str:
    if env not in ENVS:
        raise PeerError(f"no PufferLib 4.0 counterpart known for {env}; known: {', '.join(ENVS)}")
    return ENVS[env]


# ---------------------------------------------------------------------- build


def check_commit(commit: str, other: bool) -> None:
    if not re.fullmatch(r"[0-9a-f]{40}", commit):
        raise PeerError(f"--commit {commit!r}: a full 40-hex-digit commit id")
    if commit != COMMIT and not other:
        raise PeerError(
            f"--commit {commit[:12]} is not the pinned {COMMIT[:12]} the harness and docs/peers.md describe; "
            "add --other-commit to build it anyway"
        )


def checkout(source: str, commit: str, dest: Path, scratch: Path) -> None:
    """``commit``'s tree from ``source`` (a local git repository, bare or not, or a URL, fetched
    into ``scratch``) into ``dest``, without ``resources/``."""
    if "://" in source or source.startswith("git@"):
        if not (scratch / "HEAD").exists():
            run(["git", "init", "--quiet", "--bare", str(scratch)])
        have = subprocess.run(["git", "-C", str(scratch), "cat-file", "-e", f"{commit}^{{commit}}"],
                              capture_output=True).returncode == 0  # fmt: skip
        if not have:
            run(["git", "-C", str(scratch), "fetch", "--quiet", "--depth", "1", source, commit])
        repo = scratch
    else:
        repo = Path(source).expanduser()
        if not repo.is_dir():
            raise PeerError(f"--source {source}: no such folder (a git clone of {SOURCE}, or its URL)")
    found = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True, text=True
    )
    if found.returncode:
        why = found.stderr.strip().splitlines()[-1:] or ["no such commit"]
        raise PeerError(f"--source {source} has no commit {commit[:12]} ({why[0]})")
    tmp = dest.with_name(dest.name + ".part")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    cmd = ["git", "-C", str(repo), "archive", "--format=tar", commit, "--", ".", ":(exclude)resources"]
    log("$ " + shlex.join(cmd))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
        tar.extractall(tmp, filter="data")
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.wait():
        raise PeerError(f"git archive of {commit[:12]} failed: {err.strip() or 'no message'}")
    tmp.replace(dest)


def tree_version(tree: Path) -> str:
    """The version its pyproject.toml declares."""
    found = re.search(r'^version\s*=\s*"([^"]+)"', (tree / "pyproject.toml").read_text(), re.M)
    return found.group(1) if found else "?"


def raylib(cache: Path) -> Path:
    """raylib 5.5's headers and static library (``raylib-5.5_linux_amd64/``, the release archive
    build.sh downloads), taken from the checked pufferlib-3.0.0 sdist, which ships it."""
    dest = cache / RAYLIB
    if not (dest / "lib" / "libraylib.a").exists():
        sdists = peer.cache_root() / f"pufferlib-{peer.VERSION}"  # where tools/pufferlib_peer.py keeps it
        sdists.mkdir(parents=True, exist_ok=True)
        prefix = f"pufferlib-{peer.VERSION}/{RAYLIB}/"
        with tarfile.open(peer.fetch_sdist(sdists)) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(prefix) and m.isfile()]
            if not members:
                raise PeerError(f"{peer.SDIST} ships no {RAYLIB}/: find raylib 5.5 elsewhere")
            for m in members:
                m.name = m.name[len(f"pufferlib-{peer.VERSION}/") :]
                tar.extract(m, cache, filter="data")
    header = (dest / "include" / "raylib.h").read_text(errors="replace")
    if not re.search(r'#define\s+RAYLIB_VERSION\s+"5\.5"', header):
        raise PeerError(f"{dest}/include/raylib.h is not raylib 5.5")
    return dest


def obs_tensor_t(binding: str) -> str:
    """The ``#define OBS_TENSOR_T`` of an env's binding.c (build.sh's awk, which feeds the trainer)."""
    found = re.search(r"^#define\s+OBS_TENSOR_T\s+(\S+)", binding, re.M)
    if not found:
        raise PeerError("the env's binding.c has no #define OBS_TENSOR_T (build.sh needs one too)")
    return found.group(1)


def compile_commands(name: str, tree: Path, ray: Path, build: Path, out: Path, obs_t: str,
                     python_include: str, pybind_include: str) -> list[list[str]]:  # fmt: skip
    """build.sh ``ENV --cpu``'s three steps, run in the checkout (its -I. -Isrc are relative), with gcc
    for clang (its clang-only warning flags left out; -I$CUDA_HOME/include too: no CUDA here) and
    -lgomp for LLVM's -lomp5. Everything else is build.sh's: the static binding object, then the CPU
    trainer binding (bindings_cpu.cpp, float precision), linked with raylib into ``out``."""
    src = f"ocean/{name}"
    static_o, static_a, trainer_o = (
        build / f"libstatic_{name}.o",
        build / f"libstatic_{name}.a",
        build / "bindings_cpu.o",
    )
    binding = ["gcc", "-c", "-O2", "-DNDEBUG", "-Wall", "-Werror=incompatible-pointer-types", "-Werror=return-type",
               "-Wno-error=array-parameter", "-mavx2", "-mfma",
               "-I.", "-Isrc", f"-I{src}", "-Ivendor", f"-I{ray / 'include'}", "-Isrc", "-Ivendor",
               "-DPLATFORM_DESKTOP", "-fno-semantic-interposition", "-fvisibility=hidden", "-fPIC", "-fopenmp",
               f"{src}/binding.c", "-o", str(static_o)]  # fmt: skip
    archive = ["ar", "rcs", str(static_a), str(static_o)]
    trainer = ["g++", "-c", "-fPIC", "-fopenmp", "-D_GLIBCXX_USE_CXX11_ABI=1", "-DPLATFORM_DESKTOP", "-std=c++17",
               "-I.", "-Isrc", f"-I{python_include}", f"-I{pybind_include}", f"-DOBS_TENSOR_T={obs_t}",
               f"-DENV_NAME={name}", "-DPRECISION_FLOAT", "-O2", "src/bindings_cpu.cpp", "-o", str(trainer_o)]  # fmt: skip
    link = ["g++", "-shared", "-fPIC", "-fopenmp", str(trainer_o), str(static_a), str(ray / "lib" / "libraylib.a"),
            "-lm", "-lpthread", "-lgomp", "-O2", "-Bsymbolic-functions", "-o", str(out)]  # fmt: skip
    return [binding, archive, trainer, link]


def overlay(tree: Path, folder: Path) -> Path:
    """``folder/pufferlib/``: links to the checkout's ``pufferlib/`` files, where the env's own ``_C``
    goes. pufferl.py finds its config folder through the links (it takes the realpath of its file)."""
    pkg = folder / "pufferlib"
    pkg.mkdir(parents=True, exist_ok=True)
    for f in sorted((tree / "pufferlib").iterdir()):
        link = pkg / f.name
        if f.name.startswith("_C") or f.name == "__pycache__" or link.exists() or link.is_symlink():
            continue
        link.symlink_to(f.resolve())
    return pkg


def env_folder(cache: Path, env: str) -> Path:
    """What goes on PYTHONPATH for ``env``: its ``pufferlib`` with its own ``_C``."""
    return cache / "envs" / env


def built(cache: Path, env: str) -> bool:
    return (cache / "venv" / "bin" / "python").exists() and any(
        (env_folder(cache, env) / "pufferlib").glob("_C.*.so")
    )


def build(cache: Path, envs: list[str], source: str = SOURCE, commit: str = COMMIT, other_commit: bool = False,
          system_torch: bool = False) -> None:  # fmt: skip
    """The pinned checkout, raylib, the venv and one ``pufferlib._C`` per env in ``cache``."""
    names = [known(e) for e in envs]
    check_commit(commit, other_commit)
    missing = [t for t in ("git", "gcc", "g++", "ar") if not shutil.which(t)]
    if missing:
        raise PeerError(f"building PufferLib 4.0 needs {', '.join(missing)} on PATH")
    cache.mkdir(parents=True, exist_ok=True)
    tree = cache / "tree"
    if not (tree / "pyproject.toml").exists():
        checkout(source, commit, tree, cache / "source.git")
        (cache / "SOURCE").write_text(f"{source} {commit}\n")
    version = tree_version(tree)
    if not version.startswith("4."):
        raise PeerError(f"the checkout of {commit[:12]} says version {version}, not PufferLib 4")
    ray = raylib(cache)
    py = cache / "venv" / "bin" / "python"
    stamp = cache / "venv" / ".requirements"
    wanted = "\n".join([*([] if system_torch else [peer.torch_requirement()]), *REQUIREMENTS])
    if not py.exists():
        run([sys.executable, "-m", "venv", str(cache / "venv")])
    if system_torch:
        peer.see_our_packages(py)
    if not stamp.exists() or stamp.read_text() != wanted:
        run([str(py), "-m", "pip", "install", "--quiet", *wanted.split("\n")])
        stamp.write_text(wanted)
    paths = subprocess.check_output(
        [str(py), "-c", "import sysconfig, pybind11; print(sysconfig.get_path('include')); "
         "print(pybind11.get_include()); print(sysconfig.get_config_var('EXT_SUFFIX'))"], text=True,
    ).split()  # fmt: skip
    for env, name in zip(envs, names, strict=True):
        pkg = overlay(tree, env_folder(cache, env))
        out = pkg / f"_C{paths[2]}"
        if out.exists():
            continue
        build_dir = cache / "build" / env
        build_dir.mkdir(parents=True, exist_ok=True)
        obs_t = obs_tensor_t((tree / "ocean" / name / "binding.c").read_text())
        log(f"compiling PufferLib 4.0's {env} and its CPU trainer binding (about a minute)")
        for cmd in compile_commands(name, tree, ray, build_dir, out, obs_t, paths[0], paths[1]):
            run(cmd, cwd=tree)
    for env, name in zip(envs, names, strict=True):
        check = (f"import pufferlib.torch_pufferl; from pufferlib import _C; "
                 f"assert _C.env_name == {name!r} and _C.gpu == 0, _C.env_name")  # fmt: skip
        run([str(py), "-c", check], cwd=cache, env={**os.environ, "PYTHONPATH": str(env_folder(cache, env))})
    log(f"PufferLib {version} ({commit[:12]}) ready in {cache}")


# ---------------------------------------------------------------------- train

# Runs inside the peer environment: PufferLib 4.0's own config loading and training loop
# (pufferl.train, which runs PuffeRL of torch_pufferl.py on --slowly), with its PuffeRL.train wrapped
# to write one JSON line after every trained epoch and to stop the run.
DRIVER = r"""
import json, os, sys, time
env_name = sys.argv.pop(1)
stop_steps, stop_seconds, out = float(os.environ["PEER_STOP_STEPS"]), float(os.environ["PEER_STOP_SECONDS"]), os.environ["PEER_OUT"]
import numpy, torch
if os.environ.get("PEER_SEED"):  # its torch path seeds nothing itself (train.seed is read by its CUDA path only)
    torch.manual_seed(int(os.environ["PEER_SEED"]))
import pufferlib, pufferlib.pufferl as pl, pufferlib.torch_pufferl as tp
args = pl.load_config(env_name)
runtime = {"pufferlib": str(pufferlib.__version__), "torch": torch.__version__, "numpy": numpy.__version__,
           "torch_threads": torch.get_num_threads(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")}
print(json.dumps({"config": {k: v for k, v in args.items() if not k.startswith("sweep")}, "runtime": runtime},
                 default=str), flush=True)
class Stop(Exception):
    pass
f = open(out, "w")
t0 = last_time = time.time()
last_step = 0
_train = tp.PuffeRL.train
def train_and_log(self):
    global last_time, last_step
    _train(self)
    now = time.time()
    row = {"agent_steps": int(self.global_step), "seconds": now - t0, "epoch": self.epoch,
           "sps": (self.global_step - last_step) / max(now - last_time, 1e-9),
           "learning_rate": float(self.optimizer.param_groups[0]["lr"])}
    last_time, last_step = now, self.global_step
    row.update({"env/" + k: float(v) for k, v in getattr(self, "env_logs", {}).items()})
    row.update({"loss/" + k: float(v) for k, v in getattr(self, "losses", {}).items()})
    f.write(json.dumps(row) + "\n")
    f.flush()
    if row["agent_steps"] >= stop_steps or row["seconds"] >= stop_seconds or self.epoch >= self.total_epochs:
        raise Stop()  # the end of training too: pufferl.train's evaluation rollouts after it are no curve
tp.PuffeRL.train = train_and_log
try:
    pl.train(env_name, args=args)
except Stop:
    pass
sys.stdout.flush()
os._exit(0)
"""

# What the harness sets: PufferLib's own flag for its torch backend, nothing else. What 4.0's torch
# path itself does on a CPU that a reader of its ini would not expect (the report's notes say it too).
CPU_NOTES = [
    "--slowly: PufferLib 4.0's torch backend (torch_pufferl.PuffeRL), the one a build.sh --cpu build has; "
    "no other option or ini value is changed",
    "its torch path forces [vec] num_buffers = 1 (create_pufferl) and never reads [vec] num_threads: the env "
    "steps in one OpenMP loop over all envs (libgomp's default thread count, the machine's cores) between "
    "torch's forward passes (torch's default intra-op threads)",
    "its torch path seeds nothing ([train] seed is read by its CUDA path only); --seed seeds torch in the "
    "driver; every env is seeded with its index (srand(i) in vecenv.h) on every run",
    "built with gcc/g++ and libgomp where build.sh uses clang and libomp5; raylib 5.5 from the "
    "pufferlib-3.0.0 sdist (docs/peers.md)",
]


def train(cache: Path, env: str, stop_steps: float, stop_seconds: float, seed: int | None,
          extra: list[str], jsonl: Path) -> dict[str, Any]:  # fmt: skip
    """PufferLib 4.0's trainer on ``env`` with its torch backend on the CPU and its own config."""
    name = known(env)
    if not built(cache, env):
        log(f"PufferLib 4.0's {env} is not built in {cache}: building it first")
        build(cache, [env])
    py = cache / "venv" / "bin" / "python"
    jsonl.parent.mkdir(parents=True, exist_ok=True)
    driver = cache / "driver.py"
    driver.write_text(DRIVER)
    env_vars = {
        **os.environ,
        "PYTHONPATH": str(env_folder(cache, env)),
        "PEER_SEED": "" if seed is None else str(seed),
        "PEER_STOP_STEPS": str(stop_steps),
        "PEER_STOP_SECONDS": str(stop_seconds),
        "PEER_OUT": str(jsonl),
    }
    cmd = [str(py), "-W", "ignore::DeprecationWarning", str(driver), name, "--slowly", *extra]
    log("$ " + shlex.join(cmd))
    peer.use_our_package()
    from appliance.bench import noise

    sampler = noise.Sampler()  # others' load over the run: its figures are not idle ones where it is high
    sampler.sample()
    start = time.time()
    first = peer.run_driver(cmd, cache, env_vars, jsonl, "PufferLib 4.0's trainer")
    head = json.loads(first) if first.startswith("{") else {}
    command = shlex.join(cmd) + (f" (PEER_SEED={seed}: torch.manual_seed)" if seed is not None else "")
    load = sampler.sample() or {}
    return {"config": head.get("config", {}), "runtime": head.get("runtime", {}), "command": command,
            "wall_s": time.time() - start, "others_cores": load.get("others_cores")}  # fmt: skip


# ---------------------------------------------------------------------- reports


def batch_size(config: dict[str, Any]) -> int:
    """Agent-steps an epoch: [vec] total_agents x [train] horizon (its torch path's batch)."""
    return int(config["vec"]["total_agents"]) * int(config["train"]["horizon"])


def trained_steps(config: dict[str, Any]) -> float:
    """Agent-steps at the end of training: total_timesteps // batch epochs (pufferl._train's
    train_epochs); later logs are its evaluation rollouts. Unbounded where the config is not known."""
    try:
        batch = batch_size(config)
        return float(int(config["train"]["total_timesteps"]) // batch * batch)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return float("inf")


def make_report(env: str, metric: str, target: float, rows: list[dict[str, float]], config: dict[str, Any],
                command: str, seed: int | None, at: list[float], source: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """tools/pufferlib_peer.py's learning-curve report, with where the peer came from and what was set."""
    data = peer.make_report(SYSTEM, env, metric, target, rows, config, command, seed, at)
    data["analysis"]["peer"] = {
        "version": VERSION,
        "backend": "torch (--slowly), CPU",
        **source,
        "notes": CPU_NOTES,
    }
    return data


def noise_threshold() -> float:
    """Others' mean load (cores) from which the noise guard calls a measurement busy on this machine."""
    from appliance.bench import noise

    return noise.thresholds()[0]


# ---------------------------------------------------------------------- config


def ini_value(text: str) -> Any:
    """A value as 4.0's load_config reads it: a Python literal (``94_000_000``, ``1e-12``, ``'None'``),
    else the text itself."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def ini_config(config_dir: Path, env: str) -> dict[str, dict[str, Any]]:
    """4.0's config for ``env``: default.ini under the ini whose [base] env_name names it (its
    load_config looks through config/**/*.ini the same way)."""
    default = config_dir / "default.ini"
    if not default.exists():
        raise PeerError(f"no {default}: run `python tools/pufferlib4_peer.py build` first")
    name = known(env)
    for path in sorted(config_dir.glob("**/*.ini")):
        parser = configparser.ConfigParser()
        try:
            parser.read([default, path])
        except configparser.Error as e:
            raise PeerError(" ".join(str(e).split())) from None
        if path != default and name in str(parser["base"].get("env_name", "")).split():
            return {s: {k: ini_value(v) for k, v in parser[s].items()} for s in parser.sections()}
    raise PeerError(f"no ini under {config_dir} names env {name}")


# How its env at the pinned commit stands to 3.0.0's (which ours follows), read from both sources
ENV_NOTES = {
    "breakout": "its breakout.h is 3.0.0's with the constants made [env] keys at the same values (576 x 330 "
    "court, 62 x 8 paddle at 620 px/s, 32 x 32 ball from 256 to 448 px/s, 6 x 18 bricks) and a random "
    "stream per env (rand_r); those keys are the ones left out below.",
    "pong": "its pong.h at this commit pays no +0.1 for returning the ball (3.0.0's `rewards[0] = 0.1` line "
    "is gone), which 3.0.0 and ours pay by default: the same perf and score, other rewards to learn from; "
    "env.return_reward 0 below makes ours pay none either. Its other [env] values are 3.0.0's defaults.",
    "squared": "its squared.h is 3.0.0's with a random stream per env (rand_r).",
}

# Its env rules where they differ from 3.0.0's (ours' defaults), set on our env keys (ENV_NOTES says why)
ENV_RULES = {"pong": {"return_reward": 0.0}}

# Where 4.0's torch path does otherwise than our defaults and a switch of ours does as it does (the header
# names each beside the difference): set in every config written, so the recipe is its, not a mix
SWITCHES = {
    "train": {"prio_replacement": True, "muon_ns": "pufferlib4"},
    "policy": {"encoder_activation": "none", "init": "torch"},
}

# 4.0's [train] keys on ours: (our key, its key); the cast is our default's type
TRAIN_KEYS = (
    ("total_timesteps", "total_timesteps", int), ("learning_rate", "learning_rate", float),
    ("anneal_lr", "anneal_lr", bool), ("min_lr_ratio", "min_lr_ratio", float),
    ("adam_beta1", "beta1", float), ("adam_beta2", "beta2", float), ("adam_eps", "eps", float),
    ("gamma", "gamma", float), ("gae_lambda", "gae_lambda", float), ("replay_ratio", "replay_ratio", float),
    ("clip_coef", "clip_coef", float), ("vf_coef", "vf_coef", float), ("vf_clip_coef", "vf_clip_coef", float),
    ("max_grad_norm", "max_grad_norm", float), ("ent_coef", "ent_coef", float),
    ("vtrace_rho_clip", "vtrace_rho_clip", float), ("vtrace_c_clip", "vtrace_c_clip", float),
    ("prio_alpha", "prio_alpha", float), ("prio_beta0", "prio_beta0", float),
    ("bptt_horizon", "horizon", int), ("minibatch_size", "minibatch_size", int),
)  # fmt: skip
# keys of its files that its torch path or ours has no use for, by section (sections left whole: selfplay, sweep*)
MAPPED = {"base": {"env_name", "reset_state"}, "vec": {"total_agents"}, "policy": {"hidden_size", "num_layers",
          "expansion_factor"}, "torch": {"network", "encoder", "decoder"}, "train": {k for _, k, _ in TRAIN_KEYS}}  # fmt: skip


def our_config(ini: dict[str, dict[str, Any]], env: str) -> tuple[dict[str, Any], list[str], dict[str, Any]]:
    """4.0's config for ``env`` on our keys, the keys left out, and figures for the header."""
    peer.use_our_package()
    from appliance import ocean

    described = ocean.describe(env)
    pv, pe, pp, pt, torch_ = (
        ini.get("vec", {}),
        ini.get("env", {}),
        ini.get("policy", {}),
        ini["train"],
        ini.get("torch", {}),
    )
    expected = {"network": "MinGRU", "encoder": "DefaultEncoder", "decoder": "DefaultDecoder"}
    if any(torch_.get(k, v) != v for k, v in expected.items()):
        raise PeerError(
            f"{env}'s [torch] is {torch_}, not the MinGRU + DefaultEncoder/Decoder this mapping knows"
        )
    agents = int(described["agents_per_env"])
    total = int(pv["total_agents"])
    if total % agents:
        raise PeerError(f"[vec] total_agents {total} is not a whole number of {env}'s {agents}-agent envs")
    train: dict[str, Any] = {"device": "cpu", "optimizer": "muon", "precision": "float32"}
    train.update({ours: cast(pt[theirs]) for ours, theirs, cast in TRAIN_KEYS if theirs in pt})
    train.update(max_minibatch_size=train["minibatch_size"], batch_size="auto", reward_clamp=1.0,
                 reward_norm=False, reset_state=True, **SWITCHES["train"])  # fmt: skip
    policy = {"core": "mingru", "hidden_size": int(pp.get("hidden_size", 128)), "num_layers": int(pp.get("num_layers", 1)),
              "expansion_factor": int(pp.get("expansion_factor", 1)), "encoder": "linear", "obs_scale": "none",
              **SWITCHES["policy"]}  # fmt: skip
    params = described["params"]
    out = {"vec": {"num_envs": total // agents}, "env": {k: v for k, v in pe.items() if k in params},
           "train": train, "policy": policy}  # fmt: skip
    out["env"].update(ENV_RULES.get(env, {}))
    left = [f"env.{k}" for k in pe if k not in params]
    for section in ("base", "vec", "policy", "torch", "train"):
        left += [f"{section}.{k}" for k in ini.get(section, {}) if k not in MAPPED[section]]
    left += [f"[{s}]" for s in sorted({s.split(".")[0] for s in ini} - set(MAPPED) - {"env"})]
    batch = total * int(pt["horizon"])
    figures = {
        "batch": batch,
        "minibatches": int(float(pt["replay_ratio"]) * batch / int(pt["minibatch_size"])),
        "segments": int(pt["minibatch_size"]) // int(pt["horizon"]),
        "epochs": max(1, int(pt["total_timesteps"]) // batch),
        "agents": agents,
    }
    return out, left, figures


def header(env: str, ini: dict[str, dict[str, Any]], left: list[str], n: dict[str, Any], shown: Any) -> str:
    pt, pv = ini["train"], ini["vec"]
    name = known(env)
    lines = f"""\
PufferLib {VERSION}'s config/{name}.ini (over its config/default.ini) at eig1n/PufferLib-OrbitWars commit
{COMMIT}, on our keys, written from its files by
`python tools/pufferlib4_peer.py config {env}` for `puffer-bench train {env} --config {shown}` (docs/peers.md).
vec.num_envs: its [vec] total_agents {pv["total_agents"]} / {n["agents"]} agent(s) per env; its torch path steps them all as one
vector (num_buffers forced to 1, num_threads unread). A batch is {n["batch"]:,} agent-steps.
Spelled out, what its torch path does without a key: Muon (pufferlib/muon.py, its own), float32, rewards
clamped to [-1, 1] in the update and not scaled, the recurrent state zeroed at the start of every rollout
(whatever [base] reset_state says) and every trained segment run from zero, the raw observation floats.
Each "(ours: KEY VALUE)" below is a switch of ours that does what it does, set in this file.
Same name, other meaning, or not the same model:
- train.replay_ratio {pt["replay_ratio"]}: int(replay_ratio x batch / minibatch_size) = {n["minibatches"]} minibatches an epoch
  (3.0's update_epochs and ours are whole passes), each of {n["segments"]} horizon-long segments drawn by priority WITH
  replacement (torch.multinomial(..., replacement=True); ours: train.prio_replacement true); 3.0.0 drew them
  without. The advantage is computed again before every minibatch over the whole batch, with the ratios and
  values the earlier ones left (3.0 too).
- train.prio_beta0: beta anneals b0 + (1 - b0) * prio_alpha * epoch / total_epochs, total_epochs = total_timesteps
  // batch ({n["epochs"]}); 3.0.0's pufferl.py has the same alpha factor (checked in its sdist), so this is no change.
- train.learning_rate / min_lr_ratio: cosine from learning_rate down to min_lr_ratio x learning_rate over
  total_epochs, set at the start of each update (the first epoch at the full rate).
- train.adam_beta1: the momentum of its Muon (Nesterov, m = beta*m + g, u = g + beta*m; matrices
  orthogonalized by 5 Newton-Schulz steps with a different coefficient triple each step (ours: train.muon_ns
  pufferlib4), scaled by sqrt(max(1, rows/cols)); vectors plain momentum SGD). train.adam_beta2 and
  train.adam_eps are copied but its Muon never reads them (eps is stored, its Newton-Schulz uses 1e-7).
- train.minibatch_size = max_minibatch_size: it has no gradient accumulation (3.0 had).
- policy: its MinGRU (pufferlib/models.py) is num_layers layers of Linear(h, 3h, no bias) -> hidden, gate, proj;
  state lerp toward g(hidden) by sigmoid(gate) from a zero state, then a highway out = s*state + (1-s)*input,
  s = sigmoid(proj); its encoder is one Linear with no activation (ours: policy.encoder_activation none; gelu
  adds GELU), its decoder one Linear for logits and one for the value; torch's default initialization (ours:
  policy.init torch).
  policy.expansion_factor is copied but nothing at this commit reads it (MinGRU swallows it in **kwargs).
- train.ent_coef: constant (its [train] anneal_ent_coef is 0 and its torch path never reads it).
The env: {ENV_NOTES[env]}
Not carried over (run bookkeeping, its GPU path, or no counterpart here): {", ".join(left) or "nothing"}.
"""
    wrapped = [w for line in lines.splitlines() for w in textwrap.wrap(line, 116, subsequent_indent="  ")]
    return "".join(f"# {line}\n" for line in wrapped)


def write_config(config_dir: Path, env: str, out: Path) -> None:
    import yaml

    ini = ini_config(config_dir, env)
    cfg, left, figures = our_config(ini, env)
    shown = out.resolve().relative_to(REPO) if out.resolve().is_relative_to(REPO) else out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(header(env, ini, left, figures, shown) + yaml.safe_dump(cfg, sort_keys=False, width=120))
    log(f"wrote {out}")


# ---------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    ap = tool_cli.Parser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--cache", type=tool_cli.path, default=None,
                    help=f"build folder (default: {default_cache()}, one per commit)")  # fmt: skip
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="check out, install and compile PufferLib 4.0 into the cache")
    b.add_argument(
        "--envs",
        type=tool_cli.names,
        default="breakout",
        help=f"comma-separated, of {', '.join(ENVS)} (default: breakout)",
    )
    b.add_argument("--source", default=SOURCE,
                   help="a git clone (bare or not) or URL of PufferLib 4.0's repository (default: %(default)s)")  # fmt: skip
    b.add_argument("--commit", default=COMMIT, help="the commit to build (default: the pinned %(default)s)")
    b.add_argument("--other-commit", action="store_true", help="allow a --commit other than the pinned one")
    b.add_argument("--system-torch", action="store_true",
                   help="the venv takes this Python's torch (and its other packages) instead of installing ours")  # fmt: skip
    for name in ("train", "report"):
        p = sub.add_parser(
            name, help="its trainer on ENV" if name == "train" else "a report from a curve train wrote"
        )
        if name == "train":
            p.add_argument("env")
            p.add_argument("--stop-steps", type=POSITIVE, default=float("inf"))
            p.add_argument("--stop-seconds", type=POSITIVE, default=float("inf"))
            p.add_argument(
                "--seed", type=SEED, default=None, help="seeds torch (its torch path seeds nothing itself)"
            )
            p.add_argument("--set", action="append", default=[], metavar="--KEY=VALUE",
                           help="one of its options, e.g. --set=--train.learning-rate=0.01")  # fmt: skip
        else:
            p.add_argument("curve", type=tool_cli.path)
            p.add_argument("--env", required=True)
        p.add_argument("--metric", default="perf", help="a stat its env logs (default: %(default)s)")
        p.add_argument("--target", type=tool_cli.number(), default=0.9)
        p.add_argument("--at", type=steps_list, default="30e6,65e6",
                       help="agent-steps at which to report the score (comma-separated)")  # fmt: skip
        p.add_argument(
            "--out", type=tool_cli.path, required=True, help="the report (.json); the curve goes beside it"
        )
    c = sub.add_parser("config", help="its config for ENV on our keys, as bench/parity/pufferlib4/ENV.yaml")
    c.add_argument("env")
    c.add_argument(
        "--out", type=tool_cli.path, default=None, help="default: bench/parity/pufferlib4/ENV.yaml"
    )
    a = ap.parse_args(argv)
    return tool_cli.guarded(lambda: run_command(a))


def run_command(a: argparse.Namespace) -> None:
    """The work of the command ``a`` names (its arguments already parsed and typed)."""
    cache = a.cache or default_cache(getattr(a, "commit", COMMIT))
    if a.cmd == "build":
        build(cache, a.envs, a.source, a.commit, a.other_commit, a.system_torch)
    elif a.cmd == "config":
        known(a.env)
        out = a.out or REPO / "bench" / "parity" / "pufferlib4" / f"{a.env}.yaml"
        check_suffix(out, (".yaml", ".yml"), "a config")
        tool_cli.check_output(out, ours=lambda p: p.read_text().startswith(f"# PufferLib {VERSION}"))
        write_config(cache / "tree" / "config", a.env, out)
    else:
        known(a.env)
        check_out(a.out, "new" if a.cmd == "train" else "")
        source = {"source": SOURCE, "commit": COMMIT}
        if (cache / "SOURCE").exists():
            where, commit = (cache / "SOURCE").read_text().split()
            source = {"source": where, "commit": commit}
        if a.cmd == "train":
            jsonl = a.out.resolve().with_suffix(".jsonl")  # the trainer runs in the cache folder
            extra = [s for item in a.set for s in item.split("=", 1)]
            info = train(cache, a.env, a.stop_steps, a.stop_seconds, a.seed, extra, jsonl)
            config, command = info["config"], info["command"]
            source["runtime"] = info["runtime"]
        else:
            if not a.curve.exists():
                raise PeerError(f"{a.curve}: no such curve (train writes one beside its report)")
            jsonl, config = a.curve, ini_config(cache / "tree" / "config", a.env)
            command = f"PufferLib 4.0's curve {a.curve}"
        rows = peer.curve_rows(jsonl, trained_steps(config))
        data = make_report(a.env, a.metric, a.target, rows, config, command, a.seed if a.cmd == "train" else None,
                           a.at, source)  # fmt: skip
        if a.cmd == "train":
            data["analysis"]["peer"]["others_cores"] = others = info["others_cores"]
            if others is not None and others > noise_threshold():
                data["warnings"].append(
                    f"other processes used {others:.2f} cores on average during the run: its speed is not an idle machine's"
                )
        peer.write_report(data, a.out)


if __name__ == "__main__":
    sys.exit(main())
