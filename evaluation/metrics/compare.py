"""Paired comparison of two runs on the same cases, and the regression gate built on it.

A run is per-case scores: `{case_id: {metric: value}}` (e.g. accuracy 0/1,
effectiveness 0/0.5/1, any robustness rubric value; None = not applicable, or the
judge abstained). For each metric only cases where BOTH runs have a value are
paired; the rest are reported as unpaired and never silently compared.

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
    SciPy's Student t quantile. Undefined (NaN) for n < 2.
  With all d_i equal both intervals collapse to [delta, delta].
- Binary metrics (every paired value 0 or 1) also get the exact McNemar test:
  with b = cases right in the baseline and wrong in the candidate and c = the
  reverse, p = P(X ≤ min(b, c)) · 2 (capped at 1) for X ~ Binomial(b + c, ½),
  i.e. SciPy's two-sided exact binomial test of b against b + c. Only the
  discordant cases carry information about the difference; p is 1 without any.
- `regressed` / `improved`: the case ids with d_i < 0 / d_i > 0.

The gate (`RegressionGate`) gives one of three verdicts: "pass", "fail" or "not
enough evidence"; only "pass" passes. For each configured metric, with X =
max_drop[metric] in the metric's own units (0.01 = one percentage point of a 0/1
accuracy; one number for all metrics or a per-metric mapping, missing metrics 0):

- fewer than `min_cases` paired cases (default 30), or an undefined interval:
  "not enough evidence" — a gate never passes for want of data;
- rule "non_inferiority" (default): PASS iff ci_low > −X, i.e. the data show the
  candidate is at most X worse. A drop beyond X that is established (ci_high < −X)
  FAILS, and so does an interval that reaches below −X: non-inferiority is not
  shown, so an under-powered drop cannot slip through;
- rule "established_drop" (the lenient, older rule): FAIL only when ci_high < −X,
  i.e. a drop larger than allowed is established; everything else passes.

Because the interval is two-sided at `confidence`, each bound is a one-sided bound
at (1 + confidence)/2 (97.5 % for the default 0.95).

Whole-run checks (optional, when the per-case rows carry `safety_net`: 1 when the
turn ended in a fallback, deadline or error): the gate FAILS when the candidate's
share of safety-net turns exceeds `max_safety_net_share` (default 0.5). Two runs
that answered nothing but fallback lines agree perfectly, yet they measure the
harness's safety nets, not the harness.

The overall verdict is "fail" if any check fails, else "not enough evidence" if
any metric lacks evidence, else "pass".
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from scipy.stats import binomtest
from scipy.stats import t as student_t

METHODS = ("bootstrap", "t")
RULES = ("non_inferiority", "established_drop")
DEFAULT_MIN_CASES = 30
DEFAULT_MAX_SAFETY_NET_SHARE = 0.5
PASS, FAIL, NO_EVIDENCE = "pass", "fail", "not enough evidence"

Run = Mapping[str, Mapping[str, Any]]


# -- intervals and tests ------------------------------------------------------------------------------

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
    half = float(student_t.ppf((1 + confidence) / 2, n - 1)) * sd / math.sqrt(n)
    return mean - half, mean + half


def mcnemar_exact(worse: int, better: int) -> float:
    """Exact two-sided McNemar p-value from the discordant pairs (`worse`: right → wrong, `better`:
    wrong → right); 1.0 when there are none."""
    if worse < 0 or better < 0:
        raise ValueError("discordant counts must be non-negative")
    if worse + better == 0:
        return 1.0
    return float(binomtest(worse, worse + better, 0.5).pvalue)


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
    binary: bool = False  # every paired value is 0 or 1: the McNemar test applies
    mcnemar_p: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "n": self.n, "baseline_mean": self.baseline_mean,
                "candidate_mean": self.candidate_mean, "delta": self.delta, "ci_low": self.ci_low,
                "ci_high": self.ci_high, "confidence": self.confidence, "method": self.method,
                "regressed": list(self.regressed), "improved": list(self.improved),
                "unpaired": list(self.unpaired), "binary": self.binary, "mcnemar_p": self.mcnemar_p}


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
    binary = n > 0 and all(v in (0.0, 1.0) for v in (*base, *cand))
    mcnemar_p = None
    if binary:
        worse = sum(1 for b, c in zip(base, cand, strict=True) if b > c)
        mcnemar_p = mcnemar_exact(worse, sum(1 for b, c in zip(base, cand, strict=True) if c > b))
    return MetricComparison(
        metric=metric, n=n, binary=binary, mcnemar_p=mcnemar_p,
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

Verdict = Literal["pass", "fail", "not enough evidence"]


@dataclass(frozen=True)
class GateResult:
    verdict: Verdict
    reasons: tuple[str, ...]
    comparison: RunComparison | None = None

    @property
    def passed(self) -> bool:
        return self.verdict == PASS


@dataclass(frozen=True)
class RegressionGate:
    """Non-inferiority (default) or established-drop gate over paired metrics (rules in the module docstring)."""

    metrics: tuple[str, ...]
    max_drop: float | Mapping[str, float] = 0.0
    confidence: float = 0.95
    method: str = "bootstrap"
    rule: str = "non_inferiority"
    min_cases: int = DEFAULT_MIN_CASES
    max_safety_net_share: float | None = DEFAULT_MAX_SAFETY_NET_SHARE
    n_resamples: int = 10_000
    seed: int = 0
    _drops: Mapping[str, float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "metrics", tuple(self.metrics))
        if not self.metrics:
            raise ValueError("a regression gate needs at least one metric")
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, not {self.method!r}")
        if self.rule not in RULES:
            raise ValueError(f"rule must be one of {RULES}, not {self.rule!r}")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError("confidence must be in (0, 1)")
        if int(self.min_cases) < 2:
            raise ValueError("min_cases must be at least 2")
        if self.max_safety_net_share is not None and not 0.0 <= self.max_safety_net_share <= 1.0:
            raise ValueError("max_safety_net_share must be within 0..1")
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
        return self.evaluate(comparison, candidate=candidate)

    def _metric_verdict(self, result: MetricComparison, max_drop: float) -> tuple[str, str]:
        if result.n < self.min_cases:
            return NO_EVIDENCE, (f"NOT ENOUGH EVIDENCE — only {result.n} paired cases "
                                 f"(at least {self.min_cases} needed)")
        if math.isnan(result.ci_low) or math.isnan(result.ci_high):
            return NO_EVIDENCE, "NOT ENOUGH EVIDENCE — interval undefined"
        if result.ci_high < -max_drop:
            return FAIL, (f"FAIL — a drop larger than {max_drop:.4f} is established "
                          f"({len(result.regressed)} cases regressed)")
        if self.rule == "non_inferiority" and result.ci_low <= -max_drop:
            return FAIL, (f"FAIL — non-inferiority not shown: the lower bound {result.ci_low:+.4f} is not above "
                          f"−{max_drop:.4f} ({len(result.regressed)} cases regressed)")
        return PASS, "pass"

    def evaluate(self, comparison: RunComparison, *, candidate: Run | None = None) -> GateResult:
        verdicts, reasons = [], []
        level = f"{self.confidence:.0%} {'paired bootstrap' if self.method == 'bootstrap' else 'paired t'}"
        for metric in self.metrics:
            max_drop = self._drops[metric]
            result = comparison.metrics.get(metric)
            if result is None:
                verdicts.append(NO_EVIDENCE)
                reasons.append(f"{metric}: NOT ENOUGH EVIDENCE — not in the comparison")
                continue
            summary = (f"{metric}: Δ {result.delta:+.4f} [{result.ci_low:+.4f}, {result.ci_high:+.4f}] "
                       f"({level}, n={result.n}; allowed drop {max_drop:.4f}"
                       + (f"; exact McNemar p={result.mcnemar_p:.4g}" if result.mcnemar_p is not None else "")
                       + ")")
            verdict, why = self._metric_verdict(result, max_drop)
            verdicts.append(verdict)
            reasons.append(f"{summary}: {why}")
        if candidate is not None and self.max_safety_net_share is not None:
            flags = [float(row["safety_net"]) for row in candidate.values() if row.get("safety_net") is not None]
            if flags:
                share = sum(flags) / len(flags)
                if share > self.max_safety_net_share:
                    verdicts.append(FAIL)
                    reasons.append(f"candidate: {share:.0%} of {len(flags)} turns ended in a fallback, deadline or "
                                   f"error (at most {self.max_safety_net_share:.0%} allowed): FAIL — the run "
                                   "measures the safety nets, not the harness")
        verdict = FAIL if FAIL in verdicts else NO_EVIDENCE if NO_EVIDENCE in verdicts else PASS
        return GateResult(verdict=verdict, reasons=tuple(reasons), comparison=comparison)
