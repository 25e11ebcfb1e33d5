"""Which hardware profile a machine gets, and a profile derived from a GPU's properties where no
measured profile names it.

The measured profiles (``bench/profiles/*.yaml``: 2080, 4090, 5090, h100, h200, cpu) are matched by
the GPU's name first. Any other CUDA GPU gets a profile named by its architecture (ampere, ada,
hopper, ...), derived from what the GPU is:

* its memory picks the size class: the sizes (``vec.num_envs``, ``train.minibatch_size``,
  ``train.max_minibatch_size``, ``train.buffers``) of the measured profile of that much memory
  (:data:`SIZE_CLASSES`: h100's from 30 GiB, 4090's from 15 GiB, 2080's from 7 GiB), and that
  profile's per-env refinements in the env YAMLs (``profiles.h100`` ...). Below 7 GiB the sizes
  shrink with the memory (:func:`small_sizes`), down to the cpu profile's;
* its compute capability gives the precision: bfloat16 (and tf32) from sm_80 (Ampere) on, float32
  before;
* its SM count, the host's cores and the PCIe link are named in the reason; nothing measured yet
  says how they should change a size (``vec.num_threads auto`` follows the host's cores already).

Only ``--gpu cpu`` or a machine where torch has no usable CUDA device trains on the CPU; the latter
is said in one line (:attr:`Choice.why`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.config import files
from appliance.config.files import ARCHITECTURES, gpu_matches, read_yaml

GIB = 2**30

DESCRIPTIONS = {
    "pascal": "NVIDIA Pascal or older (sm_6x and below): float32",
    "volta": "NVIDIA Volta (sm_70): float32",
    "turing": "NVIDIA Turing (sm_75): float32",
    "ampere": "NVIDIA Ampere (sm_80/86/87): bf16 and tf32",
    "ada": "NVIDIA Ada Lovelace (sm_89): bf16 and tf32",
    "hopper": "NVIDIA Hopper (sm_90): bf16 and tf32",
    "blackwell": "NVIDIA Blackwell (sm_100 and later): bf16 and tf32",
}


def architecture(capability: str) -> str:
    """The architecture of a compute capability ("8.6" -> ampere)."""
    major, _, minor = str(capability).partition(".")
    m, n = int(major), int(minor or 0)
    if m >= 10:
        return "blackwell"
    if m == 9:
        return "hopper"
    if m == 8:
        return "ada" if n >= 9 else "ampere"
    if m == 7:
        return "turing" if n >= 5 else "volta"
    return "pascal"


# What ``--gpu ARCH`` is fitted to where this machine has no GPU of that architecture: one common
# GPU of each (memory, SMs, compute capability), as its maker lists it.
NOMINAL = {
    "pascal": ("Tesla P100 16GB", 16, 56, "6.0"),
    "volta": ("Tesla V100 32GB", 32, 80, "7.0"),
    "turing": ("GeForce RTX 2080 Ti", 11, 68, "7.5"),
    "ampere": ("A100 80GB", 80, 108, "8.0"),
    "ada": ("L40S", 48, 142, "8.9"),
    "hopper": ("H100 80GB", 80, 132, "9.0"),
    "blackwell": ("B200", 180, 148, "10.0"),
}

# (GiB at least, the measured profile whose sizes a GPU of that much memory takes)
SIZE_CLASSES = ((30, "h100"), (15, "4090"), (7, "2080"))
SIZE_KEYS = (
    ("vec", "num_envs"),
    ("train", "buffers"),
    ("train", "minibatch_size"),
    ("train", "max_minibatch_size"),
)

# name fragments -> architecture, for a GPU known only by its NVML name (a report's fingerprint)
NAME_HINTS = (
    (("Ada Generation",), "ada"),  # RTX 6000 Ada Generation: before "RTX 60"-like fragments
    (("Quadro RTX", "TITAN RTX"), "turing"),  # Quadro RTX 5000 is no RTX 50
    (("B100", "B200", "GB200", "RTX 50", "RTX PRO 6000 Blackwell"), "blackwell"),
    (("H100", "H200", "GH200", "H800", "H20"), "hopper"),
    (("RTX 40", "L40", "L4"), "ada"),
    (("A100", "A800", "A10", "A16", "A30", "A40", "A2", "RTX 30", "RTX A"), "ampere"),
    (("RTX 20", "T4", "GTX 16"), "turing"),
    (("V100", "TITAN V"), "volta"),
    (("P100", "P40", "P4", "GTX 10", "TITAN X"), "pascal"),
)


def architecture_from_name(name: str) -> str | None:
    """A GPU's architecture guessed from its NVML name, where its compute capability is not known."""
    for fragments, arch in NAME_HINTS:
        if any(gpu_matches(f, name) for f in fragments):
            return arch
    return None


@dataclass(frozen=True)
class Gpu:
    """What a derived profile is fitted to."""

    name: str
    memory_bytes: int | None
    sm_count: int | None = None
    capability: str | None = None
    pcie: str | None = None  # "gen 4 x16"
    host_cores: int | None = None

    @property
    def arch(self) -> str | None:
        if self.capability:
            return architecture(self.capability)
        return architecture_from_name(self.name)

    @property
    def bf16(self) -> bool:
        return self.arch in ("ampere", "ada", "hopper", "blackwell")

    def described(self) -> str:
        parts = [f"{self.memory_bytes / GIB:.0f} GiB" if self.memory_bytes else "memory unknown"]
        if self.sm_count:
            parts.append(f"{self.sm_count} SMs")
        if self.capability:
            parts.append(f"sm_{self.capability.replace('.', '')}")
        parts.append("bf16/tf32" if self.bf16 else "no bf16")
        if self.pcie:
            parts.append(f"PCIe {self.pcie}")
        if self.host_cores:
            parts.append(f"{self.host_cores} host cores")
        return f"{self.name} ({', '.join(parts)})"


def nominal(arch: str) -> Gpu:
    name, gib, sms, cc = NOMINAL[arch]
    return Gpu(name=f"a nominal {name}", memory_bytes=gib * GIB, sm_count=sms, capability=cc)


def size_class(memory_bytes: int | None) -> str | None:
    """The measured profile whose sizes a GPU with this much memory takes (None: less than 7 GiB)."""
    if memory_bytes is None:
        return SIZE_CLASSES[-1][1]  # unknown memory: the smallest measured GPU's
    for gib, name in SIZE_CLASSES:
        if memory_bytes >= gib * GIB:
            return name
    return None


def _pow2_floor(x: float) -> int:
    return 1 << max(0, int(x).bit_length() - 1) if x >= 1 else 1


def small_sizes(memory_bytes: int) -> dict[str, dict[str, int]]:
    """Sizes for a GPU under 7 GiB: the 2080 profile's (2,048 envs and 16,384-row minibatches at
    8 GiB) scaled down with the memory, a power of two each, no lower than the cpu profile's."""
    scale = memory_bytes / (8 * GIB)
    envs = max(256, _pow2_floor(2048 * scale))
    minibatch = max(2048, _pow2_floor(16384 * scale))
    return {
        "vec": {"num_envs": envs},
        "train": {
            "buffers": 2 if envs >= 1024 else 1,
            "minibatch_size": minibatch,
            "max_minibatch_size": minibatch,
        },
    }


@dataclass
class Derived:
    """A profile derived from a GPU: its layer (config sections), the measured profile its sizes
    and per-env refinements come from (None below 7 GiB) and what it was fitted to, in words."""

    name: str
    layer: dict[str, dict[str, Any]]
    like: str | None
    fitted: str
    short: str  # "derived from NVIDIA L40S": for --show-origin
    meta: dict[str, Any] = field(default_factory=dict)


def derive(arch: str, gpu: Gpu | None = None) -> Derived:
    """The ``arch`` profile fitted to ``gpu`` (one of that architecture), or to the nominal GPU of
    :data:`NOMINAL` where none is given."""
    gpu = gpu if gpu is not None and gpu.arch in (arch, None) else nominal(arch)
    like = size_class(gpu.memory_bytes)
    layer: dict[str, dict[str, Any]] = {"vec": {}, "train": {"device": "cuda"}, "bench": {}}
    if like is not None:
        base = read_yaml(files.profile_dir() / f"{like}.yaml", "hardware profile")
        for section, key in SIZE_KEYS:
            if key in (base.get(section) or {}):
                layer[section][key] = base[section][key]
        if "threads" in (base.get("bench") or {}):
            layer["bench"]["threads"] = base["bench"]["threads"]
        sizes = sizes_words(like)
    else:
        assert gpu.memory_bytes is not None
        for section, values in small_sizes(gpu.memory_bytes).items():
            layer[section].update(values)
        sizes = sizes_words(None)
    if gpu.bf16:
        layer["train"]["precision"] = "bfloat16"
    layer = {s: v for s, v in layer.items() if v}
    meta = {"gpu": "", "description": DESCRIPTIONS[arch], "like": like or ""}
    return Derived(
        arch, layer, like, f"derived from {gpu.described()}: {sizes}", f"derived from {gpu.name}", meta
    )


def sizes_words(like: str | None) -> str:
    """Where a derived profile's sizes come from, in words."""
    if like is None:
        return "sizes scaled down to its memory (under 7 GiB; not measured)"
    gib = next(g for g, name in SIZE_CLASSES if name == like)
    bigger = [g for g, name in SIZE_CLASSES if g > gib]
    span = f"{gib}-{min(bigger)} GiB" if bigger else f"{gib} GiB and more"
    return f"sizes of the {like} profile (the measured one for {span})"


# ----------------------------------------------------------------------------- detection


@dataclass(frozen=True)
class Choice:
    """The profile a machine gets, the GPU it was fitted to (None: the cpu profile or a measured one
    matched by name) and why, in one line."""

    name: str
    why: str
    gpu: Gpu | None = None


def _measured() -> list[tuple[str, str]]:
    """(profile, the GPU name it expects) for each measured GPU profile."""
    out = []
    for path in sorted(files.profile_dir().glob("*.yaml")):  # looked up each time: tests point it elsewhere
        meta = read_yaml(path, "hardware profile").get("profile")
        expected = str(meta.get("gpu") or "") if isinstance(meta, dict) else ""
        if expected:
            out.append((path.stem, expected))
    return out


def _pcie(nvml_gpu: Mapping[str, Any]) -> str | None:
    gen, width = nvml_gpu.get("pcie_max_gen"), nvml_gpu.get("pcie_max_width")
    return f"gen {gen} x{width}" if gen and width else None


def gpu_of(
    nvml_gpu: Mapping[str, Any] | None,
    cuda_device: Mapping[str, Any] | None = None,
    host_cores: int | None = None,
) -> Gpu:
    """One GPU's facts from NVML's view of it (a fingerprint's ``gpus`` entry) and torch's (SM count,
    compute capability), either may be missing."""
    nvml_gpu, cuda_device = nvml_gpu or {}, cuda_device or {}
    return Gpu(
        name=str(nvml_gpu.get("name") or cuda_device.get("name") or "a GPU"),
        # torch's figure first: what this process can use (a MIG slice, not the whole GPU)
        memory_bytes=cuda_device.get("memory_total_bytes") or nvml_gpu.get("memory_total_bytes"),
        sm_count=cuda_device.get("sm_count"),
        capability=cuda_device.get("compute_capability") or nvml_gpu.get("compute_capability"),
        pcie=_pcie(nvml_gpu),
        host_cores=host_cores,
    )


def choose(
    nvml_gpus: list[dict[str, Any]],
    cuda_devices: list[dict[str, Any]] | None = None,
    cuda_error: str | None = None,
    host_cores: int | None = None,
) -> Choice:
    """The profile for a machine with these GPUs. ``cuda_devices``: what torch can use (None: not
    asked, as for a report's fingerprint; the GPUs NVML lists are then taken as usable). The first
    usable GPU decides (the one ``cuda`` means)."""
    if cuda_devices is not None and not cuda_devices:
        if nvml_gpus:
            seen = ", ".join(str(g.get("name")) for g in nvml_gpus)
            return Choice(
                "cpu", f"training on the CPU: NVML sees {seen} but torch cannot use it ({cuda_error})"
            )
        return Choice("cpu", f"no usable CUDA device ({cuda_error or 'none found'}): training on the CPU")
    if not nvml_gpus and not cuda_devices:
        return Choice("cpu", "no GPU found: training on the CPU")
    first_cuda = cuda_devices[0] if cuda_devices else None
    first_nvml = nvml_gpus[0] if nvml_gpus else None
    if first_cuda is not None and nvml_gpus:  # the NVML entry of the same GPU (NVML's order may differ)
        first_nvml = next((g for g in nvml_gpus if g.get("name") == first_cuda.get("name")), first_nvml)
    gpu = gpu_of(first_nvml, first_cuda, host_cores)
    for profile, expected in _measured():
        if gpu_matches(expected, gpu.name):
            return Choice(
                profile, f"{gpu.name}: the measured {profile} profile (written for {expected} GPUs)", gpu
            )
    arch = gpu.arch
    if arch is None:  # known only by a name no hint knows: still a GPU, taken as the float32 kind
        arch = "pascal"
        return Choice(
            arch,
            f"{gpu.described()} matches no measured profile and its architecture is unknown: "
            f"the {arch} profile (float32), {sizes_words(size_class(gpu.memory_bytes))}",
            gpu,
        )
    words = f"derived from {gpu.described()}: {sizes_words(size_class(gpu.memory_bytes))}"
    return Choice(arch, f"no measured profile names it: the {arch} profile, {words}", gpu)


def detect_profile(gpus: list[dict[str, Any]]) -> str:
    """The hardware profile for a machine with these GPUs (NVML's view: a fingerprint's ``gpus``): the
    measured profile that names the GPU, else its architecture's (derived from its properties);
    'cpu' without a GPU. :func:`detect` also asks torch whether CUDA is usable (and why it chose)."""
    return choose(gpus).name


_detected: Choice | None = None


def detect() -> Choice:
    """This machine's profile (NVML's GPUs, torch's CUDA devices, the usable cores), found once per
    process."""
    global _detected
    if _detected is None:
        from appliance.sysinfo.gpu import cuda_devices, gpu_info

        gpus, _, nvml_error = gpu_info()
        if gpus or any(Path("/dev").glob("nvidia[0-9]*")):
            devices, error = cuda_devices()
        else:  # torch is not imported (a second) to learn what NVML and /dev already say
            devices, error = [], nvml_error or "NVML found no GPU"
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        _detected = choose(gpus, devices, error, cores)
    return _detected


def detected_gpu(arch: str) -> Gpu | None:
    """This machine's GPU if detection has run and found one of ``arch`` (a derived profile is then
    fitted to it, not to the nominal GPU)."""
    d = _detected
    return d.gpu if d is not None and d.gpu is not None and d.name == arch else None


CPU_KIND_WORDS = {
    "bf16": "AVX512-BF16 or AMX",
    "avx512": "AVX-512, no bf16 units",
    "avx2": "AVX2, no AVX-512",
    "avx": "AVX, no AVX2: an x86 CPU of about 2011-2014, where MKL runs its SSE4.2 code",
    "older": "no AVX: SSE4 at most, or not x86",
}


def cpu_kind_words() -> str:
    """This CPU's kind in words, and whether it is emulated (``PUFFER_CPU_KIND``)."""
    from appliance.sysinfo.cpu import (
        KIND_VARIABLE,
        TORCH_CAPS,
        cpu_kind,
        mkl_cap_ignored,
        real_kind,
        real_vendor,
    )

    kind, real = cpu_kind(), real_kind()
    emulated = f", emulated by {KIND_VARIABLE} on a CPU of the {real} kind" if kind != real else ""
    line = f"a CPU of the {kind} kind ({CPU_KIND_WORDS[kind]}{emulated})"
    if not (emulated and kind in ("avx", "older")):  # the kinds whose MKL cap is below AVX2
        return line
    vendor = real_vendor()
    if mkl_cap_ignored({"MKL_ENABLE_INSTRUCTIONS": TORCH_CAPS["MKL_ENABLE_INSTRUCTIONS"][kind]}, vendor):
        line += (
            f"; MKL ignores its cap on a CPU that is not Intel's (this one is {vendor}), so the matrix "
            "products run wider and faster than on a real CPU of that kind: emulate it on an Intel CPU "
            "to time it"
        )
    return line


def detected_why() -> str:
    """Why this machine gets the profile it does (:func:`detect`), with the CPU's kind on the cpu profile."""
    d = detect()
    return f"{d.why}; {cpu_kind_words()}" if d.name == "cpu" else d.why


def why(profile: str | None) -> str:
    """One line on why a run uses ``profile``: detection's reason where detection picked it,
    else that it was asked for with ``--gpu`` (and what detection found, if it ran); on the cpu
    profile, the CPU's kind too."""
    d = _detected
    if d is not None and d.name == profile:
        return f"profile '{profile}': {detected_why()}"
    if profile in ARCHITECTURES:
        gpu = detected_gpu(profile)
        return f"profile '{profile}' (--gpu): {derive(profile, gpu).fitted}"
    line = f"profile '{profile}' (--gpu {profile})" + (f"; this machine would get {d.name}" if d else "")
    return f"{line}; {cpu_kind_words()}" if profile == "cpu" else line


def unknown_profile(name: str) -> Exception:
    """The one-line error for a ``--gpu`` name no profile has: the nearest name, the valid names, how
    to see which this machine gets, and for a GPU's model name (``a100``) its architecture's profile."""
    from appliance.config.files import LIST_PROFILES, profile_names
    from appliance.config.layers import unknown_name

    arch = None
    if len(name) >= 3:  # "3090" is an RTX 3090
        arch = architecture_from_name(name) or (
            architecture_from_name(f"RTX {name}") if name.isdigit() else None
        )
    also = f" (a GPU named {name} is {arch}: --gpu {arch})" if arch else ""
    return unknown_name("hardware profile", name, profile_names(), "valid profiles", LIST_PROFILES + also)
