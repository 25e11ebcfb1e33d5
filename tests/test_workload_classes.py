"""Suites by workload class: the quick and full suites name one env per class (light vector, pixels,
many agents per env, byte observations), measure each in env and training speed, and the report
has a table of them with each class's training bottleneck."""

from __future__ import annotations

import numpy as np
import pytest

from appliance import ocean
from appliance.bench.report.markdown import class_lines
from appliance.bench.suite.definition import load, validate
from appliance.errors import ConfigError

CLASSES = {"light-vector", "pixels", "many-agents", "byte-obs"}


@pytest.mark.parametrize("suite", ["quick", "full"])
def test_quick_and_full_measure_one_env_of_each_workload_class(suite):
    data, _ = load(suite)
    classes = data["classes"]
    assert set(classes) == CLASSES
    info = {label: ocean.describe(env) for label, env in classes.items()}
    light = info["light-vector"]
    assert light["obs_dtype"] == "float32" and light["obs_shape"] is None and light["agents_per_env"] == 1
    assert info["pixels"]["obs_shape"] is not None and info["pixels"]["obs_dtype"] == "uint8"
    assert info["many-agents"]["agents_per_env"] > 1 and len(info["many-agents"]["action_nvec"]) > 1
    assert np.dtype(info["byte-obs"]["obs_dtype"]).itemsize == 1 and info["byte-obs"]["obs_shape"] is None
    for env in classes.values():  # every class is measured where the table reads it
        assert env in data["env_sps"]["envs"] and env in data["train_sps"]["envs"]


@pytest.mark.parametrize(
    "classes, fragment",
    [
        ({"pixels": "platformer"}, "must also be in env_sps.envs and train_sps.envs"),
        ({"pixels": ["platformer"]}, "must name one Ocean env"),
        ({"pixels": "no_such_env"}, "no_such_env"),
        ([], "must map a workload class"),
    ],
)
def test_a_class_must_name_an_ocean_env_the_suite_measures(classes, fragment):
    suite = {
        "name": "t",
        "env_sps": {"envs": ["breakout"]},
        "train_sps": {"envs": ["breakout"]},
        "classes": classes,
    }
    with pytest.raises(ConfigError, match=fragment):
        validate(suite)


def test_the_report_has_a_row_per_class_with_its_speeds_and_bottleneck():
    def metric(median: float, busy: bool = False) -> dict:
        return {"median": median, "noise": {"busy": busy}}

    report = {
        "suite": {"definition": {"classes": {"light-vector": "breakout", "pixels": "platformer"}}},
        "metrics": {
            "env_sps/breakout/threads=1": metric(12.5e6),
            "train_sps/breakout": metric(110e3),
            "env_sps/platformer/threads=1": metric(2.0e6, busy=True),
        },
        "analysis": {
            "training": {"breakout": {"summary": "breakout trains at 110K. The bottleneck is forward."}}
        },
    }
    lines = class_lines(report)
    assert "## Workload classes" in lines
    assert "| light-vector | breakout | 12.5 M | 0.11 M | The bottleneck is forward |" in lines
    assert "| pixels | platformer | 2 M (busy) | - | - |" in lines
    assert class_lines({"suite": {"definition": {}}}) == []
