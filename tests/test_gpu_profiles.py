"""Profiles from the hardware (issue 60, part 1): any CUDA GPU gets a GPU profile, a measured one where
its name matches, else one derived from its properties; only no usable CUDA device (or --gpu cpu)
trains on the CPU, and that is said. NVML and torch.cuda are faked: no GPU is needed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from appliance.cli import cli
from appliance.config import hardware, resolve
from appliance.config.files import env_names
from appliance.config.memory import estimate_memory
from appliance.sysinfo import gpu as sysgpu

MIB = 2**20

# (NVML name, NVML memory total in MiB, SMs, compute capability, profile, num_envs and minibatch
# of its profile on an env without refinements (squared))
TABLE = [
    ("NVIDIA H100 80GB HBM3", 81559, 132, (9, 0), "h100", 8192, 65536),
    ("NVIDIA GeForce RTX 4090", 24564, 128, (8, 9), "4090", 4096, 32768),
    ("NVIDIA H200", 143771, 132, (9, 0), "h200", 8192, 65536),
    ("NVIDIA A100-SXM4-80GB", 81920, 108, (8, 0), "ampere", 8192, 65536),
    ("NVIDIA GeForce RTX 3090", 24576, 82, (8, 6), "ampere", 4096, 32768),
    ("NVIDIA L40S", 46068, 142, (8, 9), "ada", 8192, 65536),
]


class FakeNvml:
    """pynvml with the calls gpu_info makes, for one GPU."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2

    def __init__(self, name: str, mib: int) -> None:
        self.name, self.mib = name, mib

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlSystemGetDriverVersion(self):
        return "560.35"

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetName(self, h):
        return self.name

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=self.mib * MIB)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return 4

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return 16

    def __getattr__(self, name):  # every other query: not supported by this GPU
        if name.startswith("nvml"):

            def unsupported(*args):
                raise RuntimeError("not supported")

            return unsupported
        raise AttributeError(name)


def fake_torch(name: str, mib: int, sms: int, cc: tuple[int, int], available: bool = True):
    props = SimpleNamespace(
        name=name, total_memory=mib * MIB, multi_processor_count=sms, major=cc[0], minor=cc[1]
    )
    cuda = SimpleNamespace(
        is_available=lambda: available,
        device_count=lambda: 1 if available else 0,
        get_device_properties=lambda i: props,
    )
    return SimpleNamespace(cuda=cuda, version=SimpleNamespace(cuda="12.4"))


@pytest.fixture
def machine(monkeypatch):
    """Make this machine one with the given GPU as NVML and torch.cuda see it; detection starts afresh."""
    real_info, real_cuda = sysgpu.gpu_info, sysgpu.cuda_devices

    def make(name: str, mib: int, sms: int, cc: tuple[int, int], usable: bool = True) -> hardware.Choice:
        monkeypatch.setattr(hardware, "_detected", None)
        monkeypatch.setattr(sysgpu, "gpu_info", lambda: real_info(FakeNvml(name, mib)))
        monkeypatch.setattr(sysgpu, "cuda_devices", lambda: real_cuda(fake_torch(name, mib, sms, cc, usable)))
        return hardware.detect()

    yield make
    monkeypatch.setattr(hardware, "_detected", None)


def fits(env: str, cfg, mib: int) -> bool:
    """The run's buffers (the trainer's experience and the vector's) take under a quarter of the GPU's
    memory, the rest left to the CUDA context, the weights and a minibatch's activations."""
    need = estimate_memory(env, cfg.data)
    return need["vector"] + need["training"] < mib * MIB / 4


@pytest.mark.parametrize("name,mib,sms,cc,profile,envs,minibatch", TABLE, ids=[t[0] for t in TABLE])
def test_every_gpu_of_the_table_trains_on_it_with_sizes_that_fit(
    machine, name, mib, sms, cc, profile, envs, minibatch
):
    chosen = machine(name, mib, sms, cc)
    assert chosen.name == profile, chosen
    assert name in chosen.why
    for env in ("squared", "breakout"):
        cfg = resolve(env=env, profile=chosen.name)
        assert cfg.train.device == "cuda"
        assert cfg.train.precision == "bfloat16"  # every GPU of the table has bf16
        assert cfg.vec.num_envs % cfg.train.buffers == 0
        assert fits(env, cfg, mib)
    cfg = resolve(env="squared", profile=chosen.name)
    assert (cfg.vec.num_envs, cfg.train.minibatch_size) == (envs, minibatch)


def test_a_derived_profile_takes_the_measured_sizes_of_its_memory_class(machine):
    """An A100 is sized as the h100 (and breakout's h100 refinement applies); an RTX 3090 as the 4090."""
    machine("NVIDIA A100-SXM4-80GB", 81920, 108, (8, 0))
    a100 = resolve(env="breakout", profile="ampere")
    h100 = resolve(env="breakout", profile="h100")
    for section, key in hardware.SIZE_KEYS:
        assert a100[section][key] == h100[section][key], key
    assert "derived from NVIDIA A100-SXM4-80GB" in a100.origin("vec", "num_envs")
    assert "profiles.h100" in a100.origin("train", "minibatch_size")
    machine("NVIDIA GeForce RTX 3090", 24576, 82, (8, 6))
    rtx3090, rtx4090 = resolve(env="squared", profile="ampere"), resolve(env="squared", profile="4090")
    for section, key in hardware.SIZE_KEYS:
        assert rtx3090[section][key] == rtx4090[section][key], key


def test_a_gpu_with_too_little_memory_for_the_measured_sizes_gets_smaller_ones(machine):
    """A 2 GiB Pascal: under the 7 GiB of the smallest measured GPU class (2080's 2,048 envs): the sizes
    shrink with the memory, still on the GPU, in float32 (no bf16 before sm_80)."""
    chosen = machine("NVIDIA GeForce GTX 1050", 2048, 5, (6, 1))
    assert chosen.name == "pascal"
    assert "under 7 GiB" in chosen.why
    two_gib = resolve(env="squared", profile="pascal")
    eight = resolve(env="squared", profile="2080")
    assert two_gib.train.device == "cuda"
    assert two_gib.train.precision == "float32"
    assert two_gib.vec.num_envs == 512 < eight.vec.num_envs
    assert two_gib.train.minibatch_size == 4096 < eight.train.minibatch_size
    for env in ("squared", "breakout", "snake", "platformer"):
        if env in env_names():
            assert fits(env, resolve(env=env, profile="pascal"), 2048), env
    tiny = hardware.small_sizes(512 * MIB)  # no lower than the cpu profile's sizes
    assert (tiny["vec"]["num_envs"], tiny["train"]["minibatch_size"]) == (256, 2048)


def test_a_big_gpu_without_bf16_keeps_float32(machine):
    """A Quadro RTX 8000 (48 GB, Turing): h100-class sizes, but float32."""
    chosen = machine("Quadro RTX 8000", 49152, 72, (7, 5))
    cfg = resolve(env="squared", profile=chosen.name)
    assert chosen.name == "turing"
    assert (cfg.train.device, cfg.train.precision, cfg.vec.num_envs) == ("cuda", "float32", 8192)


def test_a_gpu_torch_cannot_use_trains_on_the_cpu_and_says_so_in_one_line(machine):
    chosen = machine("NVIDIA H200", 143771, 132, (9, 0), usable=False)
    assert chosen.name == "cpu"
    assert "NVML sees NVIDIA H200 but torch cannot use it" in chosen.why
    assert "\n" not in chosen.why
    assert hardware.why("cpu").startswith("profile 'cpu': training on the CPU")


def test_no_gpu_is_the_cpu_profile_as_before(monkeypatch):
    monkeypatch.setattr(hardware, "_detected", None)
    monkeypatch.setattr(sysgpu, "gpu_info", lambda: ([], None, "NVML unavailable"))
    monkeypatch.setattr(hardware.Path, "glob", lambda self, pattern: iter(()))  # no /dev/nvidia*
    monkeypatch.setattr(sysgpu, "cuda_devices", lambda: pytest.fail("torch asked without a GPU"))
    chosen = hardware.detect()
    assert chosen.name == "cpu"
    assert "training on the CPU" in chosen.why
    monkeypatch.setattr(hardware, "_detected", None)


def test_the_first_line_of_train_says_the_profile_and_why(machine):
    from appliance.train.session import header

    machine("NVIDIA L40S", 46068, 142, (8, 9))
    cfg = resolve(env="squared", profile="ada")
    trainer = SimpleNamespace(
        device="cuda", precision="bfloat16", vec=SimpleNamespace(num_agents=8192), batch_size=524288
    )
    line = header(cfg, trainer)
    assert line.startswith(
        "train squared: profile 'ada': no measured profile names it: the ada profile, derived"
    )
    assert "NVIDIA L40S (45 GiB, 142 SMs, sm_89, bf16/tf32, PCIe gen 4 x16" in line
    assert "\n" not in line


def test_gpu_accepts_architecture_names_and_an_unknown_one_says_how_to_list_them():
    runner = CliRunner()
    result = runner.invoke(cli, ["config", "breakout", "--gpu", "hopper", "--json"])
    assert result.exit_code == 0, result.output
    assert '"device": "cuda"' in result.output and '"profile": "hopper"' in result.output
    result = runner.invoke(cli, ["config", "breakout", "--gpu", "a100"])
    out = result.output.strip()
    assert result.exit_code == 2 and len(out.splitlines()) == 1, out
    assert (
        "a GPU named a100 is ampere: --gpu ampere" in out and "puffer-bench info" in out and "hopper" in out
    )


def test_info_names_the_profile_and_why(machine, monkeypatch):
    import appliance.sysinfo as sysinfo

    machine("NVIDIA A100-SXM4-80GB", 81920, 108, (8, 0))
    monkeypatch.setattr(sysinfo, "fingerprint", lambda: {"gpus": []})
    monkeypatch.setattr(sysinfo, "summary", lambda fp: [("CPU", "a test CPU")])
    result = CliRunner().invoke(cli, ["info", "--json"])
    assert result.exit_code == 0, result.output
    assert '"name": "ampere"' in result.output and "NVIDIA A100-SXM4-80GB" in result.output


def test_a_report_fingerprint_without_torch_facts_is_named_by_its_gpu():
    """``run`` detects from the fingerprint (NVML only): the name gives the architecture."""
    assert (
        hardware.choose([{"name": "NVIDIA A100-SXM4-80GB", "memory_total_bytes": 80 * 2**30}]).name
        == "ampere"
    )
    assert hardware.choose([{"name": "NVIDIA RTX 6000 Ada Generation"}]).name == "ada"
    assert hardware.choose([{"name": "Quadro RTX 5000"}]).name == "turing"
    assert hardware.choose([{"name": "NVIDIA H200"}]).name == "h200"
    assert hardware.choose([{"name": "Some Future GPU"}]).name == "pascal"  # still a GPU, float32


def test_run_names_the_profile_and_why_in_its_report(monkeypatch):
    from appliance.bench.suite.session import bench_profile

    monkeypatch.setattr(hardware, "_detected", None)  # this process's own detection plays no part

    fp = {"gpus": [{"name": "NVIDIA L40S", "memory_total_bytes": 46068 * MIB}]}
    name, entry, warnings = bench_profile(None, fp)
    assert (name, warnings) == ("ada", [])
    assert (
        entry["why"].startswith("profile 'ada': no measured profile names it")
        and "NVIDIA L40S" in entry["why"]
    )
    name, entry, _ = bench_profile("cpu", fp)
    from appliance.sysinfo.cpu import cpu_kind

    assert entry["why"].startswith(f"profile 'cpu' (--gpu cpu); a CPU of the {cpu_kind()} kind (")


def test_a_broken_cuda_is_one_line_and_no_gpu_profile():
    def broken():
        raise RuntimeError("CUDA driver version is insufficient for CUDA runtime version\nmore")

    torch = SimpleNamespace(cuda=SimpleNamespace(is_available=broken), version=SimpleNamespace(cuda="12.4"))
    devices, error = sysgpu.cuda_devices(torch)
    assert (
        devices == []
        and error
        == "torch.cuda failed: RuntimeError: CUDA driver version is insufficient for CUDA runtime version"
    )
    no_cuda = SimpleNamespace(
        cuda=SimpleNamespace(is_available=lambda: False), version=SimpleNamespace(cuda=None)
    )
    assert sysgpu.cuda_devices(no_cuda) == (
        [],
        "torch.cuda is not available (this torch is built without CUDA)",
    )
    chosen = hardware.choose([{"name": "NVIDIA A100-SXM4-80GB"}], [], error)
    assert chosen.name == "cpu" and "torch cannot use it (torch.cuda failed: RuntimeError" in chosen.why


def test_a_mig_slice_is_sized_by_the_memory_torch_can_use():
    """NVML's memory is the whole A100's 80 GB; torch sees the 1g.10gb slice: sized as a 10 GB GPU."""
    nvml = [{"name": "NVIDIA A100-SXM4-80GB", "memory_total_bytes": 81920 * MIB}]
    cuda = [
        {"name": "NVIDIA A100-SXM4-80GB MIG 1g.10gb", "memory_total_bytes": 9728 * MIB, "sm_count": 14}
        | {"compute_capability": "8.0"}
    ]
    chosen = hardware.choose(nvml, cuda)
    assert chosen.name == "ampere" and "sizes of the 2080 profile" in chosen.why
    assert hardware.derive("ampere", chosen.gpu).like == "2080"
