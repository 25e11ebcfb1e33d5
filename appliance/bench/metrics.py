"""The metric registry: one row per family of benchmark metrics, read by everything that handles them.

A metric's name is a ``/`` path whose start says its family: ``env_sps/breakout/threads=2`` is env
speed. One :class:`Family` row says, for every metric of the family:

- ``prefix``: how its names start (a prefix ending in ``/``; without one, the one metric of that name);
- ``unit`` and ``better``: what the producer records (empty where each metric has its own, as
  ``time_to_score/``'s final score is in the env's own metric);
- ``section``: the report section (Markdown, HTML) that lists it; empty: no section;
- ``calibration``: how ``compare`` puts the figure on the base machine's CPU speed: ``copy`` (memory
  copy speed), ``compute`` (integer and float loops), ``compute_on_cpu`` (``compute`` when the run
  trained on the CPU, else none), empty for GPU-bound and descriptive figures;
- ``readme``: the starts of the names the README's reference table shows (``make readme-results``);
  ``plotted``: whether the README's speed plot shows its metrics;
- ``producer`` (the code that measures it) and ``suite_key`` (the suite YAML key that asks for it);
- ``produce``: for a family the suite runner has no step of its own for, the producer as an import
  path, ``package.module:function``. A suite's ``suite_key`` then holds a list of items (mappings), and
  for each the runner calls ``function(item, ctx)`` under the noise guard (``ctx``:
  :class:`Context`, the repeats, seconds and the speed gate's ``take``) and records each
  :class:`Measured` it returns into the family.

The suites (:mod:`appliance.bench.suite.steps`), the report renderings
(:mod:`appliance.bench.report.content`), ``compare``, the README table
(:mod:`appliance.docs.readme`) and the bottleneck analysis (:mod:`appliance.bench.bottleneck`)
read this table instead of matching names themselves. Adding a metric: docs/architecture.md,
"Adding a metric".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

CALIBRATIONS = ("", "copy", "compute", "compute_on_cpu")


@dataclass(frozen=True)
class Family:
    """One row of the registry (see the module's docstring for each field)."""

    prefix: str
    unit: str = ""
    better: str = "higher"
    section: str = ""
    calibration: str = ""
    readme: tuple[str, ...] = ()
    plotted: bool = False
    producer: str = ""
    suite_key: str = ""
    produce: str = ""

    def __post_init__(self) -> None:
        if self.calibration not in CALIBRATIONS:
            raise ValueError(f"metric family {self.prefix!r}: calibration must be one of {CALIBRATIONS}")
        if self.better not in ("higher", "lower", "info", ""):
            raise ValueError(f"metric family {self.prefix!r}: better must be higher, lower, info or empty")

    def matches(self, name: str) -> bool:
        return name.startswith(self.prefix) if self.prefix.endswith("/") else name == self.prefix

    def name(self, *parts: Any) -> str:
        """The metric name of ``parts`` in this family: ``ENV_SPS.name("breakout", "threads=2")``."""
        return self.prefix + "/".join(str(p) for p in parts)

    def under(self, *parts: Any) -> str:
        """The start of the names below ``parts``: ``TRAIN_PHASE.under("breakout")`` is
        ``train_phase/breakout/``."""
        return self.name(*parts) + "/"


PROBE = "Hardware probe"
PROBE_CPU_COPY = Family(
    "probe/cpu/memory_bandwidth", "GB/s", section=PROBE, calibration="copy", readme=("probe/cpu/",),
    producer="appliance.bench.probe.cpu_probe", suite_key="probe",
)  # fmt: skip
PROBE_CPU = Family(
    "probe/cpu/", "", section=PROBE, calibration="compute", readme=("probe/cpu/",),
    producer="appliance.bench.probe.cpu_probe", suite_key="probe",
)  # fmt: skip
PROBE_GPU = Family(
    "probe/gpu/", "", section=PROBE,
    readme=(
        "probe/gpu/h2d_pinned/256MiB", "probe/gpu/d2h_pinned/256MiB", "probe/gpu/d2d/256MiB", "probe/gpu/matmul_",
        "probe/gpu/launch_", "probe/gpu/graph_replay", "probe/gpu/policy_forward/",
    ),
    producer="appliance.bench.probe.gpu_probe", suite_key="probe",
)  # fmt: skip
PROBE_OTHER = Family("probe/", "", section=PROBE, producer="appliance.bench.probe", suite_key="probe")
ENV_SPS = Family(
    "env_sps/", "agent-steps/s", section="Env speed (Ocean C envs, random actions)", calibration="compute",
    readme=("env_sps/",), plotted=True, producer="appliance.bench.envsps.measure", suite_key="env_sps",
)  # fmt: skip
VECTOR_SPS = Family(
    "vector_sps/", "agent-steps/s", section="Vector speed per backend", calibration="compute",
    readme=("vector_sps/",), plotted=True, producer="appliance.bench.vecsps.measure", suite_key="vector_sps",
)  # fmt: skip
TRAIN_SPS = Family(
    "train_sps/", "agent-steps/s", section="Training speed (end-to-end agent-steps/s)",
    calibration="compute_on_cpu", readme=("train_sps/",), plotted=True,
    producer="appliance.bench.suite.training.training_speed", suite_key="train_sps",
)  # fmt: skip
TRAIN_PHASE = Family(
    "train_phase/", "share", "info", section="Training phase shares",
    producer="appliance.bench.suite.training.training_speed", suite_key="train_sps",
)  # fmt: skip
TRAIN_BUFFER = Family(
    "train_buffer/", "share", "info",
    section="Rollout engine buffers (share of wall time: policy step, GIL wait, env step)",
    producer="appliance.bench.suite.training.training_speed", suite_key="train_sps",
)  # fmt: skip
TIME_TO_SCORE = Family(
    "time_to_score/", "", "", section="Time to score", calibration="compute_on_cpu", readme=("time_to_score/",),
    producer="appliance.bench.suite.training.time_to_score", suite_key="time_to_score",
)  # fmt: skip
KERNEL = Family(
    "kernel/", "us", "lower", section="Fused kernels (us per call, cuda and eager torch; speed-up)",
    producer="appliance.gpucheck.check", suite_key="",
)  # fmt: skip
UPDATE = Family("update/", "ms", "lower", producer="appliance.gpucheck.check")
TRAIN_SPS_RATIO = Family("train_sps_ratio/", "x", producer="tools/pufferlib_peer.py (speed)")
SCORE_AT = Family("score_at/", "", producer="tools/pufferlib_peer.py (learning curves beside a peer)")
TIME_PER_MILLION = Family(
    "time_per_million/", "s per million agent-steps", "lower",
    producer="tools/pufferlib_peer.py (ours: a run's time counters by phase)",
)  # fmt: skip
HOST_LOAD = Family(
    "host_load/", "cores", "lower", producer="tools/pufferlib_peer.py (ours: a run's host load)"
)

FAMILIES: list[Family] = [
    PROBE_CPU_COPY,
    PROBE_CPU,
    PROBE_GPU,
    PROBE_OTHER,
    ENV_SPS,
    VECTOR_SPS,
    TRAIN_SPS,
    TRAIN_PHASE,
    TRAIN_BUFFER,
    TIME_TO_SCORE,
    KERNEL,
    UPDATE,
    TRAIN_SPS_RATIO,
    SCORE_AT,
    TIME_PER_MILLION,
    HOST_LOAD,
]


@dataclass
class Measured:
    """One metric a producer measured: its name's ``parts`` below the family's prefix, every sample,
    its labels, and its unit and direction where they are not the family's."""

    parts: tuple[Any, ...]
    samples: list[float | None]
    labels: dict[str, Any] = field(default_factory=dict)
    unit: str | None = None
    better: str | None = None


@dataclass
class Context:
    """What a producer gets beside its suite item: ``repeats`` samples of ``seconds`` each, taken
    through ``take(sample)`` (the speed gate, for CPU-bound samples) and ``config(env)``, the env's
    config resolved for the run's hardware profile."""

    repeats: int
    seconds: float
    take: Callable[[Callable[[], Any]], Any]
    config: Callable[[str], Any]


def produced() -> list[Family]:
    """The families the suite runner measures through their ``produce`` import path."""
    return [f for f in FAMILIES if f.produce and f.suite_key]


def producer(family: Family) -> Callable[[dict[str, Any], Context], Iterable[Measured]]:
    """The function ``family.produce`` names (``package.module:function``)."""
    import importlib

    module, _, name = family.produce.partition(":")
    return getattr(importlib.import_module(module), name)


def register(family: Family) -> Family:
    """Add a row (a new family of metrics); its section, if new, comes after the others."""
    if any(f.prefix == family.prefix for f in FAMILIES):
        raise ValueError(f"metric family {family.prefix!r} is registered already")
    FAMILIES.append(family)
    return family


def family_of(name: str) -> Family | None:
    """The row a metric name belongs to: the longest prefix that matches, or None."""
    found = [f for f in FAMILIES if f.matches(name)]
    return max(found, key=lambda f: len(f.prefix)) if found else None


def sections() -> list[str]:
    """The report's metric sections, in the registry's order."""
    return list(dict.fromkeys(f.section for f in FAMILIES if f.section))


def section_of(name: str) -> str:
    family = family_of(name)
    return family.section if family else ""


def in_section(metrics: dict[str, Any], section: str) -> Iterator[tuple[str, Any]]:
    """``(name, metric)`` of the metrics the report lists under ``section``, in the report's order."""
    return ((n, m) for n, m in metrics.items() if section_of(n) == section)


def calibration(name: str) -> str:
    family = family_of(name)
    return family.calibration if family else ""


def readme_starts() -> tuple[str, ...]:
    """The starts of every name the README's reference table shows."""
    return tuple(dict.fromkeys(s for f in FAMILIES for s in f.readme))


def plotted(name: str) -> bool:
    family = family_of(name)
    return bool(family and family.plotted)


def below(metrics: dict[str, Any], family: Family, *parts: Any) -> Iterable[tuple[str, Any]]:
    """``(name, metric)`` of the metrics of ``family`` under ``parts`` (all of the family without
    parts): ``below(metrics, TRAIN_PHASE, "breakout")``."""
    start = family.under(*parts) if parts else family.prefix
    return ((n, m) for n, m in metrics.items() if n.startswith(start))
