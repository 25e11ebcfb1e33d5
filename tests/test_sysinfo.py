"""The fingerprint never crashes, and NVML fields map where they should."""

from __future__ import annotations

import json
from types import SimpleNamespace

from appliance import sysinfo


class FakeNVML:
    """Just enough of pynvml for one GPU; a method listed in `fail` raises like NVML does."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2

    def __init__(self, fail=(), init_error=None):
        self.fail, self.init_error, self.shutdown = set(fail), init_error, False

    def __getattr__(self, name):
        raise AttributeError(name)

    def _value(self, name, value):
        if name in self.fail:
            raise RuntimeError("Not Supported")
        return value

    def nvmlInit(self):
        if self.init_error:
            raise self.init_error

    def nvmlShutdown(self):
        self.shutdown = True

    def nvmlSystemGetDriverVersion(self):
        return b"580.1"

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("h", i)

    def nvmlDeviceGetName(self, h):
        return self._value("name", b"NVIDIA H100 80GB HBM3")

    def nvmlDeviceGetUUID(self, h):
        return "GPU-1234"

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=80 * 2**30)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return 4

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return 8

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return {1: 1980, 2: 2619}[kind]

    def nvmlDeviceGetClockInfo(self, h, kind):
        return self._value("clock", {1: 345, 2: 2619}[kind])

    def nvmlDeviceGetPowerManagementLimit(self, h):
        return 700000


def test_fingerprint_on_this_machine_is_complete_and_json():
    fp = sysinfo.fingerprint()
    json.dumps(fp)
    assert fp["cpu"]["logical_cores"] >= 1 and fp["ram_bytes"] > 0
    assert fp["versions"]["numpy"] and fp["versions"]["puffer_bench"]
    assert len(fp["host_hash"]) == 12
    if not fp["gpus"]:
        assert fp["gpu_error"], "no GPU must come with a reason"


def test_fake_nvml_fields_map():
    fake = FakeNVML()
    gpus, driver, error = sysinfo.gpu_info(fake)
    assert error is None and driver == "580.1" and fake.shutdown
    (gpu,) = gpus
    assert gpu["name"] == "NVIDIA H100 80GB HBM3"  # bytes decoded
    assert gpu["memory_total_bytes"] == 80 * 2**30
    assert (gpu["pcie_max_gen"], gpu["pcie_max_width"], gpu["pcie_gen"], gpu["pcie_width"]) == (5, 16, 4, 8)
    assert (gpu["sm_clock_max_mhz"], gpu["mem_clock_max_mhz"], gpu["sm_clock_mhz"]) == (1980, 2619, 345)
    assert gpu["power_limit_w"] == 700.0


def test_unsupported_field_is_none_not_a_crash():
    gpus, _, error = sysinfo.gpu_info(FakeNVML(fail={"clock"}))
    assert error is None and gpus[0]["sm_clock_mhz"] is None and gpus[0]["name"]


def test_no_driver_gives_empty_list_and_reason():
    gpus, driver, error = sysinfo.gpu_info(FakeNVML(init_error=RuntimeError("Driver Not Loaded")))
    assert gpus == [] and driver is None
    assert "NVML unavailable" in error and "Driver Not Loaded" in error
    fp = sysinfo.fingerprint(FakeNVML(init_error=RuntimeError("Driver Not Loaded")))
    assert fp["gpus"] == [] and "Driver Not Loaded" in fp["gpu_error"]


# ---------------------------------------------------------------------- a fingerprint that tells machines apart


class FakeNVMLState(FakeNVML):
    """A GPU that also answers ECC, MIG, persistence and throttle-reason queries."""

    def nvmlDeviceGetEccMode(self, h):
        return (1, 1)

    def nvmlDeviceGetMigMode(self, h):
        return [0, 0]

    def nvmlDeviceGetPersistenceMode(self, h):
        return 1

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return 0x4 | 0x40  # software power cap + hardware thermal slowdown


def fake_root(tmp_path, machine_id="m" * 32, boot_id="b-1"):
    """A /proc and /sys of a 4-core Sapphire Rapids VM with a cgroup v2 quota of 2.5 cores."""
    files = {
        "proc/cpuinfo": (
            "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
            "model name\t: Intel(R) Xeon(R) Platinum 8480+\nstepping\t: 8\nmicrocode\t: 0x2b000590\n"
            "cpu MHz\t\t: 2000.000\nflags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw amx_tile amx_bf16 "
            "hypervisor\nbogomips\t: 4000.00\n\nprocessor\t: 1\nvendor_id\t: GenuineIntel\n"
        ),
        "sys/devices/system/cpu/cpu0/cache/index0/level": "1",
        "sys/devices/system/cpu/cpu0/cache/index0/type": "Data",
        "sys/devices/system/cpu/cpu0/cache/index0/size": "48K",
        "sys/devices/system/cpu/cpu0/cache/index2/level": "2",
        "sys/devices/system/cpu/cpu0/cache/index2/type": "Unified",
        "sys/devices/system/cpu/cpu0/cache/index2/size": "2048K",
        "sys/devices/system/cpu/cpu0/cache/index3/level": "3",
        "sys/devices/system/cpu/cpu0/cache/index3/type": "Unified",
        "sys/devices/system/cpu/cpu0/cache/index3/size": "105M",
        "sys/devices/system/cpu/cpu0/cpufreq/base_frequency": "2000000",
        "sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq": "3800000",
        "sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq": "3100000",
        "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor": "powersave",
        "sys/devices/system/cpu/smt/active": "1",
        "sys/devices/system/node/node0/cpulist": "0-1",
        "sys/devices/system/node/node1/cpulist": "2-3",
        "proc/self/cgroup": "0::/bench.slice\n",
        "sys/fs/cgroup/bench.slice/cpu.max": "250000 100000",
        "sys/fs/cgroup/bench.slice/cpuset.cpus.effective": "0-2",
        "sys/class/dmi/id/product_name": "Standard PC (Q35 + ICH9, 2009)",
        "etc/machine-id": machine_id,
        "proc/sys/kernel/random/boot_id": boot_id,
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text + "\n")
    return tmp_path


def test_cpu_details_from_fake_proc_and_sys(tmp_path):
    cpu = sysinfo.cpu_details(fake_root(tmp_path), pycpu={})
    assert (cpu["vendor"], cpu["family"], cpu["model_number"], cpu["stepping"]) == ("GenuineIntel", 6, 143, 8)
    assert cpu["codename"] == "Sapphire Rapids" and cpu["brand"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert cpu["isa"] == {"avx": True, "avx2": True, "avx512": True, "amx": True, "bf16": True}
    assert {"avx512f", "amx_tile", "amx_bf16"} <= set(cpu["flags"]) and "fpu" not in cpu["flags"]
    assert cpu["caches"] == {"L1d": 48 * 2**10, "L2": 2 * 2**20, "L3": 105 * 2**20}
    assert (cpu["base_mhz"], cpu["max_mhz"], cpu["current_mhz"]) == (2000, 3800, 3100)
    assert cpu["governor"] == "powersave" and cpu["smt_active"] is True and cpu["numa_nodes"] == 2
    assert cpu["cgroup"]["quota_cores"] == 2.5 and cpu["cgroup"]["cpuset"] == "0-2"
    virt = cpu["virtualization"]
    assert virt["hypervisor_flag"] and virt["product"].startswith("Standard PC")


def test_cgroup_v1_unlimited_quota_and_missing_files(tmp_path):
    (tmp_path / "sys/fs/cgroup/cpu").mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/cpu/cpu.cfs_quota_us").write_text("-1\n")
    (tmp_path / "sys/fs/cgroup/cpu/cpu.cfs_period_us").write_text("100000\n")
    cpu = sysinfo.cpu_details(tmp_path, pycpu={})
    assert cpu["cgroup"]["quota_cores"] is None and cpu["cgroup"]["quota_source"].startswith("cgroup v1")
    # nothing else exists: every field is None or empty, never an exception
    assert cpu["family"] is None and cpu["caches"] == {} and cpu["numa_nodes"] is None


def test_host_id_tells_apart_machines_sharing_a_hostname(tmp_path):
    a, sources = sysinfo.host_id(fake_root(tmp_path / "a", boot_id="boot-a"), "cpu x")
    b, _ = sysinfo.host_id(fake_root(tmp_path / "b", boot_id="boot-b"), "cpu x")
    c, _ = sysinfo.host_id(fake_root(tmp_path / "c", boot_id="boot-a"), "cpu y")
    assert len({a, b, c}) == 3 and len(a) == 12
    assert sources == ["/etc/machine-id", "boot id", "CPU model/stepping, cores and RAM"]
    _, fallback = sysinfo.host_id(tmp_path / "empty", "cpu x")
    assert fallback[0] == "hostname"


def test_fake_nvml_state_fields_and_throttle_names():
    (gpu,) = sysinfo.gpu_info(FakeNVMLState())[0]
    assert gpu["ecc_enabled"] is True and gpu["mig_enabled"] is False and gpu["persistence_mode"] is True
    assert gpu["throttle_reasons"] == ["sw_power_cap", "hw_thermal_slowdown"]
    (old,) = sysinfo.gpu_info(FakeNVML())[0]  # an NVML without those calls: None, not a crash
    assert old["ecc_enabled"] is None and old["throttle_reasons"] is None


def test_fingerprint_records_build_flags_calibration_and_host_source(tmp_path):
    fp = sysinfo.fingerprint(FakeNVMLState(), root=fake_root(tmp_path), pycpu={})
    json.dumps(fp)
    assert fp["cpu"]["model"] == "Intel(R) Xeon(R) Platinum 8480+" and fp["cpu"]["isa"]["amx"]
    assert "/etc/machine-id" in fp["host_id_from"] and fp["gpus"][0]["throttle_reasons"]
    cal = fp["calibration"]
    assert cal["int_mops"] > 0 and cal["float_gflops"] > 0 and cal["copy_gbs"] > 0
    assert len(cal["samples"]["int_mops"]) == cal["runs"] and 0 < cal["cpu_share"] <= 1.5
    assert fp["versions"]["torch_cpu_capability"] and fp["versions"]["torch_threads"] >= 1
    build = fp["build"]
    assert build["extension"].startswith("_ocean") and build["compiler"]
    assert "-O3" in (build["flags"] or ""), build  # setup.py builds with -frecord-gcc-switches
