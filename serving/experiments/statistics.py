"""Experiment statistics on per-arm sufficient statistics, following GrowthBook's open-source engine.

Sources: GrowthBook's public statistics engine `gbstats` (github.com/growthbook/growthbook,
`packages/stats/gbstats`); every formula below is tested against values GrowthBook publishes in its own
tests, see tests/serving/test_ab_statistics.py:

- per-arm mean/variance: gbstats `SampleMeanStatistic` (packages/stats/gbstats/models/statistics.py); binomial
  metrics (conversions, judge accuracy): gbstats `ProportionStatistic`, variance p(1 − p);
- ratio metrics: gbstats `RatioStatistic` + `utils.variance_of_ratios` (delta method with the M-D covariance);
- fixed-horizon uplift: gbstats `TwoSidedTTest` (packages/stats/gbstats/frequentist/tests.py): delta-method
  variance of the relative difference, Welch-Satterthwaite degrees of freedom, Student t p-value and CI;
- peeking-safe intervals: gbstats `SequentialTwoSidedTTest`, the asymptotic confidence sequence of
  Waudby-Smith et al. (arXiv:2103.06476v7, eqs. 9, 155, 161) with tuning parameter N* (default 5000);
  formulas as in GrowthBook's port packages/tsgbstats/src/frequentist/tests.ts;
- sample ratio mismatch: GrowthBook back-end `checkSrm` (packages/back-end/src/util/stats.ts), chi-squared;
- Holm-Bonferroni / Benjamini-Hochberg: GrowthBook `adjustPValuesHolmBonferroni` /
  `adjustPValuesBenjaminiHochberg` (packages/shared/src/experiments.ts). GrowthBook applies them to goal
  metrics only: pass guardrail p-values separately (or not at all).

Pure Python + scipy: no Django, no project imports.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from scipy.stats import chi2
from scipy.stats import t as student_t

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_SEQUENTIAL_TUNING",
    "SRM_P_THRESHOLD",
    "ArmStats",
    "Decision",
    "ProportionArmStats",
    "RatioArmStats",
    "Uplift",
    "absolute_difference",
    "benjamini_hochberg",
    "decide",
    "holm",
    "holm_bonferroni",
    "relative_uplift",
    "sequential_rho",
    "sequential_uplift",
    "srm_p_value",
]

DEFAULT_ALPHA = 0.05
DEFAULT_SEQUENTIAL_TUNING = 5000.0  # GrowthBook's default N*: the total sample size where the sequence is tightest
SRM_P_THRESHOLD = 0.001  # GrowthBook warns of a sample ratio mismatch below this p-value

# GrowthBook's error codes for the uninformative result (gbstats/messages.py)
ZERO_NEGATIVE_VARIANCE = "ZERO_NEGATIVE_VARIANCE"
BASELINE_VARIATION_ZERO = "BASELINE_VARIATION_ZERO"


class _Arm(Protocol):
    """What the tests need of an arm: units (users), the metric's mean and its per-unit variance."""

    @property
    def n(self) -> int: ...

    @property
    def mean(self) -> float: ...

    @property
    def variance(self) -> float: ...


@dataclass(frozen=True)
class ArmStats:
    """Sufficient statistics of a per-user metric in one arm: users n, S = Σy, Q = Σy².

    For IPV/UV, y is one user's item-page views, so `mean` is the arm's IPV/UV. Add two ArmStats (e.g. two
    time buckets of the same arm) with `+`.
    """

    n: int
    sum: float
    sum_squares: float

    def __post_init__(self):
        if self.n < 0:
            raise ValueError(f"n must be non-negative, got {self.n}")

    @property
    def mean(self) -> float:
        """μ = S / n (0 for an empty arm, as gbstats)."""
        return self.sum / self.n if self.n else 0.0

    @property
    def variance(self) -> float:
        """s² = (Q − S²/n) / (n − 1); 0 when n ≤ 1 (as gbstats), which the tests treat as "no variance"."""
        if self.n <= 1:
            return 0.0
        return (self.sum_squares - self.sum * self.sum / self.n) / (self.n - 1)

    def __add__(self, other: ArmStats) -> ArmStats:
        if not isinstance(other, ArmStats):
            return NotImplemented
        return ArmStats(self.n + other.n, self.sum + other.sum, self.sum_squares + other.sum_squares)


@dataclass(frozen=True)
class ProportionArmStats:
    """A binomial (0/1 per user) metric in one arm: users n, successes = Σy (conversions, judged-correct replies).

    As gbstats `ProportionStatistic`: mean p = successes / n and per-user variance p(1 − p), the binomial
    variance, not the sample variance (Σy² − S²/n)/(n − 1) of the 0/1 values (which is p(1 − p)·n/(n − 1)).
    """

    n: int
    successes: float

    def __post_init__(self):
        if self.n < 0:
            raise ValueError(f"n must be non-negative, got {self.n}")
        if not 0 <= self.successes <= max(self.n, 0):
            raise ValueError(f"successes must be within 0..n, got {self.successes} of {self.n}")

    @property
    def mean(self) -> float:
        return self.successes / self.n if self.n else 0.0

    @property
    def variance(self) -> float:
        """p(1 − p); 0 for an empty arm."""
        p = self.mean
        return p * (1 - p)

    def __add__(self, other: ProportionArmStats) -> ProportionArmStats:
        if not isinstance(other, ProportionArmStats):
            return NotImplemented
        return ProportionArmStats(self.n + other.n, self.successes + other.successes)


@dataclass(frozen=True)
class RatioArmStats:
    """Sufficient statistics of a ratio metric ΣM / ΣD in one arm whose randomisation unit is the user but
    whose analysis unit is not (e.g. item-page views per session: M = a user's views, D = their sessions).

    n users; per user m, d: m_sum = Σm, m_sum_squares = Σm², d_sum = Σd, d_sum_squares = Σd²,
    md_sum_products = Σ m·d.
    """

    n: int
    m_sum: float
    m_sum_squares: float
    d_sum: float
    d_sum_squares: float
    md_sum_products: float

    @property
    def numerator(self) -> ArmStats:
        return ArmStats(self.n, self.m_sum, self.m_sum_squares)

    @property
    def denominator(self) -> ArmStats:
        return ArmStats(self.n, self.d_sum, self.d_sum_squares)

    @property
    def mean(self) -> float:
        """ΣM / ΣD (0 when ΣD = 0, as gbstats)."""
        return self.m_sum / self.d_sum if self.d_sum else 0.0

    @property
    def covariance(self) -> float:
        """Sample covariance of (m, d): (Σmd − ΣmΣd/n) / (n − 1); 0 when n ≤ 1."""
        if self.n <= 1:
            return 0.0
        return (self.md_sum_products - self.m_sum * self.d_sum / self.n) / (self.n - 1)

    @property
    def variance(self) -> float:
        """Per-user delta-method variance of the ratio (gbstats `RatioStatistic.variance`):
        s²_M/μ_D² + μ_M²·s²_D/μ_D⁴ − 2·cov(M, D)·μ_M/μ_D³, so Var(ΣM/ΣD) ≈ variance / n.
        0 when μ_D = 0 or n ≤ 1."""
        m, d = self.numerator, self.denominator
        if d.mean == 0 or self.n <= 1:
            return 0.0
        return _variance_of_ratios(m.mean, m.variance, d.mean, d.variance, self.covariance)


@dataclass(frozen=True)
class Uplift:
    """Treatment vs control.

    delta: relative change (μT − μC)/|μC| (`relative_uplift`, `sequential_uplift`) or μT − μC
    (`absolute_difference`); se: its standard error (delta method); df: Welch-Satterthwaite degrees of freedom;
    [ci_low, ci_high]: two-sided 1 − alpha interval: Student t for a fixed-horizon test, the asymptotic
    confidence sequence when `sequential_tuning` is set (then p_value is the always-valid p-value).

    error: None, or GrowthBook's code when the test cannot run (an arm with n ≤ 1 or no variance:
    "ZERO_NEGATIVE_VARIANCE"; control mean 0: "BASELINE_VARIATION_ZERO"). Then, as GrowthBook, delta = se = 0,
    the interval is [0, 0], df = 0 and p_value = 1: show "not enough data", never the zeros.
    """

    delta: float
    ci_low: float
    ci_high: float
    p_value: float
    se: float
    df: float
    n_control: int = 0
    n_treatment: int = 0
    alpha: float = DEFAULT_ALPHA
    relative: bool = True
    sequential_tuning: float | None = None
    error: str | None = None

    @property
    def error_text(self) -> str:
        """Why the test cannot run, as a sentence for people (the codes stay in `error` for programs)."""
        if not self.error:
            return ""
        if min(self.n_control, self.n_treatment) <= 1:
            return (f"not enough data yet: {self.n_control} in control and {self.n_treatment} in treatment "
                    "(each side needs at least 2)")
        if self.error == BASELINE_VARIATION_ZERO:
            return "not enough data yet: the control's mean is 0, so a relative change is not defined"
        return (f"not enough data yet: no variation within an arm ({self.n_control} in control, "
                f"{self.n_treatment} in treatment, all with the same value on one side)")

    @property
    def method(self) -> str:
        if self.sequential_tuning is None:
            return "fixed-horizon Welch t-test"
        return f"asymptotic confidence sequence (N* = {self.sequential_tuning:g})"


def _variance_of_ratios(mean_m: float, var_m: float, mean_d: float, var_d: float, cov_m_d: float) -> float:
    """Delta-method variance of M/D (gbstats utils.variance_of_ratios); 0 when mean_d = 0."""
    if mean_d == 0:
        return 0.0
    return var_m / mean_d**2 + var_d * mean_m**2 / mean_d**4 - 2 * cov_m_d * mean_m / mean_d**3


def _welch_df(control: _Arm, treatment: _Arm) -> float:
    va, vb, na, nb = control.variance, treatment.variance, control.n, treatment.n
    return (vb / nb + va / na) ** 2 / (vb**2 / (nb**2 * (nb - 1)) + va**2 / (na**2 * (na - 1)))


def _moments(control: _Arm, treatment: _Arm, relative: bool) -> tuple[float, float, float, str | None]:
    """(point estimate, standard error, Welch df, error) as gbstats `EffectMoments`."""
    if control.n <= 1 or treatment.n <= 1 or control.variance <= 0 or treatment.variance <= 0:
        return 0.0, 0.0, 0.0, ZERO_NEGATIVE_VARIANCE
    mc, mt = control.mean, treatment.mean
    if relative and mc == 0:
        return 0.0, 0.0, 0.0, BASELINE_VARIATION_ZERO
    vc, vt = control.variance / control.n, treatment.variance / treatment.n  # variances of the two means
    if relative:
        # Δ = (μT − μC)/|μC|; Var(Δ) = s²T/(nT μC²) + s²C μT²/(nC μC⁴). gbstats divides by the signed μC;
        # the two agree whenever μC > 0 (always, for view counts).
        delta = (mt - mc) / abs(mc)
        variance = _variance_of_ratios(mt, vt, mc, vc, 0.0)
    else:
        delta = mt - mc
        variance = vt + vc
    if not variance > 0:
        return 0.0, 0.0, 0.0, ZERO_NEGATIVE_VARIANCE
    return delta, math.sqrt(variance), _welch_df(control, treatment), None


def _default(control: _Arm, treatment: _Arm, alpha: float, relative: bool, error: str,
             sequential_tuning: float | None = None) -> Uplift:
    return Uplift(delta=0.0, ci_low=0.0, ci_high=0.0, p_value=1.0, se=0.0, df=0.0, n_control=control.n,
                  n_treatment=treatment.n, alpha=alpha, relative=relative, sequential_tuning=sequential_tuning,
                  error=error)


def _check_alpha(alpha: float) -> None:
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be within (0, 1), got {alpha}")


def _fixed_horizon(control: _Arm, treatment: _Arm, alpha: float, relative: bool) -> Uplift:
    _check_alpha(alpha)
    delta, se, df, error = _moments(control, treatment, relative)
    if error:
        return _default(control, treatment, alpha, relative, error)
    p_value = 2 * student_t.sf(abs(delta / se), df)  # = 2(1 − F_t(|Δ/se|)), without the tail's cancellation
    half_width = float(student_t.ppf(1 - alpha / 2, df)) * se
    return Uplift(delta=delta, ci_low=delta - half_width, ci_high=delta + half_width, p_value=float(p_value),
                  se=se, df=df, n_control=control.n, n_treatment=treatment.n, alpha=alpha, relative=relative)


def relative_uplift(control: _Arm, treatment: _Arm, alpha: float = DEFAULT_ALPHA) -> Uplift:
    """Fixed-horizon relative uplift (μT − μC)/|μC| with a two-sided Welch t-test: valid for ONE look at a
    pre-planned sample size. For a live dashboard that is looked at repeatedly, use `sequential_uplift`."""
    return _fixed_horizon(control, treatment, alpha, relative=True)


def absolute_difference(control: _Arm, treatment: _Arm, alpha: float = DEFAULT_ALPHA) -> Uplift:
    """Fixed-horizon absolute difference μT − μC, Welch t-test (gbstats difference_type="absolute")."""
    return _fixed_horizon(control, treatment, alpha, relative=False)


def sequential_rho(alpha: float = DEFAULT_ALPHA, tuning: float = DEFAULT_SEQUENTIAL_TUNING) -> float:
    """Mixing parameter of the two-sided confidence sequence (Waudby-Smith et al. eq. 161):
    ρ = sqrt((−2 ln α + ln(−2 ln α + 1)) / N*)."""
    _check_alpha(alpha)
    if not tuning > 0:
        raise ValueError(f"The sequential tuning parameter must be positive, got {tuning}")
    return math.sqrt((-2 * math.log(alpha) + math.log(-2 * math.log(alpha) + 1)) / tuning)


def sequential_uplift(control: _Arm, treatment: _Arm, alpha: float = DEFAULT_ALPHA,
                      tuning: float = DEFAULT_SEQUENTIAL_TUNING, relative: bool = True) -> Uplift:
    """Peeking-safe relative uplift: GrowthBook's asymptotic confidence sequence (`SequentialTwoSidedTTest`).

    With n = nC + nT, per-observation variance s² = se²·n and ρ from `sequential_rho(alpha, tuning)`:
      half-width = sqrt(s²) · sqrt(2(nρ² + 1) · ln(sqrt(nρ² + 1)/α) / (nρ)²)            (eq. 9)
      p = min(1, sqrt(nρ² + 1) · exp(−ρ²·(Δ²n/se²) / (2(nρ² + 1))))                     (eq. 155)
    The interval covers the true uplift at every look simultaneously with probability ≥ 1 − α
    (asymptotically); it is widest far from n = N* and wider than the fixed-horizon one everywhere.
    `delta`, `se` and `df` are the fixed-horizon ones.
    """
    rho = sequential_rho(alpha, tuning)
    delta, se, df, error = _moments(control, treatment, relative)
    if error:
        return _default(control, treatment, alpha, relative, error, sequential_tuning=tuning)
    n = control.n + treatment.n
    s2 = se * se * n
    nr2p1 = n * rho * rho + 1
    half_width = math.sqrt(s2) * math.sqrt(2 * nr2p1 * math.log(math.sqrt(nr2p1) / alpha) / (n * rho) ** 2)
    st2 = delta * delta * n / (se * se)
    log_e_value = rho * rho * st2 / (2 * nr2p1) - 0.5 * math.log(nr2p1)
    p_value = 1.0 if log_e_value <= 0 else math.exp(-log_e_value)
    return Uplift(delta=delta, ci_low=delta - half_width, ci_high=delta + half_width, p_value=p_value, se=se,
                  df=df, n_control=control.n, n_treatment=treatment.n, alpha=alpha, relative=relative,
                  sequential_tuning=tuning)


def srm_p_value(observed_users: Sequence[int | None], weights: Sequence[float]) -> float:
    """Sample-ratio-mismatch p-value: χ² of observed vs expected users per arm (GrowthBook back-end `checkSrm`).

    One entry per arm, in the same order. Arms with weight 0 or a missing count (None, or `observed_users`
    shorter than `weights`) are left out; an arm with 0 users but a positive weight counts (that IS a mismatch).
    Degrees of freedom = arms counted − 1. Returns 1 when fewer than 2 arms count or nobody was observed.
    Warn when the result is below SRM_P_THRESHOLD (0.001).
    """
    data = []
    for i, w in enumerate(weights):
        o = observed_users[i] if i < len(observed_users) else None
        if not w or o is None:
            continue
        data.append((float(o), float(w)))
    if len(data) < 2:
        return 1.0
    total_users = sum(o for o, _ in data)
    if total_users == 0:
        return 1.0
    total_weight = sum(w for _, w in data)
    x = 0.0
    for o, w in data:
        e = w / total_weight * total_users
        x += (o - e) ** 2 / e
    return float(chi2.sf(x, len(data) - 1))


def holm_bonferroni(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input order (GrowthBook `adjustPValuesHolmBonferroni`):
    sort ascending, p_(i) · (m − i) capped at 1 (i from 0), then a running maximum."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(p_values[i] * (m - rank), 1.0))
        adjusted[i] = running
    return adjusted


holm = holm_bonferroni


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (FDR), in the input order (GrowthBook
    `adjustPValuesBenjaminiHochberg`): sort descending, p_(i) · m / (m − i) capped at 1, then a running minimum."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i], reverse=True)
    adjusted = [0.0] * m
    running = 1.0
    for rank, i in enumerate(order):
        running = min(running, min(p_values[i] * m / (m - rank), 1.0))
        adjusted[i] = running
    return adjusted


@dataclass(frozen=True)
class Decision:
    status: Literal["keep running", "ship", "roll back"]
    rule: str


def _pct(x: float) -> str:
    return f"{x:+.1%}"


def decide(uplift_seq: Uplift, *, min_users: int, guardrail_failed: bool) -> Decision:
    """Ship / roll back / keep running, from the SEQUENTIAL interval of one treatment vs control.

    - roll back: a guardrail failed, or the whole interval is below 0 (upper bound < 0);
    - ship: the whole interval is above 0 (lower bound > 0) and both arms have at least `min_users` users;
    - keep running: otherwise (interval straddles 0, too few users, or the test cannot run yet).
    The rule says which, with the numbers, for the dashboard. A fixed-horizon Uplift is refused (ValueError):
    deciding on it after repeated looks inflates the false-positive rate.
    """
    if uplift_seq.sequential_tuning is None:
        raise ValueError("decide() needs a sequential interval (sequential_uplift), not a fixed-horizon one.")
    what = "change" if uplift_seq.relative else "difference"
    level = f"{(1 - uplift_seq.alpha) * 100:.4g}%"
    fmt = _pct if uplift_seq.relative else (lambda x: f"{x:+.4g}")
    interval = f"[{fmt(uplift_seq.ci_low)}, {fmt(uplift_seq.ci_high)}]"
    source = f"{level} {uplift_seq.method}"
    users = f"{uplift_seq.n_control} control / {uplift_seq.n_treatment} treatment users"
    if guardrail_failed:
        return Decision("roll back", "Roll back: a guardrail failed (guardrails override the headline metric).")
    if uplift_seq.error:
        return Decision("keep running", f"Keep running: {uplift_seq.error_text}.")
    if uplift_seq.ci_high < 0:
        return Decision("roll back", f"Roll back: the {source} for the {what} is {interval}, entirely below 0.")
    if uplift_seq.ci_low > 0:
        if min(uplift_seq.n_control, uplift_seq.n_treatment) >= min_users:
            return Decision("ship", f"Ship: the {source} for the {what} is {interval}, entirely above 0, "
                                    f"with {users} (minimum {min_users} per arm).")
        return Decision("keep running", f"Keep running: the {source} for the {what} is {interval}, above 0, but "
                                        f"only {users} (minimum {min_users} per arm).")
    return Decision("keep running", f"Keep running: the {source} for the {what} is {interval}, which "
                                    f"includes 0.")
