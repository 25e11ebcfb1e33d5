"""A report's PNG plots: agent-steps/s per env, backend and training run, env thread scaling,
training phase shares, and the time-to-score runs' learning curves.

Every text from the report goes through :func:`plot_text` (matplotlib reads ``$...$`` as maths).
"""

from __future__ import annotations

from typing import Any

from appliance.bench import metrics as reg
from appliance.bench.report.content import gpu_label


def plot_text(value: Any, most: int = 80) -> str:
    """Report content as matplotlib text: ``$`` escaped (no maths parsing), cut to ``most`` characters."""
    text = " ".join(str(value).split())
    text = text if len(text) <= most else text[: most - 3] + "..."
    return text.replace("$", r"\$")


MAX_FIGURE_INCHES = 600  # at 90 dpi, below Agg's 65,536 pixels a side


def _metrics(report: dict[str, Any], family: reg.Family) -> list[tuple[str, dict[str, Any]]]:
    """The family's metrics (the metric registry) that have a median and a range (a report may lack
    either)."""
    return [
        (n, m)
        for n, m in reg.below(report["metrics"], family)
        if m.get("median") and None not in (m.get("min"), m.get("max"))
    ]


def _label(m: dict[str, Any], key: str) -> Any:
    return (m.get("labels") or {}).get(key)


def plot_images(report: dict[str, Any]) -> list[tuple[str, bytes]]:
    """(suffix, PNG bytes) of each plot: SPS per env/backend, thread scaling, training phase shares.

    Every text from the report goes through :func:`plot_text`; metrics lacking the labels a plot
    needs are left out of it."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    out: list[tuple[str, bytes]] = []

    def save(fig: Any, suffix: str) -> None:
        buf = io.BytesIO()
        fig.tight_layout()
        fig.savefig(buf, format="png", dpi=90)
        plt.close(fig)
        out.append((suffix, buf.getvalue()))

    bars = []  # best thread count per env, every backend, training
    best_env: dict[str, tuple[float, float, float]] = {}
    for _, m in _metrics(report, reg.ENV_SPS):
        env = _label(m, "env")
        if env is not None and (env not in best_env or m["median"] > best_env[env][0]):
            best_env[env] = (m["median"], m["min"], m["max"])
    bars += [(f"{env} env (best threads)", *v) for env, v in best_env.items()]
    bars += [
        (f"{_label(m, 'env')} {_label(m, 'backend')}", m["median"], m["min"], m["max"])
        for _, m in _metrics(report, reg.VECTOR_SPS)
    ]
    bars += [
        (f"{_label(m, 'env')} train", m["median"], m["min"], m["max"])
        for _, m in _metrics(report, reg.TRAIN_SPS)
    ]
    if bars:
        fig, ax = plt.subplots(figsize=(8, min(MAX_FIGURE_INCHES, 0.35 * len(bars) + 1.2)))
        labels = [plot_text(b[0]) for b in bars]
        med = [b[1] for b in bars]
        err = [[max(0, b[1] - b[2]) for b in bars], [max(0, b[3] - b[1]) for b in bars]]
        ax.barh(labels, med, xerr=err, color="#4c72b0")
        ax.set_xscale("log")
        ax.invert_yaxis()
        ax.set_xlabel("agent-steps/s (median, min-max bars)")
        fp = report["fingerprint"]
        cores = (fp.get("cpu") or {}).get("physical_cores")
        ax.set_title(plot_text(f"{report['suite'].get('name')} suite: {gpu_label(fp)}, {cores} cores", 120))
        save(fig, "sps")

    curves: dict[str, list[tuple[int, float]]] = {}
    for _, m in _metrics(report, reg.ENV_SPS):
        env, threads = _label(m, "env"), _label(m, "threads")
        if env is not None and isinstance(threads, int) and threads > 0:
            curves.setdefault(env, []).append((threads, m["median"]))
    if any(len(c) > 1 for c in curves.values()):
        fig, ax = plt.subplots(figsize=(6, 4))
        for env, pts in sorted(curves.items()):
            pts.sort()
            base = pts[0][1] / pts[0][0]
            ax.plot([p[0] for p in pts], [p[1] / base for p in pts], marker="o", label=plot_text(env))
        top = max(p[0] for c in curves.values() for p in c)
        ax.plot([1, top], [1, top], "k--", linewidth=0.8, label="linear")
        ax.set_xlabel("threads")
        ax.set_ylabel("speed-up over 1 thread")
        ax.legend(fontsize=7)
        ax.set_title("env thread scaling")
        save(fig, "scaling")

    phases: dict[str, dict[str, float]] = {}
    for _, m in _metrics(report, reg.TRAIN_PHASE):
        env, phase = _label(m, "env"), _label(m, "phase")
        if env is not None and phase is not None:
            phases.setdefault(env, {})[phase] = m["median"]
    if phases:
        fig, ax = plt.subplots(figsize=(9, min(MAX_FIGURE_INCHES, 0.6 * len(phases) + 1.6)))
        names = sorted({p for v in phases.values() for p in v})
        cmap = plt.get_cmap("tab10")
        for row, (_env, shares) in enumerate(sorted(phases.items())):
            left = 0.0
            for i, name in enumerate(names):
                width = 100 * shares.get(name, 0.0)
                ax.barh(
                    row, width, left=left, color=cmap(i % 10), label=plot_text(name) if row == 0 else None
                )
                left += width
        ax.set_yticks(range(len(phases)), [plot_text(env) for env in sorted(phases)])
        ax.set_xlabel("% of training wall time")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        ax.set_title("training phase breakdown")
        save(fig, "phases")
    plot_learning_curves(report, save, plt)
    return out


def plot_learning_curves(report: dict[str, Any], save: Any, plt: Any) -> None:
    """Score vs agent-steps and vs wall seconds, one line per env and run, the target dashed
    (from the time-to-score runs' curves in ``analysis.learning_curves``)."""
    curves = (report.get("analysis") or {}).get("learning_curves") or {}
    if not curves:
        return
    for x, label in (("steps", "agent-steps"), ("seconds", "wall seconds")):
        envs = sorted(curves)
        cols = min(3, len(envs))
        rows = -(-len(envs) // cols)
        fig, axes = plt.subplots(
            rows, cols, figsize=(4.2 * cols, min(MAX_FIGURE_INCHES, 3.2 * rows)), squeeze=False
        )
        for ax in axes.flat[len(envs) :]:
            ax.set_visible(False)
        for ax, env in zip(axes.flat, envs, strict=False):
            entry = curves[env]
            for i, run in enumerate(entry["runs"]):
                points = [(a, b) for a, b in zip(run[x], run["score"], strict=False) if None not in (a, b)]
                ax.plot(
                    [p[0] for p in points],
                    [p[1] for p in points],
                    linewidth=1.2,
                    label=f"seed +{i}" if len(entry["runs"]) > 1 else None,
                )
            target = entry.get("target")
            if target is not None:
                ax.axhline(float(target), color="k", linestyle="--", linewidth=0.8)
            ax.set_title(plot_text(f"{env}: {entry.get('metric')} (target {target})", 60), fontsize=9)
            ax.set_xlabel(label, fontsize=8)
            ax.tick_params(labelsize=7)
        save(fig, f"learning-{x}")
