"""Benchmark suites: what ``puffer-bench run`` measures, read from ``bench/suites/<name>.yaml``.

A suite names the measurements; a hardware profile (``bench/profiles``) sets the sizes. Every
measurement reuses the project's own benchmark code: :mod:`appliance.bench.envsps` for env speed,
:mod:`appliance.bench.vecsps` for vector speed, :mod:`appliance.bench.probe` for the hardware probe,
and the real :class:`~appliance.train.Trainer` for training speed and time-to-score. Suite keys::

    name, description
    seconds: 1.0                         # timed seconds per measurement
    probe:   {envs: [breakout], runs: 5}  # hardware probe; its envs get a roofline
    env_sps: {envs: [...], threads: profile | [1, 2, ...]}
    vector_sps: [{env, backends: [native|serial|multiprocessing|ray|gymnasium-sync|gymnasium-async],
                  num_envs}]
    train_sps: {envs: [...], seconds: 8}
    time_to_score: [{env, metric, target, max_timesteps, repeats, overrides: {section.key: value}}]
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.errors import ConfigError, DeviceError
from appliance.paths import data_dir

KEYS = {"name", "description", "seconds", "probe", "env_sps", "vector_sps", "train_sps", "time_to_score"}
KEYS.add("cv")  # the run-to-run spread the suite promises; the noise guard names metrics beyond it
VECTOR_BACKENDS = ("native", "serial", "multiprocessing", "ray", "gymnasium-sync", "gymnasium-async")
SCORE_WINDOW = 5  # epochs averaged when judging a score


def suite_dir() -> Path:
    return data_dir("bench") / "suites"


def suite_names() -> list[str]:
    return sorted(p.stem for p in suite_dir().glob("*.yaml"))


# ---------------------------------------------------------------------- validation


def _fail(where: str, message: str) -> ConfigError:
    return ConfigError(f"{where}: {message}" if where.startswith("-") else f"suite {where}: {message}")


def _env_list(where: str, value: Any, gymnasium_ok: bool = False) -> list[str]:
    from appliance import envs
    from appliance.config import _is_gymnasium_id

    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(where, f"must be a list of env names, got {value!r}")
    known = envs.names()
    for v in value:
        if v not in known and not (gymnasium_ok and _is_gymnasium_id(v)):
            raise _fail(where, f"unknown env {v!r}; Ocean envs: {', '.join(known)}")
    return value


def _positive(where: str, value: Any, kind: type = float) -> Any:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
    if not ok or (kind is int and int(value) != value):
        raise _fail(where, f"must be a positive {'integer' if kind is int else 'number'}, got {value!r}")
    return kind(value)


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
    unknown = set(data) - KEYS
    if unknown:
        raise ConfigError(f"{source}: unknown keys {sorted(unknown)}; allowed: {sorted(KEYS)}")
    if not isinstance(data.get("name"), str):
        raise ConfigError(f"{source}: 'name' (a string) is required")
    _positive("seconds", data.get("seconds", 1.0))
    if "cv" in data and not 0 < _positive("cv", data["cv"]) < 1:  # stated run-to-run spread (noise guard)
        raise _fail("cv", f"must be a fraction below 1 (0.03 = 3%), got {data['cv']!r}")
    if (probe := _section(data, "probe", {"envs", "runs"})) is not None:
        _env_list("probe.envs", probe.get("envs", []))
        _positive("probe.runs", probe.get("runs", 5), int)
    if (env_sps := _section(data, "env_sps", {"envs", "threads"})) is not None:
        _env_list("env_sps.envs", env_sps.get("envs", []))
        threads = env_sps.get("threads", "profile")
        if threads != "profile":
            if not isinstance(threads, list) or not threads:
                raise _fail(
                    "env_sps.threads", f"must be 'profile' or a list of thread counts, got {threads!r}"
                )
            for t in threads:
                _positive("env_sps.threads", t, int)
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
            _positive(where + ".num_envs", item["num_envs"], int)
    if (train := _section(data, "train_sps", {"envs", "seconds"})) is not None:
        _env_list("train_sps.envs", train.get("envs", []), gymnasium_ok=True)
        _positive("train_sps.seconds", train.get("seconds", 8), float)
    scores = data.get("time_to_score", [])
    if not isinstance(scores, list):
        raise _fail("time_to_score", "must be a list")
    for i, item in enumerate(scores):
        where = f"time_to_score[{i}]"
        need = {"env", "metric", "target", "max_timesteps"}
        if not isinstance(item, dict) or not need <= set(item) or set(item) - need - {"repeats", "overrides"}:
            raise _fail(where, f"needs {sorted(need)} (and optional repeats, overrides), got {item!r}")
        _env_list(where + ".env", [item["env"]], gymnasium_ok=True)
        _positive(where + ".max_timesteps", item["max_timesteps"], int)
        if not isinstance(item["target"], int | float):
            raise _fail(where + ".target", f"must be a number, got {item['target']!r}")
        if "repeats" in item:
            _positive(where + ".repeats", item["repeats"], int)
        if not isinstance(item.get("overrides", {}), dict):
            raise _fail(where + ".overrides", "must be a mapping of section.key: value")
    return data


def load(name_or_path: str) -> tuple[dict[str, Any], Path]:
    """A suite by name (bench/suites/NAME.yaml) or by path to a YAML file."""
    from appliance.config import read_yaml, unknown_name

    path = Path(name_or_path)
    if not (path.suffix in (".yaml", ".yml") and path.exists()):
        known = suite_names()
        if name_or_path not in known:
            raise unknown_name("suite", name_or_path, known, "valid suites", " (or a YAML path)")
        path = suite_dir() / f"{name_or_path}.yaml"
    return validate(read_yaml(path, "suite"), str(path)), path


# ---------------------------------------------------------------------- profiles


def detect_profile(gpus: list[dict[str, Any]]) -> str:
    """The hardware profile whose expected GPU this machine has; 'cpu' without a GPU or a match."""
    from appliance.config import profile_dir, read_yaml

    names = [str(g.get("name") or "") for g in gpus]
    for path in sorted(profile_dir().glob("*.yaml")):
        expected = str((read_yaml(path, "hardware profile").get("profile") or {}).get("gpu") or "")
        if expected and any(_gpu_matches(expected, n) for n in names):
            return path.stem
    return "cpu"


def _gpu_matches(expected: str, name: str) -> bool:
    return expected.replace(" ", "").lower() in name.replace(" ", "").lower()


# ---------------------------------------------------------------------- measurements


@dataclass
class Step:
    """One unit of suite work: a description for the progress bar and the function that measures."""

    label: str
    run: Callable[[], None]


def measure_training(cfg: Any, seconds: float, warmup_epochs: int = 1) -> dict[str, Any]:
    """End-to-end training agent-steps/s after warm-up epochs, with the phase shares of the timed part."""
    import torch

    from appliance import vector
    from appliance.train import Trainer

    trainer = Trainer(cfg, vector.make_from_config(cfg))
    try:
        cuda = trainer.device.type == "cuda"
        for _ in range(warmup_epochs):
            trainer.evaluate()
            trainer.train()
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        trainer.timings.reset()
        steps0, start, epochs = trainer.global_step, time.perf_counter(), 0
        while epochs < 2 or time.perf_counter() - start < seconds:
            trainer.evaluate()
            trainer.train()
            epochs += 1
        if cuda:
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        return {
            "sps": (trainer.global_step - steps0) / elapsed,
            "epochs": epochs,
            "shares": {k: v["share"] for k, v in trainer.timings.breakdown().items()},
            "memory_peak": torch.cuda.max_memory_allocated() if cuda else None,
            "memory_total": torch.cuda.get_device_properties(trainer.device).total_memory if cuda else None,
        }
    finally:
        trainer.close()


def time_to_score(cfg: Any, metric: str, target: float, max_timesteps: int) -> dict[str, Any]:
    """Train until the mean of ``metric`` over the last epochs reaches ``target``; wall time and steps."""
    from appliance import vector
    from appliance.train import Trainer

    trainer = Trainer(cfg, vector.make_from_config(cfg))
    history: list[float] = []
    start = time.perf_counter()
    try:
        while trainer.global_step < max_timesteps:
            trainer.evaluate()
            trainer.train()
            if metric in trainer.env_stats:
                history.append(trainer.env_stats[metric])
            recent = history[-SCORE_WINDOW:]
            if len(recent) == SCORE_WINDOW and sum(recent) / SCORE_WINDOW >= target:
                return {"reached": True, "seconds": time.perf_counter() - start, "steps": trainer.global_step}
        last = sum(history[-SCORE_WINDOW:]) / max(1, len(history[-SCORE_WINDOW:])) if history else None
        return {"reached": False, "seconds": None, "steps": None, "last": last}
    finally:
        trainer.close()


class SuiteRunner:
    """Plans a suite's measurements for a profile and records them into a Report."""

    def __init__(
        self,
        suite: dict[str, Any],
        profile: str,
        report: Any,
        repeats: int,
        envs_filter: Iterable[str] | None = None,
        seconds: float | None = None,
    ) -> None:
        from appliance.config import resolve

        self.suite, self.profile, self.report, self.repeats = suite, profile, report, repeats
        self.filter = set(_env_list("--envs", list(envs_filter), gymnasium_ok=True)) if envs_filter else None
        self.seconds = float(seconds or suite.get("seconds", 1.0))
        self.base = resolve(profile=profile)
        self.configs: dict[str, Any] = {}
        self.steps: list[Step] = []
        self.notes: list[str] = []  # progress lines the CLI prints after each step
        self._train: dict[str, dict[str, Any]] = {}
        self._probed: list[str] = []
        self._plan()

    # --------------------------------------------------------------- helpers

    def wanted(self, env: str) -> bool:
        return self.filter is None or env in self.filter

    def config(self, env: str, overrides: dict[str, Any] | None = None) -> Any:
        from appliance.config import resolve

        key = env if not overrides else f"{env}+{sorted(overrides.items())}"
        if key not in self.configs:
            layer: dict[str, dict[str, Any]] = {}
            for dotted, value in (overrides or {}).items():
                section, _, name = str(dotted).partition(".")
                layer.setdefault(section, {})[name] = value
            self.configs[key] = resolve(env=env, profile=self.profile, overrides=layer)
        return self.configs[key]

    def threads(self) -> list[int]:
        threads = (self.suite.get("env_sps") or {}).get("threads", "profile")
        return [int(t) for t in (self.base.bench.threads if threads == "profile" else threads)]

    # --------------------------------------------------------------- plan

    def _plan(self) -> None:
        from appliance.sysinfo import physical_cores

        cores = physical_cores()
        probe = self.suite.get("probe")
        if probe is not None:
            from appliance import envs

            chosen = [e for e in probe.get("envs", ["breakout"]) if self.wanted(e)]
            chosen = chosen or [e for e in sorted(self.filter or ()) if e in envs.names()][:1]
            for env in chosen:
                self.steps.append(
                    Step(f"probe ({env})", lambda env=env: self.run_probe(env, int(probe.get("runs", 5))))
                )
        env_sps = self.suite.get("env_sps") or {}
        for env in env_sps.get("envs", []):
            if not self.wanted(env):
                continue
            for t in self.threads():
                if t > cores:
                    self.report.skip(f"env_sps {env} at {t} threads", f"only {cores} usable physical cores")
                    continue
                self.steps.append(
                    Step(f"env {env} x{t} threads", lambda env=env, t=t: self.run_env_sps(env, t))
                )
        for item in self.suite.get("vector_sps", []):
            if self.wanted(item["env"]):
                for backend in item["backends"]:
                    self.steps.append(
                        Step(
                            f"vector {item['env']} {backend}",
                            lambda item=item, backend=backend: self.run_vector_sps(item, backend),
                        )
                    )
        train = self.suite.get("train_sps") or {}
        for env in train.get("envs", []):
            if self.wanted(env):
                seconds = float(train.get("seconds", 8))
                self.steps.append(Step(f"train {env}", lambda env=env, s=seconds: self.run_train_sps(env, s)))
        for item in self.suite.get("time_to_score", []):
            if self.wanted(item["env"]):
                self.steps.append(
                    Step(
                        f"time to {item['metric']} >= {item['target']} on {item['env']}",
                        lambda item=item: self.run_time_to_score(item),
                    )
                )
        if not self.steps:
            what = f" for envs {sorted(self.filter)}" if self.filter else ""
            raise ConfigError(f"suite '{self.suite['name']}' has nothing to measure{what}")
        trains = any(s.label.startswith(("train ", "time to ")) for s in self.steps)
        if trains and self.base.train.device == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise DeviceError(
                    f"profile '{self.profile}' trains on CUDA but torch sees no GPU; use --gpu cpu on this machine"
                )

    # --------------------------------------------------------------- measurements

    def run_probe(self, env: str, runs: int) -> None:
        import torch

        from appliance.bench import probe

        cfg = self.config(env)
        for f in probe.cpu_probe(cfg, runs, self.seconds):
            self.report.add(f.name, f.samples, f.unit, f.better, f.ceiling, **f.labels)
        gpus = self.report.data["fingerprint"].get("gpus") or []
        if torch.cuda.is_available():
            figures, skipped = probe.gpu_probe(gpus[0] if gpus else {}, runs)
            figures.append(probe.policy_forward(cfg, "cuda", runs))
            for f in figures:
                self.report.add(f.name, f.samples, f.unit, f.better, f.ceiling, **f.labels)
            for what, why in skipped:
                self.report.skip(what, why)
        else:
            self.report.skip("GPU probe", "torch sees no CUDA device; only the CPU side was profiled")
        self._probed.append(env)

    def roofline(self, env: str) -> None:
        """Roofline for a probed env from every figure the suite measured (run after all steps)."""
        import torch

        from appliance import envs
        from appliance.bench.bottleneck import roofline, step_bytes

        cfg = self.config(env)
        with envs.make(env, num_envs=1, **dict(cfg.env)) as vec:
            nbytes = step_bytes(vec.single_observation_space, vec.single_action_space)
        limits: dict[str, tuple[float, str]] = {}
        metrics = self.report.data["metrics"]
        pinned = [m for n, m in metrics.items() if n.startswith("probe/gpu/h2d_pinned/") and m.get("median")]
        if pinned:
            best = max(m["median"] for m in pinned)
            limits["PCIe"] = (best * 1e9 / nbytes, f"best pinned host-to-device copy, {best:.1f} GB/s")
        env_rows = [m for n, m in metrics.items() if n.startswith(f"env_sps/{env}/") and m.get("median")]
        single = metrics.get(f"probe/cpu/env_step/{env}", {}).get("median")
        if env_rows:
            best_row = max(env_rows, key=lambda m: m["median"])
            limits["env threads"] = (
                best_row["median"],
                f"measured at {best_row['labels']['threads']} threads",
            )
        elif single:
            cores = self.report.data["fingerprint"]["cpu"].get("usable_cores") or 1
            limits["env threads"] = (
                single * cores,
                f"one core's {single / 1e6:.3g} M x {cores} cores, estimated",
            )
        device = "gpu" if torch.cuda.is_available() else "cpu"
        fwd = metrics.get(f"probe/{device}/policy_forward/{env}", {})
        if fwd.get("median"):
            limits["policy forward"] = (
                fwd["median"],
                f"{fwd['labels']['core']} policy, batch {fwd['labels']['batch']} on the {device.upper()}",
            )
        train = metrics.get(f"train_sps/{env}", {})
        learn = metrics.get(f"train_phase/{env}/train.learn", {})
        if train.get("median") and learn.get("median"):
            limits["PPO update"] = (
                train["median"] / learn["median"],
                f"training ran {train['median'] / 1e3:.3g}K agent-steps/s with {100 * learn['median']:.0f}% "
                "of its time in backward passes and optimizer steps",
            )
        self.report.data["analysis"].setdefault("roofline", []).append(roofline(env, nbytes, limits))

    def run_env_sps(self, env: str, threads: int) -> None:
        from appliance.bench import envsps

        cfg = self.config(env)
        samples = [
            envsps.measure(
                env, int(cfg.vec.num_envs), threads, seconds=self.seconds, seed=r, **dict(cfg.env)
            )["sps"]
            for r in range(self.repeats)
        ]
        self.report.add(
            f"env_sps/{env}/threads={threads}",
            samples,
            "agent-steps/s",
            env=env,
            threads=threads,
            num_envs=int(cfg.vec.num_envs),
        )

    def run_vector_sps(self, item: dict[str, Any], backend: str) -> None:
        from appliance import envs, vector
        from appliance.bench import vecsps

        env = item["env"]
        ocean = env in envs.names()
        params = dict(self.config(env).env) if ocean else {}
        num_envs = int(item.get("num_envs") or self.config(env).vec.num_envs)
        samples = []
        for r in range(self.repeats):
            if backend.startswith("gymnasium-"):
                if ocean:
                    raise ConfigError(f"vector_sps {backend} runs Gymnasium envs, not the Ocean env {env!r}")
                from appliance.emulation import make_factory

                vec: Any = vecsps.GymnasiumVector(backend.split("-")[1], make_factory(env), num_envs)
            else:
                vec = vector.make(env, backend=backend, num_envs=num_envs, seed=r, **params)
            try:
                samples.append(vecsps.measure(vec, seconds=self.seconds, seed=r).sps)
            finally:
                vec.close()
        self.report.add(
            f"vector_sps/{env}/{backend}",
            samples,
            "agent-steps/s",
            env=env,
            backend=backend,
            num_envs=num_envs,
        )

    def run_train_sps(self, env: str, seconds: float) -> None:
        cfg = self.config(env)
        runs = [measure_training(cfg, seconds) for _ in range(self.repeats)]
        self.report.add(f"train_sps/{env}", [r["sps"] for r in runs], "agent-steps/s", env=env)
        for phase in runs[0]["shares"]:
            self.report.add(
                f"train_phase/{env}/{phase}",
                [r["shares"][phase] for r in runs],
                "share",
                "info",
                env=env,
                phase=phase,
            )
        self._train[env] = runs[-1]  # memory figures for the diagnosis

    def diagnose(self, env: str) -> None:
        from appliance import envs
        from appliance.bench.bottleneck import diagnose_training, step_bytes

        metrics = self.report.data["metrics"]
        run = self._train[env]
        shares = {
            m["labels"]["phase"]: m["median"]
            for n, m in metrics.items()
            if n.startswith(f"train_phase/{env}/")
        }
        cfg = self.config(env)
        figures: dict[str, Any] = {
            "memory_peak": run.get("memory_peak"),
            "memory_total": run.get("memory_total"),
            "usable_cores": self.report.data["fingerprint"]["cpu"].get("usable_cores"),
            "env_sps_single": (metrics.get(f"probe/cpu/env_step/{env}") or {}).get("median"),
            "forward_sps": (
                metrics.get(f"probe/gpu/policy_forward/{env}")
                or metrics.get(f"probe/cpu/policy_forward/{env}")
                or {}
            ).get("median"),
        }
        if env in envs.names():
            with envs.make(env, num_envs=1, **dict(cfg.env)) as vec:
                figures["bytes_per_step"] = step_bytes(vec.single_observation_space, vec.single_action_space)
                figures["obs_dtype"] = str(vec.single_observation_space.dtype)
        self.report.data["analysis"].setdefault("training", {})[env] = diagnose_training(
            env, shares, metrics[f"train_sps/{env}"]["median"], cfg.to_dict(), figures
        )

    def run_time_to_score(self, item: dict[str, Any]) -> None:
        overrides = dict(item.get("overrides") or {})
        repeats = int(item.get("repeats", self.repeats))
        runs = []
        for r in range(repeats):
            cfg = self.config(item["env"], {**overrides, "train.seed": int(self.report.data["seed"]) + r})
            runs.append(time_to_score(cfg, item["metric"], float(item["target"]), int(item["max_timesteps"])))
        name = f"time_to_score/{item['env']}/{item['metric']}>={item['target']}"
        labels = {"env": item["env"], "metric": item["metric"], "target": item["target"]}
        self.report.add(name + "/seconds", [r["seconds"] for r in runs], "s", "lower", **labels)
        self.report.add(name + "/steps", [r["steps"] for r in runs], "agent-steps", "lower", **labels)
        missed = [r for r in runs if not r["reached"]]
        if missed:
            last = ", ".join("-" if r["last"] is None else f"{r['last']:.3g}" for r in missed)
            self.report.warn(
                f"{item['env']}: {len(missed)} of {repeats} runs did not reach {item['metric']} >= {item['target']} "
                f"within {item['max_timesteps']:,} steps (last {item['metric']}: {last})"
            )

    def run_all(self, progress: Callable[[Step, int], None] | None = None) -> None:
        from appliance.bench import noise

        for i, step in enumerate(self.steps):
            if progress:
                progress(step, i)
            with noise.watch(self.report, step.label):  # flags figures measured on a busy machine
                step.run()
        self.finish()
        noise.finish(self.report, self.suite.get("cv"))

    def finish(self) -> None:
        """Analysis from all figures: a roofline per probed env, a diagnosis per trained env."""
        for env in self._probed:
            self.roofline(env)
        for env in self._train:
            self.diagnose(env)

    def resolved_configs(self) -> dict[str, Any]:
        return {"profile": self.base.to_dict(), "envs": {k: c.to_dict() for k, c in self.configs.items()}}
