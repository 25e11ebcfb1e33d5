"""Summaries of repeated measurements, intervals for medians and for ratios of two sets, and Holm's
correction for judging many ratios at once.

Benchmarks here take few samples (3 repeats by default) of noisy quantities, so every figure keeps its
samples and is summarized by its median, range, a percentile-bootstrap interval for the median and
the coefficient of variation (the run-to-run spread a re-run on the same machine should expect). Two
sets are compared by Welch's t on their logarithms (:func:`ratio_test`),
which holds its confidence at 3 samples a side where a bootstrap does not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats as scipy_stats

RESAMPLES = 4000
CONFIDENCE = 0.95
FAMILY_ALPHA = 0.05  # many ratios judged at once: the chance of calling any one of them wrongly (holm)


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


def _log_welch(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float] | None:
    """Welch's comparison of the mean logarithms of ``b`` and ``a``: (difference, its standard error,
    degrees of freedom); a side with one sample borrows the other's spread. None where a sample is not
    positive (no logarithm) or neither side has two samples."""
    if (a <= 0).any() or (b <= 0).any() or (a.size < 2 and b.size < 2):
        return None
    la, lb = np.log(a), np.log(b)
    diff = float(lb.mean() - la.mean())
    if a.size < 2 or b.size < 2:
        spread = lb if a.size < 2 else la
        se = float(spread.std(ddof=1) * np.sqrt(1 / a.size + 1 / b.size))
        return diff, se, float(spread.size - 1)
    va, vb = la.var(ddof=1) / a.size, lb.var(ddof=1) / b.size
    se = float(np.sqrt(va + vb))
    if se == 0:
        return diff, 0.0, float(a.size + b.size - 2)
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    return diff, se, float(df)


def ratio_test(
    base: Sequence[float], new: Sequence[float], confidence: float = CONFIDENCE, seed: int = 0
) -> tuple[float, list[float] | None, float | None]:
    """median(new) / median(base), an interval for the ratio that holds its confidence at 3 samples a
    side, and the two-sided p-value of "the two sides run alike" by the test the interval inverts (it
    excludes 1 exactly where p is below 1 - confidence); interval and p are None with fewer than two
    samples on both sides. Welch's t on the logarithms of the samples (the ratio of their geometric
    means), which fits speeds and times, whose noise is multiplicative. A percentile bootstrap of the
    medians, the method before it, gave a 90 % interval for its 95 % at 3 samples a side (with so few,
    it excludes 1 whenever one side's samples all lie beyond the other's, 1 time in 10 by chance:
    tests/test_bench.py simulates it); it stays for samples that are not all positive."""
    a, b = _clean(base), _clean(new)
    if a.size == 0 or b.size == 0 or np.median(a) == 0:
        raise ValueError("a ratio needs samples on both sides and a non-zero base median")
    ratio = float(np.median(b) / np.median(a))
    if a.size < 2 and b.size < 2:
        return ratio, None, None
    welch = _log_welch(a, b)
    if welch is not None:
        diff, se, df = welch
        if se == 0:
            return ratio, [float(np.exp(diff))] * 2, 1.0 if diff == 0 else 0.0
        half = float(scipy_stats.t.ppf(0.5 + confidence / 2, df)) * se
        p = float(2 * scipy_stats.t.sf(abs(diff) / se, df))
        return ratio, [float(np.exp(diff - half)), float(np.exp(diff + half))], p
    ratios = _bootstrap_ratios(a, b, seed)
    if not ratios.size:
        return ratio, None, None
    p = float(min(1.0, 2 * min((ratios <= 1).mean(), (ratios >= 1).mean())))
    return ratio, _interval(ratios, confidence), p


def ratio_interval(
    base: Sequence[float], new: Sequence[float], confidence: float = CONFIDENCE, seed: int = 0
) -> tuple[float, list[float] | None]:
    """:func:`ratio_test`'s ratio and interval."""
    ratio, ci, _ = ratio_test(base, new, confidence, seed)
    return ratio, ci


def ratio_p_value(base: Sequence[float], new: Sequence[float], seed: int = 0) -> float | None:
    """:func:`ratio_test`'s p-value; None where it has none (or no ratio)."""
    try:
        return ratio_test(base, new, seed=seed)[2]
    except ValueError:
        return None


def _bootstrap_ratios(a: np.ndarray, b: np.ndarray, seed: int) -> np.ndarray:
    ma, mb = bootstrap_medians(a, seed=seed), bootstrap_medians(b, seed=seed + 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = mb / ma
    return ratios[np.isfinite(ratios)]


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment: each p-value as it stands when all of them are tested at once, so
    that "adjusted p below alpha" errs for any of them with probability at most alpha (family-wise)."""
    order = np.argsort(p_values, kind="stable")
    m = len(p_values)
    out = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * float(p_values[i])))
        out[i] = running
    return out


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
