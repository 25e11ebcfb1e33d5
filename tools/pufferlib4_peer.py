#!/usr/bin/env python3
"""PufferLib 4.0 as a peer to measure against: its torch trainer on the CPU and its native CUDA trainer on a
GPU, built from a pinned commit.

    python tools/pufferlib4_peer.py build [--envs breakout,pong,squared] [--source PATH_OR_URL]
    python tools/pufferlib4_peer.py train breakout --stop-steps 94e6 --out results/cpu/parity4/pufferlib4-breakout-s0.json
    python tools/pufferlib4_peer.py config breakout       # -> bench/parity/pufferlib4/breakout.yaml
    python tools/pufferlib_peer.py table results/cpu/parity4/*.json results/cpu/parity/*-breakout-*.json
    # its CUDA trainer: the sources packed here (.peer4/, git-ignored), built and trained on the GPU machine
    python tools/pufferlib4_peer.py pack
    python3 tools/pufferlib4_peer.py --cache .peer4 build --cuda --envs breakout
    python3 tools/pufferlib4_peer.py --cache .peer4 train breakout --device cuda --out pufferlib4-cuda-breakout.json

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
``table`` and ``plot`` and ``puffer-bench compare`` read both.

``build --cuda`` runs ``build.sh ENV``'s default (CUDA) steps for the Python running it (nvcc on
``src/bindings.cu``, bf16, cuDNN and NCCL found as build.sh finds them) from the tree and raylib already
in the cache, fetching nothing; ``pack`` copies those and the wheels the GPU image lacks into an
ignored folder of the repository, so that a machine without internet builds from it (``--cache
.peer4``). ``train --device cuda`` runs ``pufferl.train`` on that ``_C`` (no ``--slowly``), a driver
wrapping ``_C.train`` to read its ``_C.log`` after every epoch into the same curve. docs/lab/peers.md.
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
# envs run only in its format on our side too (`puffer-bench train pufferlib:NAME`, the same env code)
FORMAT4_ONLY = "tetris enduro trash_pickup freeway rware pacman overcooked cartpole connect4 hex tripletriad"
FORMAT4_ONLY += " double_pendulum"
ENVS.update({name: name for name in FORMAT4_ONLY.split()})
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
            f"--commit {commit[:12]} is not the pinned {COMMIT[:12]} the harness and docs/lab/peers.md describe; "
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
        peer.extract(tar, tmp)
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
            peer.extract(tar, cache, members)
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


def static_commands(name: str, ray: Path, build: Path, cuda_include: str = "") -> list[list[str]]:
    """build.sh's first two steps, the same in every mode: the env's binding.c as a static object
    (gcc for clang, its clang-only warning flags left out), archived. ``cuda_include``: build.sh's
    -I$CUDA_HOME/include, which its default (CUDA) mode passes; the CPU one has no CUDA to name."""
    src = f"ocean/{name}"
    static_o, static_a = build / f"libstatic_{name}.o", build / f"libstatic_{name}.a"
    binding = ["gcc", "-c", "-O2", "-DNDEBUG", "-Wall", "-Werror=incompatible-pointer-types", "-Werror=return-type",
               "-Wno-error=array-parameter", "-mavx2", "-mfma",
               "-I.", "-Isrc", f"-I{src}", "-Ivendor", f"-I{ray / 'include'}", "-Isrc", "-Ivendor",
               *([f"-I{cuda_include}"] if cuda_include else []),
               "-DPLATFORM_DESKTOP", "-fno-semantic-interposition", "-fvisibility=hidden", "-fPIC", "-fopenmp",
               f"{src}/binding.c", "-o", str(static_o)]  # fmt: skip
    return [binding, ["ar", "rcs", str(static_a), str(static_o)]]


def compile_commands(name: str, tree: Path, ray: Path, build: Path, out: Path, obs_t: str,
                     python_include: str, pybind_include: str) -> list[list[str]]:  # fmt: skip
    """build.sh ``ENV --cpu``'s three steps, run in the checkout (its -I. -Isrc are relative), with gcc
    for clang (its clang-only warning flags left out; -I$CUDA_HOME/include too: no CUDA here) and
    -lgomp for LLVM's -lomp5. Everything else is build.sh's: the static binding object, then the CPU
    trainer binding (bindings_cpu.cpp, float precision), linked with raylib into ``out``."""
    binding, archive = static_commands(name, ray, build)
    static_a, trainer_o = build / f"libstatic_{name}.a", build / "bindings_cpu.o"
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


def pinned_tree(cache: Path, source: str, commit: str) -> Path:
    """The pinned checkout in ``cache`` (checked out there first if missing), refused unless it is 4.x."""
    tree = cache / "tree"
    if not (tree / "pyproject.toml").exists():
        checkout(source, commit, tree, cache / "source.git")
        (cache / "SOURCE").write_text(f"{source} {commit}\n")
    version = tree_version(tree)
    if not version.startswith("4."):
        raise PeerError(f"the checkout of {commit[:12]} says version {version}, not PufferLib 4")
    return tree


def build(cache: Path, envs: list[str], source: str = SOURCE, commit: str = COMMIT, other_commit: bool = False,
          system_torch: bool = False) -> None:  # fmt: skip
    """The pinned checkout, raylib, the venv and one ``pufferlib._C`` per env in ``cache``."""
    names = [known(e) for e in envs]
    check_commit(commit, other_commit)
    missing = [t for t in ("git", "gcc", "g++", "ar") if not shutil.which(t)]
    if missing:
        raise PeerError(f"building PufferLib 4.0 needs {', '.join(missing)} on PATH")
    cache.mkdir(parents=True, exist_ok=True)
    tree = pinned_tree(cache, source, commit)
    version = tree_version(tree)
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


# ---------------------------------------------------------------------- the CUDA build (build.sh's default)

CUDA_SYSTEM = f"pufferlib-{VERSION}-cuda"
# build.sh's link line, in its order
CUDA_LIBS = ("cudart", "nccl", "nvidia-ml", "cublas", "cusolver", "curand", "cudnn")
# the headers src/bindings.cu includes (through pufferlib.cu, kernels.cu, muon.cu, cudnn_conv2d.cu) that
# CUDA, its libraries and NVML provide; each must be on one of the -I folders
CUDA_HEADERS = ("cuda_runtime.h", "cuda_profiler_api.h", "cuda_bf16.h", "nvtx3/nvToolsExt.h", "nvml.h", "nccl.h",
                "cublas_v2.h", "curand_kernel.h", "cudnn.h")  # fmt: skip
# where build.sh looks for cuDNN and NCCL before asking the nvidia.cudnn / nvidia.nccl packages
CUDNN_SYSTEM = (
    ("/usr/local/cuda/include", "/usr/include"),
    ("/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu"),
)
NCCL_SYSTEM = (
    ("/usr/include", "/usr/local/cuda/include"),
    ("/usr/lib/x86_64-linux-gnu", "/usr/local/cuda/lib64"),
)
# other folders a GPU machine keeps CUDA's libraries in (the driver's NVML above all), searched after
# build.sh's -L folders for a library they lack
LIB_CANDIDATES = ("/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib64",
                  "/lib/x86_64-linux-gnu")  # fmt: skip
SYSTEM_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib/x86_64-linux-gnu", "/lib64")
PACK = REPO / ".peer4"  # the ignored folder `pack` fills for a machine without internet (device `carry`)
PACK_MARK = "PACKED"
PACK_TARBALL = "sources.tar.gz"
# what of the tree the CUDA build and its trainer read, beside the packed envs' ocean/ENV folders
PACK_TREE = ("pyproject.toml", "build.sh", "LICENSE", "pufferlib", "src", "vendor", "config")
# what pufferl.py imports that a GPU image may lack, carried as wheels (pure Python) in the pack
PACK_WHEELS = ["rich_argparse"]
PACK_IMPORTS = ("rich", "rich_argparse")  # what cuda_site checks the Python for


def cuda_env_folder(cache: Path, env: str) -> Path:
    """What goes on PYTHONPATH for ``env`` on its CUDA trainer: its ``pufferlib`` with the CUDA ``_C``."""
    return cache / "envs-cuda" / env


def cuda_built(cache: Path, env: str) -> bool:
    return any((cuda_env_folder(cache, env) / "pufferlib").glob("_C.*.so"))


def gpu_present() -> bool:
    """Whether nvidia-smi lists a GPU here."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    try:
        found = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return found.returncode == 0 and "GPU" in found.stdout


def find_nvcc() -> tuple[Path, Path]:
    """nvcc and CUDA_HOME as build.sh takes them: $CUDA_HOME, else $CUDA_PATH, else the folder above
    the nvcc on PATH (where that holds no include/cuda_runtime.h, a wrapper script's, /usr/local/cuda)."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    on_path = shutil.which("nvcc")
    if home:
        nvcc = Path(home) / "bin" / "nvcc"
        if not nvcc.exists():
            raise PeerError(f"CUDA_HOME {home} has no bin/nvcc: the CUDA build needs CUDA's compiler")
        return nvcc, Path(home)
    if not on_path:
        raise PeerError("the CUDA build needs nvcc (CUDA's compiler): none on PATH and no CUDA_HOME set")
    nvcc = Path(on_path)
    home = nvcc.parent.parent
    if not (home / "include" / "cuda_runtime.h").exists():
        for other in (nvcc.resolve().parent.parent, Path("/usr/local/cuda")):
            if (other / "include" / "cuda_runtime.h").exists() and (other / "bin" / "nvcc").exists():
                return other / "bin" / "nvcc", other
    return nvcc, home


PYTHON_PATHS = r"""
import json, os, sysconfig
out = {"include": sysconfig.get_path("include"), "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX"),
       "site": sorted({sysconfig.get_path("purelib"), sysconfig.get_path("platlib")})}
for key, module in (("pybind11", "pybind11"), ("numpy", "numpy")):
    try:
        out[key] = __import__(module).get_include()
    except ImportError:
        out[key] = None
for key in ("cudnn", "nccl"):
    try:
        out[key] = list(__import__("nvidia." + key, fromlist=["x"]).__path__)[0]
    except ImportError:
        out[key] = None
print(json.dumps(out))
"""


def python_paths(py: str) -> dict[str, Any]:
    """What build.sh asks ``python`` for: its include folder, pybind11's and numpy's, EXT_SUFFIX, and
    the folders of the nvidia.cudnn and nvidia.nccl packages; and its site folders (CUDA's wheels)."""
    paths = json.loads(subprocess.check_output([py, "-c", PYTHON_PATHS], text=True))
    missing = [k for k in ("pybind11", "numpy") if not paths[k]]
    if missing:
        raise PeerError(f"the CUDA build compiles against {' and '.join(missing)} of {py}, which has none")
    return paths


def wheel_dirs(paths: dict[str, Any], sub: str) -> list[Path]:
    """``sub`` folders of the nvidia-* wheels in the Python's site folders (nvidia/cu13/include, ...)."""
    found: list[Path] = []
    for site in paths["site"]:
        found += sorted(p for p in Path(site).glob(f"nvidia/*/{sub}") if p.is_dir())
    return found


def cuda_includes(home: Path, paths: dict[str, Any]) -> list[Path]:
    """build.sh's -I$CUDA_HOME/include, $CUDNN_IFLAG and $NCCL_IFLAG (a system folder with the header,
    else the nvidia.cudnn / nvidia.nccl package's include), then, for any of CUDA_HEADERS none of those
    holds, the first CUDA folder or nvidia-* wheel that does (a toolkit without cuBLAS or NVML's
    headers, whose wheels the GPU image has)."""
    dirs = [home / "include"]
    for header, system, package in (("cudnn.h", CUDNN_SYSTEM[0], paths.get("cudnn")),
                                    ("nccl.h", NCCL_SYSTEM[0], paths.get("nccl"))):  # fmt: skip
        hit = next((Path(d) for d in system if (Path(d) / header).exists()), None)
        if hit is None and package:
            hit = Path(package) / "include"
        if hit is not None and hit not in dirs:
            dirs.append(hit)
    more = [home / "targets" / "x86_64-linux" / "include", *wheel_dirs(paths, "include")]
    for header in CUDA_HEADERS:
        if any((d / header).exists() for d in dirs):
            continue
        hit = next((d for d in more if (d / header).exists()), None)
        if hit is None:
            raise PeerError(
                f"no {header} in {', '.join(dict.fromkeys(map(str, dirs + more)))}: the CUDA build needs CUDA's headers with "
                "cuBLAS, cuRAND, NVML, NVTX, NCCL and cuDNN's (a full toolkit, or their nvidia-* wheels)"
            )
        dirs.append(hit)
    return dirs


def cuda_libs(home: Path, paths: dict[str, Any], shims: Path) -> tuple[list[Path], list[Path]]:
    """The -L folders and the run paths of the link: build.sh's -L$CUDA_HOME/lib64, $CUDNN_LFLAG,
    $NCCL_LFLAG (a system folder, else the nvidia.cudnn / nvidia.nccl package's lib, given a run path
    as build.sh does), then, for each library of CUDA_LIBS none of them has as lib<name>.so, the first
    CUDA folder, nvidia-* wheel or driver folder that has it. A library found only as lib<name>.so.N
    (wheels ship no unversioned name; the driver's NVML is libnvidia-ml.so.1) gets a lib<name>.so link
    in ``shims``, which goes on the -L list. Every folder outside the system's, but for stubs/, gets a
    run path, so that ``_C`` loads without torch having loaded the libraries first."""
    dirs, rpaths = [home / "lib64"], []
    for lib, system, package in (("libcudnn.so", CUDNN_SYSTEM[1], paths.get("cudnn")),
                                 ("libnccl.so", NCCL_SYSTEM[1], paths.get("nccl"))):  # fmt: skip
        hit = next((Path(d) for d in system if list(Path(d).glob(lib + "*"))), None)
        if hit is None and package:
            hit = Path(package) / "lib"
            rpaths.append(hit)
        if hit is not None and hit not in dirs:
            dirs.append(hit)
    extra = os.environ.get("LIBRARY_PATH", "").split(os.pathsep)
    more = [home / "lib", home / "targets" / "x86_64-linux" / "lib", *wheel_dirs(paths, "lib"),
            *map(Path, LIB_CANDIDATES), *[Path(d) for d in extra if d], home / "lib64" / "stubs",
            home / "targets" / "x86_64-linux" / "lib" / "stubs"]  # fmt: skip
    for name in CUDA_LIBS:
        so = f"lib{name}.so"
        if any((d / so).exists() for d in dirs):
            continue
        exact = next((d for d in [*dirs, *more] if (d / so).exists()), None)
        versioned = next((f for d in [*dirs, *more] for f in sorted(d.glob(so + ".*"))), None)
        if exact is not None:
            dirs.append(exact)
            where = exact
        elif versioned is not None:
            shims.mkdir(parents=True, exist_ok=True)
            link = shims / so
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(versioned)
            if shims not in dirs:
                dirs.append(shims)
            where = versioned.parent
        else:
            raise PeerError(
                f"no {so} (or {so}.N) in {', '.join(dict.fromkeys(map(str, dirs + more)))}: build.sh links -l{name}"
                + (" (NVML: the NVIDIA driver's)" if name == "nvidia-ml" else "")
            )
        if where.name != "stubs" and str(where) not in SYSTEM_LIB_DIRS and where not in rpaths:
            rpaths.append(where)
    return dirs, rpaths


def cuda_compile_commands(name: str, ray: Path, build: Path, out: Path, obs_t: str, nvcc: Path, home: Path,
                          paths: dict[str, Any], includes: list[Path], libdirs: list[Path], rpaths: list[Path],
                          arch: str) -> list[list[str]]:  # fmt: skip
    """build.sh ENV's default (CUDA) steps, run in the checkout: the static binding object (gcc for
    clang, as on the CPU), src/bindings.cu by nvcc with build.sh's flags and defines (no
    -DPRECISION_FLOAT: bf16; -O2 --threads 0), and its link, with -lgomp for LLVM's -lomp5 and the
    CUDA, cuDNN and NCCL folders cuda_includes/cuda_libs found."""
    static, archive = static_commands(name, ray, build, str(home / "include"))
    static_a, trainer_o = build / f"libstatic_{name}.a", build / "bindings.o"
    trainer = [str(nvcc), "-c", f"-arch={arch}", "-Xcompiler", "-fPIC", "-Xcompiler=-D_GLIBCXX_USE_CXX11_ABI=1",
               "-Xcompiler=-DNPY_NO_DEPRECATED_API=NPY_1_7_API_VERSION", "-Xcompiler=-DPLATFORM_DESKTOP",
               "-std=c++17", "-I.", "-Isrc", f"-I{paths['include']}", f"-I{paths['pybind11']}", f"-I{paths['numpy']}",
               *[f"-I{d}" for d in includes], f"-I{ray / 'include'}", "-Xcompiler=-fopenmp",
               f"-DOBS_TENSOR_T={obs_t}", f"-DENV_NAME={name}", "-O2", "--threads", "0",
               "src/bindings.cu", "-o", str(trainer_o)]  # fmt: skip
    link = ["g++", "-shared", "-fPIC", "-fopenmp", str(trainer_o), str(static_a), str(ray / "lib" / "libraylib.a"),
            *[f"-L{d}" for d in libdirs], *[f"-Wl,-rpath,{d}" for d in rpaths], *[f"-l{n}" for n in CUDA_LIBS],
            "-lgomp", "-O2", "-Bsymbolic-functions", "-o", str(out)]  # fmt: skip
    return [static, archive, trainer, link]


def packed_sources(cache: Path) -> tuple[Path, Path]:
    """The source tree and raylib a CPU ``build`` left in ``cache``, or a ``pack``'s, unpacked from its
    tarball on first use (the CUDA build fetches nothing: its machine has no internet)."""
    tree, ray = cache / "tree", cache / RAYLIB
    if not (tree / "pyproject.toml").exists() and (cache / PACK_TARBALL).exists():
        with tarfile.open(cache / PACK_TARBALL) as tar:
            peer.extract(tar, cache)
    if not (tree / "pyproject.toml").exists() or not (tree / "src" / "bindings.cu").exists():
        raise PeerError(
            f"no PufferLib 4.0 source tree in {cache}/tree: the CUDA build fetches nothing; make one with "
            "`python tools/pufferlib4_peer.py pack` (-> .peer4/, carried to the GPU machine) and pass --cache .peer4"
        )
    if not (ray / "lib" / "libraylib.a").exists():
        raise PeerError(f"no {RAYLIB}/lib/libraylib.a in {cache}: `pack` puts raylib beside the tree")
    version = tree_version(tree)
    if not version.startswith("4."):
        raise PeerError(f"the tree in {cache} says version {version}, not PufferLib 4")
    return tree, ray


def cuda_site(cache: Path, py: str) -> list[Path]:
    """What pufferl.py imports and ``py`` lacks (rich_argparse on the GPU image), from the pack's
    pure-Python wheels unzipped into ``cache``/site; the folders for PYTHONPATH."""
    site = cache / "site"
    wanted = list(PACK_IMPORTS)

    def missing() -> list[str]:
        probe = "import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] if not importlib.util.find_spec(m)))"
        env = {**os.environ, "PYTHONPATH": str(site)}
        return subprocess.check_output([py, "-c", probe, *wanted], text=True, env=env).split()

    lacking = missing()
    if lacking:
        import zipfile

        for wheel in sorted((cache / "wheels").glob("*.whl")):
            with zipfile.ZipFile(wheel) as z:
                z.extractall(site)
        lacking = missing()
    if lacking:
        raise PeerError(
            f"pufferl.py imports {', '.join(lacking)}, which {py} lacks and {cache}/wheels has no wheel of "
            "(`pack` puts them there)"
        )
    return [site] if site.is_dir() else []


def build_cuda(cache: Path, envs: list[str], arch: str = "native", compile_only: bool = False) -> None:
    """build.sh ENV (its default mode): PufferLib 4.0's native CUDA trainer, one ``_C`` per env in
    ``cache``/envs-cuda, compiled for the Python running this script (its numpy and pybind11; torch,
    which pufferl.py imports, too) from the tree and raylib already in ``cache``. ``compile_only``:
    no import check (a machine without the NVIDIA driver, where _C cannot load)."""
    names = [known(e) for e in envs]
    nvcc, home = find_nvcc()
    missing = [t for t in ("gcc", "g++", "ar") if not shutil.which(t)]
    if missing:
        raise PeerError(f"building PufferLib 4.0 needs {', '.join(missing)} on PATH")
    tree, ray = packed_sources(cache)
    if arch == "native" and not gpu_present():
        raise PeerError("-arch=native (build.sh's default) compiles for this machine's GPU and nvidia-smi finds "
                        "none: name one, e.g. --arch sm_90 (H100/H200)")  # fmt: skip
    py = sys.executable
    paths = python_paths(py)
    site = [] if compile_only else cuda_site(cache, py)
    includes = cuda_includes(home, paths)
    version = (
        subprocess.run([str(nvcc), "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    )
    for env, name in zip(envs, names, strict=True):
        pkg = overlay(tree, cuda_env_folder(cache, env))
        out = pkg / f"_C{paths['ext_suffix']}"
        build_dir = cache / "build-cuda" / env
        if not out.exists():
            build_dir.mkdir(parents=True, exist_ok=True)
            libdirs, rpaths = cuda_libs(home, paths, build_dir / "lib")
            obs_t = obs_tensor_t((tree / "ocean" / name / "binding.c").read_text())
            cmds = cuda_compile_commands(name, ray, build_dir, out, obs_t, nvcc, home, paths, includes, libdirs,
                                         rpaths, arch)  # fmt: skip
            (build_dir / "commands.sh").write_text("".join(shlex.join(c) + "\n" for c in cmds))
            log(
                f"compiling PufferLib 4.0's {env} and its CUDA trainer (src/bindings.cu: 1-3 minutes with nvcc)"
            )
            for cmd in cmds:
                run(cmd, cwd=tree)
            info = {"arch": arch, "nvcc": version[-1] if version else "?", "cuda_home": str(home), "python": py,
                    "commands": [shlex.join(c) for c in cmds]}  # fmt: skip
            (build_dir / "build.json").write_text(json.dumps(info, indent=1) + "\n")
        if compile_only:
            log(f"compiled {out} (--compile-only: not imported)")
            continue
        check = (f"import torch, pufferlib.pufferl; from pufferlib import _C; "
                 f"assert _C.env_name == {name!r} and _C.gpu == 1, _C.env_name")  # fmt: skip
        pythonpath = os.pathsep.join(map(str, [cuda_env_folder(cache, env), *site]))
        run([py, "-c", check], cwd=cache, env={**os.environ, "PYTHONPATH": pythonpath})
    log(f"PufferLib {tree_version(tree)}'s CUDA trainer ready in {cache}")


def fetch_wheels(dest: Path) -> None:
    """The pure-Python wheels of PACK_WHEELS from the package index, by pip."""
    run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "--dest",
         str(dest), *PACK_WHEELS])  # fmt: skip


def pack(cache: Path, out: Path, envs: list[str], source: str = SOURCE, commit: str = COMMIT,
         other_commit: bool = False) -> None:  # fmt: skip
    """What the CUDA build of ``envs`` needs on a machine without internet, in ``out`` (an ignored
    folder of the repository the device tool carries): PACK_TARBALL (the tree's PACK_TREE, the envs'
    ocean/ folders, raylib, where it came from; compressed, for the device tool's 64 MiB) and the
    wheels of PACK_WHEELS. Fetches the tree and raylib into ``cache`` first where they are not there
    yet. ``out`` is then a cache folder of its own: ``--cache OUT build --cuda`` unpacks it."""
    names = [known(e) for e in envs]
    check_commit(commit, other_commit)
    if out.resolve() == cache.resolve():
        raise PeerError(f"--out {out} is the cache folder itself")
    if out.exists() and any(out.iterdir()) and not (out / PACK_MARK).exists():
        raise PeerError(f"--out {out} is a folder that is not an earlier pack: refusing to replace it")
    tree = pinned_tree(cache, source, commit)
    version = tree_version(tree)
    ray = raylib(cache)
    where = (cache / "SOURCE").read_text() if (cache / "SOURCE").exists() else f"{source} {commit}\n"
    tmp = cache / "pack.part"  # in the cache: a pack cut short leaves nothing in the repository
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    (tmp / "SOURCE").write_text(where)
    items = [tree / i for i in PACK_TREE] + [tree / "ocean" / n for n in names]
    missing = [str(i.relative_to(tree)) for i in items if not i.exists()]
    if missing:
        raise PeerError(f"the tree in {cache} has no {', '.join(missing)}")
    with tarfile.open(tmp / PACK_TARBALL, "w:gz") as tar:
        for item in items:
            tar.add(
                item,
                f"tree/{item.relative_to(tree)}",
                filter=lambda m: None if "__pycache__" in m.name else m,
            )
        tar.add(ray, RAYLIB)
        tar.add(tmp / "SOURCE", "SOURCE")
    fetch_wheels(tmp / "wheels")
    size = sum(f.stat().st_size for f in tmp.rglob("*") if f.is_file())
    (tmp / PACK_MARK).write_text(f"PufferLib {version} {where.split()[-1]} for {', '.join(envs)}: {PACK_TARBALL} "
                                 f"(tree, {RAYLIB}), wheels; {size:,} bytes\n")  # fmt: skip
    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(tmp, out)
    log(f"packed PufferLib {version}'s tree for {', '.join(envs)}, raylib and "
        f"{len(list((out / 'wheels').glob('*.whl')))} wheel(s) in {out} ({size / 2**20:.1f} MiB)")  # fmt: skip


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
# a swept ini's policy sizes are floats (trash_pickup: num_layers 2.92514), which its torch path cannot
# build a model with; its CUDA trainer reads them into int fields, so 2: the same cast here
for key in ("hidden_size", "num_layers", "expansion_factor"):
    if isinstance(args.get("policy", {}).get(key), float):
        args["policy"][key] = int(args["policy"][key])
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

# Runs on the GPU machine: PufferLib 4.0's own config loading and training loop (pufferl.train on its
# native backend, the CUDA ``_C`` module), with ``_C.train`` wrapped to read its own ``_C.log`` after
# every trained epoch, write one JSON line of it and stop the run; its loop's own (rate-limited) log
# calls get that epoch's logs instead of reading, and so resetting, them a second time.
CUDA_DRIVER = r"""
import json, math, os, sys, time
env_name = sys.argv.pop(1)
stop_steps, stop_seconds, out = float(os.environ["PEER_STOP_STEPS"]), float(os.environ["PEER_STOP_SECONDS"]), os.environ["PEER_OUT"]
import numpy, torch
import pufferlib, pufferlib.pufferl as pl
from pufferlib import _C
args = pl.load_config(env_name)
runtime = {"pufferlib": str(pufferlib.__version__), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
           "numpy": numpy.__version__, "precision_bytes": int(getattr(_C, "precision_bytes", 0)),
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")}
print(json.dumps({"config": {k: v for k, v in args.items() if not k.startswith("sweep")}, "runtime": runtime},
                 default=str), flush=True)
class Stop(Exception):
    pass
t = args["train"]
total_epochs = int(t["total_timesteps"]) // (int(args["vec"]["total_agents"]) * int(t["horizon"]))  # _train's train_epochs
lr0 = float(t["learning_rate"])
lr_min = float(t["min_lr_ratio"]) * lr0
def learning_rate(epoch):  # train_impl's cosine_annealing(lr, min_lr_ratio * lr, epoch, total_epochs), set at its start
    if not t["anneal_lr"] or total_epochs == 0:
        return lr0
    ratio = min(max(epoch / total_epochs, 0.0), 1.0)
    return lr_min + 0.5 * (lr0 - lr_min) * (1.0 + math.cos(math.pi * ratio))
f = open(out, "w")
t0 = last_time = time.time()
last_step = 0
latest = []
_train, _log = _C.train, _C.log
def train_and_log(pufferl):
    global last_time, last_step
    result = _train(pufferl)
    logs = _log(pufferl)
    latest[:] = [logs]
    now = time.time()
    step, epoch = int(logs["agent_steps"]), int(logs["epoch"])
    row = {"agent_steps": step, "seconds": now - t0, "epoch": epoch,
           "sps": (step - last_step) / max(now - last_time, 1e-9), "learning_rate": learning_rate(epoch - 1)}
    last_time, last_step = now, step
    for section, prefix in (("env", "env/"), ("loss", "loss/"), ("perf", "time/"), ("util", "util/")):
        row.update({prefix + k: float(v) for k, v in dict(logs.get(section, {})).items()})
    f.write(json.dumps(row) + "\n")
    f.flush()
    if step >= stop_steps or row["seconds"] >= stop_seconds or epoch >= total_epochs:
        raise Stop()  # the end of training too: pufferl._train's evaluation rollouts after it are no curve
    return result
def its_log(pufferl):
    return latest[0] if latest else _log(pufferl)
_C.train, _C.log = train_and_log, its_log
try:
    pl.train(env_name, args=args)
except Stop:
    pass
sys.stdout.flush()
os._exit(0)
"""

CUDA_NOTES = [
    "PufferLib 4.0's native CUDA trainer (pufferl.train on its _C backend, src/bindings.cu), built as "
    "build.sh ENV (its default mode: bf16, nvcc -O2) with gcc for clang in the env's static object and "
    "-lgomp for LLVM's -lomp5; raylib 5.5 from the pufferlib-3.0.0 sdist (docs/lab/peers.md)",
    "its own ini, nothing changed: [vec] num_buffers and num_threads as written, [base] cudagraphs (graphs "
    "captured at create time), [base] seed (--seed sets it); the curve's seconds start before create_pufferl",
    "the driver calls its own _C.log after every trained epoch (its loop logs at most every 0.6 s) and its "
    "loop's log calls get that epoch's logs; so its dashboard is drawn at the start and the end only",
    "learning_rate on the curve is its cosine_annealing formula at the epoch trained, computed by the "
    "driver (the native backend does not report it); loss/ keys are its names, time/ its profile seconds",
]


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
    "pufferlib-3.0.0 sdist (docs/lab/peers.md)",
]


def train(cache: Path, env: str, stop_steps: float, stop_seconds: float, seed: int | None,
          extra: list[str], jsonl: Path, device: str = "cpu") -> dict[str, Any]:  # fmt: skip
    """PufferLib 4.0's trainer on ``env`` with its own config: on ``device`` cpu its torch backend in
    the cache's venv; on cuda its native CUDA trainer (the ``build --cuda`` one, built first where it is
    missing) in the Python running this script (the GPU machine's, with its torch)."""
    name = known(env)
    jsonl.parent.mkdir(parents=True, exist_ok=True)
    env_vars = {
        **os.environ,
        "PEER_SEED": "" if seed is None else str(seed),
        "PEER_STOP_STEPS": str(stop_steps),
        "PEER_STOP_SECONDS": str(stop_seconds),
        "PEER_OUT": str(jsonl),
    }
    if device == "cuda":
        if not gpu_present():
            raise PeerError(
                "--device cuda: nvidia-smi finds no GPU here; PufferLib 4.0's CUDA trainer needs one"
            )
        if not cuda_built(cache, env):
            log(f"PufferLib 4.0's CUDA {env} is not built in {cache}: building it first")
            build_cuda(cache, [env])
        py = sys.executable
        site = cuda_site(cache, py)
        driver = cache / "driver_cuda.py"
        driver.write_text(CUDA_DRIVER)
        env_vars["PYTHONPATH"] = os.pathsep.join(map(str, [cuda_env_folder(cache, env), *site]))
        cmd = [py, "-W", "ignore::DeprecationWarning", str(driver), name,
               *(["--seed", str(seed)] if seed is not None else []), *extra]  # fmt: skip
    else:
        if not built(cache, env):
            log(f"PufferLib 4.0's {env} is not built in {cache}: building it first")
            build(cache, [env])
        py = str(cache / "venv" / "bin" / "python")
        driver = cache / "driver.py"
        driver.write_text(DRIVER)
        env_vars["PYTHONPATH"] = str(env_folder(cache, env))
        cmd = [py, "-W", "ignore::DeprecationWarning", str(driver), name, "--slowly", *extra]
    log("$ " + shlex.join(cmd))
    peer.use_our_package()
    from appliance.measure import noise

    sampler = noise.Sampler()  # others' load over the run: its figures are not idle ones where it is high
    sampler.sample()
    start = time.time()
    first = peer.run_driver(cmd, cache, env_vars, jsonl, "PufferLib 4.0's trainer")
    head = json.loads(first) if first.startswith("{") else {}
    command = shlex.join(cmd)
    if seed is not None and device == "cpu":
        command += f" (PEER_SEED={seed}: torch.manual_seed)"
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
                command: str, seed: int | None, at: list[float], source: dict[str, Any],
                device: str = "cpu") -> dict[str, Any]:  # fmt: skip
    """tools/pufferlib_peer.py's learning-curve report, with where the peer came from and what was set."""
    cuda = device == "cuda"
    data = peer.make_report(CUDA_SYSTEM if cuda else SYSTEM, env, metric, target, rows, config, command, seed, at,
                            device=device)  # fmt: skip
    data["analysis"]["peer"] = {
        "version": VERSION,
        "backend": "native CUDA (_C, src/bindings.cu), bf16" if cuda else "torch (--slowly), CPU",
        **source,
        "notes": CUDA_NOTES if cuda else CPU_NOTES,
    }
    return data


def noise_threshold() -> float:
    """Others' mean load (cores) from which the noise guard calls a measurement busy on this machine."""
    from appliance.measure import noise

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
    "train": {"prio_replacement": True, "muon_ns": "pufferlib4", "vtrace_rho_on": "reward"},
    "policy": {"encoder_activation": "none", "init": "torch"},
}

# 4.0's [train] keys on ours: (our key, its key, cast), the one table `puffer-bench envs build` maps an
# ini's recipe with too
peer.use_our_package()
from appliance.pufferlib_envs import TRAIN_KEYS  # noqa: E402  (after use_our_package)

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
    # its beta anneal ends at b0 + (1 - b0) * alpha (the header says so); ours ends at prio_beta1
    if "prio_beta0" in train and "prio_alpha" in train:
        train["prio_beta1"] = train["prio_beta0"] + (1 - train["prio_beta0"]) * train["prio_alpha"]
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
`python tools/pufferlib4_peer.py config {env}` for `puffer-bench train {env} --config {shown}` (docs/lab/peers.md).
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
  // batch ({n["epochs"]}), so it ends at b0 + (1 - b0) * prio_alpha, not 1 (3.0.0's pufferl.py the same); ours
  anneals to train.prio_beta1, set here to that end value.
- train.vtrace_rho_clip: its CPU advantage loop (puff_advantage_cpu) weights the reward alone by the clipped
  ratio, delta = rho*r' + gamma*V'*(1-d') - V, where 3.0.0 (and its CUDA kernel at a horizon that is a
  multiple of 4) weight the whole TD error (ours: train.vtrace_rho_on reward).
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
    b.add_argument("--cuda", action="store_true",
                   help="its native CUDA trainer (build.sh's default mode, nvcc) for this Python, from the tree "
                        "and raylib already in the cache (`pack`: --cache .peer4); fetches nothing")  # fmt: skip
    b.add_argument("--arch", default=os.environ.get("NVCC_ARCH", "native"),
                   help="with --cuda: nvcc's -arch (default: $NVCC_ARCH or native, as build.sh; sm_90: H100/H200)")  # fmt: skip
    b.add_argument("--compile-only", action="store_true",
                   help="with --cuda: compile and link, but do not import the result (a machine without the driver)")  # fmt: skip
    k = sub.add_parser("pack", help="the source tree, raylib and wheels the CUDA build needs, for a machine "
                                    "without internet (an ignored folder the device tool can carry)")  # fmt: skip
    k.add_argument("--out", type=tool_cli.path, default=PACK, help="default: %(default)s")
    k.add_argument("--envs", type=tool_cli.names, default="breakout",
                   help=f"whose ocean/ folders go with it, of {', '.join(ENVS)} (default: breakout)")  # fmt: skip
    k.add_argument("--source", default=SOURCE, help="as build's, where the cache has no tree yet")
    k.add_argument("--commit", default=COMMIT, help="as build's (default: the pinned %(default)s)")
    k.add_argument("--other-commit", action="store_true", help="allow a --commit other than the pinned one")
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
            p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                           help="cpu: its torch trainer; cuda: its native CUDA trainer (build --cuda)")  # fmt: skip
        else:
            p.add_argument("curve", type=tool_cli.path)
            p.add_argument("--env", required=True)
            p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="which trainer wrote it")
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
    # absolute: the trainer runs in the cache folder, the compilers in its tree (--cache .peer4 on a GPU machine)
    cache = Path(os.path.abspath(a.cache or default_cache(getattr(a, "commit", COMMIT))))
    if a.cmd == "build" and a.cuda:
        if a.system_torch or a.source != SOURCE or a.commit != COMMIT:
            raise PeerError(
                "build --cuda takes the tree already in the cache: no --source/--commit/--system-torch"
            )
        build_cuda(cache, a.envs, a.arch, a.compile_only)
    elif a.cmd == "build":
        if a.compile_only or a.arch != os.environ.get("NVCC_ARCH", "native"):
            raise PeerError("--arch and --compile-only are for build --cuda")
        build(cache, a.envs, a.source, a.commit, a.other_commit, a.system_torch)
    elif a.cmd == "pack":
        pack(cache, a.out, a.envs, a.source, a.commit, a.other_commit)
    elif a.cmd == "config":
        known(a.env)
        if a.env in FORMAT4_ONLY.split():
            raise PeerError(
                f"config {a.env}: this env runs in its format on our side too, so there is no Ocean env of "
                f"ours to map its ini onto; `puffer-bench envs build PATH/TO/ocean/{a.env}` writes the recipe"
            )
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
            info = train(cache, a.env, a.stop_steps, a.stop_seconds, a.seed, extra, jsonl, a.device)
            config, command = info["config"], info["command"]
            source["runtime"] = info["runtime"]
            made = cache / "build-cuda" / a.env / "build.json"
            if a.device == "cuda" and made.exists():
                source["build"] = {k: v for k, v in json.loads(made.read_text()).items() if k != "python"}
        else:
            if not a.curve.exists():
                raise PeerError(f"{a.curve}: no such curve (train writes one beside its report)")
            jsonl, config = a.curve, ini_config(cache / "tree" / "config", a.env)
            command = f"PufferLib 4.0's curve {a.curve}"
        rows = peer.curve_rows(jsonl, trained_steps(config))
        data = make_report(a.env, a.metric, a.target, rows, config, command, a.seed if a.cmd == "train" else None,
                           a.at, source, a.device)  # fmt: skip
        if a.cmd == "train":
            data["analysis"]["peer"]["others_cores"] = others = info["others_cores"]
            if others is not None and others > noise_threshold():
                data["warnings"].append(
                    f"other processes used {others:.2f} cores on average during the run: its speed is not an idle machine's"
                )
        peer.write_report(data, a.out)


if __name__ == "__main__":
    sys.exit(main())
