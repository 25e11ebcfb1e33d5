"""Plans a suite's measurements for a hardware profile and records them into a report.

Every measurement reuses the project's own benchmark code: :mod:`appliance.bench.envsps` for env
speed, :mod:`appliance.bench.vecsps` for vector speed, :mod:`appliance.bench.probe` for the hardware
probe, :mod:`appliance.bench.suite.training` (the real trainer, through the one training loop) for training
speed and time-to-score. The analysis after the last step is :mod:`appliance.bench.bottleneck`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from appliance.bench import metrics as reg
from appliance.bench.suite import training
from appliance.bench.suite.definition import _env_list, missing_modules, score_parts
from appliance.errors import ConfigError, DeviceError


@dataclass
class Step:
    """One unit of suite work: a description for the progress bar and the function that measures;
    ``last``: false for a round of a metric measured in rounds before its last (its figure is not
    complete yet, so the progress line waits for the last round); ``checks``: false where every
    sample goes through the speed gate, whose checks judge them (the step's own would be unused)."""

    label: str
    run: Callable[[], None]
    last: bool = True
    checks: bool = True


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
        self.filter = (
            set(_env_list("--envs", list(envs_filter), gymnasium_ok=True))
            if envs_filter is not None
            else None
        )
        self.seconds = float(seconds or suite.get("seconds", 1.0))
        self.base = resolve(profile=profile)
        self.configs: dict[str, Any] = {}
        self.steps: list[Step] = []
        self.notes: list[str] = []  # progress lines the CLI prints after each step
        self._train: dict[str, dict[str, Any]] = {}
        self._probed: list[str] = []
        self.note: Callable[[str], None] = lambda _: None  # a step's progress within it (probe sections)
        self.gate = self._gate()
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

    def _gate(self) -> Any:
        """The speed gate for CPU-bound samples (None when the suite says ``gate: false``)."""
        from appliance.measure import noise

        spec = self.suite.get("gate", True)
        if spec is False:
            return None
        limits = spec if isinstance(spec, dict) else {}
        return noise.SpeedGate(reference=self.report.data["fingerprint"].get("calibration"), **limits)

    def take(
        self, sample: Callable[[], Any], cpu_bound: bool = True, figure: Callable[[Any], float] | None = None
    ) -> Any:
        """One sample of a measurement, through the speed gate when it is CPU-bound (``figure``: the
        number of a structured sample, kept for a discarded one)."""
        if self.gate is None or not cpu_bound:
            return sample()
        return self.gate.take(sample, figure)

    def threads(self) -> list[int]:
        threads = (self.suite.get("env_sps") or {}).get("threads", "profile")
        return [int(t) for t in (self.base.bench.threads if threads == "profile" else threads)]

    # --------------------------------------------------------------- plan

    def _plan(self) -> None:
        from appliance.sysinfo import physical_cores

        cores = physical_cores()
        probe = self.suite.get("probe")
        if probe is not None:
            from appliance import ocean

            chosen = [e for e in probe.get("envs", ["breakout"]) if self.wanted(e)]
            chosen = chosen or [e for e in sorted(self.filter or ()) if e in ocean.names()][:1]
            for env in chosen:
                budget = probe.get("budget_s")  # per probe section; none: the full detail
                self.steps.append(
                    Step(
                        f"probe ({env})",
                        lambda env=env, b=budget: self.run_probe(env, int(probe.get("runs", 5)), b),
                    )
                )
        sampled: list[tuple[str, Callable[[int], None]]] = []  # (label, take sample r): env and vector speed
        env_sps = self.suite.get("env_sps") or {}
        for env in env_sps.get("envs", []):
            if not self.wanted(env):
                continue
            for t in self.threads():
                if t > cores:
                    self.report.skip(f"env_sps {env} at {t} threads", f"only {cores} usable physical cores")
                    continue
                sampled.append(
                    (f"env {env} x{t} threads", lambda r, env=env, t=t: self.run_env_sps(env, t, r))
                )
        for item in self.suite.get("vector_sps", []):
            if self.wanted(item["env"]):
                for backend in item["backends"]:
                    sampled.append(
                        (
                            f"vector {item['env']} {backend}",
                            lambda r, item=item, backend=backend: self.run_vector_sps(item, backend, r),
                        )
                    )
        self._plan_sampled(sampled)
        train = self.suite.get("train_sps") or {}
        for env in train.get("envs", []):
            if self.wanted(env):
                seconds = float(train.get("seconds", 8))
                self.steps.append(Step(f"train {env}", lambda env=env, s=seconds: self.run_train_sps(env, s)))
                for label, overrides in (train.get("variants") or {}).items():  # e.g. buffers x graphs
                    self.steps.append(
                        Step(
                            f"train {env} {label}",
                            lambda env=env, s=seconds, label=label, o=overrides: self.run_train_sps(
                                env, s, label, o
                            ),
                        )
                    )
        for item in self.suite.get("time_to_score", []):
            if not self.wanted(item["env"]):
                continue
            missing = missing_modules(item.get("requires", []))
            what = f"time to {item['metric']} >= {item['target']} on {item['env']}" + (
                f" ({item['label']})" if item.get("label") else ""
            )
            if missing:
                self.report.skip(what, f"needs {', '.join(missing)} (not installed)")
            else:
                self.steps.append(Step(what, lambda item=item: self.run_time_to_score(item)))
        for family in reg.produced():  # a registered family measured by its own producer
            for item in self.suite.get(family.suite_key) or []:
                if self.wanted(str(item.get("env", ""))) or "env" not in item:
                    label = " ".join([family.suite_key, *(str(v) for v in item.values())])
                    self.steps.append(Step(label, lambda f=family, item=item: self.run_produced(f, item)))
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

    def _plan_sampled(self, sampled: list[tuple[str, Callable[[int], None]]]) -> None:
        """Steps for measurements of independent samples (``sampled``: a label and a function that
        takes sample r). In rounds (the suite's ``order``, default): the first sample of each, then
        the second of each, and so on, so each figure's samples lie apart across the whole phase and
        their spread includes the machine's drift over it (docs/lab/noise.md, "Samples in rounds");
        ``order: steps``: each measurement's samples back to back."""
        checks = self.gate is None  # env and vector samples are CPU-bound: all gated where a gate is on
        if self.suite.get("order", "rounds") == "steps" or self.repeats == 1:
            for label, part in sampled:
                self.steps.append(
                    Step(label, lambda part=part: [part(r) for r in range(self.repeats)], checks=checks)
                )
            return
        for r in range(self.repeats):
            for label, part in sampled:
                self.steps.append(
                    Step(
                        f"{label} ({r + 1}/{self.repeats})",
                        lambda part=part, r=r: part(r),
                        last=r == self.repeats - 1,
                        checks=checks,
                    )
                )

    def _sample(
        self, family: reg.Family, parts: tuple[Any, ...], r: int, sample: Callable[[], float], **labels: Any
    ) -> None:
        """Sample ``r`` of the metric ``parts`` of ``family`` through the speed gate; the metric is
        recorded with every sample taken so far (the earlier rounds' from the report; complete after
        the last)."""
        earlier = self.report.samples(family.name(*parts)) if r else []
        self.report.record(family, parts, [*earlier, self.take(sample)], **labels)

    # --------------------------------------------------------------- measurements

    def run_probe(self, env: str, runs: int, budget_s: float | None = None) -> None:
        """The probe's sections, each announced through ``note`` and, with ``budget_s``, held to about
        that many seconds (:class:`appliance.bench.probe.Sections`); their seconds go to the analysis."""
        import torch

        from appliance.bench import probe

        cfg = self.config(env)
        sections = probe.Sections(budget_s, self.note)
        for f in probe.cpu_probe(cfg, runs, self.seconds, sections, take=self.take):
            self.report.add(f.name, f.samples, f.unit, f.better, f.ceiling, **f.labels)
        gpus = self.report.data["fingerprint"].get("gpus") or []
        if torch.cuda.is_available():
            figures, skipped = probe.gpu_probe(gpus[0] if gpus else {}, runs, sections)
            with sections(f"{env} policy forward on the GPU") as budget:
                figures += probe.policy_forward_scaling(cfg, "cuda", runs, budget=budget)
            for f in figures:
                self.report.add(f.name, f.samples, f.unit, f.better, f.ceiling, **f.labels)
            for what, why in skipped:
                self.report.skip(what, why)
        else:
            self.report.skip("GPU probe", "torch sees no CUDA device; only the CPU side was profiled")
        self.report.analyse(
            "probe_sections",
            {"budget_s": budget_s, "seconds": {name: round(s, 3) for name, s in sections.seconds.items()}},
            env,
        )
        self._probed.append(env)

    def roofline(self, env: str) -> None:
        """Roofline for a probed env from every figure the suite measured (run after all steps)."""
        from appliance.bench.bottleneck import roofline_from_report

        entry = roofline_from_report(env, self.config(env), self.report.data)
        self.report.append_analysis("roofline", entry)

    def run_env_sps(self, env: str, threads: int, r: int) -> None:
        """Sample ``r`` of the env's speed at ``threads`` threads (seeded r)."""
        from appliance.bench import envsps

        cfg = self.config(env)
        self._sample(
            reg.ENV_SPS,
            (env, f"threads={threads}"),
            r,
            lambda: envsps.measure(
                env, int(cfg.vec.num_envs), threads, seconds=self.seconds, seed=r, **dict(cfg.env)
            )["sps"],
            env=env,
            threads=threads,
            num_envs=int(cfg.vec.num_envs),
        )

    def run_vector_sps(self, item: dict[str, Any], backend: str, r: int) -> None:
        """Sample ``r`` of a vector backend's speed (a fresh vector, seeded r)."""
        from appliance import ocean, vector
        from appliance.bench import vecsps

        env = item["env"]
        is_ocean = env in ocean.names()
        params = dict(self.config(env).env) if is_ocean else {}
        num_envs = int(item.get("num_envs") or self.config(env).vec.num_envs)
        if backend.startswith("gymnasium-") and is_ocean:
            raise ConfigError(f"vector_sps {backend} runs Gymnasium envs, not the Ocean env {env!r}")
        if is_ocean and item.get("num_envs"):  # the suite's own count: refused if it cannot fit in memory
            from appliance.config import check_memory

            data = self.config(env).data
            check_memory(env, {**data, "vec": {**data["vec"], "num_envs": num_envs}})

        def sample() -> float:
            if backend.startswith("gymnasium-"):
                from appliance.emulation import make_factory

                vec: Any = vecsps.GymnasiumVector(backend.split("-")[1], make_factory(env), num_envs)
            else:
                vec = vector.make(env, backend=backend, num_envs=num_envs, seed=r, **params)
            try:
                return vecsps.measure(vec, seconds=self.seconds, seed=r).sps
            finally:
                vec.close()  # before the gate's check after the sample: no worker spins through it

        self._sample(
            reg.VECTOR_SPS,
            (env, backend),
            r,
            sample,
            env=env,
            backend=backend,
            num_envs=num_envs,
        )

    def run_train_sps(
        self, env: str, seconds: float, label: str | None = None, overrides: dict[str, Any] | None = None
    ) -> None:
        """Training speed on ``env``; a suite variant (``label`` and its config ``overrides``) adds
        ``train_sps/<env>/<label>`` and no phase shares or diagnosis (those describe the env's config)."""
        cfg = self.config(env, overrides)
        from appliance.train.make import resolve_device

        # a GPU run's CPU clocks drop with its own load (docs/lab/noise.md): no gate there
        on_cpu = resolve_device(str(cfg.train.device)).type == "cpu"
        runs = training.training_speed(
            cfg,
            seconds,
            self.repeats,
            take=lambda window: self.take(window, on_cpu, figure=lambda r: r["sps"]),
        )
        if label is not None:
            self.report.record(
                reg.TRAIN_SPS, (env, label), [r["sps"] for r in runs], env=env, variant=label,
                overrides=dict(overrides or {}),
            )  # fmt: skip
            return
        self.report.record(reg.TRAIN_SPS, (env,), [r["sps"] for r in runs], env=env)
        for phase in runs[0]["shares"]:
            self.report.record(
                reg.TRAIN_PHASE, (env, phase), [r["shares"][phase] for r in runs], env=env, phase=phase
            )
        for b, parts in enumerate(runs[0].get("buffers") or []):
            for part in parts:
                self.report.record(
                    reg.TRAIN_BUFFER,
                    (env, b, part),
                    [r["buffers"][b][part] for r in runs],
                    env=env,
                    buffer=b,
                    part=part,
                )
        self._train[env] = runs[-1]  # memory figures for the diagnosis

    def run_produced(self, family: reg.Family, item: dict[str, Any]) -> None:
        """One suite item of a registered family, by the family's producer; each metric it returns is
        recorded in the family's unit and direction unless it names its own."""
        context = reg.Context(self.repeats, self.seconds, self.take, self.config)
        for m in reg.producer(family)(item, context):
            self.report.record(family, m.parts, m.samples, m.unit, m.better, **m.labels)

    def diagnose(self, env: str) -> None:
        from appliance.bench.bottleneck import diagnosis_from_report

        entry = diagnosis_from_report(env, self.config(env), self.report.data, self._train[env])
        self.report.analyse("training", entry, env)

    def run_time_to_score(self, item: dict[str, Any]) -> None:
        overrides = dict(item.get("overrides") or {})
        repeats = int(item.get("repeats", self.repeats))
        runs = []
        for r in range(repeats):
            cfg = self.config(item["env"], {**overrides, "train.seed": int(self.report.data["seed"]) + r})
            runs.append(
                training.time_to_score(
                    cfg,
                    item["metric"],
                    float(item["target"]),
                    int(item["max_timesteps"]),
                    min_epochs=int(item.get("min_epochs", 1)),
                )
            )
        where = score_parts(item)
        who = "/".join(where[:-1])  # the env, and the label where the item has one
        labels = {"env": item["env"], "metric": item["metric"], "target": item["target"]}
        if item.get("label"):
            labels["variant"] = item["label"]
        score = reg.TIME_TO_SCORE
        self.report.record(score, (*where, "seconds"), [r["seconds"] for r in runs], "s", "lower", **labels)
        self.report.record(
            score, (*where, "steps"), [r["steps"] for r in runs], "agent-steps", "lower", **labels
        )
        self.report.record(
            score, (*where, "final"), [r["final"] for r in runs], item["metric"], "higher", **labels
        )
        self.report.analyse("learning_curves", {**labels, "runs": [r["curve"] for r in runs]}, who)
        missed = [r for r in runs if not r["reached"]]
        if missed:
            last = ", ".join("-" if r["last"] is None else f"{r['last']:.3g}" for r in missed)
            self.report.warn(
                f"{who}: {len(missed)} of {repeats} runs did not reach {item['metric']} >= {item['target']} "
                f"within {item['max_timesteps']:,} steps (last {item['metric']}: {last})"
            )

    def run_all(
        self,
        progress: Callable[[Step, int], None] | None = None,
        done: Callable[[Step, list[str]], None] | None = None,
    ) -> None:
        """Every step under the noise guard (which flags figures measured on a busy machine);
        ``progress`` before each, ``done`` after it with the names of the metrics it added."""
        self.begin()
        for i in range(len(self.steps)):
            self.run_step(i, progress, done)
        self.end()

    def begin(self) -> None:
        """Before the first step: the C library's memory thresholds a long run reaches
        (:mod:`appliance.bench.allocator`), then the speed check's spread on this machine now, the
        step gate (noise.start), which also judges the samples the speed gate takes."""
        from appliance.bench.allocator import hold_freed_memory
        from appliance.measure import noise

        held = hold_freed_memory()  # every sample in the memory regime a long run settles into
        if held is not None:
            self.report.set("allocator", held)
        if self.steps:
            checks = noise.start(self.report)
            if self.gate is not None:
                self.gate.use_floors(noise.spread_gate(checks), checks)

    def run_step(
        self,
        i: int,
        progress: Callable[[Step, int], None] | None = None,
        done: Callable[[Step, list[str]], None] | None = None,
    ) -> None:
        """Step ``i`` under the noise guard (``run_all``'s callbacks)."""
        from appliance.measure import noise

        step = self.steps[i]
        if progress:
            progress(step, i)
        before = dict(self.report.data["metrics"])
        with noise.watch(
            self.report, step.label, speed=noise.speed_check if step.checks else None, gate=self.gate
        ):
            step.run()
        if done:  # the figures the step completed: none in a round before a metric's last
            metrics = self.report.data["metrics"]
            done(step, [n for n in metrics if before.get(n) is not metrics[n]] if step.last else [])

    def end(self) -> None:
        """After the last step: the analysis and the noise guard's verdicts."""
        from appliance.measure import noise

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
