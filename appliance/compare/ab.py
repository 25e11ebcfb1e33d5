"""A/B runs: two variants measured in turns (A B A B ...) on one machine, and their ratio with an interval.

Comparing a figure against one measured at another time mixes the change with whatever else changed
(the machine, its load, its clocks). ``puffer-bench ab A B`` runs the same suite for both variants in
alternating rounds, so drift and background load hit both alike, and reports, per metric, the ratio
of medians B / A with a 95% interval (:func:`appliance.measure.stats.ratio_interval`).

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
killed run left behind is removed by the next ``ab``. Variants, and how each kind measures a round:
:mod:`appliance.compare.abvariants`.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from appliance.compare.abvariants import InProcess, Subprocess, Variant, parse_variant
from appliance.errors import ConfigError
from appliance.measure.stats import FAMILY_ALPHA, holm, ratio_test, summarize
from appliance.redact import command_line

SCHEMA = "puffer-bench/ab/1"
UNRELIABLE = "unreliable (busy)"


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
    from appliance.bench.suite.definition import _env_list, load
    from appliance.config import detect_profile
    from appliance.sysinfo import fingerprint

    if rounds < 2:
        raise ConfigError("ab needs at least 2 rounds for an interval (--rounds)")
    if envs is not None:  # before any worktree or image is prepared
        if not envs:
            raise ConfigError("--envs names no env: leave it out to measure every env of the suite")
        _env_list("--envs", list(envs), gymnasium_ok=True)
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
        "envs": list(envs) if envs is not None else None,
        "seconds": seconds,
        "suite_arg": str(path.resolve()) if Path(suite_name).suffix in (".yaml", ".yml") else suite_name,
    }
    if kinds == {"image"} and Path(suite_name).suffix in (".yaml", ".yml"):
        raise ConfigError("image variants run the image's own suites: give --suite by name, not a file")
    from appliance.signals import Interrupted, stop_signals

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
            ratio, ci, m["p"] = ratio_test(sides["A"], sides["B"])
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
    _judge_together(metrics)
    return {
        "schema": SCHEMA,
        "created_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": command_line(),
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


def _judge_together(metrics: dict[str, dict[str, Any]]) -> None:
    """As compare judges: "B better" or "B worse" only where the difference stays significant when
    all the judged metrics (not descriptive, not busy) are tested together (Holm, 5 % family-wise);
    one significant alone reads "possibly B better" / "possibly B worse"."""
    judged = [
        m
        for m in metrics.values()
        if m["better"] != "info" and m.get("p") is not None and m["verdict"] != UNRELIABLE
    ]
    for m, p in zip(judged, holm([m["p"] for m in judged]), strict=True):
        m["p_family"] = p
        if m["verdict"] in ("B better", "B worse") and p >= FAMILY_ALPHA:
            m["verdict"] = "possibly " + m["verdict"]


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
        "- ratio = median(B) / median(A) over the rounds, with a 95% interval (Welch's t on the logarithms); "
        "a verdict needs the interval to exclude 1, and 'B better' / 'B worse' that the difference stays "
        "significant with all the speed metrics tested together (Holm, 5% family-wise); else 'possibly ...'",
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
