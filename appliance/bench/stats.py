"""Summaries of repeated measurements, and bootstrap confidence intervals for medians and their ratios.

Benchmarks here take few samples (3 repeats by default) of noisy quantities, so every figure keeps its
samples and is summarized by its median, range, a percentile-bootstrap interval for the median and
the coefficient of variation (the run-to-run spread a re-run on the same machine should expect).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

RESAMPLES = 4000
CONFIDENCE = 0.95


def _clean(samples: Sequence[float]) -> np.ndarray:
    values = np.asarray([s for s in samples if s is not None], dtype=np.float64)
    return values[np.isfinite(values)]


def bootstrap_medians(samples: Sequence[float], resamples: int = RESAMPLES, seed: int = 0) -> np.ndarray:
    """Medians of ``resamples`` resamplings (with replacement) of ``samples``."""
    values = _clean(samples)
    if values.size == 0:
        return np.array([])
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, values.size, size=(resamples, values.size))
    return np.median(values[picks], axis=1)


def _interval(values: np.ndarray, confidence: float) -> list[float]:
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(values, [tail, 100 - tail])
    return [float(lo), float(hi)]


def summarize(samples: Sequence[float], confidence: float = CONFIDENCE) -> dict[str, Any]:
    """median, min, max, mean, cv (std/mean, sample std) and a bootstrap interval for the median."""
    values = _clean(samples)
    if values.size == 0:
        return {"n": 0, "median": None, "min": None, "max": None, "mean": None, "cv": None, "ci": None}
    mean = float(values.mean())
    cv = float(values.std(ddof=1) / abs(mean)) if values.size > 1 and mean != 0 else None
    return {
        "n": int(values.size),
        "median": float(np.median(values)),
        "min": float(values.min()),
        "max": float(values.max()),
        "mean": mean,
        "cv": cv,
        "ci": _interval(bootstrap_medians(values), confidence) if values.size > 1 else None,
    }


def ratio_interval(
    base: Sequence[float], new: Sequence[float], confidence: float = CONFIDENCE, seed: int = 0
) -> tuple[float, list[float] | None]:
    """median(new) / median(base), and a bootstrap interval for that ratio (resampling each side)."""
    a, b = _clean(base), _clean(new)
    if a.size == 0 or b.size == 0 or np.median(a) == 0:
        raise ValueError("a ratio needs samples on both sides and a non-zero base median")
    ratio = float(np.median(b) / np.median(a))
    if a.size < 2 and b.size < 2:
        return ratio, None
    ma, mb = bootstrap_medians(a, seed=seed), bootstrap_medians(b, seed=seed + 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = mb / ma
    ratios = ratios[np.isfinite(ratios)]
    return ratio, _interval(ratios, confidence) if ratios.size else None


def iqm_intervals(
    runs: dict[str, Sequence[float]], confidence: float = CONFIDENCE, reps: int = RESAMPLES, seed: int = 0
) -> dict[str, tuple[float, float, float]] | None:
    """Per setup, the interquartile mean of its runs' scores (one score per seed) and a stratified
    bootstrap interval for it, from the ``rliable`` library (Agarwal et al. 2021): (iqm, low, high).
    One task per setup, so the strata are its runs. None where rliable is not installed (the
    ``stats`` extra); setups without a finite score are left out."""
    import warnings

    try:
        from rliable import library, metrics
    except ImportError:
        return None
    scores = {k: _clean(v).reshape(-1, 1) for k, v in runs.items()}
    scores = {k: v for k, v in scores.items() if v.size}
    if not scores:
        return {}
    with warnings.catch_warnings():  # arch's notice that RandomState is on its way out
        warnings.simplefilter("ignore", FutureWarning)
        point, ci = library.get_interval_estimates(
            scores,
            lambda s: np.array([metrics.aggregate_iqm(s)]),
            reps=reps,
            confidence_interval_size=confidence,
            random_state=np.random.RandomState(seed),
        )
    return {k: (float(point[k][0]), float(ci[k][0, 0]), float(ci[k][1, 0])) for k in scores}
