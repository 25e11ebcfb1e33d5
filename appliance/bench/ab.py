"""A/B runs: two variants measured in turns (A B A B ...) on one machine, and their ratio with an interval.

Comparing a figure against one measured at another time mixes the change with whatever else changed
(the machine, its load, its clocks). ``puffer-bench ab A B`` runs the same suite for both variants in
alternating rounds, so drift and background load hit both alike, and reports, per metric, the ratio
of medians B / A with a 95% bootstrap interval (:func:`appliance.bench.stats.ratio_interval`).

A variant (``A`` or ``B``) is one of::

    base                          the current code and config
    vec.num_envs=16,train.seed=2  config overrides (section.key=value, comma-separated)
    my.yaml                       a config file (same layers as ``--config``)
    git:REF                       a commit, checked out in a temporary git worktree whose C envs are
                                  built in place; it runs with this venv's Python and libraries
    image:NAME                    a container image (``puffer-bench run`` inside it, see docker.sh)

Both variants must be of one kind: configs run in this process; commits and images each run
``puffer-bench run --repeats 1`` per round in a fresh process. Each round adds one sample per
metric to each side; the noise guard's busy flags carry over, and a metric measured busy in any
round is "unreliable (busy)".

Nothing is lost or left behind: an unwritable ``--out`` is refused before the first round; Ctrl-C,
SIGTERM or SIGHUP ends the run with the rounds measured so far, as a result marked ``partial``; a
commit's worktree is removed (and pruned from the repository) on every exit path, and one that a
killed run left behind is removed by the next ``ab``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.bench.stats import ratio_interval, summarize
from appliance.errors import ConfigError, ReportError

SCHEMA = "puffer-bench/ab/1"
UNRELIABLE = "unreliable (busy)"
TMP_PREFIX = "puffer-ab-"  # each commit variant's folder in the temp folder: <tmp>/puffer-ab-*/tree
OWNER = "owner.lock"  # locked while the ab run that made the folder lives

# The CLI of a commit's worktree, whatever the layout (a module before the house refactor, a package after).
CLI_MAIN = "import sys; from appliance.cli import main; sys.argv[0] = 'puffer-bench'; main()"


@dataclass
class Variant:
    """One side of an A/B run, parsed from its command-line spec."""

    spec: str
    kind: str  # "config", "git" or "image"
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    config_file: str | None = None
    ref: str | None = None
    image: str | None = None

    def describe(self) -> str:
        if self.kind == "git":
            return f"commit {self.ref}"
        if self.kind == "image":
            return f"image {self.image}"
        if self.config_file:
            return f"config file {self.config_file}"
        return "current config" if not self.overrides else f"overrides {self.spec}"


def parse_variant(spec: str) -> Variant:
    """``base``, ``section.key=value,...``, ``FILE.yaml``, ``git:REF`` or ``image:NAME``."""
    from appliance.config import parse_overrides

    text = spec.strip()
    if text.startswith("git:"):
        if not text[4:]:
            raise ConfigError(f"variant {spec!r}: git: needs a commit, e.g. git:HEAD~1")
        return Variant(spec, "git", ref=text[4:])
    if text.startswith("image:"):
        if not text[6:]:
            raise ConfigError(f"variant {spec!r}: image: needs an image name, e.g. image:puffer-bench:cpu")
        return Variant(spec, "image", image=text[6:])
    if text in ("base", ""):
        return Variant(spec, "config")
    if text.endswith((".yaml", ".yml")):
        if not Path(text).is_file():
            raise ConfigError(f"variant {spec!r}: no such config file")
        return Variant(spec, "config", config_file=text)
    if "=" in text:
        pairs = [p.strip() for p in text.split(",") if p.strip()]
        bad = [p for p in pairs if "=" not in p]
        if bad:
            raise ConfigError(f"variant {spec!r}: {bad[0]!r} is not section.key=value")
        return Variant(spec, "config", overrides=parse_overrides([f"--{p}" for p in pairs]))
    raise ConfigError(
        f"variant {spec!r} is none of: base, section.key=value[,...], FILE.yaml, git:REF, image:NAME"
    )


# ---------------------------------------------------------------------- running one round


def _suite_runner_class() -> type:
    from appliance.bench.suite.steps import SuiteRunner

    class VariantRunner(SuiteRunner):
        """A SuiteRunner whose env configs get the variant's config file and overrides on top."""

        variant: Variant

        def config(self, env: str, overrides: dict[str, Any] | None = None) -> Any:
            from appliance.config import resolve

            key = env if not overrides else f"{env}+{sorted(overrides.items())}"
            if key not in self.configs:
                layer = {s: dict(v) for s, v in self.variant.overrides.items()}
                for dotted, value in (overrides or {}).items():
                    section, _, name = str(dotted).partition(".")
                    layer.setdefault(section, {})[name] = value
                self.configs[key] = resolve(
                    env=env, profile=self.profile, config_file=self.variant.config_file, overrides=layer
                )
            return self.configs[key]

    return VariantRunner


class InProcess:
    """Config variants: the suite runs in this process with the variant's config layers."""

    def __init__(
        self, variant: Variant, suite: dict[str, Any], fingerprint: dict[str, Any], options: dict[str, Any]
    ):
        self.variant, self.suite, self.fp, self.options = variant, suite, fingerprint, options
        self.cls = _suite_runner_class()
        self.cls.variant = variant

    def prepare(self) -> None:
        pass  # a bad override fails in round 1 of its side, before the other side has run much

    def round(self, index: int) -> dict[str, Any]:
        from appliance.bench.report import Report

        report = Report(
            {"name": self.suite["name"], "definition": self.suite}, {"name": self.options["profile"]},
            self.fp, {}, seed=0, repeats=1,
        )  # fmt: skip
        runner = self.cls(
            self.suite,
            self.options["profile"],
            report,
            1,
            self.options.get("envs"),
            self.options.get("seconds"),
        )
        runner.run_all()
        report.data["config"] = runner.resolved_configs()
        return report.data

    def close(self) -> None:
        pass


def _run_args(options: dict[str, Any], out: Path) -> list[str]:
    args = [
        "run",
        "--suite",
        options["suite_arg"],
        "--repeats",
        "1",
        "--no-plots",
        "--gpu",
        options["profile"],
    ]
    if options.get("envs"):
        args += ["--envs", ",".join(options["envs"])]
    if options.get("seconds"):
        args += ["--seconds", str(options["seconds"])]
    return [*args, "--out", str(out)]


def _read_round(out: Path, profile: str, what: str) -> dict[str, Any]:
    from appliance.bench import report as rpt

    found = sorted((out / profile).glob("*.json"))
    if len(found) != 1:
        raise ReportError(f"{what} wrote {len(found)} reports to {out / profile}, expected one")
    return rpt.load(found[0])


class Subprocess:
    """Commit and image variants: ``puffer-bench run --repeats 1`` in a fresh process per round."""

    def __init__(
        self,
        variant: Variant,
        options: dict[str, Any],
        execute: Callable[..., Any] = subprocess.run,
        root: Path | None = None,
    ) -> None:
        self.variant, self.options, self.execute = variant, options, execute
        self.root = root
        self.tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX))
        self.owner = open(self.tmp / OWNER, "w")  # noqa: SIM115 (held, locked, for the run's lifetime)
        fcntl.flock(self.owner, fcntl.LOCK_EX)
        self.tree: Path | None = None

    def _git(self, *args: str) -> None:
        try:
            result = self.execute(["git", "-C", str(self.root), *args], capture_output=True, text=True)
        except FileNotFoundError:
            raise ConfigError("git: variants need git on PATH; none was found") from None
        if result.returncode != 0:
            raise ConfigError(f"git {' '.join(args)} failed: {(result.stderr or '').strip()[:300]}")

    def prepare(self) -> None:
        if self.variant.kind != "git":
            return
        if self.root is None:
            from appliance.paths import checkout_root

            self.root = checkout_root()
            if self.root is None:
                raise ConfigError("git: variants need puffer-bench to run from a git checkout")
        self._remove_abandoned()
        self.tree = self.tmp / "tree"
        self._git("worktree", "add", "--detach", str(self.tree), str(self.variant.ref))
        build = self.execute(
            [sys.executable, "setup.py", "build_ext", "--inplace"],
            cwd=self.tree,
            capture_output=True,
            text=True,
        )
        if build.returncode != 0:
            raise ConfigError(
                f"building the C envs of {self.variant.ref} failed: {(build.stderr or '').strip()[-300:]}"
            )

    def round(self, index: int) -> dict[str, Any]:
        out = self.tmp / f"round-{index}"
        args = _run_args(self.options, out)
        if self.variant.kind == "git":
            assert self.tree is not None
            env = {**os.environ, "PYTHONPATH": str(self.tree)}
            result = self.execute(
                [sys.executable, "-c", CLI_MAIN, *args],
                cwd=self.tree,
                env=env,
                capture_output=True,
                text=True,
            )
            if result.returncode != 0:
                tail = (result.stderr or result.stdout or "").strip().splitlines()[-1:]
                raise ConfigError(f"commit {self.variant.ref}: puffer-bench run failed: {' '.join(tail)}")
        else:
            from appliance.container import run_in_container

            code = run_in_container(str(self.variant.image), args[:-2], results=out)
            if code != 0:
                raise ConfigError(f"image {self.variant.image}: puffer-bench run exited with {code}")
        return _read_round(out, self.options["profile"], self.variant.describe())

    def _remove_abandoned(self) -> None:
        """Worktrees an ab run that was killed (SIGKILL, a crash) left in the temp folder: their
        owner lock is free. Removed, and pruned from the repository."""
        for folder in self.tmp.parent.glob(f"{TMP_PREFIX}*"):
            if folder == self.tmp or not (folder / OWNER).is_file():
                continue
            try:
                with open(folder / OWNER) as f:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # taken: its run is gone
                    shutil.rmtree(folder, ignore_errors=True)
            except OSError:
                continue  # held: a live ab run's
        with contextlib.suppress(Exception):
            self._git("worktree", "prune")

    def close(self) -> None:
        """Remove the worktree and the temp folder, and prune the repository's record of it."""
        if self.tree is not None and self.root is not None:
            with contextlib.suppress(Exception):
                self._git("worktree", "remove", "--force", str(self.tree))
        shutil.rmtree(self.tmp, ignore_errors=True)
        if self.tree is not None and self.root is not None:
            with contextlib.suppress(Exception):
                self._git("worktree", "prune")  # also when the removal above failed half-way
        self.owner.close()


# ---------------------------------------------------------------------- the A/B run


def run(
    a: str,
    b: str,
    suite_name: str = "quick",
    rounds: int = 3,
    profile: str | None = None,
    envs: Sequence[str] | None = None,
    seconds: float | None = None,
    progress: Callable[[str], None] | None = None,
    execute: Callable[..., Any] = subprocess.run,
) -> dict[str, Any]:
    """Measure A and B in alternating rounds (A B A B ...); return the A/B result (JSON-ready)."""
    from appliance.bench.suite.definition import load
    from appliance.config import detect_profile
    from appliance.sysinfo import fingerprint

    if rounds < 2:
        raise ConfigError("ab needs at least 2 rounds for an interval (--rounds)")
    variants = {"A": parse_variant(a), "B": parse_variant(b)}
    kinds = {v.kind for v in variants.values()}
    if len(kinds) > 1:
        raise ConfigError(
            f"A is a {variants['A'].kind} variant and B a {variants['B'].kind} one; compare like with like "
            "(e.g. git:HEAD against git:HEAD~1, not base against a commit)"
        )
    suite, path = load(suite_name)
    fp = fingerprint()
    options = {
        "profile": profile or detect_profile(fp.get("gpus") or []),
        "envs": list(envs) if envs else None,
        "seconds": seconds,
        "suite_arg": str(path.resolve()) if Path(suite_name).suffix in (".yaml", ".yml") else suite_name,
    }
    if kinds == {"image"} and Path(suite_name).suffix in (".yaml", ".yml"):
        raise ConfigError("image variants run the image's own suites: give --suite by name, not a file")
    from appliance.train.loop import Interrupted, stop_signals

    runners: dict[str, Any] = {}
    rounds_out: list[dict[str, Any]] = []
    where = "while starting"
    with stop_signals() as guard:
        try:
            for side, v in variants.items():
                runners[side] = (
                    InProcess(v, suite, fp, options)
                    if v.kind == "config"
                    else Subprocess(v, options, execute)
                )
            for side, r in runners.items():
                where = f"while preparing {side}"
                if progress:
                    progress(f"preparing {side}: {variants[side].describe()}")
                r.prepare()
            for i in range(rounds):
                for side in ("A", "B"):
                    where = f"in round {i + 1}/{rounds} ({side})"
                    if progress:
                        progress(f"round {i + 1}/{rounds}: {side} ({variants[side].describe()})")
                    data = runners[side].round(i)
                    rounds_out.append({"side": side, "round": i, "report": data})
        except Interrupted as e:
            result = summarize_rounds(variants, rounds_out, suite, fp, options, rounds)
            result["partial"] = {
                "signal": e.name,
                "where": where,
                "runs": len(rounds_out),
                "planned": 2 * rounds,
            }
            return result
        finally:
            with guard.deferred():  # a second Ctrl-C waits for the worktrees to go
                for r in runners.values():
                    r.close()
    return summarize_rounds(variants, rounds_out, suite, fp, options, rounds)


def summarize_rounds(
    variants: dict[str, Variant],
    rounds_out: list[dict[str, Any]],
    suite: dict[str, Any],
    fp: dict[str, Any],
    options: dict[str, Any],
    rounds: int,
) -> dict[str, Any]:
    """Per metric: each side's samples (one per round), their summary, B/A ratio and interval, verdict."""
    samples: dict[str, dict[str, list[float]]] = {}
    meta: dict[str, dict[str, Any]] = {}
    busy: dict[str, set[str]] = {}
    for entry in rounds_out:
        for name, m in entry["report"]["metrics"].items():
            meta.setdefault(name, {"unit": m["unit"], "better": m["better"]})
            if m.get("median") is not None:
                samples.setdefault(name, {"A": [], "B": []})[entry["side"]].append(m["median"])
            if (m.get("noise") or {}).get("busy"):
                busy.setdefault(name, set()).add(entry["side"])
    metrics = {}
    for name, sides in samples.items():
        m = {**meta[name], "a": sides["A"], "b": sides["B"], "busy": sorted(busy.get(name, ()))}
        m["a_summary"], m["b_summary"] = summarize(sides["A"]), summarize(sides["B"])
        if sides["A"] and sides["B"] and m["a_summary"]["median"]:
            ratio, ci = ratio_interval(sides["A"], sides["B"])
            m["ratio"], m["ci"] = ratio, ci
            significant = ci is not None and (ci[0] > 1 or ci[1] < 1)
            if m["busy"]:
                m["verdict"] = UNRELIABLE
            elif not significant:
                m["verdict"] = "no clear difference"
            elif m["better"] == "info":
                m["verdict"] = "B differs"
            else:
                better = (ratio > 1) == (m["better"] == "higher")
                m["verdict"] = "B better" if better else "B worse"
        else:
            m["ratio"], m["ci"], m["verdict"] = None, None, "no data"
        metrics[name] = m
    return {
        "schema": SCHEMA,
        "created_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": "puffer-bench " + " ".join(sys.argv[1:]),
        "suite": suite,
        "profile": options["profile"],
        "rounds": rounds,
        "order": [f"{e['side']}{e['round'] + 1}" for e in rounds_out],
        "variants": {
            side: {"spec": v.spec, "kind": v.kind, "what": v.describe()} for side, v in variants.items()
        },
        "fingerprint": fp,
        "commits": {
            e["side"]: ((e["report"].get("fingerprint") or {}).get("git") or {}).get("commit")
            for e in rounds_out
        },
        "metrics": metrics,
    }


def table(result: dict[str, Any]) -> Any:
    """The result as a rich Table: medians, B/A with its interval, verdict."""
    from rich.markup import escape
    from rich.table import Table

    from appliance.bench.report import fmt

    out = Table(title=f"B / A over {result['rounds']} rounds ({' '.join(result['order'])})")
    for col in ("metric", "median A", "median B", "B / A (95% CI)", "verdict"):
        out.add_column(col, justify="left" if col in ("metric", "verdict") else "right")
    for name, m in result["metrics"].items():
        ci = f" ({m['ci'][0]:.3f}-{m['ci'][1]:.3f})" if m.get("ci") else ""
        out.add_row(
            escape(f"{name} ({m['unit']})"),  # a variant's report is its own text, not markup
            fmt(m["a_summary"]["median"], m["unit"]),
            fmt(m["b_summary"]["median"], m["unit"]),
            f"{m['ratio']:.3f}{ci}" if m.get("ratio") is not None else "-",
            m["verdict"],
        )
    return out


def to_markdown(result: dict[str, Any]) -> str:
    """The A/B result as Markdown; values from the variants' reports go through ``md_format``."""
    from appliance.bench.report import fmt, machine_line
    from appliance.bench.report import md_format as md

    v = result["variants"]
    lines = [
        md("# puffer-bench ab: suite {!c}, profile {!c}", result["suite"]["name"], result["profile"]),
        "",
        md("- A: {!c} ({})", v["A"]["spec"], v["A"]["what"]),
        md("- B: {!c} ({})", v["B"]["spec"], v["B"]["what"]),
        md(
            "- {} rounds in the order {} on one machine: {}",
            result["rounds"],
            " ".join(result["order"]),
            machine_line(result["fingerprint"]),
        ),
        *(
            [
                md(
                    "- **partial**: interrupted by {} {}",
                    result["partial"]["signal"],
                    result["partial"]["where"],
                )
            ]
            if result.get("partial")
            else []
        ),
        "- ratio = median(B) / median(A) over the rounds, with a 95% bootstrap interval; "
        "a verdict needs the interval to exclude 1",
        "",
        "| metric | unit | median A | median B | B / A (95% CI) | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for name, m in result["metrics"].items():
        ci = f" ({m['ci'][0]:.3f}-{m['ci'][1]:.3f})" if m.get("ci") else ""
        ratio = f"{m['ratio']:.3f}{ci}" if m.get("ratio") is not None else "-"
        a, b = fmt(m["a_summary"]["median"], m["unit"]), fmt(m["b_summary"]["median"], m["unit"])
        lines.append(md("| {!c} | {} | {} | {} | {} | {} |", name, m["unit"], a, b, ratio, m["verdict"]))
    return "\n".join(lines) + "\n"


def write(result: dict[str, Any], path: str | Path) -> list[Path]:
    """The A/B result as JSON and Markdown (same stem), each written atomically; on a full disk what
    fits (the JSON first: the Markdown renders from it) and a one-line error saying what did not."""
    from appliance.errors import ApplianceError
    from appliance.report_io import write_what_fits

    path = Path(path)
    written, missing, why = write_what_fits(
        [
            (path.with_suffix(".json"), lambda: (json.dumps(result, indent=2) + "\n").encode()),
            (path.with_suffix(".md"), lambda: to_markdown(result).encode()),
        ]
    )
    if missing:
        kept = (
            f"kept {', '.join(map(str, written))}"
            if written
            else "nothing saved: the table above is all there is"
        )
        raise ApplianceError(f"disk full writing {', '.join(map(str, missing))} ({why}); {kept}")
    return written


def partial_line(result: dict[str, Any], written: list[Path]) -> str:
    """What an interrupted run kept, in one line."""
    p = result["partial"]
    runs = f"{p['runs']} of {p['planned']} runs"
    if not p["runs"]:
        return f"interrupted ({p['signal']}) {p['where']}: nothing measured yet"
    if written:
        return f"interrupted ({p['signal']}) {p['where']}: kept {runs} in {written[0]} (marked partial)"
    return f"interrupted ({p['signal']}) {p['where']}: the table above holds {runs} (no --out: not saved)"
