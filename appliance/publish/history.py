"""A metric's history across commits on one machine, and the steps in it (asv-style).

A history is a series of points, one per commit in the order the commits were first measured
(the earliest report of each), each holding the samples of every report taken at that commit. The
figures of reports the noise guard marked busy or slowed are shown but never judged.

A step is a change in level that is significant given the samples' noise, not one noisy point.
Found by binary segmentation: in a stretch of points, every split into a before and an after is
tested (the difference of their mean log levels, a two-sample t), the most significant split is
kept when it passes, and both halves are searched again. The noise a point's level carries is the
larger of two estimates, so neither hides the other: the scatter of the points' levels around their
side's mean (run-to-run drift, code changes too small to call), and the spread of the samples
within each point divided by the samples a point has (what the repeats themselves say). A split
passes at :data:`~appliance.measure.stats.FAMILY_ALPHA` divided by the number of places a step could
be in the whole history (Bonferroni), so a history of pure noise shows a step about one time in
twenty or less, however long it is. Where no single split passes, a level that left and came back
(a regression fixed later, which no single split shows) is searched for as two steps, at the
family level divided by the number of such pairs of places. A stretch of one point forms a side only where it is the
newest commit (which must be judged at once, before a second one confirms it); elsewhere one point
apart from its neighbours is one noisy point, not a step.

Each step names its first commit, its size (the ratio of the after level to the before level,
geometric means of the points' medians beside each step) and a 95 % interval for that ratio. Its
verdict is ``compare``'s: a regression or an improvement beyond the threshold, else within the
threshold; descriptive ("info") figures only change.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats as scipy_stats

from appliance.bench.report import fmt
from appliance.compare.compare import SLOWED, UNRELIABLE
from appliance.measure.stats import CONFIDENCE, FAMILY_ALPHA, summarize
from appliance.publish.collect import Entry, short_commit

MIN_POINTS = 3  # fewer commits: no step can be told from noise
NOT_POSITIVE = "not judged (a sample <= 0)"  # levels are compared as logarithms
MAX_PAIRS_POINTS = 200  # a level that left and came back is searched for in stretches up to this long


@dataclass
class Point:
    commit: str
    created: str  # the earliest report's date at this commit
    samples: list[float]  # judged samples (busy and slowed ones left out)
    reports: list[Entry] = field(default_factory=list)
    median: float | None = None
    ci: list[float] | None = None
    unreliable: str = ""  # "unreliable (busy)"/"(slowed)" where no judged sample is left

    @property
    def judged(self) -> bool:
        return bool(self.samples) and all(s > 0 for s in self.samples)


@dataclass
class Step:
    index: int  # the first point of the new level
    commit: str
    created: str
    ratio: float
    ci: list[float]
    p: float
    verdict: str
    before: float
    after: float


def _flag(metric: dict[str, Any]) -> str:
    noise = metric.get("noise") or {}
    if noise.get("busy"):
        return UNRELIABLE
    if (noise.get("gate") or {}).get("slow_kept"):
        return SLOWED
    return ""


def points(name: str, entries: list[Entry]) -> list[Point]:
    """One point per commit (per report where the commit is unknown), ordered by the first report."""
    by_commit: dict[str, Point] = {}
    for e in sorted(entries, key=lambda e: e.created):
        key = e.commit if e.commit != "?" else f"?{e.id}"
        p = by_commit.get(key)
        if p is None:
            p = by_commit[key] = Point(e.commit, e.created, [])
        p.reports.append(e)
        m = e.data["metrics"][name]
        flag = _flag(m)
        if not flag:
            p.samples += [float(s) for s in m["samples"] if s is not None]
        elif not p.unreliable:
            p.unreliable = flag
    out = list(by_commit.values())
    for p in out:
        if p.samples:
            p.unreliable = "" if all(s > 0 for s in p.samples) else NOT_POSITIVE
            s = summarize(p.samples)
            p.median, p.ci = s["median"], s["ci"]
        else:
            every = [s for e in p.reports for s in e.data["metrics"][name]["samples"] if s is not None]
            if every:
                s = summarize(every)
                p.median, p.ci = s["median"], s["ci"]
    return out


def _levels(pts: list[Point]) -> tuple[np.ndarray, list[np.ndarray]]:
    logs = [np.log(np.asarray(p.samples)) for p in pts]
    return np.array([x.mean() for x in logs]), logs


def _noise(y: np.ndarray, logs: list[np.ndarray], cuts: list[int]) -> tuple[float, int] | None:
    """The variance of a point's level and its degrees of freedom, with the history cut at ``cuts``:
    the larger of the points' scatter around their segment's mean and the samples' spread within
    the points over the samples a point has. None where neither can be estimated."""
    bounds = [0, *sorted(cuts), len(y)]
    resid = np.concatenate([y[a:b] - y[a:b].mean() for a, b in itertools.pairwise(bounds)])
    df_between = len(y) - (len(bounds) - 1)
    between = float((resid**2).sum() / df_between) if df_between > 0 else 0.0
    df_within = sum(len(x) - 1 for x in logs)
    within = 0.0
    if df_within > 0:
        within_ss = sum(float(((x - x.mean()) ** 2).sum()) for x in logs)
        within = within_ss / df_within / float(np.mean([len(x) for x in logs]))
    if df_between <= 0 and df_within <= 0:
        return None
    return (between, df_between) if between >= within and df_between > 0 else (within, df_within)


def _split_test(
    y: np.ndarray, logs: list[np.ndarray], lo: int, k: int, hi: int, cuts: list[int]
) -> tuple[float, float, float, float] | None:
    """Points [lo, k) against [k, hi), the history cut at ``cuts`` and ``k``: (difference of mean
    levels, its standard error, degrees of freedom, two-sided p); None where the noise cannot be
    estimated."""
    noise = _noise(y, logs, [*cuts, k])
    if noise is None:
        return None
    var, df = noise
    diff = float(y[k:hi].mean() - y[lo:k].mean())
    se = math.sqrt(var * (1 / (k - lo) + 1 / (hi - k)))
    if se == 0:
        return (diff, 0.0, float(df), 0.0 if diff else 1.0)
    p = float(2 * scipy_stats.t.sf(abs(diff) / se, df))
    return diff, se, float(df), p


def _search(y: np.ndarray, logs: list[np.ndarray], alpha: float, pair_alpha: float) -> list[int]:
    """Binary segmentation: the most significant split of each stretch while one passes ``alpha``;
    where none does, the most significant stretch that left and came back (``pair_alpha``)."""
    n = len(y)
    cuts: list[int] = []
    stretches = [(0, n)]
    while stretches:
        lo, hi = stretches.pop()
        best: tuple[float, int] | None = None
        for k in range(lo + 1, hi):
            # one point alone on a side only where it is the newest commit
            if k - lo < 2 or (hi - k < 2 and hi != n):
                continue
            test = _split_test(y, logs, lo, k, hi, cuts)
            if test is not None and (best is None or test[3] < best[0]):
                best = (test[3], k)
        if best is not None and best[0] < alpha:
            cuts.append(best[1])
            stretches += [(lo, best[1]), (best[1], hi)]
            continue
        pair = _best_pair(y, logs, lo, hi, cuts)
        if pair is not None and pair[0] < pair_alpha:
            _, k1, k2 = pair
            cuts += [k1, k2]
            stretches += [(lo, k1), (k1, k2), (k2, hi)]
    return sorted(cuts)


def _best_pair(
    y: np.ndarray, logs: list[np.ndarray], lo: int, hi: int, cuts: list[int]
) -> tuple[float, int, int] | None:
    """A level that changed and changed back within [lo, hi) (which no single split shows): the
    stretch [k1, k2) of at least two points against the points around it, (p, k1, k2)."""
    n = len(y)
    best: tuple[float, int, int] | None = None
    if hi - lo > MAX_PAIRS_POINTS:
        return None
    for k1 in range(lo + 2, hi - 1):
        for k2 in range(k1 + 2, hi + 1):
            if k2 == hi or (hi - k2 < 2 and hi != n):
                continue  # a stretch to the end is a single split
            noise = _noise(y, logs, [*cuts, k1, k2])
            if noise is None:
                continue
            var, df = noise
            outside = np.concatenate([y[lo:k1], y[k2:hi]])
            diff = float(y[k1:k2].mean() - outside.mean())
            se = math.sqrt(var * (1 / (k2 - k1) + 1 / len(outside)))
            p = float(2 * scipy_stats.t.sf(abs(diff) / se, df)) if se else float(diff == 0)
            if best is None or p < best[0]:
                best = (p, k1, k2)
    return best


def _verdict(ratio: float, better: str, threshold: float) -> str:
    if better == "info":
        return "changed"
    gain = 1 / ratio if better == "lower" else ratio
    if gain < 1 - threshold:
        return "regression"
    if gain > 1 + threshold:
        return "improvement"
    return "within threshold"


def steps(pts: list[Point], better: str, threshold: float = 0.05) -> list[Step]:
    """The steps in a history's judged points, oldest first (:mod:`this module <.history>`)."""
    idx = [i for i, p in enumerate(pts) if p.judged]
    judged = [pts[i] for i in idx]
    n = len(judged)
    if n < MIN_POINTS:
        return []
    y, logs = _levels(judged)
    alpha = FAMILY_ALPHA / (n - 1)
    cuts = _search(y, logs, alpha, FAMILY_ALPHA / max(1, (n - 1) * (n - 2) // 2))
    bounds = [0, *cuts, n]
    out = []
    for j, k in enumerate(cuts):
        lo, hi = bounds[j], bounds[j + 2]
        others = [c for c in cuts if c != k]
        test = _split_test(y, logs, lo, k, hi, others)
        if test is None:
            continue
        diff, se, df, p = test
        half = float(scipy_stats.t.ppf(0.5 + CONFIDENCE / 2, df)) * se
        ratio = math.exp(diff)
        point = judged[k]
        out.append(
            Step(
                index=idx[k],
                commit=point.commit,
                created=point.created,
                ratio=ratio,
                ci=[math.exp(diff - half), math.exp(diff + half)],
                p=p,
                verdict=_verdict(ratio, better, threshold),
                before=math.exp(float(y[lo:k].mean())),
                after=math.exp(float(y[k:hi].mean())),
            )
        )
    return out


def step_text(step: Step, unit: str) -> str:
    """'step at 5c61bcd5 (2026-11-25): 0.903x (0.871-0.936), 12.1 M -> 10.9 M agent-steps/s, regression'."""
    return (
        f"step at {short_commit(step.commit)} ({step.created[:10]}): {step.ratio:.3f}x "
        f"({step.ci[0]:.3f}-{step.ci[1]:.3f}), {fmt(step.before, unit)} -> {fmt(step.after, unit)} {unit}, "
        f"{step.verdict}"
    )


def newest_regression(found: list[Step]) -> Step | None:
    """The newest step, where it is a regression beyond the threshold (what `history` exits 1 on)."""
    return found[-1] if found and found[-1].verdict == "regression" else None
