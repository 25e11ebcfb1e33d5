"""Self-tuning where a run starts (issue 60): what ``train`` may try on a machine it has not tuned for
yet, the rule that picks among what it measured, and where the choice is kept.

The timing itself needs the trainer and the statistics above this layer; it lives in
:mod:`appliance.tune.selftune`. This module holds what does not measure:

* what may be tuned (:data:`TUNED_KEYS`): the native backend's env threads (``vec.num_threads``), the
  multiprocessing backend's workers (``vec.num_workers``) and the rollout engine's buffers
  (``train.buffers``). None of them changes what is learned per agent-step: the same envs step the
  same actions (buffers 1, 2 and 4 give the same actions, rewards and observations,
  ``tests/test_engine.py``). ``vec.num_envs`` and the minibatch are the recipe and are never tuned; a
  key the user set (``--config``, the command line, a resumed run) is never tuned either;
* the candidates (:func:`axes`): the profile's own settings first, then each key's other values
  within the usable cores, one key at a time;
* the rule (:func:`keep_candidate`): a candidate replaces the profile's settings only where its
  interleaved ratio's interval lies wholly above 1 and no sample was taken on a busy machine, so the
  tuned settings are never slower than the profile's at that threshold; a tuning that found the
  machine busy is timed again by the next run, up to :data:`BUSY_TRIES` in a row (:func:`busy_tries`);
* the store (:func:`load`, :func:`save`): one JSON file per machine fingerprint (:func:`machine`)
  under the data folder (:func:`data_dir`), an entry per recipe (:func:`recipe_key`), written
  atomically; a file that cannot be read is one warning and the run tunes again.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.config.layers import COMMAND_LINE, CONFIG_FILE, RESUMED
from appliance.errors import ConfigError
from appliance.sysinfo.cpu import cpu_kind

if TYPE_CHECKING:
    from appliance.config.build import Config

MODES = ("off", "on", "redo")
ENV_VAR = "PUFFER_AUTOTUNE"  # off | on | redo when --autotune is not given (the test suite sets off)
DATA_ENV = "PUFFER_BENCH_DATA"  # the data folder (default: $XDG_DATA_HOME/puffer-bench)
BUDGET_S = 60.0  # the whole tuning, builds included, stays near this
SCHEMA = "puffer-bench/autotune/1"
TUNED_KEYS = (("vec", "num_threads"), ("vec", "num_workers"), ("train", "buffers"))
USER_LAYERS = (CONFIG_FILE, COMMAND_LINE, RESUMED)  # a key set there is the user's
MAX_BUFFERS = 4
# train keys that change the speed of a step or an update (the rest, learning rates and the like, do not)
SPEED_KEYS = (
    "device",
    "precision",
    "bptt_horizon",
    "batch_size",
    "minibatch_size",
    "max_minibatch_size",
    "update_epochs",
    "optimizer",
    "fused_optimizer",
    "compile",
    "engine",
    "graphs",
    "cpu_offload",
)


def mode(option: str | None, environ: Mapping[str, str] | None = None) -> str:
    """``--autotune`` if given, else ``$PUFFER_AUTOTUNE``, else ``on``; anything else is one line."""
    environ = os.environ if environ is None else environ
    value = option if option is not None else environ.get(ENV_VAR, "on")
    text = value.strip().lower()
    if text not in MODES:
        where = "--autotune" if option is not None else ENV_VAR
        raise ConfigError(f"{where} {value!r}: expected one of {', '.join(MODES)}")
    return text


def data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The appliance's data folder: ``$PUFFER_BENCH_DATA``, else ``$XDG_DATA_HOME/puffer-bench``, else
    ``~/.local/share/puffer-bench``."""
    environ = os.environ if environ is None else environ
    if environ.get(DATA_ENV):
        return Path(environ[DATA_ENV])
    base = environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "puffer-bench"


def _cpuinfo(path: Path = Path("/proc/cpuinfo")) -> dict[str, str]:
    """The first processor's block of /proc/cpuinfo (cheap: py-cpuinfo takes a second and more)."""
    out: dict[str, str] = {}
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return out
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        out[key.strip()] = value.strip()
    return out


def machine(cores: int, cfg: Config) -> tuple[str, dict[str, Any]]:
    """The tuning's machine fingerprint: the CPU model and stepping, the usable cores, the RAM, the
    hardware profile and device, and the torch and puffer-bench versions (not the boot id: a reboot
    keeps the tuning). Returns its 12-hex key and the facts it came from."""
    import psutil

    import appliance

    info = _cpuinfo()
    try:
        import torch

        torch_version = str(torch.__version__)
    except ImportError:  # pragma: no cover - torch is a dependency
        torch_version = None
    facts = {
        "cpu": info.get("model name") or platform.processor() or platform.machine(),
        "cpu_id": " ".join(info.get(k, "?") for k in ("vendor_id", "cpu family", "model", "stepping")),
        "usable_cores": cores,
        "ram_bytes": psutil.virtual_memory().total,
        "cpu_kind": cpu_kind(),  # an emulated kind (PUFFER_CPU_KIND) is tuned apart from the CPU's own
        "profile": cfg.profile,
        "device": str(cfg.train.device),
        "torch": torch_version,
        "puffer_bench": appliance.__version__,
    }
    key = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:12]
    return key, facts


def recipe_key(cfg: Config) -> str:
    """What a tuning holds for: the env, its parameters, the policy, the vector but for the tuned keys,
    and the train keys that change speed (:data:`SPEED_KEYS`); a new seed or learning rate keeps it."""
    tuned = {f"{s}.{k}" for s, k in TUNED_KEYS}
    vec = {k: v for k, v in cfg.data["vec"].items() if f"vec.{k}" not in tuned}
    train = {k: cfg.data["train"].get(k) for k in SPEED_KEYS}
    what = {
        "env": cfg.env_name,
        "env_params": cfg.data.get("env"),
        "policy": cfg.data.get("policy"),
        "vec": vec,
        "train": train,
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]


def tunable(cfg: Config) -> list[tuple[str, str]]:
    """The keys this run may tune: those of its backend that the user did not set."""
    backend = cfg.data["vec"]["backend"]
    keys: list[tuple[str, str]] = []
    if backend == "native":
        keys.append(("vec", "num_threads"))
        if cfg.data["train"].get("engine") != "off":
            keys.append(("train", "buffers"))
    elif backend == "multiprocessing":
        keys.append(("vec", "num_workers"))
    return [k for k in keys if not cfg.origin(*k).startswith(USER_LAYERS)]


def axes(cfg: Config, cores: int) -> list[tuple[str, list[int]]]:
    """Each key this run may tune (``vec.num_threads``) with the values worth timing, those equal to
    the profile's left out: env threads 1, 2, 4, ... up to the usable cores; workers that divide the
    envs within the cores; 1 or 2 buffers that divide the envs (up to 4 on a GPU: on a CPU the
    buffers' policy steps share the cores with the envs). Screened one key at a time, in this order
    (:func:`appliance.tune.selftune.tune`), so the count grows with the sum of the values, not
    their product. Empty: nothing to tune."""
    num_envs = int(cfg.data["vec"]["num_envs"])
    out: list[tuple[str, list[int]]] = []
    for key in tunable(cfg):
        if key == ("vec", "num_threads"):
            values = sorted({n for n in (1, 2, 4, 8, 16, 32, 64, cores) if n <= min(cores, num_envs)})
        elif key == ("vec", "num_workers"):
            values = [n for n in range(1, min(cores, num_envs) + 1) if num_envs % n == 0]
        else:
            most = MAX_BUFFERS if str(cfg.data["train"]["device"]).startswith("cuda") else 2
            values = [b for b in (1, 2, 4) if b <= most and num_envs % b == 0]
        values = [v for v in values if v != cfg.data[key[0]][key[1]]]
        if values:
            out.append((f"{key[0]}.{key[1]}", values))
    return out


def describe(choice: Mapping[str, Any]) -> str:
    """``vec.num_threads 2, train.buffers 2``, or ``the profile's settings``."""
    return ", ".join(f"{k} {v}" for k, v in choice.items()) or "the profile's settings"


def keep_candidate(ratio: float, interval: list[float] | None, busy: bool) -> bool:
    """The rule: a candidate's settings replace the profile's only where its speed over the profile's,
    measured in turns, has an interval wholly above 1 and none of those samples was taken busy."""
    return not busy and interval is not None and interval[0] > 1.0 and ratio > 1.0


BUSY_TRIES = 2  # tunings in a row that found the machine busy before the last one is reused


def busy_tries(entry: Mapping[str, Any] | None) -> int:
    """How many tunings in a row found the machine busy, for a kept ``entry`` (0: the last one was
    quiet, or there is none). A busy tuning keeps the profile's settings without having compared
    them, so the next run times again, up to :data:`BUSY_TRIES` tunings in a row."""
    measured = entry.get("measured") if entry is not None else None
    if not isinstance(measured, dict) or not measured.get("busy"):
        return 0
    tries = entry.get("busy_tries", 1)
    return tries if type(tries) is int and tries >= 1 else 1


def apply(cfg: Config, choice: Mapping[str, Any], origin: str) -> None:
    """Set the chosen values in ``cfg`` (their history says ``origin``)."""
    for dotted, value in choice.items():
        section, key = dotted.split(".", 1)
        cfg.data[section][key] = value
        cfg.history.setdefault((section, key), []).append((origin, value))


def store_path(key: str, environ: Mapping[str, str] | None = None) -> Path:
    return data_dir(environ) / "autotune" / f"{key}.json"


def load(path: Path) -> tuple[dict[str, Any], str | None]:
    """The store at ``path`` (an empty one where there is none) and a one-line warning where the file
    could not be read or is not a tuning store (it is then tuned again and written over)."""
    from appliance.report_io import read_json

    empty: dict[str, Any] = {"schema": SCHEMA, "entries": {}}
    if not path.exists() and not path.is_symlink():
        return empty, None
    try:
        data = read_json(path, "the tuning store", ConfigError, max_bytes=2**20)
    except ConfigError as e:
        return empty, f"{e}; tuning again"
    entries = data.get("entries") if isinstance(data, dict) and data.get("schema") == SCHEMA else None
    if not isinstance(entries, dict) or not all(_valid(e) for e in entries.values()):
        return empty, f"the tuning store {path} is not one this version wrote; tuning again"
    return data, None


def _valid(entry: Any) -> bool:
    if not isinstance(entry, dict) or not isinstance(entry.get("chosen"), dict):
        return False
    if not isinstance(entry.get("when"), str):
        return False
    allowed = {f"{s}.{k}" for s, k in TUNED_KEYS}
    return all(k in allowed and type(v) is int and 1 <= v <= 4096 for k, v in entry["chosen"].items())


def save(
    path: Path, store: dict[str, Any], facts: dict[str, Any], recipe: str, entry: dict[str, Any]
) -> str | None:
    """Add ``entry`` under ``recipe`` and write the store atomically (a temp file renamed over it,
    never through a link); a failure is returned as a one-line warning, not raised: the run goes on."""
    from appliance.errors import ApplianceError
    from appliance.report_io import write_bytes_atomic
    from appliance.safe_files import refuse_link

    store = {"schema": SCHEMA, "machine": facts, "entries": {**store.get("entries", {}), recipe: entry}}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        refuse_link(path, "the tuning store")
        write_bytes_atomic(path, (json.dumps(store, indent=1, sort_keys=True) + "\n").encode())
    except (OSError, ApplianceError) as e:
        return f"could not keep the tuning in {path}: {e}; the next run tunes again"
    return None


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
