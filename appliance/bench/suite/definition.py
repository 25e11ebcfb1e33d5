"""Benchmark suites: what ``puffer-bench run`` measures, read from ``bench/suites/<name>.yaml``.

A suite names the measurements; a hardware profile (``bench/profiles``) sets the sizes; the
:class:`~appliance.bench.suite.steps.SuiteRunner` plans and runs them. This module reads and checks
suite definitions. Suite keys::

    name, description
    seconds: 1.0                         # timed seconds per measurement
    cv: 0.03                             # repeats agree within this CV (the noise guard names others)
    threshold: 0.05                      # selftest: a change beyond this between two runs is a difference
    order: rounds                        # env and vector samples: the first of each, then the second of
                                         # each, ... (default); steps: each figure's samples back to back
    probe:   {envs: [breakout], runs: 5, budget_s: 10}  # hardware probe; its envs get a roofline;
                                         # budget_s: seconds per probe section (none: the full detail)
    env_sps: {envs: [...], threads: profile | [1, 2, ...]}
    vector_sps: [{env, backends: [native|serial|multiprocessing|ray|gymnasium-sync|gymnasium-async],
                  num_envs}]
    train_sps: {envs: [...], seconds: 8, variants: {label: {section.key: value}}}
    time_to_score: [{env, metric, target, max_timesteps, repeats, min_epochs, overrides: {section.key: value},
                     label, requires: [module, ...]}]  # requires: skipped (and said so) where one is not
                                         # installed; label: the item's name in the report's metrics
                                         # (time_to_score/<env>/<label>/...), needed where two items
                                         # share an env, metric and target
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from appliance.errors import ConfigError
from appliance.paths import data_dir

KEYS = {"name", "description", "seconds", "probe", "env_sps", "vector_sps", "train_sps", "time_to_score"}
KEYS.add("cv")  # the run-to-run spread the suite promises; the noise guard names metrics beyond it
KEYS.add("threshold")  # the relative change selftest counts as a difference (default 5 %, compare's)
KEYS.add("gate")  # the speed gate of CPU-bound samples (noise.SpeedGate): false, or GATE_LIMITS
KEYS.add("order")  # env and vector samples: "rounds" (default) or "steps" (SuiteRunner._plan_sampled)
KEYS.add("classes")  # workload class -> the Ocean env that stands for it (the report's "Workload classes")
ORDERS = ("rounds", "steps")
GATE_LIMITS = {"retakes", "patience_s", "budget_s"}
VECTOR_BACKENDS = ("native", "serial", "multiprocessing", "ray", "gymnasium-sync", "gymnasium-async")


def suite_dir() -> Path:
    return data_dir("bench") / "suites"


def suite_names() -> list[str]:
    return sorted(p.stem for p in suite_dir().glob("*.yaml"))


# ---------------------------------------------------------------------- validation


def _fail(where: str, message: str) -> ConfigError:
    return ConfigError(f"{where}: {message}" if where.startswith("-") else f"suite {where}: {message}")


def score_parts(item: dict[str, Any]) -> tuple[str, ...]:
    """What names a ``time_to_score`` item's metrics below ``time_to_score/``: its env, its label where
    it has one (as ``train_sps``'s variants), then ``metric>=target``; all but the last, joined by
    ``/``, name its learning curves."""
    label = item.get("label")
    return (str(item["env"]), *([label] if label else []), f"{item['metric']}>={item['target']}")


def missing_modules(names: list[str]) -> list[str]:
    """The modules of ``names`` that are not installed (a ``time_to_score`` item's ``requires``)."""
    import importlib.util

    missing = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def _env_list(where: str, value: Any, gymnasium_ok: bool = False) -> list[str]:
    from appliance import ocean
    from appliance.config import _is_gymnasium_id, is_import_path

    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(where, f"must be a list of env names, got {value!r}")
    known = ocean.names()
    for v in value:
        if v not in known and not (gymnasium_ok and (is_import_path(v) or _is_gymnasium_id(v))):
            raise _fail(where, f"unknown env {v!r}; Ocean envs: {', '.join(known)}")
    return value


# Upper bounds of the counts and durations a suite sets (suites are shared: a huge value would run
# forever or allocate without end). They match the config's ranges where one exists.
MOST_SECONDS = 1e6  # bench.seconds
MOST_RUNS = 1000  # bench.repeats; a report holds at most 1,000 samples a metric
MOST_THREADS = 4096  # bench.threads
MOST_ENVS = 2**31 - 1  # vec.num_envs
MOST_STEPS = 2**63 - 1


def _positive(where: str, value: Any, kind: type = float, most: float = MOST_SECONDS) -> Any:
    """A positive int or finite float up to ``most``; anything else names the key."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    if not ok or (kind is int and int(value) != value):
        raise _fail(where, f"must be a positive {'integer' if kind is int else 'number'}, got {value!r}")
    if value > most:
        raise _fail(where, f"must be at most {most:,g}, got {value!r}")
    return kind(value)


def _overrides(where: str, value: Any) -> None:
    """``{section.key: value}`` overrides, checked as the config checks them (names, types, ranges)."""
    from appliance.config import check_layer

    if not isinstance(value, dict) or not all(isinstance(k, str) and "." in k for k in value):
        raise _fail(where, "must be a mapping of section.key: value")
    layer: dict[str, dict[str, Any]] = {}
    for dotted, v in value.items():
        section, _, key = dotted.partition(".")
        if section != "env":  # env parameters are the env's own, checked when its config resolves
            layer.setdefault(section, {})[key] = v
    check_layer(layer, f"suite {where}")


def _section(data: dict[str, Any], key: str, allowed: set[str]) -> dict[str, Any] | None:
    section = data.get(key)
    if section is None:
        return None
    if not isinstance(section, dict):
        raise _fail(key, f"must be a mapping, got {type(section).__name__}")
    unknown = set(section) - allowed
    if unknown:
        raise _fail(key, f"unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}")
    return section


def validate(data: Any, source: str = "suite") -> dict[str, Any]:
    """Check a suite definition; raise ConfigError naming the key and the rule."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a suite is a YAML mapping")
    from appliance.bench.metrics import produced

    keys = KEYS | {f.suite_key for f in produced()}  # a registered family's own suite key
    unknown = set(data) - keys
    if unknown:
        raise ConfigError(f"{source}: unknown keys {sorted(unknown)}; allowed: {sorted(keys)}")
    for family in produced():
        items = data.get(family.suite_key, [])
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise _fail(family.suite_key, f"must be a list of mappings, got {items!r}")
    if not isinstance(data.get("name"), str):
        raise ConfigError(f"{source}: 'name' (a string) is required")
    if not isinstance(data.get("description", ""), str):
        raise ConfigError(f"{source}: 'description' must be a string")
    _positive("seconds", data.get("seconds", 1.0))
    if "cv" in data and not 0 < _positive("cv", data["cv"]) < 1:  # stated run-to-run spread (noise guard)
        raise _fail("cv", f"must be a fraction below 1 (0.03 = 3%), got {data['cv']!r}")
    if "threshold" in data and not 0 < _positive("threshold", data["threshold"]) < 1:
        raise _fail("threshold", f"must be a fraction below 1 (0.05 = 5%), got {data['threshold']!r}")
    if data.get("order", "rounds") not in ORDERS:
        raise _fail("order", f"must be one of {list(ORDERS)}, got {data['order']!r}")
    gate = data.get("gate", True)
    if gate is not True and gate is not False:
        gate = _section(data, "gate", GATE_LIMITS) or {}
        for key, value in gate.items():
            if key == "retakes":
                if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MOST_RUNS:
                    raise _fail("gate.retakes", f"must be an integer >= 0 and <= {MOST_RUNS}, got {value!r}")
            else:
                _positive(f"gate.{key}", value)
    if (probe := _section(data, "probe", {"envs", "runs", "budget_s"})) is not None:
        _env_list("probe.envs", probe.get("envs", []))
        _positive("probe.runs", probe.get("runs", 5), int, MOST_RUNS)
        if "budget_s" in probe:
            _positive("probe.budget_s", probe["budget_s"])
    if (env_sps := _section(data, "env_sps", {"envs", "threads"})) is not None:
        _env_list("env_sps.envs", env_sps.get("envs", []))
        threads = env_sps.get("threads", "profile")
        if threads != "profile":
            if not isinstance(threads, list) or not threads:
                raise _fail(
                    "env_sps.threads", f"must be 'profile' or a list of thread counts, got {threads!r}"
                )
            for t in threads:
                _positive("env_sps.threads", t, int, MOST_THREADS)
    vector_sps = data.get("vector_sps", [])
    if not isinstance(vector_sps, list):
        raise _fail("vector_sps", "must be a list of {env, backends, num_envs}")
    for i, item in enumerate(vector_sps):
        where = f"vector_sps[{i}]"
        if not isinstance(item, dict) or set(item) - {"env", "backends", "num_envs"} or "env" not in item:
            raise _fail(where, f"must be a mapping with env, backends and optional num_envs, got {item!r}")
        _env_list(where + ".env", [item["env"]], gymnasium_ok=True)
        backends = item.get("backends")
        if not isinstance(backends, list) or not backends or set(backends) - set(VECTOR_BACKENDS):
            raise _fail(
                where + ".backends", f"must list backends from {', '.join(VECTOR_BACKENDS)}, got {backends!r}"
            )
        if "num_envs" in item:
            _positive(where + ".num_envs", item["num_envs"], int, MOST_ENVS)
    if (train := _section(data, "train_sps", {"envs", "seconds", "variants"})) is not None:
        _env_list("train_sps.envs", train.get("envs", []), gymnasium_ok=True)
        _positive("train_sps.seconds", train.get("seconds", 8), float)
        variants = train.get("variants", {})
        if not isinstance(variants, dict) or not all(
            isinstance(k, str) and k and isinstance(v, dict) for k, v in variants.items()
        ):
            raise _fail("train_sps.variants", "must map a label to {section.key: value} overrides")
        for label, overrides in variants.items():
            _overrides(f"train_sps.variants.{label}", overrides)
    _classes(data)
    scores = data.get("time_to_score", [])
    if not isinstance(scores, list):
        raise _fail("time_to_score", "must be a list")
    named: dict[tuple[str, ...], int] = {}
    for i, item in enumerate(scores):
        where = f"time_to_score[{i}]"
        need = {"env", "metric", "target", "max_timesteps"}
        optional = {"repeats", "min_epochs", "overrides", "label", "requires"}
        if not isinstance(item, dict) or not need <= set(item) or set(item) - need - optional:
            raise _fail(
                where,
                f"needs {sorted(need)} (and optional repeats, min_epochs, overrides, label, requires), got {item!r}",
            )
        label = item.get("label")
        if label is not None and (not isinstance(label, str) or not label.strip() or "/" in label):
            raise _fail(where + ".label", f"must be a non-empty name without '/', got {label!r}")
        requires = item.get("requires", [])
        if not isinstance(requires, list) or not all(isinstance(m, str) and m for m in requires):
            raise _fail(where + ".requires", f"must be a list of module names, got {requires!r}")
        key = score_parts(item)  # an item named as an earlier one would replace its metrics
        if key in named:
            raise _fail(
                where,
                f"measures {item['metric']} >= {item['target']} on {item['env']} as time_to_score[{named[key]}] "
                "does; give each of them its own label",
            )
        named[key] = i
        if missing_modules(requires):
            continue  # the runner skips it and says why; its env may not even be registered here
        _env_list(where + ".env", [item["env"]], gymnasium_ok=True)
        _positive(where + ".max_timesteps", item["max_timesteps"], int, MOST_STEPS)
        target = item["target"]
        if isinstance(target, bool) or not isinstance(target, int | float) or not math.isfinite(target):
            raise _fail(where + ".target", f"must be a finite number, got {target!r}")
        if not isinstance(item["metric"], str):
            raise _fail(where + ".metric", f"must be the name of a logged metric, got {item['metric']!r}")
        for key in ("repeats", "min_epochs"):
            if key in item:
                _positive(f"{where}.{key}", item[key], int, MOST_RUNS)
        _overrides(where + ".overrides", item.get("overrides", {}))
    return data


def _classes(data: dict[str, Any]) -> None:
    """``classes``: each workload class (light vector, pixels, many agents per env, ...) names one Ocean
    env, which the suite must measure in env_sps and train_sps, so its report says per class how fast
    the env steps and trains and where its training time goes."""
    classes = data.get("classes")
    if classes is None:
        return
    if not isinstance(classes, dict) or not classes:
        raise _fail("classes", f"must map a workload class to an Ocean env, got {classes!r}")
    env_sps = set((data.get("env_sps") or {}).get("envs", []))
    train_sps = set((data.get("train_sps") or {}).get("envs", []))
    for label, env in classes.items():
        where = f"classes.{label}"
        if not isinstance(label, str) or not label.strip():
            raise _fail("classes", f"class names must be non-empty strings, got {label!r}")
        if not isinstance(env, str):
            raise _fail(where, f"must name one Ocean env, got {env!r}")
        _env_list(where, [env])
        missing = [
            key for key, envs in (("env_sps.envs", env_sps), ("train_sps.envs", train_sps)) if env not in envs
        ]
        if missing:
            raise _fail(where, f"{env} must also be in {' and '.join(missing)}: a class is measured there")


def load(name_or_path: str) -> tuple[dict[str, Any], Path]:
    """A suite by name (bench/suites/NAME.yaml) or by path to a YAML file."""
    from appliance.config import read_yaml, unknown_name

    path = Path(name_or_path)
    if not (path.suffix in (".yaml", ".yml") and path.exists()):
        known = suite_names()
        if name_or_path not in known:
            raise unknown_name("suite", name_or_path, known, "valid suites", " (or a YAML path)")
        path = suite_dir() / f"{name_or_path}.yaml"
    data = read_yaml(path, "suite")
    try:
        return validate(data, str(path)), path
    except ConfigError as e:  # name the file (a suite may come from elsewhere) and the key
        if str(path) in str(e):
            raise
        raise ConfigError(f"suite {path}: {str(e).removeprefix('suite ')}") from None
