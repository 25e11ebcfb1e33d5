"""On a CUDA machine, NVML must see the GPU that torch sees, with its link and clocks."""

from appliance.sysinfo import fingerprint


def test_fingerprint_lists_the_cuda_device():
    import torch

    fp = fingerprint()
    assert fp["gpu_error"] is None
    assert len(fp["gpus"]) >= torch.cuda.device_count() >= 1
    gpu = fp["gpus"][0]
    assert gpu["name"] and gpu["uuid"].startswith("GPU-")
    assert gpu["memory_total_bytes"] > 2**30
    assert fp["versions"]["nvidia_driver"]
