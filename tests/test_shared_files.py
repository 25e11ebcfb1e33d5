"""Files that come from another machine are hostile input: reports, checkpoints, run
configs, suites, config files, hardware profiles and sweep spaces.

A crafted report must render as text (no markup of its own in HTML, Markdown or the README), and a
damaged or crafted file of any kind must give one line naming the file and the field, exit 2, never
a traceback, a hang or a huge allocation. Each test reproduces a file that used to do one of those.
"""

from __future__ import annotations

import json
import math
import os
import re
import zipfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch
import yaml
from click.testing import CliRunner
from conftest import one_line_error, trained_run
from markdown_it import MarkdownIt

from appliance import config, sweep
from appliance.bench import report as rpt
from appliance.bench.suite import definition as suite
from appliance.cli import cli
from appliance.docs import readme
from appliance.errors import ConfigError, ReportError
from appliance.measure.stats import summarize

# Every way into markup at once: closing an attribute, a script, an event handler, a javascript: link
# in HTML and in Markdown, a table cell break, a code span, the README's end marker, matplotlib maths,
# a template expression and a new line starting a heading.
HOSTILE = (
    '"\'><script>alert(1)</script><img src=x onerror=alert(1)><a href="javascript:alert(1)">a</a>'
    " [l](javascript:alert(1)) | `tick` <!-- results:end --> $\\frac{1}{$ {{7*7}}\n# heading"
)
PREFIXES = ("probe/", "env_sps/", "vector_sps/", "train_sps/", "train_phase/", "time_to_score/")


def run_cli(*args: str):
    return CliRunner().invoke(cli, [str(a) for a in args])


# ----------------------------------------------------------------------------- reports


def metric(samples: list[float], **extra) -> dict:
    return {
        "unit": "agent-steps/s",
        "better": "higher",
        "labels": {},
        "samples": samples,
        **summarize(samples),
        **extra,
    }


def good_report() -> dict:
    return {
        "schema": rpt.SCHEMA,
        "created_utc": "2026-11-23T00:00:00Z",
        "command": "puffer-bench run",
        "suite": {"name": "quick"},
        "profile": {"name": "cpu"},
        "fingerprint": {"cpu": {"model": "cpu", "physical_cores": 2}, "ram_bytes": 2**33},
        "config": {"train": {"seed": 0}},
        "seed": 0,
        "repeats": 3,
        "metrics": {"env_sps/squared/threads=1": metric([1e6, 1.1e6, 0.9e6])},
    }


def hostile_report() -> dict:
    """A valid report whose every string (names, machine, config, units, labels, warnings...) is HOSTILE."""
    h = HOSTILE
    steps = {"steps": [1.0, 2.0], "seconds": [1.0, 2.0], "score": [0.5, 1.0]}
    labels = {"env": h, "backend": h, "phase": h, "kind": h, "threads": 1}
    noise = {"busy": True, "reasons": [h]}
    return {
        "schema": rpt.SCHEMA,
        "created_utc": h,
        "command": h,
        "suite": {"name": h, "definition": {"name": h}},
        "profile": {"name": h, "expected_gpu": h, "detected_gpu": h},
        "fingerprint": {
            "cpu": {
                **dict.fromkeys(
                    ("model", "vendor", "codename", "microcode", "governor", "physical_cores"), h
                ),
                "family": h,
                "usable_cores": h,
                "flags": [h],
                "isa": {"avx2": h},
                "caches": {h: 2**20},
                "cgroup": {"quota_source": h, "quota_cores": h, "cpuset": h},
                "virtualization": {"vm": h, "container": h},
            },
            "gpus": [{"name": h, "throttle_reasons": [h], "sm_count": h, "ecc_enabled": h}],
            "versions": dict.fromkeys(("puffer_bench", "torch", "cuda_runtime", "nvidia_driver", "numpy"), h),
            "git": {"commit": h},
            "os": {"release": h},
            "build": {"compiler": h, "flags": h},
            "python": h,
            "host_hash": h,
            "host_id_from": [h],
            "ram_bytes": 2**34,
            "calibration": {"int_mops": 1.0, "float_gflops": 1.0, "copy_gbs": 1.0, "cpu_share": 0.5},
        },
        "config": {h: {h: h}},
        "seed": 0,
        "repeats": 3,
        "duration_s": 1.0,
        "warnings": [h],
        "skipped": [{"what": h, "why": h}],
        "metrics": {
            p + h: {
                **metric([1.0, 2.0, 3.0]),
                "unit": h,
                "labels": labels,
                "noise": noise,
                "ceiling": {"value": 9.0, "source": h},
            }
            for p in PREFIXES
        },
        "analysis": {
            "roofline": [{"summary": h}],
            "training": {h: {"summary": h, "suggestions": [h]}},
            "learning_curves": {h: {"metric": h, "target": 1.0, "runs": [steps]}},
        },
        "noise": {
            "steps": [
                {
                    "step": h,
                    "n": 3,
                    **{f"{w}_cores_{s}": 0.1 for w in ("others", "steal") for s in ("mean", "max")},
                    "busy": True,
                    "reasons": [h],
                    "speed_ratio": {"int_mops": 0.9},
                    "gate": {
                        "samples": h,
                        "retaken": [{"value": 1.0, "speed_ratio": 0.5}],
                        "slow_kept": h,
                        "waited_s": 0,
                    },
                }
            ]
        },
    }


class _Markup(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.rows: list[int] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))
        if tag == "tr":
            self.rows.append(0)
        elif tag in ("td", "th") and self.rows:
            self.rows[-1] += 1


def assert_no_markup_from_report(html: str, allowed: set[str]) -> None:
    """Only the renderer's own tags; no event handler, no javascript: URL; table rows stay whole."""
    page = _Markup()
    page.feed(html)
    tags = {tag for tag, _ in page.tags}
    assert tags <= allowed, tags - allowed
    for tag, attrs in page.tags:
        for name, value in attrs:
            assert not name.startswith("on"), (tag, name)
            if name in ("href", "src"):  # text in alt is text; a URL is what a browser follows
                assert "javascript:" not in (value or "").lower(), (tag, value)
    assert "<script" not in html.lower()


HTML_TAGS = {
    "html",
    "head",
    "meta",
    "title",
    "style",
    "body",
    "h1",
    "h2",
    "ul",
    "li",
    "code",
    "p",
    "div",
    "b",
}
HTML_TAGS |= {"table", "tr", "th", "td", "span", "img"}


def markdown_as_html(text: str) -> str:
    """Markdown rendered as GitHub would: CommonMark with tables, raw HTML passed through."""
    return MarkdownIt("commonmark", {"html": True}).enable("table").render(text)


MD_TAGS = {"h1", "h2", "p", "ul", "li", "code", "strong", "em", "blockquote", "table", "thead", "tbody"}
MD_TAGS |= {"tr", "th", "td", "img", "a"}


def assert_safe_markdown(text: str) -> None:
    html = markdown_as_html(text)
    assert_no_markup_from_report(html, MD_TAGS)
    assert "<!--" not in text and "<script" not in text
    assert not [line for line in text.splitlines() if line.startswith("# heading")]
    page = _Markup()
    page.feed(html)
    for table in re.findall(r"<table>.*?</table>", html, re.S):  # every row has its header's cells
        rows = _Markup()
        rows.feed(table)
        assert len(set(rows.rows)) == 1, rows.rows
    links = [
        dict(attrs).get("href") or dict(attrs).get("src") for tag, attrs in page.tags if tag in ("a", "img")
    ]
    assert all(link and not link.lower().startswith("javascript") for link in links), links


@pytest.fixture
def hostile(tmp_path):
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(hostile_report()))
    return path


def test_a_hostile_report_renders_as_text_in_html_and_markdown(hostile):
    result = run_cli("report", "--render", hostile)
    assert result.exit_code == 0, result.output
    html = hostile.with_suffix(".html").read_text()
    assert_no_markup_from_report(html, HTML_TAGS)
    assert "{{7*7}}" in html and "&lt;script&gt;" in html  # shown as the text it is
    assert_safe_markdown(hostile.with_suffix(".md").read_text())
    assert len(list(hostile.parent.glob("hostile-*.png"))) >= 3  # plots drawn, $...$ not read as maths
    out = hostile.parent / "out.md"
    assert run_cli("report", hostile, "--markdown", out).exit_code == 0
    assert_safe_markdown(out.read_text())
    # the renderer escapes on its own, whatever reaches it (the validator would refuse this seed)
    data = {**hostile_report(), "seed": HOSTILE}
    assert_no_markup_from_report(rpt.to_html(data), HTML_TAGS)
    assert_safe_markdown(rpt.to_markdown(data, images=[HOSTILE]))


def test_comparing_hostile_reports_prints_their_text(tmp_path, hostile):
    other = tmp_path / "other.json"
    data = hostile_report()
    data["fingerprint"]["cpu"]["model"] = "[/red] [link=javascript:alert(1)]x[/link]"  # rich markup
    other.write_text(json.dumps(data))
    table = run_cli("compare", hostile, other)
    assert table.exit_code in (0, 1) and "Traceback" not in table.output, table.output
    assert "[/red]" in table.output  # shown, not read as markup
    md = run_cli("compare", hostile, other, "--markdown")
    assert md.exit_code in (0, 1), md.output
    assert_safe_markdown(md.output.replace(str(tmp_path), "tmp"))


def test_an_ab_result_and_its_partial_line_render_as_text():
    """ab's Markdown, its "partial" line included, escapes what the variants' reports and specs hold."""
    from appliance.compare import ab

    summary = {"median": 1.0}
    result = {
        "suite": {"name": HOSTILE},
        "profile": HOSTILE,
        "variants": {side: {"spec": HOSTILE, "what": HOSTILE} for side in ("A", "B")},
        "rounds": 1,
        "order": ["A1", "B1"],
        "fingerprint": hostile_report()["fingerprint"],
        "partial": {"signal": HOSTILE, "where": HOSTILE, "runs": 1, "planned": 2},
        "metrics": {
            HOSTILE: {
                "unit": HOSTILE,
                "a_summary": summary,
                "b_summary": summary,
                "ratio": 1.0,
                "verdict": HOSTILE,
            }
        },
    }
    text = ab.to_markdown(result)
    assert_safe_markdown(text)
    assert [line for line in text.splitlines() if line.startswith("- **partial**: interrupted by ")]


def test_a_sweeps_trials_md_and_best_yaml_hold_a_crafted_space_as_text(tmp_path):
    """trials.md escapes the metric, keys and choices a shared space file names; best.yaml's header
    stays one comment line; the plot reads no maths from the metric."""
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution
    from optuna.trial import TrialState, create_trial

    study = optuna.create_study(directions=["maximize", "minimize"])
    study.add_trial(
        create_trial(
            params={"train.gamma": 0.9},
            distributions={"train.gamma": FloatDistribution(0.8, 0.99)},
            values=[1.0, 2.0],
            user_attrs={"score": 1.0, "seconds": 2.0, "steps": 10},
        )
    )
    study.add_trial(
        create_trial(
            state=TrialState.FAIL,
            params={"env.note": HOSTILE},
            distributions={"env.note": CategoricalDistribution([HOSTILE])},
            user_attrs={"error": HOSTILE},
        )
    )
    space = sweep.Space(params={"train.gamma": {"low": 0.8, "high": 0.99}}, metric=HOSTILE)
    lines = list(sweep.write_outputs(study, space, tmp_path, "squared"))
    assert any("best.yaml" in line for line in lines), lines
    assert_safe_markdown((tmp_path / "trials.md").read_text())
    best = (tmp_path / "best.yaml").read_text()
    assert best.splitlines()[0].startswith("# puffer-bench sweep squared") and "\n# heading" not in best
    assert yaml.safe_load(best) == {"train": {"gamma": 0.9}}
    assert (tmp_path / "pareto.png").read_bytes()[:4] == b"\x89PNG"


def test_readme_regeneration_is_idempotent_and_report_text_is_no_marker(tmp_path, hostile):
    page = tmp_path / "README.md"
    page.write_text(f"# project\n\n{readme.BEGIN}\nold\n{readme.END}\n\n## after\n")
    results = tmp_path / "results"
    assert run_cli("report", "--readme", page, hostile, "--results", results).exit_code == 0
    first = page.read_bytes()
    assert run_cli("report", "--readme", page, hostile, "--results", results).exit_code == 0
    text = page.read_text()
    assert page.read_bytes() == first
    assert text.count(readme.BEGIN) == 1 and text.count(readme.END) == 1
    assert text.endswith(f"{readme.END}\n\n## after\n") and "old" not in text
    assert_safe_markdown(text.split(readme.BEGIN)[1].split(readme.END)[0])
    # a README whose markers an older version multiplied is refused, not made worse
    page.write_text(text + f"\n{readme.END}\n")
    one_line_error(run_cli("report", "--readme", page, hostile, "--results", results), "keep exactly one")


def mutated(change) -> dict:
    data = good_report()
    change(data)
    return data


M = "metrics['env_sps/squared/threads=1']"
DAMAGED_REPORTS = [
    (mutated(lambda d: d["metrics"]["env_sps/squared/threads=1"].update(median="fast")), f"{M}.median"),
    (mutated(lambda d: d["metrics"]["env_sps/squared/threads=1"].update(cv="3%")), f"{M}.cv"),
    (mutated(lambda d: d["metrics"]["env_sps/squared/threads=1"].update(unit=5)), f"{M}.unit"),
    (mutated(lambda d: d["metrics"]["env_sps/squared/threads=1"].update(samples=[math.nan] * 3)), "NaN"),
    (mutated(lambda d: d["metrics"]["env_sps/squared/threads=1"].update(median=math.inf)), "Infinity"),
    (
        mutated(lambda d: d["metrics"]["env_sps/squared/threads=1"].update(samples=[1.0] * 50_000)),
        "at most 1,000",
    ),
    (
        mutated(lambda d: d["metrics"]["env_sps/squared/threads=1"]["labels"].update(threads="x")),
        f"{M}.labels.threads",
    ),
    (mutated(lambda d: d["fingerprint"].update(cpu="x")), "fingerprint.cpu must be an object"),
    (mutated(lambda d: d["fingerprint"].update(calibration={"int_mops": "fast"})), "calibration.int_mops"),
    (
        mutated(lambda d: d.update(noise={"steps": [{"step": "s", "n": 2, "others_cores_mean": "a"}]})),
        "noise.steps[0]",
    ),
    (mutated(lambda d: d.update(duration_s="long")), "duration_s"),
    (mutated(lambda d: d.update(metrics=[1])), "metrics must be an object"),
    (mutated(lambda d: d.update(warnings=["\x1b]0;owned\x07"])), "control character 0x1b"),
    (mutated(lambda d: d.update(seed="<script>")), "seed must be a whole number"),
]
DAMAGED_FILES = [
    (b"[" * 200_000 + b"]" * 200_000, "nests 200,000 levels deep"),
    (json.dumps(good_report()).encode()[:300], "cannot read report"),
    (b"\x89PNG\r\n\x1a\n\xff\xfe" + bytes(range(256)), "is not UTF-8 text"),
    (b"", "cannot read report"),
    (b'{"schema": 1e999999}', "schema"),
]


@pytest.mark.parametrize(
    ("content", "field"),
    [(json.dumps(d).encode(), f) for d, f in DAMAGED_REPORTS] + DAMAGED_FILES,
    ids=[f"report-{i}" for i in range(len(DAMAGED_REPORTS))]
    + [f"file-{i}" for i in range(len(DAMAGED_FILES))],
)
def test_a_damaged_report_is_one_line_naming_file_and_field_in_every_command(tmp_path, content, field):
    bad, good, page = tmp_path / "bad.json", tmp_path / "good.json", tmp_path / "README.md"
    bad.write_bytes(content)
    good.write_text(json.dumps(good_report()))
    page.write_text(f"{readme.BEGIN}\n{readme.END}\n")
    for args in (
        ("report", "--render", bad),
        ("report", bad, "--markdown", tmp_path / "x.md"),
        ("compare", good, bad),
        ("report", "--readme", page, bad, "--results", tmp_path),
    ):
        one_line_error(run_cli(*args), str(bad), field)


def test_a_report_larger_than_the_bound_is_refused_before_parsing(tmp_path, monkeypatch):
    path = tmp_path / "big.json"
    path.write_text(json.dumps(good_report()))
    from appliance.bench.report import schema

    monkeypatch.setattr(schema, "MAX_BYTES", 100)
    one_line_error(run_cli("report", "--render", path), str(path), "larger than")


def test_what_puffer_bench_writes_it_reads_back(tmp_path):
    r = rpt.Report({"name": "t"}, {"name": "cpu"}, {"cpu": {}}, {}, seed=0, repeats=2)
    r.add("env_sps/x/threads=1", [1.0, math.nan, 2.0], "agent-steps/s", env="x", threads=1)
    r.warn("colour \x1b[31m from a subprocess")
    rpt.write(r.data, tmp_path / "r", plots=False)
    back = rpt.load(tmp_path / "r.json")
    assert back["metrics"]["env_sps/x/threads=1"]["samples"] == [1.0, None, 2.0]
    assert "\x1b" not in back["warnings"][0]


def test_every_committed_report_passes_the_validator():
    results = Path(__file__).parent.parent / "results"
    if not results.is_dir():
        pytest.skip("results/ is not in this tree")
    checked = 0
    for path in results.rglob("*.json"):
        if json.loads(path.read_text()).get("schema") == rpt.SCHEMA:
            rpt.to_markdown(rpt.load(path))
            checked += 1
    assert checked


# ----------------------------------------------------------------------------- checkpoints and runs

SMALL = ["--train.device", "cpu", "--vec.num-envs", "8", "--train.bptt-horizon", "8"]
SMALL += ["--train.minibatch-size", "64", "--policy.hidden-size", "32"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A data dir with one squared run (one epoch, hidden size 32) that ``latest`` names."""
    return trained_run(tmp_path_factory.mktemp("runs"), *SMALL, log=False)


@pytest.fixture
def run_copy(trained, tmp_path):
    """A copy of the trained data dir to damage."""
    import shutil

    data = tmp_path / "runs"
    shutil.copytree(trained, data)
    return data


def eval_cli(data: Path, env: str = "squared", *extra: str):
    return run_cli("eval", env, "--episodes", "1", "--train.device", "cpu", "--train.data-dir", data, *extra)


def test_eval_of_another_env_than_the_checkpoint_names_both(trained):
    out = one_line_error(eval_cli(trained, "CartPole-v1"), "trained on env squared, not CartPole-v1")
    assert "--load-model-path" in out and "log_std" not in out


@pytest.mark.parametrize(
    ("saved", "fragment"),
    [
        ("policy: {hidden_size: 1e6}\n", "policy.hidden_size"),  # would allocate terabytes
        ("policy: {core: transformer}\n", "policy.core"),
        ("policy: 5\n", "'policy' must be a mapping"),
        ("- a\n- b\n", "must hold a mapping"),
        ("policy: [1, 2\n", "bad YAML"),
        (b"\xff\xfe\x00\x81junk", "not UTF-8"),
    ],
)
def test_a_damaged_run_config_is_one_line_before_any_policy_is_built(run_copy, saved, fragment, monkeypatch):
    saved_path = run_copy / "r1" / "config.yaml"
    saved_path.write_bytes(saved if isinstance(saved, bytes) else saved.encode())
    import appliance.train.trainer as trainer_module

    def no_policy(*args, **kwargs):
        raise AssertionError("a policy was built from a damaged config")

    monkeypatch.setattr(trainer_module, "make_policy", no_policy)
    one_line_error(eval_cli(run_copy), str(saved_path), fragment)


def rewrite_checkpoint(path: Path, change) -> None:
    blob = torch.load(path, weights_only=True)
    change(blob)
    path.unlink()  # model.pt shares its blocks with the epoch's snapshot: keep the snapshot intact
    torch.save(blob, path)


class PickledCode:
    def __reduce__(self):
        return (os.system, ("true",))


def test_a_checkpoint_holding_pickled_code_is_refused_for_safety(run_copy):
    model = run_copy / "r1" / "model.pt"
    rewrite_checkpoint(model, lambda b: b["meta"].update(extra=PickledCode()))
    out = one_line_error(eval_cli(run_copy), str(model), "not plain tensors and data", "refused for safety")
    assert "truncated" not in out and "corrupt" not in out


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (lambda b: b["meta"]["policy"].update(hidden_size=1e6), "policy.hidden_size"),
        (lambda b: b["meta"]["policy"].update(core="transformer"), "policy.core"),
        (lambda b: b.update(meta="squared"), "'meta'"),
        (lambda b: b.update(epoch="one"), "epoch must be a whole number"),
        (lambda b: b.update(model={"w": [1.0, 2.0]}), "named tensors"),
        (
            lambda b: b.update(return_scale={"count": 1, "mean": 0.0, "m2": -1.0, "scale": 0.0}),
            "return_scale is not reward-scale statistics",
        ),
    ],
)
def test_crafted_checkpoint_fields_are_one_line_on_eval_and_resume(run_copy, change, fragment):
    model = run_copy / "r1" / "model.pt"
    rewrite_checkpoint(model, change)
    one_line_error(eval_cli(run_copy), str(model), fragment, "model_000001.pt")
    resume = run_cli(
        "train", "squared", "--resume", "r1", "--no-dashboard", *SMALL, "--train.data-dir", run_copy
    )
    one_line_error(resume, str(model), fragment)


def test_a_zip_bomb_checkpoint_is_refused_before_torch_reads_it(run_copy):
    bomb = run_copy / "bomb.pt"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("bomb/data.pkl", bytes(64 * 2**20))
    one_line_error(eval_cli(run_copy, "squared", "--load-model-path", bomb), str(bomb), "would unpack to")


@pytest.mark.parametrize("pointer", [b"\xff\xfe\x00junk", b"r\x001", b""])
def test_a_damaged_latest_pointer_is_one_line(run_copy, pointer):
    (run_copy / "latest").write_bytes(pointer)
    one_line_error(eval_cli(run_copy), str(run_copy / "latest"), "damaged")


# ----------------------------------------------------------------------------- suites, configs, profiles, sweeps


def laughs() -> str:
    """Ten levels of ten aliases each: a few hundred bytes that expand to 10^10 values."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    return "\n".join(lines) + "\n"


BAD_YAML = [
    ("x: " + "[" * 5000 + "]" * 5000 + "\n", "nests deeper than 32"),
    ("x:\n" + "".join(" " * i + "- \n" for i in range(1, 300)), "nests deeper than 32"),
    (laughs(), "more than 1,000,000 values"),
    ("x: " + "9" * 5000 + "\n", "bad YAML"),
    (b"\x89PNG\r\n\x1a\n\xff" + bytes(range(200)), "not UTF-8"),
    ("x: [1, 2\n", "bad YAML"),
    ("train:\n  gamma: 0.9\nvec: {}\ntrain:\n  gamma: 0.8\n", "key 'train' is given twice, on lines 1 and 4"),
    ("train:\n  gamma: 0.9\n  gamma: 0.8\n", "key 'train.gamma' is given twice, on lines 2 and 3"),
    ("x: [{a: 1, a: 2}]\n", "key 'x[0].a' is given twice, on line 1, columns 6 and 12"),
]
BAD_SUITES = [
    ({"seconds": math.inf}, "seconds: must be a positive number"),
    ({"seconds": math.nan}, "seconds: must be a positive number"),
    ({"seconds": 1e300}, "seconds: must be at most"),
    ({"probe": {"envs": ["squared"], "runs": 10**9}}, "probe.runs: must be at most 1,000"),
    ({"env_sps": {"envs": ["squared"], "threads": [10**9]}}, "env_sps.threads: must be at most"),
    (
        {"vector_sps": [{"env": "squared", "backends": ["native"], "num_envs": 10**12}]},
        "num_envs: must be at most",
    ),
    ({"gate": {"retakes": 10**11}}, "gate.retakes"),
    (
        {"time_to_score": [{"env": "squared", "metric": "perf", "target": math.nan, "max_timesteps": 10}]},
        "target",
    ),
    ({"time_to_score": [{"env": "squared", "metric": [1], "target": 1, "max_timesteps": 10}]}, "metric"),
    (
        {"train_sps": {"envs": ["squared"], "variants": {"v": {"policy.hidden_size": 10**9}}}},
        "policy.hidden_size",
    ),
    ({"train_sps": {"envs": ["squared"], "variants": {"v": {"train.bogus": 1}}}}, "train.bogus"),
    ({"description": {"a": 1}}, "'description'"),
]


@pytest.mark.parametrize(
    ("content", "fragment"),
    [(text, f) for text, f in BAD_YAML] + [({"name": "t", **spec}, f) for spec, f in BAD_SUITES],
)
def test_a_damaged_or_crafted_suite_is_one_line_naming_it(tmp_path, content, fragment):
    path = tmp_path / "suite.yaml"
    if isinstance(content, dict):
        content = yaml.safe_dump(content)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    one_line_error(
        run_cli("run", "--suite", path, "--out", tmp_path / "out", "--gpu", "cpu"), str(path), fragment
    )


@pytest.mark.parametrize(
    ("content", "fragment"), [*BAD_YAML, ("policy: {hidden_size: .inf}\n", "policy.hidden_size")]
)
def test_a_damaged_config_file_is_one_line_naming_it(tmp_path, content, fragment):
    path = tmp_path / "best.yaml"  # e.g. a sweep's best.yaml passed on
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    one_line_error(run_cli("config", "squared", "--config", path), str(path), fragment)


def test_a_key_twice_is_refused_in_every_yaml_read_but_a_merge_may_override(tmp_path, monkeypatch):
    """A sweep space, a hardware profile and an env's YAML are read strictly like --config; a key a
    ``<<`` merge brings in may be overridden, as YAML means it to be."""
    twice = "space:\n  train.gamma: {low: 0.8, high: 0.9}\n  train.gamma: {low: 0.5, high: 0.9}\n"
    (tmp_path / "space.yaml").write_text(twice)
    with pytest.raises(ConfigError, match="key 'space.train.gamma' is given twice, on lines 2 and 3"):
        sweep.load_space("squared", tmp_path / "space.yaml")
    (tmp_path / "odd.yaml").write_text("train: {gamma: 0.9}\ntrain: {gamma: 0.8}\n")
    monkeypatch.setattr(config.files, "profile_dir", lambda: tmp_path)
    with pytest.raises(ConfigError, match="odd.yaml: key 'train' is given twice, on lines 1 and 2"):
        config.resolve(env="squared", profile="odd")
    merged = tmp_path / "merged.yaml"
    merged.write_text("train:\n  <<: {gamma: 0.9, learning_rate: 0.01}\n  gamma: 0.8\n")
    assert config.resolve(env="squared", config_file=merged).train.gamma == 0.8


def test_a_config_file_larger_than_the_bound_is_refused(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_bytes(b"train:\n" + b"#" * config.MAX_YAML_BYTES)
    one_line_error(run_cli("config", "squared", "--config", path), str(path), "larger than 4 MiB")


def test_a_crafted_hardware_profile_is_a_config_error(tmp_path, monkeypatch):
    (tmp_path / "odd.yaml").write_text("profile: just a string\n")
    (tmp_path / "big.yaml").write_text("profile: {gpu: H200}\npolicy: {hidden_size: 1.0e+6}\n")
    monkeypatch.setattr(config.files, "profile_dir", lambda: tmp_path)
    # no AttributeError on odd.yaml; an H100 no profile here names is still a GPU: its architecture's
    assert config.detect_profile([{"name": "NVIDIA H100"}]) == "hopper"
    with pytest.raises(ConfigError, match="'profile' in .*odd.yaml must be a mapping"):
        config.resolve(env="squared", profile="odd")
    with pytest.raises(ConfigError, match="policy.hidden_size .from .*big.yaml.*out of range"):
        config.resolve(env="squared", profile="big")


@pytest.mark.parametrize(
    ("space", "fragment"),
    [
        (
            {"space": {"policy.hidden_size": {"choices": [32, 10**9]}}},
            "policy.hidden_size: choice 1000000000 is not valid",
        ),
        ({"space": {"train.gamma": {"low": "a", "high": 1}}}, "train.gamma.low must be a number"),
        ({"space": {"train.learning_rate": {"low": 0, "high": 1, "log": True}}}, "a log range needs low > 0"),
        (
            {"space": {"train.gamma": {"low": 0.8, "high": 0.9}}, "envs": ["squared"]},
            "envs must be a mapping",
        ),
        ({"space": {"train.gamma": {"low": 0.8, "high": 0.9}}, "prune": {"warmup": "soon"}}, "prune.warmup"),
        ({"space": {"train.gamma": {"low": 0.8, "high": 0.9}}, "objective": {"target": math.nan}}, "target"),
    ],
)
def test_a_crafted_sweep_space_is_one_line_naming_it(tmp_path, space, fragment):
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space))
    with pytest.raises(ConfigError) as e:
        sweep.load_space("squared", path)
    assert str(path) in str(e.value) and fragment in str(e.value) and "\n" not in str(e.value)


def test_suite_and_report_bounds_agree():
    """A suite cannot ask for more samples a metric than a report may hold."""
    assert suite.MOST_RUNS == rpt.MAX_SAMPLES == config.RANGES[("bench", "repeats")].high
    with pytest.raises(ReportError, match="samples"):
        rpt.validate(
            mutated(lambda d: d["metrics"]["env_sps/squared/threads=1"].update(samples=[1.0] * 1001))
        )
