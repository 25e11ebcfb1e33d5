"""Markers: `gpu` tests are skipped without a CUDA device; `slow` ones still run in make test."""

from __future__ import annotations

import functools

import pytest


@functools.cache
def cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="needs a CUDA device (none found)")
    for item in items:
        if "/tests/gpu/" in str(item.path):  # everything under tests/gpu/ is a GPU test
            item.add_marker(pytest.mark.gpu)
        if "gpu" in item.keywords and not cuda_available():
            item.add_marker(skip)
