#!/usr/bin/env python3
"""PufferLib 3.0.0 as a peer to measure against, built from its source distribution.

    python tools/pufferlib_peer.py build [--envs breakout,pong]      # once: into the cache folder
    python tools/pufferlib_peer.py train breakout --stop-steps 70e6 --out results/cpu/parity/puffer-s42.json
    python tools/pufferlib_peer.py ours experiments/RUN --env breakout --out results/cpu/parity/ours-s0.json
    python tools/pufferlib_peer.py plot results/cpu/parity/*.json --out results/cpu/parity/breakout.png

``build`` fetches pufferlib-3.0.0.tar.gz from the package index pip is configured with (checked
against its pinned sha256), makes a virtual environment in the cache folder with PufferLib's
dependencies at the versions it was released with (heavyball 1.7.2, gymnasium 0.29.1, numpy < 2)
and this project's torch version, and compiles the named Ocean envs and PufferLib's CPU torch
extension in place. Nothing is fetched from anywhere else: PufferLib's own setup.py downloads
raylib and box2d from the web, so the harness compiles the envs itself against the raylib the
source distribution ships.

``train`` runs PufferLib's own trainer (``pufferlib.pufferl.train``) with its own config for the env
(``config/ocean/<env>.ini``) in the peer environment, with ``--train.device cpu`` and the Serial
backend unless told otherwise, and writes its curve: agent-steps, seconds and every environment
stat PufferLib logs, one JSON line per log, then a puffer-bench report (``time_to_score`` metrics
and ``analysis.learning_curves``, as the ``learn`` suite writes them). ``ours`` writes the same
report from one of our run folders (``experiments/<run>/metrics.jsonl``), so ``puffer-bench
compare`` and ``plot`` put the two side by side. Scores are the mean over the last 5 logged
epochs on both sides (our suites' window).

puffer-bench never imports PufferLib; this script runs it in its own interpreter. docs/lab/peers.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tool_cli  # a sibling script, not a package

VERSION = "3.0.0"
SDIST = f"pufferlib-{VERSION}.tar.gz"
SDIST_SHA256 = "7df3a3e3f5f894d78d2a1f5374097890aec01473183e748abefe4f3faa10eaa9"
# PufferLib 3.0.0's pins (its setup.py) and what was current at its release (heavyball)
PEER_REQUIREMENTS = [
    "numpy<2",
    "gymnasium==0.29.1",
    "pettingzoo==1.24.1",
    "gym==0.23.1",
    "heavyball==1.7.2",
    "pyro-ppl",  # imported by pufferlib.sweep, which pufferl imports
    "rich",
    "rich_argparse",
    "psutil",
    "setuptools",
    "wheel",
    "pyyaml",  # not PufferLib's: our run configs, read when peer_crossplay.py loads our policy here
]
# our env name -> PufferLib's (its ini's env_name) and the folder of its binding
ENVS = {
    "breakout": ("puffer_breakout", "breakout"),
    "pong": ("puffer_pong", "pong"),
    "squared": ("puffer_squared", "squared"),
    "connect4": ("puffer_connect4", "connect4"),
    "target": ("puffer_target", "target"),
    "go": ("puffer_go", "go"),
    "snake": ("puffer_snake", "snake"),
}
WINDOW = 5  # logged epochs averaged into a score, as appliance.bench.suite.training.SCORE_WINDOW
REPO = Path(__file__).resolve().parent.parent


def use_our_package() -> None:
    """Make ``appliance`` importable: the installed one when there is one (it has the compiled
    extension; a checkout's tree may not), else this checkout's, appended so nothing is shadowed."""
    import importlib.util

    if importlib.util.find_spec("appliance") is None and str(REPO) not in sys.path:
        sys.path.append(str(REPO))


class PeerError(tool_cli.ToolError):
    """A one-line reason the harness cannot go on."""


def json_lines(path: Path, what: str) -> list[dict[str, Any]]:
    """The records of a JSON-lines file (a curve, a run's metrics.jsonl); a damaged line (cut short by
    a kill or a full disk) is skipped and the count said in one line on stderr
    (:func:`appliance.safe_files.read_json_lines`)."""
    use_our_package()
    from appliance.errors import ApplianceError
    from appliance.safe_files import read_json_lines, skipped_note

    try:
        records, skipped = read_json_lines(path, what)
    except ApplianceError as e:
        raise PeerError(str(e)) from None
    note = skipped_note(path, skipped)
    if note:
        log(f"warning: {note}")
    return records


def check_output(out: Path, option: str = "--out", beside: tuple[Path, ...] = ()) -> None:
    """The CLI's up-front check of an output (:func:`appliance.safe_files.check_output`): its folder
    writable with room, the file not a link, a folder or a device."""
    use_our_package()
    from appliance.errors import ApplianceError
    from appliance.safe_files import check_output as check

    try:
        check(out, option, beside=beside)
    except ApplianceError as e:
        raise PeerError(str(e)) from None


def cache_root() -> Path:
    """The folder that holds each peer's build folder ($PUFFER_PEER_CACHE, else ~/.cache/puffer-bench/peers)."""
    root = os.environ.get("PUFFER_PEER_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "puffer-bench", "peers"
    )
    return Path(root)


def default_cache() -> Path:
    return cache_root() / f"pufferlib-{VERSION}"


def log(msg: str) -> None:
    print(f"[peer] {msg}", file=sys.stderr, flush=True)


def dies_with_us() -> Any:
    """A ``preexec_fn`` for a trainer this harness starts: it dies with the harness, however the
    harness dies (appliance.lifeline)."""
    use_our_package()
    from appliance.lifeline import dies_with_parent

    return dies_with_parent()


def guarded(cmd: list[str]) -> list[str]:
    """``cmd`` under appliance.lifeline's guard: a trainer's own children (its vector workers, which
    arm no parent-death signal) die with the harness too, and whatever it leaves running when it ends."""
    use_our_package()
    from appliance.lifeline import guarded as guard

    return guard(cmd)


def run(cmd: list[str], **kw: Any) -> None:
    log("$ " + shlex.join(cmd))
    result = subprocess.run(cmd, **kw)
    if result.returncode:
        raise PeerError(f"command failed with exit code {result.returncode}: {shlex.join(cmd)}")


# ---------------------------------------------------------------------- build


def index_url() -> str:
    """The simple index pip uses here (PIP_INDEX_URL, pip's config, else pip's default)."""
    url = os.environ.get("PIP_INDEX_URL")
    if not url:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "get", "global.index-url"], capture_output=True, text=True
        )
        url = out.stdout.strip() if out.returncode == 0 else ""
    if not url:
        from pip._internal.models.index import PyPI  # pip's own default index

        url = PyPI.simple_url
    return url.rstrip("/")


def extract(tar: tarfile.TarFile, dest: Path, members: Any = None) -> None:
    """Unpack ``members`` (default: all, also for a streamed ``r|`` archive) of ``tar`` into ``dest``
    with the "data" filter: absolute names made relative, nothing outside ``dest``, no devices. Python
    3.11 before 3.11.4 (the Docker base image's, say) has no ``filter=``; there each member is checked
    the same way before it is unpacked, so an archive that would escape ``dest`` is refused on every
    Python."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(dest, members=members, filter="data")
        return
    root, what = dest.resolve(), tar.name or "the archive"
    for m in members if members is not None else tar:
        m.name = m.name.lstrip("/")  # as the filter does: an absolute name unpacks inside dest
        target = (root / m.name).resolve()
        if not target.is_relative_to(root):
            raise PeerError(f"{what}: member {m.name!r} would unpack outside {dest}")
        link = m.issym() or m.islnk()
        if link:
            linked = (target.parent / m.linkname) if m.issym() else (root / m.linkname)
            if Path(m.linkname).is_absolute() or not linked.resolve().is_relative_to(root):
                raise PeerError(f"{what}: link {m.name!r} -> {m.linkname!r} leaves {dest}")
        elif not (m.isfile() or m.isdir()):
            raise PeerError(f"{what}: member {m.name!r} is not a file, folder or link")
        m.mode = (m.mode | 0o600) & 0o755  # a link's is never set (set_attrs below)
        m.uid = m.gid = 0
        m.uname = m.gname = ""
        tar.extract(m, dest, set_attrs=not link)


def fetch_sdist(dest: Path, local: Path | None = None) -> Path:
    """pufferlib-3.0.0.tar.gz from ``local`` (a folder, e.g. one ``wheels`` filled) or the index's
    project page (PEP 691 JSON), sha256-checked either way."""
    path = dest / SDIST
    if path.exists() and hashlib.sha256(path.read_bytes()).hexdigest() == SDIST_SHA256:
        return path
    if local is not None and (local / SDIST).exists():
        data = (local / SDIST).read_bytes()
        if hashlib.sha256(data).hexdigest() != SDIST_SHA256:
            raise PeerError(
                f"{local / SDIST} does not have {SDIST}'s sha256 {SDIST_SHA256}: refusing to build it"
            )
        path.write_bytes(data)
        return path
    page = f"{index_url()}/pufferlib/"
    req = urllib.request.Request(page, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            files = json.load(r)["files"]
    except Exception as e:  # any network or format failure ends the build in one line
        raise PeerError(f"cannot read the package index page {page}: {e}") from None
    entry = next((f for f in files if f["filename"] == SDIST), None)
    if entry is None:
        raise PeerError(f"{page} lists no {SDIST}")
    log(f"downloading {SDIST}")
    with urllib.request.urlopen(entry["url"], timeout=300) as r:
        data = r.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != SDIST_SHA256:
        raise PeerError(f"{SDIST} has sha256 {digest}, expected {SDIST_SHA256}: refusing to build it")
    tmp = path.with_suffix(".part")
    tmp.write_bytes(data)
    tmp.replace(path)
    return path


def torch_requirement() -> str:
    """This project's torch version for the peer too (a local CPU wheel is preferred by pip if
    configured with find-links), so both sides run the same kernels."""
    try:
        import torch

        return "torch==" + torch.__version__.split("+")[0]
    except ImportError:
        return "torch"


def built(cache: Path, env: str) -> bool:
    """Whether ``env``'s PufferLib binding (and so the venv and sources it needs) is in ``cache``."""
    src = cache / f"pufferlib-{VERSION}"
    folder = src / "pufferlib" / "ocean" / ENVS[env][1]
    return (cache / "venv" / "bin" / "python").exists() and any(folder.glob("binding.*.so"))


def build(cache: Path, envs: list[str], cuda: bool = False, wheels: Path | None = None,
          system_torch: bool = False) -> None:  # fmt: skip
    """The source tree, its venv and the named envs in ``cache``. ``cuda``: PufferLib's torch
    extension with its CUDA kernels (nvcc needed), for ``train --device cuda``. ``wheels``: install the
    venv's packages from that folder only (a machine without a package index; ``wheels`` fills it).
    ``system_torch``: the venv sees the packages of the Python running this script (behind its own)
    and takes its torch (a GPU machine's CUDA build) instead of installing this project's version."""
    unknown = [e for e in envs if e not in ENVS]
    if unknown:
        raise PeerError(f"no PufferLib counterpart known for {', '.join(unknown)}; known: {', '.join(ENVS)}")
    if cuda and not shutil.which("nvcc"):
        raise PeerError("--cuda compiles PufferLib's CUDA kernels and needs nvcc (CUDA's compiler) on PATH")
    if wheels is not None and not wheels.is_dir():
        raise PeerError(
            f"--wheels {wheels}: no such folder (fill one with `pufferlib_peer.py wheels --out DIR`)"
        )
    cache.mkdir(parents=True, exist_ok=True)
    src = cache / f"pufferlib-{VERSION}"
    if not (src / "setup.py").exists():
        local = wheels / SOURCES if wheels is not None else None
        with tarfile.open(local if local and local.exists() else fetch_sdist(cache, wheels)) as tar:
            extract(tar, cache)
    venv = cache / "venv"
    py = venv / "bin" / "python"
    stamp = venv / ".requirements"
    wanted = "\n".join([*([] if system_torch else [torch_requirement()]), *PEER_REQUIREMENTS])
    if not py.exists():
        run([sys.executable, "-m", "venv", str(venv)])
    if system_torch:
        see_our_packages(py)
    if not stamp.exists() or stamp.read_text() != wanted:
        offline = ["--no-index", "--find-links", str(wheels)] if wheels is not None else []
        run([str(py), "-m", "pip", "install", "--quiet", *offline, *wanted.split("\n")])
        stamp.write_text(wanted)
    suffix = subprocess.check_output(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))"], text=True
    ).strip()
    includes = subprocess.check_output(
        [
            str(py),
            "-c",
            "import numpy, sysconfig; print(numpy.get_include()); print(sysconfig.get_paths()['include'])",
        ],
        text=True,
    ).split()
    raylib = src / "raylib-5.5_linux_amd64"
    for env in envs:
        folder = src / "pufferlib" / "ocean" / ENVS[env][1]
        target = folder / f"binding{suffix}"
        if target.exists():
            continue
        log(f"compiling PufferLib's {env}")
        run(
            ["gcc", "-shared", "-fPIC", "-O2", "-flto", "-DNPY_NO_DEPRECATED_API=NPY_1_7_API_VERSION",
             "-DPLATFORM_DESKTOP", "-Wno-implicit-function-declaration", "-Wno-alloc-size-larger-than",
             *[f"-I{i}" for i in includes], f"-I{raylib / 'include'}", str(folder / "binding.c"),
             str(raylib / "lib" / "libraylib.a"), "-lm", "-lpthread", "-ldl", "-o", str(target)],
        )  # fmt: skip
    kind = "cuda" if cuda else "cpu"
    if not list((src / "pufferlib").glob(f"_C{suffix}")) or extension_kind(cache) != kind:
        log(f"compiling PufferLib's {kind.upper()} torch extension (a minute or more)")
        run([str(py), "-c", extension_setup(cuda)], cwd=src)
        (src / "pufferlib" / EXTENSION_STAMP).write_text(kind)
    check = "import pufferlib.pufferl; " + "; ".join(
        f"import pufferlib.ocean.{ENVS[e][1]}.binding" for e in envs
    )
    run([str(py), "-W", "ignore", "-c", check], cwd=src, env={**os.environ, "PYTHONPATH": str(src)})
    log(f"PufferLib {VERSION} ready in {src}")


def see_our_packages(py: Path) -> None:
    """Let the venv of ``py`` import what the Python running this script has (its torch above all),
    after its own packages: a .pth file naming our site folders. ``venv --system-site-packages``
    would not do where this Python is itself a venv (the GPU machine's is): it adds the base
    interpreter's folders, not ours."""
    import sysconfig

    try:
        import torch  # noqa: F401
    except ImportError:
        raise PeerError(f"--system-torch takes the torch of {sys.executable}, which has none") from None
    paths = sysconfig.get_paths()
    ours = list(dict.fromkeys([paths["purelib"], paths["platlib"]]))
    site = subprocess.check_output(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
    ).strip()
    (Path(site) / "_peer_system_packages.pth").write_text("\n".join(ours) + "\n")


EXTENSION_STAMP = ".extension-kind"  # beside pufferlib/_C*.so: "cpu" or "cuda", what it was built with


def extension_kind(cache: Path) -> str:
    """What PufferLib's torch extension in ``cache`` was compiled for: "cpu", "cuda" or "" (none, or
    built before the harness kept a stamp, which was always the CPU one)."""
    folder = cache / f"pufferlib-{VERSION}" / "pufferlib"
    stamp = folder / EXTENSION_STAMP
    if stamp.exists():
        return stamp.read_text().strip()
    return "cpu" if any(folder.glob("_C.*.so")) else ""


def extension_setup(cuda: bool) -> str:
    """The setup script that compiles ``pufferlib._C`` in place: PufferLib's own sources, as its
    setup.py builds them (with nvcc, its CUDA kernels too), without the web downloads of its setup.py."""
    sources = [
        "pufferlib/extensions/pufferlib.cpp",
        *(["pufferlib/extensions/cuda/pufferlib.cu"] if cuda else []),
    ]
    kind = "CUDAExtension" if cuda else "CppExtension"
    return (
        "from setuptools import setup\n"
        f"from torch.utils.cpp_extension import {kind}, BuildExtension\n"
        "setup(name='pufferlib-C', packages=[], py_modules=[], cmdclass={'build_ext': BuildExtension},\n"
        f"      ext_modules=[{kind}('pufferlib._C', {sources!r},\n"
        "                   extra_compile_args={'cxx': ['-O3'], 'nvcc': ['-O3']})],\n"
        "      script_args=['-q', 'build_ext', '--inplace'])\n"
    )


# The peer venv's own packages (PEER_REQUIREMENTS and what they need, torch's tree left out), with
# the versions installed there: what a machine that has torch but no package index must be given.
CLOSURE = r"""
import json, re, sys
from importlib import metadata
from packaging.requirements import Requirement
todo = [Requirement(r).name for r in sys.argv[1:]]
seen = {}
while todo:
    name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
    if name in seen or name == "torch":
        continue
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        continue
    seen[name] = dist.version
    for text in dist.requires or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            todo.append(req.name)
print(json.dumps(seen))
"""


# The sdist's tree without pufferlib/resources (72 MB of the 90 MB unpacked: the envs' art, read
# only to render), small enough to travel to a machine with no package index.
SOURCES = f"pufferlib-{VERSION}-sources.tar.gz"


def trim_sdist(sdist: Path, out: Path) -> None:
    skip = f"pufferlib-{VERSION}/pufferlib/resources/"
    tmp = out.with_name(out.name + ".part")
    with tarfile.open(sdist) as src, tarfile.open(tmp, "w:gz") as dst:
        for member in src:
            if not (member.name + "/").startswith(skip):
                dst.addfile(member, src.extractfile(member) if member.isfile() else None)
    tmp.replace(out)


def wheels(cache: Path, out: Path, python_version: str, platforms: list[str]) -> list[str]:
    """Fill ``out`` with what ``build --wheels out --system-torch`` needs on an offline machine of
    that Python and platform: the checked sdist's tree without its art (SOURCES) and a wheel of every package in the peer venv
    here apart from torch and its own needs (those come from that machine's torch). Packages without
    a wheel for that target are built here into a wheel, which must then be pure Python."""
    py = cache / "venv" / "bin" / "python"
    if not py.exists():
        raise PeerError(
            f"PufferLib is not built in {cache}: run `python tools/pufferlib_peer.py build` first"
        )
    out.mkdir(parents=True, exist_ok=True)
    trim_sdist(fetch_sdist(cache), out / SOURCES)
    names = [r.split(";")[0] for r in PEER_REQUIREMENTS]
    found = json.loads(subprocess.check_output([str(py), "-c", CLOSURE, *names], text=True))
    pins = [f"{name}=={version}" for name, version in sorted(found.items())]
    target = ["--python-version", python_version, "--implementation", "cp"]
    for platform in platforms:
        target += ["--platform", platform]
    for pin in pins:
        got = subprocess.run(
            [str(py), "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", *target,
             "-d", str(out), pin], capture_output=True, text=True,
        )  # fmt: skip
        if got.returncode == 0:
            continue
        log(f"no wheel of {pin} for Python {python_version}: building one here")
        before = set(out.glob("*.whl"))
        run([str(py), "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), pin])
        for wheel in set(out.glob("*.whl")) - before:
            if not wheel.name.endswith(("-py3-none-any.whl", "-py2.py3-none-any.whl")):
                wheel.unlink()
                raise PeerError(f"{pin} has no wheel for Python {python_version} and is not pure Python")
    log(f"{len(pins)} packages and {SOURCES} in {out}")
    return pins


# ---------------------------------------------------------------------- train

# Runs inside the peer environment: PufferLib's own config loading and trainer, a logger that
# writes each log as a JSON line and stops the run at the requested step or second.
DRIVER = r"""
import json, os, sys, time
env_name = sys.argv.pop(1)
stop_steps, stop_seconds, out = float(os.environ["PEER_STOP_STEPS"]), float(os.environ["PEER_STOP_SECONDS"]), os.environ["PEER_OUT"]
import pufferlib.pufferl as pl
args = pl.load_config(env_name)
class Stop(Exception):
    pass
class JsonLogger:
    def __init__(self):
        self.run_id = "peer-" + str(os.getpid())
        self.f = open(out, "w")
        self.t0 = time.time()
    def log(self, logs, step):
        row = {"agent_steps": int(logs["agent_steps"]), "seconds": time.time() - self.t0, "sps": float(logs["SPS"])}
        for k, v in logs.items():
            if k.startswith(("environment/", "losses/")):
                row[k] = float(v)
        self.f.write(json.dumps(row) + "\n")
        self.f.flush()
        if row["agent_steps"] >= stop_steps or row["seconds"] >= stop_seconds:
            raise Stop()
    def close(self, path):
        pass
vecenv = None
our_env = os.environ.get("PEER_OUR_ENV")
if our_env:  # PufferLib's trainer on our env: a PufferEnv whose buffers our native vector fills
    import numpy as np
    import pufferlib, pufferlib.vector
    from appliance import vector as our_vector
    class OurEnv(pufferlib.PufferEnv):
        def __init__(self, num_envs=1, buf=None, seed=0, frameskip=None, **ignored):
            params = {} if frameskip is None else {"frameskip": int(frameskip)}
            params.update(json.loads(os.environ.get("PEER_OUR_ENV_PARAMS") or "{}"))
            self.vec = our_vector.make(our_env, num_envs=num_envs, num_threads=1, seed=seed, **params)
            self.single_observation_space = self.vec.single_observation_space
            self.single_action_space = self.vec.single_action_space
            self.num_agents = self.vec.num_agents
            super().__init__(buf)
            self.tick = 0
        def reset(self, seed=0):
            self.observations[:] = self.vec.reset(seed=seed)[0]
            return self.observations, []
        def step(self, actions):
            obs, rew, term, trunc, _ = self.vec.step(np.asarray(actions).astype(np.int32))
            self.observations[:], self.rewards[:] = obs, rew
            self.terminals[:], self.truncations[:] = term, trunc
            self.tick += 1
            log = self.vec.log() if self.tick % 128 == 0 else {}  # PufferLib's Ocean envs log every 128 steps
            return self.observations, self.rewards, self.terminals, self.truncations, [log] if log else []
        def close(self):
            self.vec.close()
    vecenv = pufferlib.vector.make(OurEnv, env_kwargs=args["env"], **args["vec"])
print(json.dumps({"config": {k: v for k, v in args.items() if isinstance(v, dict) and k != "sweep"}}), flush=True)
trainers = []  # the trainer pl.train makes, so that its weights can be saved where the run stops
_init = pl.PuffeRL.__init__
def _keep(self, *a, **k):
    _init(self, *a, **k)
    trainers.append(self)
pl.PuffeRL.__init__ = _keep
try:
    pl.train(env_name, args=args, vecenv=vecenv, logger=JsonLogger())
except Stop:
    pass
model = os.environ.get("PEER_MODEL")
if model and trainers:
    import torch
    torch.save(trainers[-1].uncompiled_policy.state_dict(), model + ".tmp")
    os.replace(model + ".tmp", model)
    print(json.dumps({"model": model, "epoch": trainers[-1].epoch}), file=sys.stderr, flush=True)
sys.stdout.flush()
os._exit(0)  # PufferLib's utilization monitor is a non-daemon thread that only close() stops
"""


def train(cache: Path, env: str, stop_steps: float, stop_seconds: float, seed: int | None,
          extra: list[str], jsonl: Path, our_env: bool = False,
          save_model: Path | None = None, our_env_params: dict[str, Any] | None = None,
          device: str = "cpu", backend: str | None = None) -> dict[str, Any]:  # fmt: skip
    """PufferLib's trainer on ``env``: on the CPU with the Serial backend unless ``backend`` says
    otherwise; on ``device`` cuda with the backend of its config (default.ini: Multiprocessing)."""
    src = cache / f"pufferlib-{VERSION}"
    py = cache / "venv" / "bin" / "python"
    if env not in ENVS:
        raise PeerError(f"no PufferLib counterpart known for {env}; known: {', '.join(ENVS)}")
    if device not in ("cpu", "cuda"):
        raise PeerError(f"--device {device!r}: cpu or cuda")
    if not built(cache, env):
        log(f"PufferLib's {env} is not built in {cache}: building it first")
        build(cache, [env], cuda=device == "cuda")
    if device == "cuda" and extension_kind(cache) != "cuda":
        raise PeerError(
            f"PufferLib in {cache} was built without its CUDA kernels: "
            "run `python tools/pufferlib_peer.py build --cuda` on this GPU machine first"
        )
    backend = backend or ("Serial" if device == "cpu" else None)
    args = ["--train.device", device, *(["--vec.backend", backend] if backend else [])]
    if seed is not None:
        args += ["--train.seed", str(seed), "--vec.seed", str(seed)]
    args += extra
    jsonl.parent.mkdir(parents=True, exist_ok=True)
    driver = cache / "driver.py"
    driver.write_text(DRIVER)
    env_vars = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(src), *([str(REPO)] if our_env else [])]),
        "PEER_OUR_ENV": env if our_env else "",
        "PEER_OUR_ENV_PARAMS": json.dumps(our_env_params or {}),
        "PEER_STOP_STEPS": str(stop_steps),
        "PEER_STOP_SECONDS": str(stop_seconds),
        "PEER_OUT": str(jsonl),
        "PEER_MODEL": str(save_model.resolve()) if save_model else "",
    }
    cmd = [str(py), "-W", "ignore::DeprecationWarning", str(driver), ENVS[env][0], *args]
    log("$ " + shlex.join(cmd))
    start = time.time()
    first = run_driver(cmd, cache, env_vars, jsonl, "PufferLib's trainer")
    config = json.loads(first)["config"] if first.startswith("{") else {}
    on = f"PEER_OUR_ENV={env}" + (f", env params {json.dumps(our_env_params)}" if our_env_params else "")
    command = shlex.join(cmd) + (f" ({on}: on our env through the adapter)" if our_env else "")
    return {"config": config, "command": command, "wall_s": time.time() - start}


def run_driver(cmd: list[str], cache: Path, env_vars: dict[str, str], jsonl: Path, who: str) -> str:
    """A peer's training driver to its end; returns its first line (its config as JSON). PufferLib's
    dashboard redraws the terminal each epoch: it goes to the log beside the curve, not to ours."""
    with open(jsonl.with_suffix(".log"), "w") as console:
        proc = subprocess.Popen(
            guarded(cmd), cwd=cache, env=env_vars, stdout=subprocess.PIPE, stderr=console, text=True,
            preexec_fn=dies_with_us(),
        )  # fmt: skip
        assert proc.stdout is not None
        first = proc.stdout.readline()
        for line in proc.stdout:
            console.write(line)
        rc = proc.wait()
    if rc:
        raise PeerError(f"{who} exited with code {rc}; see {jsonl.with_suffix('.log')}")
    return first


# ---------------------------------------------------------------------- reports


def windowed(rows: list[dict[str, float]], metric: str, window: int = WINDOW) -> dict[str, list[float]]:
    """The curve as the learn suite keeps it: per logged epoch with ``metric``, its steps, seconds
    and the mean of the last ``window`` values."""
    curve: dict[str, list[float]] = {"steps": [], "seconds": [], "score": []}
    values: list[float] = []
    for r in rows:
        if metric in r:
            values.append(r[metric])
            curve["steps"].append(r["steps"])
            curve["seconds"].append(r["seconds"])
            curve["score"].append(sum(values[-window:]) / len(values[-window:]))
    return curve


def score_at(curve: dict[str, list[float]], step: float) -> float | None:
    before = [s for x, s in zip(curve["steps"], curve["score"], strict=True) if x <= step]
    return before[-1] if before and curve["steps"][-1] >= step else None


def finite_at(curve: dict[str, list[float]], step: float) -> float | None:
    """:func:`score_at`, None where that score is NaN or infinite (no score to average)."""
    v = score_at(curve, step)
    return v if v is not None and math.isfinite(v) else None


def make_report(system: str, env: str, metric: str, target: float, rows: list[dict[str, float]],
                config: dict[str, Any], command: str, seed: int | None, at: list[float],
                device: str = "cpu", window: int = WINDOW,
                phases: dict[str, float] | None = None,
                load: dict[str, float] | None = None,
                sessions: list[dict[str, Any]] | None = None) -> dict[str, Any]:  # fmt: skip
    """The report of one run's curve. ``sessions``: the machines our run trained on (its
    ``machines.jsonl``, :func:`run_machines`); the report then carries the first one's fingerprint
    and lists them all, else the fingerprint of the machine reading."""
    use_our_package()
    from appliance.bench.report import Report
    from appliance.sysinfo import fingerprint

    curve = windowed(rows, metric, window)
    if not curve["steps"]:
        raise PeerError(
            f"the run logged no {metric!r}; stats it logged: {sorted({k for r in rows for k in r})}"
        )
    hit = next((i for i, s in enumerate(curve["score"]) if s >= target), None)
    suite = {"name": f"parity-{system}", "path": None, "definition": {"system": system, "env": env}}
    machine = sessions[0]["fingerprint"] if sessions else fingerprint()
    gpus = machine.get("gpus") or [{}]
    profile = (
        {"name": "cpu", "gpu": ""} if device == "cpu" else {"name": device, "gpu": gpus[0].get("name", "")}
    )
    report = Report(suite, profile, machine, config, seed or 0, 1, command)
    name = f"time_to_score/{env}/{metric}>={target}"
    labels = {"env": env, "metric": metric, "target": target, "system": system}
    report.add(name + "/seconds", [None if hit is None else curve["seconds"][hit]], "s", "lower", **labels)
    report.add(
        name + "/steps", [None if hit is None else curve["steps"][hit]], "agent-steps", "lower", **labels
    )
    report.add(name + "/final", [curve["score"][-1]], metric, "higher", **labels)
    for step in at:
        value = score_at(curve, step)
        if value is not None:
            report.add(
                f"score_at/{env}/{metric}/{step / 1e6:g}M", [value], metric, "higher", **labels, step=step
            )
    for phase, seconds in (phases or {}).items():  # where the run's time went (phase_seconds)
        report.add(f"time_per_million/{phase}", [seconds], "s per million agent-steps", "lower", phase=phase)
    for who, cores in (load or {}).items():  # what the machine's others took from the run (host_load)
        report.add(f"host_load/{who}", [cores], "cores", "lower")
    report.data["analysis"]["learning_curves"] = {env: {**labels, "runs": [curve]}}
    report.data["analysis"]["system"] = system
    if sessions:  # where the run trained, session by session (a resumed run may have moved)
        report.data["analysis"]["run_machines"] = [session_line(r) for r in sessions]
    report.data["duration_s"] = curve["seconds"][-1]
    return report.data


# Metrics that need each side's own log semantics to mean the same thing. target: PufferLib's env
# never ends an episode and logs every star eaten as a one-star "episode" (perf and score always 1);
# ``n`` is the stars one vector env's agents ate in the 128 steps between logs. Ours logs each agent's
# stars in a window of steps (its score; the window's length as episode_length: log_ticks, or
# max_ticks in runs from before our target stopped ending). Both become stars per agent-step.
PEER_LOG_INTERVAL = 128  # steps between PufferLib's Ocean env logs (its envs' log_interval default)
DERIVED = {
    "stars_per_step": {
        "pufferlib": lambda r, c: (
            r["n"] / (PEER_LOG_INTERVAL * c["env"]["num_envs"] * c["env"]["num_agents"]) if "n" in r else None
        ),
        "ours": lambda r, c: r["score"] / r["episode_length"] if "score" in r else None,
    },
}


def on_our_env(config: dict[str, Any], env: str) -> dict[str, Any]:
    """PufferLib's config for a run on our env: its ``[env]`` keys, and our env's defaults for the
    parameters the ini does not set (the adapter makes our env with those; target's ``log_ticks``)."""
    use_our_package()
    from appliance import ocean

    ours = {k: v for k, v in ocean.describe(env)["params"].items() if k not in config.get("env", {})}
    return {**config, "env": {**ours, **config.get("env", {})}}


def derive(
    rows: list[dict[str, float]], metric: str, side: str, config: dict[str, Any]
) -> list[dict[str, float]]:
    """``rows`` with ``metric`` computed where it is one of DERIVED (``side``: whose logs they are)."""
    if metric not in DERIVED:
        return rows
    fn = DERIVED[metric][side]
    try:
        for r in rows:
            value = fn(r, config)
            if value is not None:
                r[metric] = value
    except KeyError as e:
        raise PeerError(f"{metric} needs {e} in the {side} run's config") from None
    return rows


def peer_rows(jsonl: Path, config: dict[str, Any]) -> list[dict[str, float]]:
    """PufferLib's logged rows up to the end of training: after its last epoch, ``pufferl.train`` runs
    32 more rollouts without updates and logs them (pong: 12.1 M trained steps, a last row at 16.3 M),
    which are not part of the learning curve."""
    train_cfg, vec = config.get("train", {}), config.get("vec", {})
    try:
        batch = (
            int(config.get("env", {}).get("num_envs", 1))
            * serial_vec_envs(vec)
            * int(train_cfg["bptt_horizon"])
        )
        limit = float(train_cfg["total_timesteps"]) + batch
    except (KeyError, TypeError, ValueError):
        limit = float("inf")
    return curve_rows(jsonl, limit)


def curve_rows(jsonl: Path, limit: float = float("inf")) -> list[dict[str, float]]:
    """A peer's curve (one JSON line per log: ``agent_steps``, ``seconds``, ``section/stat`` values)
    as rows of steps, seconds and each stat under its name without the section, up to ``limit``
    agent-steps."""
    rows = []
    for i, r in enumerate(json_lines(jsonl, "curve"), 1):
        try:
            row = {"steps": float(r["agent_steps"]), "seconds": float(r["seconds"])}
        except (KeyError, TypeError, ValueError) as e:
            raise PeerError(
                f"{jsonl} record {i} is not a line of a peer's curve (agent_steps, seconds): {e!r}"
            ) from None
        row.update(
            {k.split("/", 1)[-1]: v for k, v in r.items() if k not in ("agent_steps", "seconds", "sps")}
        )
        if row["steps"] <= limit:
            rows.append(row)
    return rows


def session_line(record: dict[str, Any]) -> dict[str, Any]:
    """One session of a run (a ``machines.jsonl`` record) in brief: when, from which step, the host
    and the CPU's kind as the trainer ran it."""
    fp = record["fingerprint"]
    cpu = fp.get("cpu") or {}
    return {
        "utc": record.get("utc"),
        "global_step": record.get("global_step"),
        "host_hash": fp.get("host_hash"),
        "kind": cpu.get("emulated_kind") or cpu.get("kind"),
        "emulated": bool(cpu.get("emulated_kind")),
        "library_caps": cpu.get("library_caps") or {},
        "gpus": [g.get("name") for g in fp.get("gpus") or []],
    }


def run_machines(run_dir: Path) -> list[dict[str, Any]]:
    """The machines our run trained on (its ``machines.jsonl``), with a warning on stderr where its
    sessions differ in host or CPU kind (the report carries the first) or the folder has none (a run
    from before the trainer wrote it: the report carries the reader's machine)."""
    use_our_package()
    from appliance.errors import ApplianceError
    from appliance.train.runs import MACHINES, machines

    try:
        records = machines(run_dir)
    except ApplianceError as e:
        raise PeerError(str(e)) from None
    if not records:
        print(
            f"[peer] {run_dir} has no {MACHINES}: the report carries this machine's fingerprint",
            file=sys.stderr,
        )
        return []
    seen = {
        (r["host_hash"], r["kind"], json.dumps(r["library_caps"], sort_keys=True))
        for r in map(session_line, records)
    }
    if len(seen) > 1:
        print(
            f"[peer] {run_dir} trained on {len(seen)} machines or CPU kinds (analysis.run_machines lists "
            "them); the report's fingerprint is its first session's",
            file=sys.stderr,
        )
    return records


def our_rows(run_dir: Path) -> tuple[list[dict[str, float]], dict[str, Any]]:
    """A run folder's curve and config. A resumed run's seconds go on from its checkpoint's epoch
    (each process logs its own uptime), and the epochs it trained again after that replace the old."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        raise PeerError(f"{path} does not exist: name one of our run folders (experiments/<run>)")
    rows: list[dict[str, float]] = []
    offset, last_uptime = 0.0, -1.0
    for i, r in enumerate(json_lines(path, "run's metrics"), 1):
        try:
            steps, uptime = float(r["global_step"]), float(r["uptime"])
        except (KeyError, TypeError, ValueError) as e:
            raise PeerError(f"{path} record {i} is not a line of our run's curve: {e!r}") from None
        if uptime < last_uptime:  # a --resume: its process counts its uptime from 0 again
            while rows and rows[-1]["steps"] >= steps:  # epochs after its checkpoint, trained again
                rows.pop()
            offset = rows[-1]["seconds"] if rows else 0.0
        last_uptime = uptime
        row = {"steps": steps, "seconds": offset + uptime}
        row.update({k.split("/", 1)[1]: v for k, v in r.items() if k.startswith("env/")})
        rows.append(row)
    config: dict[str, Any] = {}
    if (run_dir / "config.yaml").exists():
        use_our_package()
        from appliance.config import read_yaml
        from appliance.errors import ConfigError

        try:
            config = read_yaml(run_dir / "config.yaml", "run config")
        except ConfigError as e:
            raise PeerError(str(e)) from None
    return rows, config


# the trainer's time counters (train/timings.py) that say where a run's seconds went; the per-buffer
# ones (time/buffer0/...) split the same seconds again
PHASES = ("evaluate.forward", "evaluate.env", "evaluate.copy", "evaluate.graphed", "evaluate.misc",
          "train.forward", "train.learn", "train.copy", "train.graphed", "train.misc")  # fmt: skip


def phase_seconds(run_dir: Path) -> dict[str, float]:
    """Seconds a million agent-steps in each phase of the run's last process (its ``time/`` counters
    count from that process's start, so a resumed run's are measured from its first record); {} where
    the run logged no counters or one record only after a resume."""
    records = [r for r in json_lines(run_dir / "metrics.jsonl", "run's metrics") if "global_step" in r]
    start = 0
    for i in range(1, len(records)):
        if float(records[i].get("uptime", 0.0)) < float(records[i - 1].get("uptime", 0.0)):
            start = i  # a --resume: a new process, its counters from 0 again
    last = records[-1] if records else {}
    base = records[start] if start else {}
    steps = float(last.get("global_step", 0.0)) - float(base.get("global_step", 0.0))
    if steps <= 0:
        return {}
    return {
        phase: (float(last[f"time/{phase}"]) - float(base.get(f"time/{phase}", 0.0))) / steps * 1e6
        for phase in PHASES
        if f"time/{phase}" in last
    }


def host_load(run_dir: Path) -> dict[str, float]:
    """Cores' worth the hypervisor's steal and other processes took over the run, on average: each
    record's ``host/`` reading (since the record before) weighted by the seconds it covers; {} for a
    run from before the trainer logged them."""
    sums: dict[str, float] = {}
    seconds, last = 0.0, 0.0
    for r in json_lines(run_dir / "metrics.jsonl", "run's metrics"):
        uptime = float(r.get("uptime", 0.0))
        dt = uptime - last if uptime >= last else uptime  # a --resume counts its uptime from 0 again
        last = uptime
        keys = [k for k in ("steal_cores", "others_cores") if f"host/{k}" in r]
        if not keys or dt <= 0:
            continue
        seconds += dt
        for k in keys:
            sums[k] = sums.get(k, 0.0) + float(r[f"host/{k}"]) * dt
    return {k: v / seconds for k, v in sums.items()} if seconds else {}


def write_report(data: dict[str, Any], out: Path) -> None:
    """The report, atomically; a late failure (a full disk) keeps it in the temp folder, named in the error."""
    use_our_package()
    from appliance.errors import ApplianceError
    from appliance.safe_files import write_or_keep

    try:
        write_or_keep(out, (json.dumps(data, indent=2) + "\n").encode(), "--out")
    except ApplianceError as e:
        raise PeerError(str(e)) from None
    log(f"wrote {out}")


def plot(reports: list[Path], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entries = curve_entries(reports)  # each file checked to be a learning-curve report, before drawing
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    target = None
    for path, env, entry in entries:
        target = entry["target"]
        for run_ in entry["runs"]:
            label = f"{entry.get('system', '?')} {path.stem}"
            style = "-" if "pufferlib" in str(entry.get("system")) else "--"
            axes[0].plot([s / 1e6 for s in run_["steps"]], run_["score"], style, label=label, linewidth=1.2)
            axes[1].plot(run_["seconds"], run_["score"], style, label=label, linewidth=1.2)
        axes[0].set_title(f"{env}: {entry['metric']} (mean of last {WINDOW} epochs)", fontsize=9)
    for ax, xl in zip(axes, ("agent-steps (M)", "wall seconds"), strict=True):
        if target is not None:
            ax.axhline(float(target), color="k", linestyle=":", linewidth=0.8)
        ax.set_xlabel(xl)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    log(f"wrote {out}")


def first_reach(curve: dict[str, list[float]], target: float) -> tuple[float, float] | None:
    """(agent-steps, seconds) at the first logged epoch whose windowed score is at least ``target``."""
    for x, t, score in zip(curve["steps"], curve["seconds"], curve["score"], strict=True):
        if score >= target:
            return x, t
    return None


def curve_entries(reports: list[Path]) -> list[tuple[Path, str, dict[str, Any]]]:
    """(report, env, its learning-curve entry) for every env of every report, or a PeerError naming
    the file that is not a learning-curve report."""
    out = []
    for path in reports:
        try:
            curves = json.loads(path.read_text())["analysis"]["learning_curves"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise PeerError(f"{path}: not a learning-curve report from train or ours ({e!r})") from None
        if not isinstance(curves, dict) or not all(map(_is_curve, curves.values())):
            raise PeerError(
                f"{path}: not a learning-curve report from train or ours (its curves are damaged)"
            )
        out.extend((path, env, entry) for env, entry in curves.items())
    return out


def _is_curve(entry: Any) -> bool:
    """A learning-curve entry as make_report writes it: target, metric, and runs of steps, seconds, score."""
    runs = entry.get("runs") if isinstance(entry, dict) else None
    return (
        isinstance(runs, list)
        and isinstance(entry.get("target"), int | float)
        and "metric" in entry
        and all(
            isinstance(r, dict) and all(isinstance(r.get(k), list) for k in ("steps", "seconds", "score"))
            for r in runs
        )
    )


def table(reports: list[Path], targets: dict[str, float], at: tuple[float, ...] = (), links: str = "") -> str:
    """Markdown: per env, each report's agent-steps and seconds to a target score. The target is
    ``targets[env]`` where given, else the lowest final score among that env's PufferLib reports (so
    "PufferLib's final score": every PufferLib run reaches it by its end); ``at``: agent-step counts
    at which each run's windowed score is shown too; ``links``: a prefix for the reports' links."""
    by_env: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for path, env, entry in curve_entries(reports):
        # ours on a PufferLib-format env is pufferlib:NAME, the same env code as its NAME
        by_env.setdefault(env.removeprefix("pufferlib:"), []).append((path, entry))
    extra = "".join(f" score at {x / 1e6:g} M |" for x in at)
    lines = [
        "| env | target | run | agent-steps to target | seconds to target | steps run | final score |"
        + extra,
        "|---|---|---|---|---|---|---|" + "---|" * len(at),
    ]
    for env, entries in by_env.items():
        finals = [e["runs"][0]["score"][-1] for _, e in entries if "pufferlib" in str(e.get("system"))]
        peers = [v for v in finals if math.isfinite(v)]  # a NaN or infinite final score is no target
        if env in targets:
            target = targets[env]
        elif peers:
            target = min(peers)
        elif finals:
            raise PeerError(
                f"{env}: every PufferLib report's final score is NaN or infinite; give --target {env}=VALUE"
            )
        else:
            raise PeerError(f"{env}: no PufferLib report among the reports and no --target {env}=VALUE")
        metric = entries[0][1]["metric"]
        d = decimals([v for _, e in entries for v in e["runs"][0]["score"]])
        for path, entry in entries:
            curve = entry["runs"][0]
            hit = first_reach(curve, target)
            steps, seconds = (
                ("not reached", "-") if hit is None else (f"{hit[0] / 1e6:.1f} M", f"{hit[1]:,.0f}")
            )
            lines.append(
                f"| {env} | {metric} {target:.3g} | [{path.stem}]({links}{path.name}) | {steps} | {seconds} "
                f"| {curve['steps'][-1] / 1e6:.1f} M | {curve['score'][-1]:.3g} |"
                + "".join(f" {'-' if (v := finite_at(curve, x)) is None else f'{v:.{d}f}'} |" for x in at)
            )
    return "\n".join(lines) + "\n"


def decimals(values: list[float]) -> int:
    """Decimals that show three significant digits of the largest of ``values`` (at least 3): a
    perf near 1 keeps 3, target's stars per agent-step near 0.007 gets 5."""
    top = max((abs(v) for v in values if v and math.isfinite(v)), default=1.0)
    return max(3, 2 - math.floor(math.log10(top)))


def seed_group(stem: str) -> str:
    """A report's name without its seed suffix (``ours-4096-breakout-s2`` -> ``ours-4096-breakout``):
    the runs of one setup that differ only in their seed."""
    import re

    return re.sub(r"-s\d+$", "", stem)


def means(reports: list[Path], at: tuple[float, ...]) -> str:
    """Markdown: per env and per setup (reports grouped by ``seed_group``), how many runs and, at each
    of ``at``, over the runs that got that far, the interquartile mean of their windowed scores with
    a 95 % stratified bootstrap interval (the ``rliable`` library, :func:`appliance.measure.stats.iqm_intervals`;
    where rliable is not installed, the plain mean, and the table says so), their range and count;
    then each of our setups against each PufferLib setup of the env: the difference of means and
    its two-sided permutation p (:func:`permutation_p`)."""
    if not at:
        raise PeerError("--means needs --at: the agent-steps at which to average the runs' scores")
    use_our_package()
    from appliance.measure.stats import iqm_intervals

    groups: dict[tuple[str, str], list[dict[str, list[float]]]] = {}
    for path, env, entry in curve_entries(reports):
        groups.setdefault((env, seed_group(path.stem)), []).append(entry["runs"][0])
    at_values = {
        (key, x): [v for curve in runs if (v := finite_at(curve, x)) is not None]
        for key, runs in groups.items()
        for x in at
    }
    unscored = sum(
        1
        for runs in groups.values()
        for curve in runs
        for x in at
        if (v := score_at(curve, x)) is not None and not math.isfinite(v)
    )
    iqm = iqm_intervals({f"{k}": v for k, v in at_values.items()})
    what = "IQM [95% CI] (min-max)" if iqm is not None else "mean (min-max)"
    lines = [
        "| env | setup | runs |" + "".join(f" {what} at {x / 1e6:g} M |" for x in at),
        "|---|---|---|" + "---|" * len(at),
    ]
    places = {
        env: decimals(
            [v for (e, _), runs in groups.items() if e == env for curve in runs for v in curve["score"]]
        )
        for env, _ in groups
    }
    for (env, group), runs in groups.items():
        cells = []
        d = places[env]
        for x in at:
            values = at_values[((env, group), x)]
            if not values:
                cells.append(" - |")
                continue
            spread = f"({min(values):.{d}f}-{max(values):.{d}f}, n={len(values)})"
            if iqm is None or f"{((env, group), x)}" not in iqm:
                cells.append(f" {sum(values) / len(values):.{d}f} {spread} |")
            else:
                mid, low, high = iqm[f"{((env, group), x)}"]
                cells.append(f" {mid:.{d}f} [{low:.{d}f}, {high:.{d}f}] {spread} |")
        lines.append(f"| {env} | {group} | {len(runs)} |" + "".join(cells))
    if iqm is None:
        lines += ["", "(means: install rliable, `pip install 'puffer-bench[stats]'`, for IQMs and intervals)"]
    if unscored:
        lines += [
            "",
            f"({unscored} scores that are NaN or infinite left out: a run's curve is damaged there)",
        ]
    versus = [
        (env, group, peer)
        for (env, group) in groups
        if not group.startswith("pufferlib")
        for (peer_env, peer) in groups
        if peer_env == env and peer.startswith("pufferlib")
    ]
    if versus:
        lines += [
            "",
            "| env | setup | against | runs |"
            + "".join(f" difference of means at {x / 1e6:g} M (p) |" for x in at),
            "|---|---|---|---|" + "---|" * len(at),
        ]
    for env, group, peer in versus:
        cells = []
        for x in at:
            ours = [v for curve in groups[(env, group)] if (v := finite_at(curve, x)) is not None]
            theirs = [v for curve in groups[(env, peer)] if (v := finite_at(curve, x)) is not None]
            if not ours or not theirs:
                cells.append(" - |")
                continue
            diff = sum(ours) / len(ours) - sum(theirs) / len(theirs)
            cells.append(f" {diff:+.{places[env]}f} ({permutation_p(ours, theirs):.2f}) |")
        lines.append(
            f"| {env} | {group} | {peer} | {len(groups[(env, group)])} vs {len(groups[(env, peer)])} |"
            + "".join(cells)
        )
    return "\n".join(lines) + "\n"


def permutation_p(a: list[float], b: list[float]) -> float:
    """Two-sided p of the difference of means of ``a`` and ``b`` under exchangeability: the share of
    all ways to split the pooled runs into groups of their sizes (exact; random splits past 100,000)
    whose difference is at least as far from zero as the one observed."""
    import itertools
    import math
    import random

    pooled, k = a + b, len(a)
    observed = abs(sum(a) / len(a) - sum(b) / len(b)) - 1e-12
    total = sum(pooled)

    def far(chosen: tuple[int, ...]) -> bool:
        first = sum(pooled[i] for i in chosen)
        return abs(first / k - (total - first) / (len(pooled) - k)) >= observed

    if math.comb(len(pooled), k) <= 100_000:
        splits = list(itertools.combinations(range(len(pooled)), k))
    else:
        rng = random.Random(0)
        splits = [tuple(rng.sample(range(len(pooled)), k)) for _ in range(100_000)]
    return sum(map(far, splits)) / len(splits)


# ---------------------------------------------------------------------- speed


def steady_sps(points: list[tuple[float, float]], warmup: float) -> float | None:
    """Agent-steps per second between the first logged point after ``warmup`` seconds and the last
    (``points``: (seconds, agent-steps) as each trainer logged them): start-up and the first epochs'
    allocation stay out of the figure."""
    after = [p for p in points if p[0] >= warmup]
    if len(after) < 2 or after[-1][0] <= after[0][0]:
        return None
    return (after[-1][1] - after[0][1]) / (after[-1][0] - after[0][0])


def ours_for(
    cache: Path, env: str, seconds: float, run_dir: Path, ours_set: list[str], defaults: bool = False
) -> list[tuple[float, float]]:
    """Our trainer on ``env`` for ``seconds``, ended by SIGINT (it saves and exits); its (uptime,
    global_step) per epoch. At PufferLib's settings (bench/parity/ENV.yaml), or with ``defaults`` on
    our own defaults for the env, as ``puffer-bench train ENV`` runs with no flags."""
    import signal

    config: list[str] = []
    if not defaults:
        path = REPO / "bench" / "parity" / f"{env}.yaml"
        if not path.exists():
            write_config(cache, env, path)
        config = ["--config", str(path)]
    cmd = [sys.executable, "-c", "from appliance.cli import main; main()", "train", env, *config,
           "--run-id", run_dir.name, "--train.data-dir", str(run_dir.parent), "--no-dashboard", *ours_set]  # fmt: skip
    log("$ " + shlex.join(cmd[3:]))
    with open(run_dir.parent / f"{run_dir.name}.log", "w") as out:
        proc = subprocess.Popen(
            cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=out, stderr=out,
            preexec_fn=dies_with_us(),
        )  # fmt: skip
        try:
            proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=600)
    rows = json_lines(run_dir / "metrics.jsonl", "run's metrics")
    return [(float(r["uptime"]), float(r["global_step"])) for r in rows]


def peer_for(cache: Path, env: str, seconds: float, jsonl: Path) -> list[tuple[float, float]]:
    """PufferLib's trainer on ``env`` with its own config for ``seconds``; its (seconds, agent-steps)."""
    train(cache, env, float("inf"), seconds, None, [], jsonl)
    rows = json_lines(jsonl, "curve")
    return [(float(r["seconds"]), float(r["agent_steps"])) for r in rows]


def speed(cache: Path, env: str, rounds: int, seconds: float, warmup: float, out: Path,
          ours_set: list[str], ours_defaults: bool = False) -> dict[str, Any]:  # fmt: skip
    """Both trainers interleaved (A B, B A, ...) on this machine: each round one window of each, the
    per-CPU speed check (the noise guard's) before and after each window. PufferLib always on its own
    config; ours at the same settings, or with ``ours_defaults`` on its own defaults for the env."""
    import tempfile

    use_our_package()
    from appliance.bench.report import Report
    from appliance.measure import noise
    from appliance.sysinfo import fingerprint

    system = f"pufferlib-{VERSION}"
    samples: dict[str, list[float | None]] = {system: [], "puffer-bench": []}
    checks: list[dict[str, Any]] = []
    scratch = Path(tempfile.mkdtemp(prefix="peer-speed-"))
    try:
        for r in range(rounds):
            order = [system, "puffer-bench"] if r % 2 == 0 else ["puffer-bench", system]
            for side in order:
                before, sampler = noise.gate_check(), noise.Sampler()
                sampler.sample()
                if side == system:
                    points = peer_for(cache, env, seconds, scratch / f"peer-{r}.jsonl")
                else:
                    points = ours_for(cache, env, seconds, scratch / f"ours-{r}", ours_set, ours_defaults)
                load = sampler.sample() or {}
                sps = steady_sps(points, warmup)
                samples[side].append(sps)
                checks.append({"round": r, "side": side, "sps": sps, "before": before, "after": noise.gate_check(),
                               "others_cores": load.get("others_cores"), "steal_cores": load.get("steal_cores")})  # fmt: skip
                log(f"round {r + 1}/{rounds} {side}: {sps or float('nan'):,.0f} agent-steps/s "
                    f"(others' load {load.get('others_cores', float('nan')):.2f} cores)")  # fmt: skip
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    suite = {"name": f"parity-speed-{env}", "path": None, "definition": {"env": env, "rounds": rounds,
             "seconds": seconds, "warmup": warmup, "ours_set": ours_set,
             "ours_config": "defaults" if ours_defaults else "parity"}}  # fmt: skip
    command = "python tools/pufferlib_peer.py " + shlex.join(sys.argv[1:])
    report = Report(
        suite, {"name": "cpu", "gpu": ""}, fingerprint(), ini_config(cache, env), 0, rounds, command
    )
    for side, values in samples.items():
        report.add(f"train_sps/{env}/{side}", values, "agent-steps/s", "higher", env=env, system=side)
    ratios = [
        b / a if a and b else None for a, b in zip(samples[system], samples["puffer-bench"], strict=True)
    ]
    report.add(f"train_sps_ratio/{env}/puffer-bench_over_{system}", ratios, "x", "higher", env=env)
    report.data["analysis"]["speed_checks"] = checks
    for warning in busy_warnings(checks, noise.thresholds()):
        report.warn(warning)
    return report.data


def busy_warnings(checks: list[dict], limits: tuple[float, float]) -> list[str]:
    """The speed windows' noise by the noise guard's (others, steal) limits: other processes' load
    and the hypervisor's steal, each a warning where some window passed its limit."""
    out = []
    for key, limit, who in (("others_cores", limits[0], "other processes used"), ("steal_cores", limits[1], "the hypervisor stole")):  # fmt: skip
        seen = [c[key] for c in checks if c.get(key) is not None]
        if seen and max(seen) > limit:
            out.append(f"{who} up to {max(seen):.2f} cores during the windows: figures are not idle ones")
    return out


# ---------------------------------------------------------------------- config

# PufferLib's [train] keys that mean the same on our side, under the same names
TRAIN_KEYS = (
    "total_timesteps", "optimizer", "learning_rate", "anneal_lr", "adam_beta1", "adam_beta2", "adam_eps",
    "gamma", "gae_lambda", "update_epochs", "clip_coef", "vf_coef", "vf_clip_coef", "max_grad_norm",
    "ent_coef", "bptt_horizon", "batch_size", "minibatch_size", "max_minibatch_size", "vtrace_rho_clip",
    "vtrace_c_clip", "prio_alpha", "prio_beta0", "precision",
)  # fmt: skip


def ini_value(text: str) -> Any:
    """A value as PufferLib's config loader reads it (``12_000_000`` an int, ``True`` a bool)."""
    text = text.strip()
    for cast in (int, float):
        try:
            return cast(text.replace("_", "") if cast is int else text)
        except ValueError:
            pass
    return {"True": True, "False": False}.get(text, text)


def ini_config(cache: Path, env: str) -> dict[str, dict[str, Any]]:
    """PufferLib's config for ``env``: config/default.ini with config/ocean/<env>.ini over it."""
    import configparser

    folder = cache / f"pufferlib-{VERSION}" / "pufferlib" / "config"
    if not (folder / "default.ini").exists():
        raise PeerError(
            f"PufferLib is not built in {cache}: run `python tools/pufferlib_peer.py build` first"
        )
    name = ENVS[env][1] if env in ENVS else env
    parser = configparser.ConfigParser(inline_comment_prefixes=("#",))
    if not parser.read([folder / "default.ini", folder / "ocean" / f"{name}.ini"])[1:]:
        raise PeerError(f"PufferLib has no config/ocean/{name}.ini")
    return {section: {k: ini_value(v) for k, v in parser[section].items()} for section in parser.sections()}


def serial_vec_envs(vec: dict[str, Any]) -> int:
    """How many of its vector envs PufferLib 3.0 steps with the Serial backend (the one this harness
    runs): ``pufferlib.vector.make`` turns ``batch_size = auto`` into half of ``num_envs`` (1 for one),
    and Serial then makes only ``batch_size`` envs. breakout.ini's 8 x 1,024 games run as 4 x 1,024,
    with batches of 262,144 agent-steps, not 524,288."""
    n = int(vec.get("num_envs", 1))
    if "num_workers" not in vec:  # make() only sizes the batch when workers are given
        return n
    batch = vec.get("batch_size", "auto")
    if batch == "auto":
        return 1 if n == 1 else n // 2
    return n if batch in (None, "None") else int(batch)


def parse_our_env_params(env: str, items: list[str]) -> dict[str, int | float]:
    """``--our-env-param KEY=VALUE`` items as our env's params, checked by the env's own ParamSpec
    (names, ranges, whole numbers) before anything starts."""
    raw: dict[str, float] = {}
    for item in items:
        key, _, value = item.partition("=")
        try:
            raw[key] = float(value)  # a missing "=VALUE" is "" here, which float refuses
        except ValueError:
            raise PeerError(f"--our-env-param wants KEY=NUMBER, got {item!r}") from None
    if not raw:
        return {}
    use_our_package()
    from appliance import ocean
    from appliance.errors import ConfigError

    try:
        ocean.describe(env, **raw)
    except ConfigError as e:
        raise PeerError(str(e)) from None
    known = ocean.params(env)
    return {k: known[k].type(v) for k, v in raw.items()}


# Our env params that make an env show the trainer what PufferLib's does where our default differs
# (go: PufferLib's reset at a game's end clears the terminal flag; docs/lab/learning.md, "go")
AS_PUFFERLIB: dict[str, dict[str, Any]] = {"go": {"terminal_at_game_end": 0}}


def our_config(cache: Path, env: str) -> tuple[dict[str, Any], list[str]]:
    """PufferLib's config for ``env`` on our keys, and the PufferLib keys left out (with why)."""
    use_our_package()
    from appliance import ocean

    ini = ini_config(cache, env)
    params = ocean.describe(env)["params"]
    pe, pv, pt = ini.get("env", {}), ini.get("vec", {}), ini["train"]
    envs = int(pe.get("num_envs", 1)) * serial_vec_envs(pv)
    out: dict[str, Any] = {
        "vec": {"num_envs": envs},
        "env": {**{k: v for k, v in pe.items() if k in params}, **AS_PUFFERLIB.get(env, {})},
        "train": {"device": "cpu", **{k: pt[k] for k in TRAIN_KEYS if k in pt}},
        "policy": {"core": "lstm", "hidden_size": int(ini.get("rnn", {}).get("hidden_size", 128)),
                   "encoder": "linear", "init": "pufferlib", "obs_scale": "none"},
    }  # fmt: skip
    # PufferLib only clamps rewards, and zeroes every agent's LSTM state at the start of each rollout
    # (and each trained segment); its Default policy is Linear + GELU over the raw observation floats
    # (obs_scale none: not divided by the declared bounds, as ours does by default)
    out["train"].update(reward_clamp=1.0, reward_norm=False, reset_state=True)
    # its update passes over each batch update_epochs times: replay_ratio auto, whatever a kind of
    # CPU's section of the env YAML says (breakout's float32 kinds train on half of each batch)
    out["train"]["replay_ratio"] = "auto"
    left = [f"env.{k}" for k in pe if k not in params and k != "num_envs"]
    left += [f"train.{k}" for k in pt if k not in TRAIN_KEYS and k not in out["train"]]
    return out, left


def write_config(cache: Path, env: str, out: Path) -> None:
    import yaml

    cfg, left = our_config(cache, env)
    shown = out.resolve().relative_to(REPO) if out.resolve().is_relative_to(REPO) else out
    head = (
        f"# PufferLib {VERSION}'s config/ocean/{ENVS[env][1]}.ini (its default.ini underneath) on our keys, made by\n"
        f"# `python tools/pufferlib_peer.py config {env}` for the learning-parity runs of docs/lab/learning.md:\n"
        f"# `puffer-bench train {env} --config {shown}`. Our vec.num_envs are the games its Serial backend\n"
        "# steps: env.num_envs x the vector envs Serial makes (half of vec.num_envs, as its batch_size auto);\n"
        "# its policy (Default: Linear + GELU encoder over the raw observation floats, LSTM 128, PufferLib's\n"
        "# init), reward handling (clamp to [-1, 1], no scaling), recurrent state (zeroed at each rollout)\n"
        "# and passes over each batch (its update_epochs: replay_ratio auto) are spelled out"
        + (
            f", and so are our env params that show what PufferLib's env shows: {', '.join(f'env.{k}' for k in AS_PUFFERLIB[env])}"
            if env in AS_PUFFERLIB
            else ""
        )
        + ".\n"
        f"# Not carried over (no counterpart on our side, or the run's bookkeeping): {', '.join(left) or 'nothing'}.\n"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(head + yaml.safe_dump(cfg, sort_keys=False, width=120))
    log(f"wrote {out}")


# ---------------------------------------------------------------------- command line


def steps_list(text: str) -> list[float]:
    """``--at 30e6,65e6`` as agent-step counts (an argparse type: a bad list is a one-line usage error);
    ``''`` is none, an empty item (``30e6,``) a mistake."""
    if not text.strip():
        return []
    try:
        steps = [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected agent-step counts, e.g. 30e6,65e6") from None
    if not all(math.isfinite(x) and x > 0 for x in steps):
        raise argparse.ArgumentTypeError(f"{text!r}: agent-step counts must be positive")
    return steps


def is_report(path: Path) -> bool:
    """Whether ``path`` holds a puffer-bench report (what a report's --out may replace)."""
    try:
        return json.loads(path.read_text()).get("schema", "").startswith("puffer-bench/report/")
    except (OSError, ValueError, AttributeError):
        return False


def check_out(out: Path, curve: str = "", source: Path | None = None) -> None:
    """Refuse, in one line, an ``--out`` that would overwrite a run's own files. The report is a
    ``.json`` that replaces only an older report. ``curve="new"`` (train): the curve (``.jsonl``) and
    console log (``.log``) written beside it are a run's record and must not exist yet. ``curve="copy"``
    (ours): the copy of ``source`` (a run's metrics.jsonl) written beside it may replace only an earlier
    copy of that file (a prefix of it: the run went on since), never another run's curve."""
    if out.suffix != ".json":
        raise PeerError(f"--out {out}: a report is a .json file (its curve goes beside it as .jsonl)")
    check_output(out, beside=(out.with_suffix(".jsonl"), out.with_suffix(".log")) if curve else ())
    tool_cli.check_output(out, "--out", ours=is_report)  # a folder, a symlink, a run's file or another file
    beside = [out.with_suffix(".jsonl"), out.with_suffix(".log")] if curve == "new" else []
    for path in beside:
        if path.exists():
            raise PeerError(f"{path} exists: it is a run's record, so pick another --out (or move it away)")
    copy = out.with_suffix(".jsonl")
    mine = source is None or not source.exists() or not copy.exists() or copy.resolve() == source.resolve()
    if curve == "copy" and not mine and not source.read_bytes().startswith(copy.read_bytes()):
        raise PeerError(
            f"{copy} exists and is not an earlier copy of {source}: refusing to overwrite another run's curve"
        )


def check_suffix(out: Path, suffixes: tuple[str, ...], what: str) -> None:
    """``table``/``plot`` ``--out``: a file of their own kind (never a run's metrics.jsonl or config)."""
    if out.suffix not in suffixes:
        raise PeerError(f"--out {out}: {what} is written to a {' or '.join(suffixes)} file")
    check_output(out)


POSITIVE = tool_cli.number(0, low_open=True)  # --stop-steps, --stop-seconds (inf: no limit)
SEED = tool_cli.number(0, 2**32 - 1, integer=True)


def main(argv: list[str] | None = None) -> int:
    ap = tool_cli.Parser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--cache", type=tool_cli.path, default=default_cache(), help="build folder (default: %(default)s)"
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="fetch, install and compile PufferLib into the cache")
    b.add_argument(
        "--envs",
        type=tool_cli.names,
        default="breakout",
        help="comma-separated env names (default: breakout)",
    )
    b.add_argument(
        "--cuda", action="store_true", help="PufferLib's torch extension with its CUDA kernels (needs nvcc)"
    )
    b.add_argument("--wheels", type=tool_cli.path, default=None, metavar="DIR",
                   help="install the venv's packages from DIR only, no package index (see `wheels`)")  # fmt: skip
    b.add_argument("--system-torch", action="store_true",
                   help="the venv takes this machine's torch (and its other packages) instead of installing ours")  # fmt: skip
    w = sub.add_parser(
        "wheels", help="a folder with what `build --wheels DIR --system-torch` needs on an offline machine"
    )
    w.add_argument("--out", type=tool_cli.path, required=True)
    w.add_argument("--python-version", default="3.12", help="that machine's Python (default: %(default)s)")
    w.add_argument("--platform", action="append", default=[], metavar="TAG",
                   help="its wheel platform tags (default: manylinux 2.17 to 2.28, x86_64)")  # fmt: skip
    helps = {"train": "PufferLib's trainer on ENV", "ours": "a report from our run folder",
             "report": "a report from a PufferLib curve (.jsonl) written by train"}  # fmt: skip
    for name in ("train", "ours", "report"):
        p = sub.add_parser(name, help=helps[name])
        if name == "train":
            p.add_argument("env")
            p.add_argument("--stop-steps", type=POSITIVE, default=float("inf"))
            p.add_argument("--stop-seconds", type=POSITIVE, default=float("inf"))
            p.add_argument(
                "--seed", type=SEED, default=None, help="train.seed and vec.seed (PufferLib's default: 42)"
            )
            p.add_argument("--set", action="append", default=[], metavar="--KEY=VALUE",
                           help="a PufferLib option, e.g. --set=--train.learning-rate=0.01")  # fmt: skip
            p.add_argument("--our-env", action="store_true",
                           help="train on our env (appliance.vector, this checkout) through an adapter")  # fmt: skip
            p.add_argument("--our-env-param", action="append", default=[], metavar="KEY=VALUE",
                           help="with --our-env: one of our env's params, e.g. terminal_at_game_end=0")  # fmt: skip
            p.add_argument("--save-model", type=tool_cli.path, default=None, metavar="PATH",
                           help="write the policy's weights here where the run stops (for peer_crossplay.py)")  # fmt: skip
            p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                           help="cuda: on a GPU, after `build --cuda` (default: %(default)s)")  # fmt: skip
            p.add_argument("--backend", default=None,
                           help="PufferLib's vec backend (default: Serial on the CPU, its config's on cuda)")  # fmt: skip
        elif name == "ours":
            p.add_argument("run_dir", type=tool_cli.path)
            p.add_argument("--env", required=True)
            p.add_argument("--seed", type=SEED, default=None)
            p.add_argument("--window", type=tool_cli.number(1, 10**6, integer=True), default=WINDOW,
                           help="logged epochs averaged into the score (default %(default)s, the learn "
                           "suite's; more where an epoch ends one or two episodes, as 8 Atari envs do)")  # fmt: skip
        else:
            p.add_argument("curve", type=tool_cli.path)
            p.add_argument("--env", required=True)
            p.add_argument("--our-env", action="store_true", help="the curve is of a train --our-env run")
        p.add_argument("--metric", default="perf", help=f"a logged stat, or one of {', '.join(DERIVED)}")
        p.add_argument("--target", type=tool_cli.number(), default=0.9)
        p.add_argument(
            "--at", type=steps_list, default="30e6,65e6",
            help="steps at which to report the score (comma-separated)",
        )  # fmt: skip
        p.add_argument(
            "--out",
            type=tool_cli.path,
            required=True,
            help="the report (.json); the raw curve goes beside it",
        )
    sp = sub.add_parser(
        "speed",
        help="both trainers at PufferLib's settings for ENV (or ours on its defaults), interleaved windows",
    )
    sp.add_argument("env")
    sp.add_argument("--rounds", type=tool_cli.number(1, 1000, integer=True), default=3)
    sp.add_argument("--seconds", type=tool_cli.number(0, 1e6, low_open=True), default=120.0,
                    help="each window (default: %(default)s)")  # fmt: skip
    sp.add_argument("--warmup", type=tool_cli.number(0, 1e6), default=30.0,
                    help="seconds left out of each window's figure")  # fmt: skip
    sp.add_argument("--ours", action="append", default=[], metavar="--KEY=VALUE",
                    help="an option for our side, e.g. --ours=--train.precision=bfloat16")  # fmt: skip
    sp.add_argument("--ours-defaults", action="store_true",
                    help="our side on its own defaults for ENV (puffer-bench train ENV), not bench/parity/ENV.yaml")  # fmt: skip
    sp.add_argument("--out", type=tool_cli.path, required=True)
    c = sub.add_parser("config", help="PufferLib's config for ENV on our keys, as bench/parity/ENV.yaml")
    c.add_argument("env")
    c.add_argument("--out", type=tool_cli.path, default=None, help="default: bench/parity/ENV.yaml")
    tb = sub.add_parser(
        "table", help="agent-steps and seconds to PufferLib's final score, per env (Markdown)"
    )
    tb.add_argument("reports", type=tool_cli.path, nargs="+")
    tb.add_argument("--target", action="append", default=[], metavar="ENV=VALUE",
                    help="the score to reach on ENV (default: the lowest final score of its PufferLib reports)")  # fmt: skip
    tb.add_argument(
        "--at", type=steps_list, default="", help="agent-steps at which to show each run's score too (comma-separated)"
    )  # fmt: skip
    tb.add_argument(
        "--links", default="", help="a prefix for the links to the reports, e.g. results/cpu/parity/"
    )
    tb.add_argument(
        "--means", action="store_true",
        help="a second table: per setup (reports named alike but for their -sN seed suffix), the IQM of its seeds' scores with a 95%% stratified bootstrap interval (rliable) at each --at",
    )  # fmt: skip
    tb.add_argument("--out", type=tool_cli.path, default=None, help="write the table here too")
    pl = sub.add_parser("plot", help="the reports' curves in one figure")
    pl.add_argument("reports", type=tool_cli.path, nargs="+")
    pl.add_argument("--out", type=tool_cli.path, required=True)
    a = ap.parse_args(argv)
    a.argv = list(sys.argv[1:] if argv is None else argv)  # the command a report records
    return tool_cli.guarded(lambda: run_command(a))


def run_command(a: argparse.Namespace) -> None:
    """The work of the command ``a`` names (its arguments already parsed and typed)."""
    if a.cmd == "build":
        if a.wheels is not None and not a.wheels.is_dir():
            raise PeerError(f"--wheels {a.wheels}: no such folder (make one with the `wheels` command)")
        build(a.cache, a.envs, a.cuda, a.wheels, a.system_torch)
    elif a.cmd == "wheels":
        platforms = a.platform or [f"manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28)] + [
            "manylinux2014_x86_64"
        ]
        if not re.fullmatch(r"3\.\d+", a.python_version):
            raise PeerError(f"--python-version {a.python_version!r}: a Python 3 version such as 3.12")
        wheels(a.cache, a.out, a.python_version, platforms)
    elif a.cmd == "config":
        if a.env not in ENVS:
            raise PeerError(f"no PufferLib counterpart known for {a.env}; known: {', '.join(ENVS)}")
        out = a.out or REPO / "bench" / "parity" / f"{a.env}.yaml"
        check_suffix(out, (".yaml", ".yml"), "a config")
        tool_cli.check_output(
            out, ours=lambda p: p.read_text().startswith(f"# PufferLib {VERSION}'s config/")
        )
        write_config(a.cache, a.env, out)
    elif a.cmd == "speed":
        if a.env not in ENVS:
            raise PeerError(f"no PufferLib counterpart known for {a.env}; known: {', '.join(ENVS)}")
        if not a.seconds > a.warmup:
            raise PeerError(f"--seconds {a.seconds:g} must be more than --warmup {a.warmup:g}")
        check_out(a.out)
        ours_set = [x for item in a.ours for x in item.split("=", 1)]
        write_report(
            speed(a.cache, a.env, a.rounds, a.seconds, a.warmup, a.out, ours_set, a.ours_defaults), a.out
        )
    elif a.cmd == "plot":
        check_suffix(a.out, (".png", ".svg", ".pdf"), "the figure")
        tool_cli.check_output(a.out)
        plot(a.reports, a.out)
    elif a.cmd == "table":
        targets = tool_cli.finite_items(a.target, "--target")
        at_steps = tuple(a.at)
        if a.out:
            check_suffix(a.out, (".md", ".txt"), "the table")
            tool_cli.check_output(a.out)
        text = table(a.reports, targets, at_steps, a.links)
        if a.means:
            text += "\n" + means(a.reports, at_steps)
        print(text, end="")
        if a.out:
            a.out.parent.mkdir(parents=True, exist_ok=True)
            a.out.write_text(text)
    else:
        at = list(a.at)
        if a.cmd == "ours":
            check_out(a.out, "copy", a.run_dir / "metrics.jsonl")
        else:
            check_out(a.out, "new" if a.cmd == "train" else "")
        if a.cmd == "train":
            jsonl = a.out.resolve().with_suffix(".jsonl")  # the trainer runs in the cache folder
            extra = [s for item in a.set for s in item.split("=", 1)]
            if a.save_model:
                a.save_model.parent.mkdir(parents=True, exist_ok=True)
            if a.our_env_param and not a.our_env:
                raise PeerError("--our-env-param needs --our-env")
            our_params = parse_our_env_params(a.env, a.our_env_param)
            info = train(a.cache, a.env, a.stop_steps, a.stop_seconds, a.seed, extra, jsonl, a.our_env,
                         a.save_model, our_params, a.device, a.backend)  # fmt: skip
            rows = derive(
                peer_rows(jsonl, info["config"]),
                a.metric,
                "ours" if a.our_env else "pufferlib",
                on_our_env(info["config"], a.env) if a.our_env else info["config"],
            )
            system = f"pufferlib-{VERSION}" + ("-on-our-env" if a.our_env else "")
            data = make_report(system, a.env, a.metric, a.target, rows, info["config"],
                               info["command"], a.seed, at, a.device)  # fmt: skip
        elif a.cmd == "report":
            ini = ini_config(a.cache, a.env)
            side = "ours" if a.our_env else "pufferlib"
            rows = derive(
                peer_rows(a.curve, ini), a.metric, side, on_our_env(ini, a.env) if a.our_env else ini
            )
            system = f"pufferlib-{VERSION}" + ("-on-our-env" if a.our_env else "")
            data = make_report(system, a.env, a.metric, a.target, rows, ini_config(a.cache, a.env),
                               f"PufferLib's curve {a.curve}", None, at)  # fmt: skip
        else:
            rows, config = our_rows(a.run_dir)
            if config.get("env_name") not in (None, a.env):
                raise PeerError(
                    f"--env {a.env}: {a.run_dir} is a run of {config['env_name']}; pass --env {config['env_name']}"
                )
            rows = derive(rows, a.metric, "ours", config)
            a.out.parent.mkdir(parents=True, exist_ok=True)  # the raw curve beside the report, as train's
            copy = a.out.with_suffix(".jsonl")
            if copy.resolve() != (a.run_dir / "metrics.jsonl").resolve():
                copy.write_bytes((a.run_dir / "metrics.jsonl").read_bytes())
            from appliance.redact import redact_args

            this = ["python", "tools/pufferlib_peer.py", *redact_args(a.argv)]
            data = make_report("puffer-bench", a.env, a.metric, a.target, rows, config,
                               shlex.join(this), a.seed, at, window=a.window,
                               phases=phase_seconds(a.run_dir), load=host_load(a.run_dir),
                               sessions=run_machines(a.run_dir))  # fmt: skip
        write_report(data, a.out)


if __name__ == "__main__":
    sys.exit(main())
