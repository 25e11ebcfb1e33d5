"""Results folders: one up-front check that a folder can take the results (writable, with
room) for run, ab, sweep, train --report and run folders; a disk that fills anyway keeps what fits."""

from __future__ import annotations

import errno
import json
import shutil
from collections import namedtuple

import pytest
import yaml
from click.testing import CliRunner

from appliance.bench import report as rpt
from appliance.cli import cli
from appliance.errors import ApplianceError, ConfigError
from appliance.report_io import MIN_FREE, unwritable

TINY_SUITE = "name: tiny\nseconds: 0.05\ngate: false\nenv_sps:\n  envs: [squared]\n  threads: [1]\n"
TRAIN = ["--train.device", "cpu", "--vec.num-envs", "8", "--train.bptt-horizon", "8",
         "--train.minibatch-size", "64", "--policy.hidden-size", "32", "--train.total-timesteps", "128"]  # fmt: skip
Usage = namedtuple("Usage", "total used free")


@pytest.fixture
def suite(tmp_path, monkeypatch):
    from appliance.bench.suite import session as bench_run

    monkeypatch.setattr(bench_run, "SUITES_DIR", tmp_path / "suites")
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY_SUITE)
    return str(path)


@pytest.fixture
def full(tmp_path, monkeypatch):
    """A folder whose filesystem has 1 MiB free (shutil.disk_usage says so)."""
    folder = tmp_path / "full"
    real = shutil.disk_usage

    def usage(path):
        if str(path).startswith(str(folder)):
            return Usage(10 * 2**30, 10 * 2**30 - 2**20, 2**20)
        return real(path)

    monkeypatch.setattr(shutil, "disk_usage", usage)
    return folder


def test_the_check_names_the_folder_and_the_free_space(full):
    assert (
        unwritable(full)
        == f"only 1 MiB free in {full} (results need 64 MiB); free some space or write elsewhere"
    )
    assert unwritable(full, need=2**19) is None and MIN_FREE == 64 * 2**20
    assert unwritable("/proc/x").startswith("cannot write into /proc/x: ")


def _no_measuring(monkeypatch):
    from appliance.bench import envsps

    monkeypatch.setattr(envsps, "measure", lambda *a, **k: pytest.fail("measured before checking the folder"))


def test_run_refuses_a_nearly_full_out_before_measuring(full, suite, monkeypatch):
    from appliance.bench.suite.session import run_suite

    _no_measuring(monkeypatch)
    with pytest.raises(
        ConfigError, match=f"--out {full}: only 1 MiB free in {full / 'cpu'} .*nothing was measured"
    ):
        run_suite(suite, "cpu", repeats=1, out_dir=full, plots=False)


def test_train_refuses_a_nearly_full_report_folder_or_run_folder_before_training(full, tmp_path):
    runner = CliRunner()
    data = tmp_path / "exp"
    report = runner.invoke(cli, ["train", "squared", "--no-dashboard", "--train.data-dir", str(data),
                                 "--report", str(full / "r.json"), *TRAIN])  # fmt: skip
    assert report.exit_code == 2 and f"--report {full / 'r.json'}: only 1 MiB free" in report.output
    run = runner.invoke(cli, ["train", "squared", "--no-dashboard", "--train.data-dir", str(full), "--run-id", "r1",
                              *TRAIN])  # fmt: skip
    assert run.exit_code == 2 and f"run folder: only 1 MiB free in {full / 'r1'}" in run.output, run.output
    assert not (full / "r1" / "model.pt").exists()


def test_ab_refuses_a_nearly_full_out_before_the_first_round(full, suite, monkeypatch):
    _no_measuring(monkeypatch)
    ab = CliRunner().invoke(
        cli, ["ab", "base", "vec.num_envs=4", "--suite", suite, "--out", str(full / "ab.json")]
    )
    assert ab.exit_code == 2 and f"--out {full / 'ab.json'}: only 1 MiB free in {full}" in ab.output, (
        ab.output
    )


def test_sweep_refuses_a_nearly_full_folder_before_the_first_trial(full):
    sweep = CliRunner().invoke(cli, ["sweep", "squared", "--out", str(full / "s"), *TRAIN])
    assert sweep.exit_code == 2 and f"sweep folder {full / 's'}: only 1 MiB free" in sweep.output, (
        sweep.output
    )
    assert not (full / "s" / "study.db").exists()


def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_disk_that_fills_while_the_report_is_written_keeps_the_json_and_says_so(
    tmp_path, suite, monkeypatch
):
    from appliance.bench.report import writing
    from appliance.bench.suite.session import run_suite

    monkeypatch.setattr(writing, "write_bytes_atomic", _enospc)  # the Markdown, HTML and plots after the JSON
    with pytest.raises(ApplianceError) as caught:
        run_suite(suite, "cpu", repeats=1, out_dir=tmp_path / "results", plots=False)
    (saved,) = (tmp_path / "results" / "cpu").glob("*.json")
    assert str(caught.value) == (
        f"disk full writing the report into {tmp_path / 'results' / 'cpu'} (No space left on device): kept "
        f"{saved}; its Markdown, HTML and plots are missing: `puffer-bench report --render {saved}` once there is space"
    )
    assert "env_sps/squared/threads=1" in json.loads(saved.read_text())["metrics"]


def test_a_report_that_does_not_fit_at_all_goes_to_the_temp_folder(tmp_path, suite, monkeypatch):
    import tempfile

    from appliance.bench.report import writing
    from appliance.bench.suite.session import run_suite

    monkeypatch.setattr(writing, "write_bytes_exclusive", _enospc)  # not even the JSON
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "spare"))
    (tmp_path / "spare").mkdir()
    with pytest.raises(
        ApplianceError, match="disk full .*: saved it as .*spare/puffer-bench-report-.*json instead"
    ):
        run_suite(suite, "cpu", repeats=1, out_dir=tmp_path / "results", plots=False)
    (spare,) = (tmp_path / "spare").glob("puffer-bench-report-*.json")
    assert rpt.load(spare)["metrics"]


def _full_for(monkeypatch, *names):
    """report_io's atomic writes fail with ENOSPC for these file names."""
    import appliance.report_io as io

    real = io.write_bytes_atomic

    def write(path, data):
        if path.name in names:
            _enospc()
        return real(path, data)

    monkeypatch.setattr(io, "write_bytes_atomic", write)


def test_an_ab_result_keeps_its_json_when_the_markdown_does_not_fit(tmp_path, monkeypatch):
    from appliance.compare import ab

    result = {"rounds": 2, "order": [], "metrics": {}, "suite": {"name": "t"}, "profile": "cpu",
              "fingerprint": {}, "variants": {s: {"spec": "base", "what": "x"} for s in "AB"}}  # fmt: skip
    _full_for(monkeypatch, "ab.md")
    with pytest.raises(
        ApplianceError, match=r"disk full writing .*ab.md \(No space left on device\); kept .*ab.json"
    ):
        ab.write(result, tmp_path / "ab.json")
    assert json.loads((tmp_path / "ab.json").read_text())["rounds"] == 2


def test_a_sweep_writes_the_outputs_that_fit_and_names_the_rest(tmp_path, monkeypatch):
    from test_sweep import TINY, instant

    from appliance import sweep as sw

    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({"space": {"train.learning_rate": {"low": 0.001, "high": 0.05}}}))
    out = tmp_path / "sweep"
    _full_for(monkeypatch, "pareto.png")
    with pytest.raises(ApplianceError) as caught:
        list(
            sw.sweep(
                "squared", out, sw.Options(trials=1), str(space), overrides=TINY, profile="cpu", trial=instant
            )
        )
    assert str(caught.value) == (
        f"disk full in {out} (No space left on device): not written: pareto.png; study.db holds every trial: "
        "free some space and run the same command again to write them"
    )
    assert (out / "best.yaml").is_file() and (out / "trials.md").is_file()
