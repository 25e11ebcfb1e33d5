"""A sweep's results: the trials as rows and a table, the best trade-off on the Pareto front, and
the files written at the end: ``trials.md``, ``pareto.png`` and ``best.yaml`` (which ``puffer-bench
train ENV --config best.yaml`` takes as is). A disk that fills keeps what fits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from appliance.config import resolve
from appliance.errors import ApplianceError
from appliance.report_io import write_what_fits
from appliance.sweep.space import SECTIONS, Base, Space, merge, sections_of, trial_overrides
from appliance.sweep.study import DB, finished_trials, interrupted, trial_error


def rows(study: Any) -> list[dict[str, Any]]:
    """One dict per finished trial: number, state, score, seconds, steps, on the front, params."""
    from optuna.trial import TrialState

    front = {t.number for t in study.best_trials}
    skip = interrupted(study)
    out = []
    for t in study.get_trials(deepcopy=False):
        if t.state in (TrialState.RUNNING, TrialState.WAITING) or t.number in skip:
            continue
        out.append(
            {
                "trial": t.number,
                "state": t.state.name.lower(),
                "score": t.user_attrs.get("score"),
                "seconds": t.user_attrs.get("seconds"),
                "steps": t.user_attrs.get("steps"),
                "pareto": t.number in front,
                "baseline": bool(t.user_attrs.get("baseline")),
                "params": dict(t.params),
                "error": trial_error(study, t),
            }
        )
    return out


def best_trade_off(study: Any, target: float | None) -> Any | None:
    """On the Pareto front: the fastest trial that reached the target, else the best score."""
    front = study.best_trials
    if not front:
        return None
    if target is not None:
        reached = [t for t in front if t.values[0] >= target]
        if reached:
            return min(reached, key=lambda t: t.values[1])
    return max(front, key=lambda t: (t.values[0], -t.values[1]))


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def table(study: Any) -> tuple[list[str], list[list[str]]]:
    trials = rows(study)
    names = sorted({k for r in trials for k in r["params"]})
    columns = ["trial", "state", "score", "seconds", "steps", "front", *names]
    body = []
    for r in sorted(trials, key=lambda r: (r["score"] is None, -(r["score"] or 0), r["seconds"] or 0)):
        mark = ("*" if r["pareto"] else "") + (" (baseline)" if r["baseline"] else "")
        body.append(
            [str(r["trial"]), r["state"], _fmt(r["score"]), _fmt(r["seconds"]), _fmt(r["steps"]), mark]
            + [_fmt(r["params"].get(k)) for k in names]
        )
    return columns, body


def write_outputs(
    study: Any, space: Space, out: Path, env: str, filled: tuple[str, str | None] | None = None
) -> Iterator[str]:
    """trials.md, pareto.png and best.yaml; on a full disk each one that still fits, then one line.

    ``filled``: the disk filled while the sweep ran (why, and the result line of a trial the study
    could not record, if any); the files of the trials that finished are written as far as they fit,
    then one line says where every measured figure is.

    trials.md is Markdown of text from the space file and the study (metric, keys, choices): every
    value goes through the report's escaping (:func:`~appliance.bench.report.md`)."""
    from appliance.bench.report import md, md_format

    columns, body = table(study)
    target = md_format("Target {} {:g}.", space.metric, space.target) if space.target else ""
    lines = [
        md_format("# Sweep of {}: {} (maximize) against wall seconds (minimize)", env, space.metric),
        "",
        "`*`: on the Pareto front. " + target,
        "",
        "| " + " | ".join(map(md, columns)) + " |",
        "|" + "---|" * len(columns),
        *("| " + " | ".join(map(md, row)) + " |" for row in body),
        "",
    ]
    files: list[tuple[Path, Callable[[], bytes]]] = [(out / "trials.md", lambda: "\n".join(lines).encode())]
    png = pareto_png(study, space, env)
    if png is not None:
        files.append((out / "pareto.png", lambda: png))
    best = best_trade_off(study, space.target)
    if best is not None:
        sections = best_config(env, study, best)
        profile = study.user_attrs.get("profile")
        header = _yaml_comment(
            f"puffer-bench sweep {env}: trial {best.number}, {space.metric} {best.values[0]:.4g} "
            f"in {best.values[1]:.1f} s" + (f" on profile '{profile}'" if profile else "") + ". "
            f"Use: puffer-bench train {env} --config {out / 'best.yaml'}"
        )
        files.append(
            (out / "best.yaml", lambda: (header + yaml.safe_dump(sections, sort_keys=True)).encode())
        )
    written, missing, why = write_what_fits(files)
    for path in written:
        yield f"wrote {path}" + (
            f" (trial {best.number})" if best is not None and path.name == "best.yaml" else ""
        )
    if best is None:
        yield "no trial completed: no best.yaml"
    if filled is not None:
        raise ApplianceError(_filled_line(study, out, filled, written, missing))
    if missing:
        raise ApplianceError(
            f"disk full in {out} ({why}): not written: {', '.join(p.name for p in missing)}; {DB} holds every "
            "trial: free some space and run the same command again to write them"
        )


def _filled_line(
    study: Any, out: Path, filled: tuple[str, str | None], written: list[Path], missing: list[Path]
) -> str:
    why, unrecorded = filled
    done = len(finished_trials(study))
    lost = f"; not recorded there (it runs again): {unrecorded}" if unrecorded else ""
    kept = f"; kept {', '.join(p.name for p in written)}" if written else ""
    short = f"; did not fit: {', '.join(p.name for p in missing)}" if missing else ""
    return (
        f"disk full in {out} while the sweep ran ({why}): {out / DB} holds the {done} "
        f"{'trial that' if done == 1 else 'trials that'} finished{lost}{kept}{short}; free some space "
        "and run the same command again to go on"
    )


def _yaml_comment(text: str) -> str:
    """One YAML comment line: a metric name or profile from a shared space file or study.db cannot
    break out of it into keys of best.yaml."""
    return "# " + "".join(c if c.isprintable() else " " for c in text) + "\n"


def best_config(env: str, study: Any, trial: Any) -> dict[str, dict[str, Any]]:
    """The trial's config as a ``--config`` file, typed as the config types it: its params, and every
    other value of the sweep's base config that differs from the env's defaults on the sweep's profile."""
    attrs = study.user_attrs
    profile = attrs.get("profile")
    if attrs.get("base"):  # the base config as resolved when the sweep began
        layer = {s: dict(v) for s, v in attrs["base"].items() if s in SECTIONS}
    else:  # a study from before the base was kept: its overrides and --config as given
        layer = sections_of(
            Base(env, profile, attrs.get("config_file"), attrs.get("overrides", [])).resolve()
        )
    start = resolve(env=env, profile=profile, overrides=layer)
    cfg = resolve(env=env, profile=profile, overrides=merge(layer, trial_overrides(start, trial.params)))
    defaults = resolve(env=env, profile=profile)
    swept = {tuple(name.split(".", 1)) for name in trial.params}
    out: dict[str, dict[str, Any]] = {}
    for section in SECTIONS:
        for key, value in cfg[section].items():
            if defaults[section].get(key) != value or (section, key) in swept:
                out.setdefault(section, {})[key] = value
    return out


def pareto_png(study: Any, space: Space, env: str) -> bytes | None:
    """Score against wall seconds per trial, the Pareto front joined, as PNG bytes (None: no points)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from appliance.bench.report import plot_text  # a space file's metric is text, not maths

    trials = [r for r in rows(study) if r["score"] is not None and r["seconds"] is not None]
    if not trials:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    for state, marker, color in (("complete", "o", "tab:blue"), ("pruned", "x", "tab:gray")):
        pts = [r for r in trials if r["state"] == state]
        if pts:
            ax.scatter(
                [r["seconds"] for r in pts], [r["score"] for r in pts], marker=marker, c=color, label=state
            )
    front = sorted((r for r in trials if r["pareto"]), key=lambda r: r["seconds"])
    if front:
        ax.plot(
            [r["seconds"] for r in front],
            [r["score"] for r in front],
            "-o",
            c="tab:red",
            label="Pareto front",
        )
    for r in trials:
        if r["baseline"]:
            ax.annotate("baseline", (r["seconds"], r["score"]), textcoords="offset points", xytext=(4, 4))
    if space.target is not None:
        ax.axhline(space.target, ls="--", c="k", lw=0.8, label=f"target {space.target:g}")
    ax.set_xlabel("wall seconds per trial")
    ax.set_ylabel(plot_text(space.metric))
    ax.set_title(f"sweep of {env}: {len(trials)} trials")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def summary(study: Any, space: Space) -> list[str]:
    """A few lines for the end of the command: the front and the best trade-off."""
    best = best_trade_off(study, space.target)
    if best is None:
        return []
    base = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("baseline") and t.values]
    lines = [f"Pareto front: {len(study.best_trials)} trials; best trade-off trial {best.number}"]
    if base and space.target is not None:
        b = base[0]
        lines.append(
            f"baseline (your config): {space.metric} {b.values[0]:.3f} in {b.values[1]:.1f} s; "
            f"best: {best.values[0]:.3f} in {best.values[1]:.1f} s"
        )
    return lines
