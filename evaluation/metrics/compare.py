"""Paired comparison of two runs on the same cases, and the regression gate built on it.

A run is per-case scores: `{case_id: {metric: value}}` (e.g. accuracy 0/1,
effectiveness 0/0.5/1, any robustness rubric value; None = not applicable).
For each metric only cases where BOTH runs have a value are paired; the rest are
reported as unpaired and never silently compared.

For one metric with paired differences d_i = candidate_i − baseline_i (i = 1..n):

- `delta` = mean(d) (= candidate mean − baseline mean over the paired cases).
- Confidence interval at level `confidence` (two-sided), by `method`:
  - "bootstrap" (default): the paired percentile bootstrap. `n_resamples` times,
    draw n case indices with replacement (Python's `random.Random(seed)`, so the
    same inputs and seed give the same interval) and take the mean of those d_i;
    the interval is the (1 − confidence)/2 and (1 + confidence)/2 quantiles of the
    resampled means (linear interpolation between order statistics). Makes no
    normality assumption, which suits 0/1 and 0/0.5/1 scores; slightly narrow
    for very small n.
  - "t": the paired t interval, delta ± t_{(1+confidence)/2, n−1} · sd(d)/√n, with
    the Student t quantile computed here (regularised incomplete beta + bisection,
    no SciPy). Undefined (NaN) for n < 2.
  With all d_i equal both intervals collapse to [delta, delta].
- `regressed` / `improved`: the case ids with d_i < 0 / d_i > 0.

The gate (`RegressionGate`): for each configured metric, FAIL when

    ci_high(candidate − baseline) < −max_drop[metric]

i.e. the whole interval lies below −max_drop: the candidate is worse than the
baseline by MORE than the allowed drop, with confidence. Because the interval is
two-sided at `confidence`, its upper bound is a one-sided upper confidence bound
at (1 + confidence)/2 (97.5 % for the default 0.95). `max_drop` is in the
metric's own units (0.01 = one percentage point of a 0/1 accuracy) and may be
one number for all metrics or a per-metric mapping (missing metrics: 0). A drop
that is not established — a small drop, or a large one on too few cases — passes.
The gate also fails, with a reason, when a metric has fewer than `min_cases`
paired cases or its interval is undefined: a gate must not pass for want of data.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

METHODS = ("bootstrap", "t")

Run = Mapping[str, Mapping[str, Any]]


# -- Student t quantile (pure Python) --------------------------------------------------------------

def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction for the incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 3e-16
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom."""
    if df <= 0:
        raise ValueError("degrees of freedom must be positive")
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t (bisection on `t_cdf`, |error| < 1e-10)."""
    if not 0.0 < p < 1.0:
        raise ValueError("p must be in (0, 1)")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return (lo + hi) / 2.0


# -- intervals ----------------------------------------------------------------------------------------

def _quantile(sorted_values: Sequence[float], q: float) -> float:
    h = (len(sorted_values) - 1) * q
    lo = math.floor(h)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (h - lo) * (sorted_values[hi] - sorted_values[lo])


def bootstrap_ci(diffs: Sequence[float], *, confidence: float = 0.95, n_resamples: int = 10_000,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of mean(diffs) (see the module docstring)."""
    diffs = list(diffs)
    n = len(diffs)
    if n == 0:
        return math.nan, math.nan
    if min(diffs) == max(diffs):
        return float(diffs[0]), float(diffs[0])
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(diffs, k=n)) / n for _ in range(n_resamples))
    alpha = 1.0 - confidence
    return _quantile(means, alpha / 2), _quantile(means, 1 - alpha / 2)


def t_ci(diffs: Sequence[float], *, confidence: float = 0.95) -> tuple[float, float]:
    """Paired t interval of mean(diffs); NaN for fewer than two values."""
    diffs = list(diffs)
    n = len(diffs)
    if n < 2:
        return math.nan, math.nan
    mean = sum(diffs) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = t_quantile((1 + confidence) / 2, n - 1) * sd / math.sqrt(n)
    return mean - half, mean + half


# -- comparison ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MetricComparison:
    metric: str
    n: int
    baseline_mean: float
    candidate_mean: float
    delta: float
    ci_low: float
    ci_high: float
    confidence: float
    method: str
    regressed: tuple[str, ...] = ()
    improved: tuple[str, ...] = ()
    unpaired: tuple[str, ...] = ()  # cases where only one run has a value for this metric

    def as_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "n": self.n, "baseline_mean": self.baseline_mean,
                "candidate_mean": self.candidate_mean, "delta": self.delta, "ci_low": self.ci_low,
                "ci_high": self.ci_high, "confidence": self.confidence, "method": self.method,
                "regressed": list(self.regressed), "improved": list(self.improved),
                "unpaired": list(self.unpaired)}


@dataclass(frozen=True)
class RunComparison:
    metrics: Mapping[str, MetricComparison]
    only_in_baseline: tuple[str, ...] = ()
    only_in_candidate: tuple[str, ...] = ()

    def __getitem__(self, metric: str) -> MetricComparison:
        return self.metrics[metric]

    def as_dict(self) -> dict[str, Any]:
        return {"metrics": {k: v.as_dict() for k, v in self.metrics.items()},
                "only_in_baseline": list(self.only_in_baseline),
                "only_in_candidate": list(self.only_in_candidate)}


def _value(row: Mapping[str, Any], metric: str) -> float | None:
    value = row.get(metric)
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def compare_metric(baseline: Run, candidate: Run, metric: str, *, confidence: float = 0.95,
                   method: str = "bootstrap", n_resamples: int = 10_000, seed: int = 0) -> MetricComparison:
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, not {method!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError("confidence must be in (0, 1)")
    ids, base, cand, unpaired = [], [], [], []
    for case_id in sorted(set(baseline) & set(candidate)):
        b, c = _value(baseline[case_id], metric), _value(candidate[case_id], metric)
        if b is None and c is None:
            continue
        if b is None or c is None:
            unpaired.append(case_id)
            continue
        ids.append(case_id)
        base.append(b)
        cand.append(c)
    diffs = [c - b for b, c in zip(base, cand, strict=True)]
    n = len(diffs)
    if method == "t":
        low, high = t_ci(diffs, confidence=confidence)
    else:
        low, high = bootstrap_ci(diffs, confidence=confidence, n_resamples=n_resamples, seed=seed)
    return MetricComparison(
        metric=metric, n=n,
        baseline_mean=sum(base) / n if n else math.nan,
        candidate_mean=sum(cand) / n if n else math.nan,
        delta=sum(diffs) / n if n else math.nan,
        ci_low=low, ci_high=high, confidence=confidence, method=method,
        regressed=tuple(i for i, d in zip(ids, diffs, strict=True) if d < 0),
        improved=tuple(i for i, d in zip(ids, diffs, strict=True) if d > 0),
        unpaired=tuple(unpaired),
    )


def compare_runs(baseline: Run, candidate: Run, metrics: Iterable[str] | None = None, *,
                 confidence: float = 0.95, method: str = "bootstrap", n_resamples: int = 10_000,
                 seed: int = 0) -> RunComparison:
    """Compare every metric (default: all metric names either run reports) on the shared cases."""
    if metrics is None:
        names = {m for run in (baseline, candidate) for row in run.values() for m in row}
        metrics = sorted(n for n in names if n != "case_id")
    out = {m: compare_metric(baseline, candidate, m, confidence=confidence, method=method,
                             n_resamples=n_resamples, seed=seed) for m in metrics}
    return RunComparison(
        metrics=out,
        only_in_baseline=tuple(sorted(set(baseline) - set(candidate))),
        only_in_candidate=tuple(sorted(set(candidate) - set(baseline))),
    )


def by_case(rows: Iterable[Mapping[str, Any]], key: str = "case_id") -> dict[str, dict[str, Any]]:
    """Per-case result rows (each with a `case_id`) as a run mapping; a repeated id is an error."""
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        case_id = str(row[key])
        if case_id in out:
            raise ValueError(f"case {case_id!r} appears twice")
        out[case_id] = {k: v for k, v in row.items() if k != key}
    return out


# -- the gate -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GateResult:
    passed: bool
    reasons: tuple[str, ...]
    comparison: RunComparison | None = None


@dataclass(frozen=True)
class RegressionGate:
    """Fails when a metric's drop beyond `max_drop` is established (rule in the module docstring)."""

    metrics: tuple[str, ...]
    max_drop: float | Mapping[str, float] = 0.0
    confidence: float = 0.95
    method: str = "bootstrap"
    n_resamples: int = 10_000
    seed: int = 0
    min_cases: int = 2
    _drops: Mapping[str, float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "metrics", tuple(self.metrics))
        if not self.metrics:
            raise ValueError("a regression gate needs at least one metric")
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, not {self.method!r}")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError("confidence must be in (0, 1)")
        if isinstance(self.max_drop, Mapping):
            drops = {m: float(self.max_drop.get(m, 0.0)) for m in self.metrics}
        else:
            drops = dict.fromkeys(self.metrics, float(self.max_drop))
        if any(d < 0 for d in drops.values()):
            raise ValueError("max_drop must be >= 0")
        object.__setattr__(self, "_drops", drops)

    def check(self, baseline: Run, candidate: Run) -> GateResult:
        comparison = compare_runs(baseline, candidate, self.metrics, confidence=self.confidence,
                                  method=self.method, n_resamples=self.n_resamples, seed=self.seed)
        return self.evaluate(comparison)

    def evaluate(self, comparison: RunComparison) -> GateResult:
        passed, reasons = True, []
        level = f"{self.confidence:.0%} {'paired bootstrap' if self.method == 'bootstrap' else 'paired t'}"
        for metric in self.metrics:
            max_drop = self._drops[metric]
            result = comparison.metrics.get(metric)
            if result is None:
                passed = False
                reasons.append(f"{metric}: not in the comparison")
                continue
            summary = (f"{metric}: Δ {result.delta:+.4f} [{result.ci_low:+.4f}, {result.ci_high:+.4f}] "
                       f"({level}, n={result.n}; allowed drop {max_drop:.4f})")
            if result.n < self.min_cases:
                passed = False
                reasons.append(f"{summary}: FAIL — only {result.n} paired cases (< {self.min_cases})")
            elif math.isnan(result.ci_high):
                passed = False
                reasons.append(f"{summary}: FAIL — interval undefined")
            elif result.ci_high < -max_drop:
                passed = False
                reasons.append(f"{summary}: FAIL — a drop larger than {max_drop:.4f} is established "
                               f"({len(result.regressed)} cases regressed)")
            else:
                reasons.append(f"{summary}: pass")
        return GateResult(passed=passed, reasons=tuple(reasons), comparison=comparison)
