"""The cupy kernels on a real GPU: each against its torch reference (gpu-check's cases, at breakout
scale), launched on torch's current stream, no allocation with caller buffers, and the report."""

from __future__ import annotations

import json

import pytest
import torch

from appliance import gpucheck as check
from appliance.gpu import kernels, reference
from appliance.train import advantage as advantage_definition

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def force_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("cupy")
    monkeypatch.setenv(kernels.ENV, "cuda")


def test_every_kernel_matches_its_reference_at_breakout_scale() -> None:
    failed = []
    for case in check._cases(kernels, reference, torch.device("cuda", 0)):
        ok, detail = case["compare"]()
        if not ok:
            failed.append((case["op"], case["dtype"], detail))
    assert not failed


def test_sample_logits_runs_on_the_current_stream_without_allocating() -> None:
    dev = torch.device("cuda", 0)
    out = torch.randn(8192, 4, device=dev)
    action = torch.empty(8192, dtype=torch.int64, device=dev)
    logprob, value = torch.empty(8192, device=dev), torch.empty(8192, device=dev)
    kernels.sample_logits(out, [3], 1, 0, action=action, logprob=logprob, value=value)  # loads the module
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        side.wait_stream(torch.cuda.current_stream(dev))
        for step in range(5):
            kernels.sample_logits(out, [3], 1, step, action=action, logprob=logprob, value=value)
    assert torch.cuda.memory_allocated() == before
    side.synchronize()
    ra, rlp, rv = reference.sample_logits(out, [3], 1, 4)
    torch.testing.assert_close(value, rv)
    assert float((action == ra).float().mean()) > 0.999
    torch.testing.assert_close(logprob, rlp, rtol=1e-5, atol=1e-4)


def test_cuda_graph_capture_of_advantage() -> None:
    dev = torch.device("cuda", 0)
    args = [torch.randn(256, 64, device=dev) for _ in range(2)]
    args += [torch.zeros(256, 64, device=dev), torch.ones(256, 64, device=dev)]
    out = torch.empty(256, 64, device=dev)
    kernels.advantage(*args, 0.99, 0.95, out=out)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kernels.advantage(*args, 0.99, 0.95, out=out)
    args[0].copy_(torch.randn(256, 64, device=dev))
    graph.replay()
    torch.cuda.synchronize()
    expected = advantage_definition.advantage(*args, 0.99, 0.95)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)


def test_gpu_check_writes_a_report(tmp_path) -> None:
    data = check.run_check(tmp_path, runs=2, log=lambda _: None)
    assert data["analysis"]["passed"], data["analysis"]["kernels"]
    (path,) = (tmp_path / "kernels").glob("*.json")
    saved = json.loads(path.read_text())
    assert saved["metrics"]["kernel/advantage/f32/speedup"]["median"] > 0
