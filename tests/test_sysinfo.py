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
