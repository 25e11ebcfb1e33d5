"""PufferLib 4.0's env format on our runtime: build an ``ocean/NAME/`` folder, load it, read its recipe.

A PufferLib 4.0 env is a folder ``ocean/NAME/`` (``NAME.h``, ``binding.c``) with a ``config/NAME.ini``.
:func:`build` compiles its ``binding.c`` unchanged against our compatibility header
(``envs/compat4/vecenv.h``, which turns it into one of our ``EnvSpec`` tables) into a shared library,
cached per source hash under :func:`cache_root`; :func:`load` registers it in ``appliance._ocean``
as ``pufferlib:NAME``, after which it is an Ocean env like the compiled-in ones: the native vector,
the rollout engine, ``envs sps`` and the trainer step it on our thread pool and buffers.

Its ini gives the env's kwargs (the ``[env]`` section: the parameters ``my_init`` reads, defaults of
the ``env`` config section, overridable with ``--env.KEY``) and its training recipe (``[train]``,
``[policy]``, ``[vec]`` on our keys: :func:`recipe`), written beside the library as ``recipe.yaml``,
the env's own layer of the config (docs/configuration.md).

Continuous actions (ACT_SIZES all 1, the format's rule) are a Box of float actions. What the
compatibility layer does not cover is refused at build time in one line: the hooks that replace the
vector's stepping or its slots (MY_VEC_STEP, MY_SHARED, MY_USES_PERM, ...); MY_VEC_INIT/MY_VEC_CLOSE
(state made for the whole vector) are supported.
"""

from __future__ import annotations

import ast
import configparser
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance import pufferlib3
from appliance.errors import ConfigError
from appliance.paths import data_dir
from appliance.report_io import read_bounded, read_json, write_bytes_atomic

PREFIX = "pufferlib:"
REQUIRED_MACROS = ("OBS_SIZE", "NUM_ATNS", "ACT_SIZES", "OBS_TENSOR_T")
TENSOR_TYPES = ("FloatTensor", "ByteTensor")
# the format's earlier dialect names the observation's element type in OBS_TYPE (and the actions' in
# ACT_TYPE) instead of OBS_TENSOR_T; the compatibility header reads both from the Env struct itself
OBS_TYPES = ("FLOAT", "CHAR", "UNSIGNED_CHAR")
ACT_TYPES = ("FLOAT", "DOUBLE")
# hooks of the format's own vector that our runtime has no place for (each replaces its memory);
# MY_VEC_INIT/MY_VEC_CLOSE are our EnvSpec's vec_init/vec_close, MY_USES_PERM/MY_USES_TAGS and
# MY_VEC_STEP(_RANGE) are covered by envs/compat4/vecenv.h (see there)
UNSUPPORTED_HOOKS = ("MY_SHARED", "MY_METHODS")
RAYLIB_ENV = "PUFFER_RAYLIB"
BUILD_VERSION = "5"  # part of every build's hash: a change to how envs are built or probed builds them anew
# keyword arguments of the vector (appliance.vector.make, the native Vec): no env parameter may take them
RESERVED_KWARGS = {
    "num_envs",
    "num_threads",
    "seed",
    "backend",
    "num_workers",
    "batch_size",
    "zero_copy",
    "env_offset",
}
# PufferLib 4.0's [train] keys on ours: (our key, its key, cast); the rest of its sections are its
# trainer's own (checkpoints, selfplay, sweeps) and have no key of ours
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
# where PufferLib 4.0's trainer does otherwise than our defaults and a switch of ours does as it does
RECIPE_SWITCHES = {
    "train": {"optimizer": "muon", "prio_replacement": True, "muon_ns": "pufferlib4", "vtrace_rho_on": "reward",
              "reward_clamp": 1.0, "reward_norm": False, "reset_state": True, "batch_size": "auto"},
    "policy": {"core": "mingru", "encoder": "linear", "encoder_activation": "none", "init": "torch", "obs_scale": "none"},
}  # fmt: skip


# its [torch] network (the model its torch trainer builds) on our policy.core
NETWORKS = {"mingru": "mingru", "mlp": "mlp", "lstm": "lstm"}


@dataclass(frozen=True)
class Built:
    """One built env: its registered name, the library, its recipe layer and the build's facts."""

    name: str
    library: Path
    recipe: Path
    meta: dict[str, Any]


def atomic_write_text(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode())


def _read_record(path: Path) -> Any:
    """A build record of the cache (JSON), read as any shared file is (a FIFO, device or folder there
    is refused without waiting on it; bounded); ValueError, one line, when it is not one."""
    return read_json(path, "build record", ValueError, 2**20)


def _source_text(path: Path) -> str:
    """An env's source file (C, header, ini) as text: a FIFO, device or folder by that name is one
    line naming it, never waited on (:func:`report_io.read_bounded`)."""
    return read_bounded(path, "source file", ConfigError, 64 * 2**20).decode(errors="replace")


def cache_root() -> Path:
    """Where built envs live ($PUFFER_ENV_CACHE, else ~/.cache/puffer-bench/envs)."""
    root = os.environ.get("PUFFER_ENV_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "puffer-bench", "envs"
    )
    return Path(root)


def is_env_folder(path: str | Path) -> bool:
    """True for a folder that holds a ``binding.c`` (what ``train PATH`` builds)."""
    try:
        return Path(path).is_dir() and (Path(path) / "binding.c").is_file()
    except OSError:
        return False


# ---------------------------------------------------------------------- the folder and its ini


def macros(binding: str) -> dict[str, str]:
    """``#define NAME value`` lines of a binding.c (a value continued with a backslash is joined)."""
    text = re.sub(r"\\\n", " ", binding)
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    out = {}
    for m in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(?![\w(])[ \t]*(.*)$", text, re.M):
        out[m.group(1)] = re.sub(r"//.*$", "", m.group(2)).strip()
    return out


def check_folder(folder: Path) -> tuple[str, dict[str, str]]:
    """The env's name and its binding's macros, or a one-line ConfigError saying what is missing."""
    if not folder.exists():
        raise ConfigError(
            f"{folder}: no such folder (give a PufferLib env folder, e.g. PufferLib/ocean/squared)"
        )
    if not folder.is_dir():
        raise ConfigError(f"{folder} is not a folder: give a PufferLib env folder such as ocean/squared")
    binding_path = folder / "binding.c"
    if not binding_path.is_file():
        raise ConfigError(
            f"{folder} has no binding.c: not a PufferLib 4.0 env folder (ocean/NAME/ with NAME.h and binding.c)"
        )
    binding = _source_text(binding_path)
    headers = "\n".join(_source_text(p) for p in sorted(folder.glob("*.h")))
    found = {**macros(headers), **macros(binding)}  # a size may be defined in the env's header
    if pufferlib3.is_format3(binding):  # its sizes are its spaces file's (appliance/pufferlib3.py)
        return _check_hooks(folder, found, "3.0")
    dialect = "OBS_TENSOR_T" not in found and "OBS_TYPE" in found
    missing = [m for m in REQUIRED_MACROS if m not in found and not (dialect and m == "OBS_TENSOR_T")]
    if missing:
        raise ConfigError(f"{folder}/binding.c does not #define {', '.join(missing)} (a PufferLib 4.0 binding defines "
                          f"{', '.join(REQUIRED_MACROS)} and Env, then includes vecenv.h)")  # fmt: skip
    if "Env" not in found:
        raise ConfigError(
            f"{folder}/binding.c does not #define Env (its env struct's type) before including vecenv.h"
        )
    if dialect:
        for key, allowed in (("OBS_TYPE", OBS_TYPES), ("ACT_TYPE", ACT_TYPES)):
            if key in found and found[key] not in allowed:
                raise ConfigError(f"{folder}/binding.c: {key} is {found[key]!r}; the format's earlier dialect "
                                  f"names {' or '.join(allowed)}")  # fmt: skip
    elif found["OBS_TENSOR_T"] not in TENSOR_TYPES:
        raise ConfigError(
            f"{folder}/binding.c: OBS_TENSOR_T is {found['OBS_TENSOR_T']!r}; the format's observations are "
            f"{' or '.join(TENSOR_TYPES)}"
        )
    return _check_hooks(folder, found, "4.0")


def _check_hooks(folder: Path, found: dict[str, str], version: str) -> tuple[str, dict[str, str]]:
    if "Env" not in found:
        raise ConfigError(f"{folder}/binding.c does not #define Env (its env struct's type)")
    hooks = [h for h in UNSUPPORTED_HOOKS if h in found]
    if hooks:
        raise ConfigError(
            f"{folder}/binding.c defines {', '.join(hooks)}: hooks the PufferLib {version} format's own vector or "
            "Python calls (shared state, extra methods), which our runtime has no place for; not supported"
        )
    return folder.resolve().name, found


def ini_value(text: str) -> Any:
    """A value as PufferLib's config loader reads it: a Python literal, else the text itself."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def find_ini(folder: Path, name: str) -> Path | None:
    """The env's ini: ``NAME.ini`` beside binding.c or in its ``config/``, else the snapshot layout's
    ``config/`` two folders up, where the ini whose ``[base] env_name`` lists NAME is the env's."""
    for candidate in (folder / f"{name}.ini", folder / "config" / f"{name}.ini"):
        if candidate.is_file():
            return candidate
    config_dir = folder.resolve().parent.parent / "config"
    if not config_dir.is_dir():
        return None
    if (config_dir / f"{name}.ini").is_file():
        return config_dir / f"{name}.ini"
    for path in sorted(config_dir.glob("**/*.ini")):
        parser = configparser.ConfigParser()
        try:
            parser.read(path)
        except configparser.Error:
            continue
        if name in str(parser.get("base", "env_name", fallback="")).split():
            return path
    return None


def read_ini(path: Path | None) -> dict[str, dict[str, Any]]:
    """The ini's sections as values, over a ``default.ini`` beside it (PufferLib's own layering)."""
    if path is None:
        return {}
    parser = configparser.ConfigParser()
    files = [p for p in (path.parent / "default.ini", path) if p.is_file()]
    try:
        parser.read(files)
    except configparser.Error as e:
        raise ConfigError(f"{path}: not a readable ini: {' '.join(str(e).split())}") from None
    return {s: {k: ini_value(v) for k, v in parser[s].items()} for s in parser.sections()}


def env_params(ini: dict[str, dict[str, Any]]) -> tuple[list[tuple[str, str, float]], list[str]]:
    """The ``[env]`` keys my_init can read (numbers: ``(name, int|float, value)``) and those it cannot
    (text values: the format's kwargs are doubles)."""
    params, skipped = [], []
    for key, value in (ini.get("env") or {}).items():
        if isinstance(value, (bool, int)):
            params.append((key, "int", float(int(value))))
        elif isinstance(value, float):
            params.append((key, "float", value))
        else:
            skipped.append(key)
    return params, skipped


def recipe(ini: dict[str, dict[str, Any]], agents_per_env: int) -> dict[str, dict[str, Any]]:
    """The ini's training recipe on our keys: ``[train]`` by TRAIN_KEYS, ``[policy]`` sizes on the
    MinGRU core, ``[vec] total_agents`` as envs, and the switches that make our trainer do what
    PufferLib 4.0's does (RECIPE_SWITCHES). A hardware profile's sizes still apply over it."""
    pt, pp, pv = ini.get("train") or {}, ini.get("policy") or {}, ini.get("vec") or {}
    if not pt:
        return {}
    train: dict[str, Any] = dict(RECIPE_SWITCHES["train"])
    for ours, theirs, cast in TRAIN_KEYS:
        if theirs in pt and not isinstance(pt[theirs], str):
            train[ours] = cast(pt[theirs])
    if "minibatch_size" in train:
        train["max_minibatch_size"] = train["minibatch_size"]
    if "prio_beta0" in train and "prio_alpha" in train:  # its beta anneal ends at b0 + (1 - b0) * alpha
        train["prio_beta1"] = train["prio_beta0"] + (1 - train["prio_beta0"]) * train["prio_alpha"]
    policy: dict[str, Any] = dict(RECIPE_SWITCHES["policy"])
    network = (ini.get("torch") or {}).get(
        "network"
    )  # its torch path's model: MinGRU (default.ini), MLP, ...
    if isinstance(network, str) and network.strip():
        core = NETWORKS.get(network.strip().lower())
        if core is None:
            raise ConfigError(f"the ini's [torch] network = {network!r} has no core of ours: "
                              f"{', '.join(sorted(NETWORKS))} map to {', '.join(sorted(set(NETWORKS.values())))}")  # fmt: skip
        policy["core"] = core
    for key in ("hidden_size", "num_layers", "expansion_factor"):
        value = pp.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 1:
            policy[key] = int(value)  # a swept ini's 2.93 layers: its CUDA trainer's int field holds 2
    out: dict[str, dict[str, Any]] = {"train": train, "policy": policy}
    total = pv.get("total_agents")
    if isinstance(total, int) and agents_per_env > 0 and total % agents_per_env == 0:
        out["vec"] = {"num_envs": total // agents_per_env}
    return out


# ---------------------------------------------------------------------- raylib


def raylib_needed(folder: Path) -> bool:
    """True when the env's sources include raylib (every PufferLib env's renderer does)."""
    include = re.compile(r'^\s*#\s*include\s*[<"](raylib|raymath|rlgl)\.h[>"]', re.M)
    return any(include.search(_source_text(p)) for p in folder.glob("*.[ch]"))


def find_raylib(given: str | Path | None = None) -> Path | None:
    """raylib's folder (``include/raylib.h``, ``lib/libraylib.a``): ``given``, $PUFFER_RAYLIB, or one an
    earlier build or the PufferLib peer harness unpacked under the cache."""
    candidates: list[Path] = []
    if given:
        candidates.append(Path(given))
    if os.environ.get(RAYLIB_ENV):
        candidates.append(Path(os.environ[RAYLIB_ENV]))
    candidates.append(cache_root() / "raylib")
    candidates += sorted(cache_root().parent.glob("peers/*/raylib-*"))
    for c in candidates:
        if (c / "include" / "raylib.h").is_file() and (c / "lib" / "libraylib.a").is_file():
            return c
    if given:
        raise ConfigError(f"--raylib {given}: no include/raylib.h and lib/libraylib.a there")
    return None


# ---------------------------------------------------------------------- build


def _source_hash(folder: Path, ini_path: Path | None, extra: list[str]) -> str:
    h = hashlib.sha256()
    compat = data_dir("envs")
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in (".c", ".h", ".ini"))
    files += [ini_path] if ini_path else []
    files += [
        compat / "vecenv.h",
        *sorted((compat / "compat4").glob("*.h")),
        *sorted((compat / "compat3").glob("*.h")),
    ]
    for p in files:
        h.update(str(p.name).encode())
        h.update(p.read_bytes())
    for e in extra:
        h.update(e.encode())
    return h.hexdigest()[:16]


def _params_header(params: list[tuple[str, str, float]], fixed: list[str]) -> str:
    """The parameter table; a ``fixed`` one (a 3.0 env's spaces depend on it) ranges over its value."""
    rows = [
        f'    {{"{name}", {"PARAM_INT" if kind == "int" else "PARAM_FLOAT"}, {value!r}, '
        + (f"{value!r}, {value!r}}}," if name in fixed else "-1e300, 1e300},")
        for name, kind, value in params
    ]
    return (
        "/* The env's [env] keys from its ini, written by `puffer-bench envs build`. */\n"
        "static const ParamSpec compat4_params[] = {\n"
        + "\n".join(rows)
        + "\n    {NULL, PARAM_INT, 0, 0, 0},\n};\n"
    )


def compiler() -> str:
    for cc in (os.environ.get("CC"), "gcc", "cc", "clang"):
        if cc and shutil.which(cc):
            return cc
    raise ConfigError("no C compiler found (gcc, cc or clang; or set CC): building an env needs one")


def first_error(log: str) -> str:
    """The first line of a compiler log that says error (else its first line)."""
    for line in log.splitlines():
        if re.search(r"\berror\b", line):
            return line.strip()
    lines = [text.strip() for text in log.splitlines() if text.strip()]
    return lines[0] if lines else "no output"


def build(path: str | Path, *, ini: str | Path | None = None, raylib: str | Path | None = None,
          force: bool = False, progress: Any = None, spaces: str | Path | None = None) -> Built:  # fmt: skip
    """Compile the env folder ``path`` into a library registered as ``pufferlib:NAME`` (cached per
    hash of its sources, its ini and our headers; ``force`` builds again). One-line ConfigErrors for
    a folder that is not such an env, a missing macro, a missing ini or kwarg, a compile error.
    A PufferLib 3.0-format folder takes its spaces from ``spaces`` (appliance/pufferlib3.py)."""
    folder = Path(path)
    name, found = check_folder(folder)
    ini_path = Path(ini) if ini else find_ini(folder, name)
    if ini is not None and not Path(ini).is_file():
        raise ConfigError(f"--ini {ini}: no such file")
    sections = read_ini(ini_path)
    params, skipped = env_params(sections)
    format3 = None
    if pufferlib3.is_format3(_source_text(folder / "binding.c")):
        format3 = pufferlib3.read(pufferlib3.find(folder, name, spaces), sections.get("env") or {})
        computed = [(k, "int" if v.is_integer() else "float", v) for k, v in format3.kwargs.items()]
        params = [p for p in params if p[0] not in format3.kwargs] + computed
        skipped = [k for k in skipped if k not in format3.kwargs]
    elif spaces is not None:
        raise ConfigError(
            f"--spaces is for PufferLib 3.0-format folders; {folder}'s binding.c declares its own sizes"
        )
    fixed = sorted(format3.fixed | set(format3.kwargs)) if format3 else []
    if len(params) > 60:
        raise ConfigError(f"{ini_path}: {len(params)} [env] keys; the runtime takes at most 60 parameters")
    ray = find_raylib(raylib) if raylib_needed(folder) else None
    if raylib_needed(folder) and ray is None:
        raise ConfigError(
            f"{name} includes raylib.h: give raylib 5.5 (include/raylib.h, lib/libraylib.a) with --raylib DIR or "
            f"${RAYLIB_ENV}, e.g. `puffer-bench envs raylib` (unpacks it from the pufferlib 3.0.0 source "
            "distribution on the package index)"
        )
    cc = compiler()
    rng_field = bool(re.search(r"\b(unsigned\s+int|unsigned|uint32_t|int)\s+rng\s*;", _sources_text(folder)))
    extras = [BUILD_VERSION, cc, str(ray or ""), json.dumps(params), str(rng_field),
              json.dumps(format3.describe() if format3 else None)]  # fmt: skip
    digest = _source_hash(folder, ini_path, extras)
    out_dir = cache_root() / f"{name}-{digest}"
    library = out_dir / f"{name}.so"
    meta_path = out_dir / "meta.json"
    try:  # a damaged or foreign record is built again
        meta = _read_record(meta_path) if library.is_file() and not force else None
    except ValueError:
        meta = None
    if isinstance(meta, dict):
        built = Built(PREFIX + name, library, out_dir / "recipe.yaml", meta)
        _write_recipe(built, ini_path, sections)  # derived from the ini by this version's mapping
        _record_current(built)
        return built
    out_dir.mkdir(parents=True, exist_ok=True)
    command = _compile_command(cc, folder, name, ray, rng_field, format3)
    if progress:
        progress(f"compiling {name} ({folder})")
    _compile(command, params, library, out_dir, fixed, folder if format3 else None)
    meta = {"name": PREFIX + name, "folder": str(folder.resolve()), "ini": str(ini_path) if ini_path else None,
            "hash": digest, "raylib": str(ray) if ray else None, "params": [p[0] for p in params],
            "skipped_env_keys": skipped, "macros": {k: found[k] for k in (*REQUIRED_MACROS, "OBS_TYPE", "ACT_TYPE", "MY_ACTION_MASK") if k in found},
            "action_mask": "MY_ACTION_MASK" in found, "format": "3.0" if format3 else "4.0",
            **({"spaces": format3.describe()} if format3 else {})}  # fmt: skip
    built = Built(PREFIX + name, library, out_dir / "recipe.yaml", meta)
    agents, read = _probe_in_child(built)
    if "MY_VEC_INIT" in found:  # my_vec_init reads kwargs too (maze's map_size), which the probe cannot see
        read = [p[0] for p in params if p[0] in read or p[0] not in RESERVED_KWARGS]
    if set(read) != {p[0] for p in params}:
        # the env section holds what my_init reads: an ini key it never reads would be a knob that does
        # nothing (and may shadow a vector argument: dino's [env] num_envs)
        meta["unread_env_keys"] = [p[0] for p in params if p[0] not in read]
        params = [p for p in params if p[0] in read]
        meta["params"] = [p[0] for p in params]
        _compile(command, params, library, out_dir, fixed, folder if format3 else None)
        agents, read = _probe_in_child(built)
    clash = sorted(set(read) & RESERVED_KWARGS)
    if clash:
        raise ConfigError(f"{name}'s my_init reads kwarg(s) {', '.join(clash)}, which the vector's own arguments "
                          "take: rename them in its binding.c and ini")  # fmt: skip
    meta["agents_per_env"] = agents
    _write_recipe(built, ini_path, sections)
    atomic_write_text(meta_path, json.dumps(meta, indent=1))
    _record_current(built)
    return built


def _compile_command(cc: str, folder: Path, name: str, ray: Path | None, rng_field: bool,
                     format3: pufferlib3.Spaces | None = None) -> list[str]:  # fmt: skip
    """The compiler command, with BUILD standing for the folder of the generated parameter table,
    OUT for the library, and BINDING for the binding.c compiled (a 3.0-format one: a copy in the
    build folder, whose "../env_binding.h" is then ours, not the checkout's CPython one)."""
    compat = data_dir("envs") / "compat4"
    extra_c = [p for p in sorted(folder.glob("*.c")) if p.name != "binding.c" and _is_library_source(p)]
    return [cc, "-O2", "-std=gnu11", "-fPIC", "-shared", "-fvisibility=hidden", "-DNDEBUG", "-DPLATFORM_DESKTOP",
            "-Werror=implicit-function-declaration", "-include", str(compat / "prelude.h"), f"-I{compat}", "-IBUILD", f"-I{folder}",
            f'-DPUFFER4_NAME="{PREFIX}{name}"', *(["-DPUFFER4_RNG_FIELD"] if rng_field else []),
            *(["-DPUFFER4_RAYLIB"] if ray else []), *(format3.defines() if format3 else []),
            *_vendor_includes(folder), *([f"-I{ray / 'include'}"] if ray else []),
            "BINDING3" if format3 else str(folder / "binding.c"), *map(str, extra_c), "-o", "OUT",
            *([str(ray / "lib" / "libraylib.a")] if ray else []), "-lm", "-lpthread"]  # fmt: skip


def _compile(command: list[str], params: list[tuple[str, str, float]], library: Path, out_dir: Path,
             fixed: list[str] | None = None, format3_folder: Path | None = None) -> None:  # fmt: skip
    """Compile into a temporary folder, then move the library into place (a reader never sees half).
    ``format3_folder``: a PufferLib 3.0-format env's folder, whose binding.c is compiled as a copy."""
    work = Path(tempfile.mkdtemp(prefix=f".{library.stem}-", dir=out_dir))
    try:
        (work / "compat4_params.h").write_text(_params_header(params, fixed or []))
        binding3 = work / "ocean" / library.stem / "binding.c"
        if format3_folder is not None:
            binding3.parent.mkdir(parents=True)
            binding3.write_text(_source_text(format3_folder / "binding.c"))
            header = data_dir("envs") / "compat3" / "env_binding.h"
            (work / "ocean" / "env_binding.h").write_text(f'#include "{header}"\n')
        cmd = [{"-IBUILD": f"-I{work}", "OUT": str(work / library.name), "BINDING3": str(binding3)}.get(c, c)
               for c in command]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=600)
        log_path = out_dir / "build.log"
        atomic_write_text(log_path, " ".join(cmd) + "\n\n" + proc.stdout + proc.stderr)
        if proc.returncode != 0:
            raise ConfigError(
                f"{library.stem} failed to compile: {first_error(proc.stderr)} (full log: {log_path})"
            )
        os.replace(work / library.name, library)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _probe_in_child(built: Built) -> tuple[int, list[str]]:
    """Load the library and run its my_init once in a process of its own (an env that aborts or
    crashes there ends that process, not the command), with the kwarg check; its agents per env."""
    import signal
    import sys

    code = (
        "import json, sys; from appliance import pufferlib_envs as p; "
        "b = p.Built(sys.argv[1], p.Path(sys.argv[2]), p.Path(sys.argv[3]), json.loads(sys.argv[4])); "
        "name = p.load_library(b); print('AGENTS', p._describe(name)['agents_per_env']); "
        "print('READ', json.dumps(p.kwargs_read(b)), flush=True); print('PAST', *p.bounds(b))"
    )
    args = [
        sys.executable,
        "-c",
        code,
        built.name,
        str(built.library),
        str(built.recipe),
        json.dumps(built.meta),
    ]
    try:
        proc = subprocess.run(args, capture_output=True, text=True, errors="replace", timeout=120)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"{built.name}: my_init did not return within 120 s") from None
    found = re.search(r"^AGENTS (\d+)$", proc.stdout, re.M)
    read = re.search(r"^READ (.*)$", proc.stdout, re.M)
    past = re.search(r"^PAST (-?\d+) (\d)$", proc.stdout, re.M)
    if found and read and not past:  # my_init ran; stepping it crashed
        how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
        raise ConfigError(f"{built.name} crashed ({how}) in its first {BOUNDS_STEPS} steps of one env with random "
                          f"actions{_last_words(proc)}")  # fmt: skip
    if proc.returncode == 0 and found and read and past:
        if int(past.group(1)) > 0:
            raise ConfigError(_overrun(built, int(found.group(1)), int(past.group(1)), int(past.group(2))))
        return int(found.group(1)), json.loads(read.group(1))
    said = [line.strip() for line in (proc.stdout + "\n" + proc.stderr).splitlines() if line.strip()]
    if proc.returncode < 0:
        try:
            how = signal.Signals(-proc.returncode).name
        except ValueError:
            how = f"signal {-proc.returncode}"
        last = f"; its last words: {said[-1][:200]}" if said else ""
        hint = data_hint(Path(built.meta.get("folder") or "."))
        raise ConfigError(f"{built.name} crashed ({how}) in my_init with its ini's kwargs{last}{hint}")
    last = said[-1] if said else "no output"
    error = re.match(r"^(?:\w+\.)*ConfigError: (.*)$", last)
    raise ConfigError(error.group(1) if error else f"{built.name}: {last[:300]}")


BOUNDS_STEPS = 256


def bounds(built: Built) -> tuple[int, int]:
    """The loaded library's own check that one env keeps to its rows over BOUNDS_STEPS random steps
    (envs/compat4/vecenv.h, ocean_plugin_bounds): (bytes written past the end, which buffer)."""
    import ctypes

    lib = ctypes.CDLL(str(built.library))
    which = ctypes.c_int(0)
    lib.ocean_plugin_bounds.restype = ctypes.c_long
    past = lib.ocean_plugin_bounds(ctypes.c_int(BOUNDS_STEPS), ctypes.byref(which))
    return int(past), int(which.value)


def _last_words(proc: subprocess.CompletedProcess) -> str:
    said = [line.strip() for line in (proc.stdout + "\n" + proc.stderr).splitlines() if line.strip()]
    said = [line for line in said if not re.match(r"^(AGENTS|READ) ", line)]
    return f"; its last words: {said[-1][:200]}" if said else ""


def _overrun(built: Built, agents: int, past: int, which: int) -> str:
    """One line for an env that writes past its rows: what it was declared to hold and by how much
    it wrote over, so the user can fix the size that is wrong."""
    macros_ = built.meta.get("macros") or {}
    sp = built.meta.get("spaces")
    if which in (0, 3):
        declared = (f"its spaces file's observations = {sp['obs_size']} ({sp['file']})" if isinstance(sp, dict)
                    else f"its OBS_SIZE {macros_.get('OBS_SIZE', '?')}")  # fmt: skip
        what = f"observation rows ({declared}, {agents} agent(s) an env)"
    elif which == 4:
        what = f"action mask rows (its MY_ACTION_MASK {macros_.get('MY_ACTION_MASK', '?')}, {agents} agent(s) an env)"
    else:
        what = f"{('rewards', 'terminals')[which - 1]} ({agents} agent(s) an env, as declared)"
    return (f"{built.name} writes {past:,} bytes past the end of its {what} in {BOUNDS_STEPS} random steps of "
            "one env: a size it declares is smaller than what it writes, which would corrupt the vector's "
            "memory; fix the declared size (or the ini's kwargs it follows from)")  # fmt: skip


def data_hint(folder: Path) -> str:
    """Where an env that crashed may have looked for its data: the format's envs open files by paths
    relative to the checkout's root (``resources/NAME/...``), the folder PufferLib runs them from. Says
    to run from there when the checkout has the folder the working folder lacks, or that it is missing."""
    text = "\n".join(_source_text(p) for p in sorted(folder.glob("*.[ch]")))
    tops = sorted({m.group(1) for m in re.finditer(r'"((?:resources|\w+_data))/[^"\n]*"', text)})
    root = folder.resolve().parent.parent
    for top in tops:
        if (Path.cwd() / top).exists():
            continue
        if (root / top).is_dir():
            return f" (it opens {top}/... relative to the working folder: run it from {root})"
        return f" (it opens {top}/... relative to the working folder, and neither here nor {root} has it)"
    return ""


def _write_recipe(built: Built, ini_path: Path | None, sections: dict[str, dict[str, Any]]) -> None:
    """The env's config layer from its ini (``recipe.yaml`` beside the library)."""
    import yaml

    layer = recipe(sections, int(built.meta.get("agents_per_env", 0)))
    head = f"# From {ini_path} by `puffer-bench envs build` (appliance/pufferlib_envs.py: recipe()).\n"
    atomic_write_text(built.recipe, head + (yaml.safe_dump(layer, sort_keys=False) if layer else "{}\n"))


def _sources_text(folder: Path) -> str:
    return "\n".join(_source_text(p) for p in sorted(folder.glob("*.h")))


def _is_library_source(path: Path) -> bool:
    """A .c beside binding.c that is part of the env (not a demo program with its own main)."""
    return not re.search(r"\bint\s+main\s*\(", _source_text(path))


def _vendor_includes(folder: Path) -> list[str]:
    """The snapshot's vendor/ folder (box2d and other libraries some envs include), where it exists."""
    vendor = folder.resolve().parent.parent / "vendor"
    return [f"-I{vendor}"] if vendor.is_dir() else []


def _record_current(built: Built) -> None:
    """Name -> newest build, so ``pufferlib:NAME`` finds it (one small JSON per name, atomic)."""
    atomic_write_text(cache_root() / "current" / f"{built.name[len(PREFIX):]}.json",
                      json.dumps({"library": str(built.library), "recipe": str(built.recipe), **built.meta}))  # fmt: skip


# ---------------------------------------------------------------------- load


def current(name: str) -> Built | None:
    """The newest build of ``pufferlib:NAME`` (``name`` with or without the prefix), or None."""
    short = name[len(PREFIX) :] if name.startswith(PREFIX) else name
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", short):
        return None
    path = cache_root() / "current" / f"{short}.json"
    try:
        data = _read_record(path)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("library"), str):
        return None
    library = Path(data["library"])
    if not isinstance(data.get("recipe", ""), str) or not library.is_file():
        return None
    return Built(PREFIX + short, library, Path(data.get("recipe", "")), data)


def load_library(built: Built) -> str:
    """Register ``built`` in ``appliance._ocean`` (once per process) and check that its my_init reads
    only kwargs its ini gives; returns its name."""
    from appliance import _ocean

    try:
        name = _ocean.load_plugin(str(built.library))
        missing, _ = _ocean.plugin_probe(str(built.library), name)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if missing:
        where = built.meta.get("ini") or "no ini was found"
        raise ConfigError(f"{name}'s my_init reads kwarg {missing!r}, which its ini's [env] lacks ({where})")
    return name


def kwargs_read(built: Built) -> list[str]:
    """The parameters the loaded env's my_init reads with its defaults."""
    from appliance import _ocean

    return list(_ocean.plugin_probe(str(built.library), built.name)[1])


def load(name: str) -> str:
    """Load ``pufferlib:NAME`` from its newest build; a one-line error names `envs build` otherwise.
    A name this process has registered already is that env (its library stays loaded)."""
    from appliance import _ocean

    full = name if name.startswith(PREFIX) else PREFIX + name
    if full in _ocean.names():
        return full
    built = current(name)
    if built is None:
        short = name[len(PREFIX) :] if name.startswith(PREFIX) else name
        raise ConfigError(
            f"{PREFIX}{short} is not built: run `puffer-bench envs build PATH/TO/ocean/{short}` first "
            f"(or give the folder itself as the env)"
        )
    try:
        return load_library(built)
    except ConfigError as e:
        folder = Path(built.meta.get("folder") or "")
        if "built against other runtime headers" not in str(e) or not is_env_folder(folder):
            raise
    # an upgrade of puffer-bench changed the runtime's tables: the env's folder is built again
    import sys

    print(
        f"{built.name} was built for an older puffer-bench: building it again from {folder}", file=sys.stderr
    )
    spaces = (
        (built.meta.get("spaces") or {}).get("file") if isinstance(built.meta.get("spaces"), dict) else None
    )
    return load_library(build(folder, ini=built.meta.get("ini"), force=True, spaces=spaces))


def _describe(name: str) -> dict[str, Any]:
    from appliance import _ocean

    return _ocean.describe(name, None)


def built_envs() -> list[dict[str, Any]]:
    """Every env with a build in the cache (``envs list``)."""
    out = []
    for path in sorted((cache_root() / "current").glob("*.json")):
        try:
            record = _read_record(path)
        except ValueError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


# PufferLib 3.0.0's source distribution ships raylib 5.5 (headers and a static library for linux
# amd64): the release archive PufferLib's build.sh downloads, under the same folder name
RAYLIB_SDIST = ("pufferlib", "3.0.0", "7df3a3e3f5f894d78d2a1f5374097890aec01473183e748abefe4f3faa10eaa9")
RAYLIB_FOLDER = "raylib-5.5_linux_amd64"


def fetch_raylib(progress: Any = None) -> Path:
    """raylib 5.5 unpacked into ``cache_root()/raylib`` from the pufferlib 3.0.0 sdist, which pip
    downloads from the configured package index (sha256-checked). Returns the folder."""
    import sys
    import tarfile

    dest = cache_root() / "raylib"
    if (dest / "lib" / "libraylib.a").is_file():
        return dest
    project, version, sha = RAYLIB_SDIST
    with tempfile.TemporaryDirectory() as tmp:
        if progress:
            progress(f"downloading the {project} {version} source distribution (it ships {RAYLIB_FOLDER})")
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
               "--no-build-isolation", f"{project}=={version}", "-d", tmp]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=900)
        archives = list(Path(tmp).glob(f"{project}-{version}.tar.gz"))
        if proc.returncode != 0 or not archives:
            raise ConfigError(f"could not download {project}=={version}: {first_error(proc.stderr)}")
        data = archives[0].read_bytes()
        if hashlib.sha256(data).hexdigest() != sha:
            raise ConfigError(
                f"{archives[0].name} does not have the sha256 it was published with: not unpacked"
            )
        prefix = f"{project}-{version}/{RAYLIB_FOLDER}/"
        staging = Path(tempfile.mkdtemp(prefix=".raylib-", dir=_made(cache_root())))
        try:
            with tarfile.open(archives[0]) as tar:
                members = [m for m in tar.getmembers() if m.name.startswith(prefix) and m.isfile()]
                if not members:
                    raise ConfigError(f"{archives[0].name} ships no {RAYLIB_FOLDER}/")
                for m in members:
                    m.name = m.name[len(prefix) :]
                tar.extractall(staging, members=members, filter="data")
            if dest.exists():
                shutil.rmtree(dest)
            os.replace(staging, dest)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return dest


def _made(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


# ---------------------------------------------------------------------- a display for c_render

_display: dict[str, Any] = {}


def render_display(warn: Any = None) -> bool:
    """Make the env's own picture possible in this process: its ``c_render`` draws through raylib into
    a window, which needs a display. ``$DISPLAY`` when it names one; else a private Xvfb (X's virtual
    framebuffer) started for this process, which dies with it (``lifeline``) and is ended at exit.
    Sets ``PUFFER4_RENDER=1``, which the compatibility header reads before it calls ``c_render``.
    Without either, frames stay black and ``warn`` is told once how to get a display."""
    if "ready" in _display:
        return _display["ready"]
    ready = _display_usable(os.environ.get("DISPLAY", "")) or _start_xvfb()
    if ready:
        os.environ["PUFFER4_RENDER"] = "1"
    elif warn:
        warn("no display to draw a PufferLib-format env on: its frames are black (install Xvfb, e.g. "
             "`apt install xvfb libgl1-mesa-dri`, or set DISPLAY)")  # fmt: skip
    _display["ready"] = ready
    return ready


def _display_usable(display: str) -> bool:
    """A local display ``:N`` whose X socket exists, or a remote one (trusted as given)."""
    if not display:
        return False
    host, _, rest = display.rpartition(":")
    if host and host != "unix":
        return True
    number = rest.split(".")[0]
    return number.isdigit() and Path(f"/tmp/.X11-unix/X{number}").exists()


def _start_xvfb() -> bool:
    import atexit
    import select

    from appliance.lifeline import dies_with_parent

    xvfb = shutil.which("Xvfb")
    if not xvfb:
        return False
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(
            [xvfb, "-displayfd", str(write_fd), "-screen", "0", "1280x1024x24", "-nolisten", "tcp"],
            pass_fds=(write_fd,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, preexec_fn=dies_with_parent(),
        )  # fmt: skip
    except OSError:
        os.close(read_fd)
        os.close(write_fd)
        return False
    os.close(write_fd)
    number = b""
    try:
        while not number.endswith(b"\n") and select.select([read_fd], [], [], 10.0)[0]:
            chunk = os.read(read_fd, 16)
            if not chunk:
                break
            number += chunk
    finally:
        os.close(read_fd)
    if not number.strip().isdigit():
        proc.kill()
        proc.wait()
        return False
    atexit.register(_stop_xvfb, proc)
    _display["xvfb"] = proc
    os.environ["DISPLAY"] = f":{number.decode().strip()}"
    return True


def _stop_xvfb(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
