"""serving.experiments.statistics against values GrowthBook publishes in its own tests.

Sources (github.com/growthbook/growthbook), asserted to the precision each source asserts:

[T]  packages/stats/tests/frequentist/test_tests.py @ 59f39a7002864aeb31f2eca73d8a3a01da972788
     TwoSidedTTest (relative), 5 decimals. Same inputs there as mean/stddev: control 0.41 ± 3.9 (n 3407),
     treatment 0.70 ± 6.2 (n 3461), i.e. the sums below. Later versions of that file (stored copy without a
     commit id in our index) add the absolute and SequentialTwoSidedTTest cases repeated in [F].
[F]  packages/tsgbstats/test/fixtures/frequentist/tests.fixtures.json @ b23e8ec3c7a817c9914c6ec1f0082d1ced559998
     "fixtures generated from Python gbstats" (TwoSidedTTest relative/absolute/missing variance,
     SequentialTwoSidedTTest incl. the N* below/near/above cases), 5 decimals.
[S]  packages/tsgbstats/test/fixtures/statistics.fixtures.json @ b23e8ec3c7a817c9914c6ec1f0082d1ced559998
     SampleMeanStatistic, RatioStatistic covariance / zero denominator.
[G]  packages/stats/tests/test_gbstats.py @ ff5f9b67d58a42c5df565566499ce530bd4327df
     check_srm (9 decimals) and a frequentist relative p-value from mean/stddev rows (9 decimals).
[B]  packages/back-end/test/stats.test.ts @ c95d8d3e37b51aaaab2c67644e44373fe97b555d
     checkSrm (toFixed(9)); implementation packages/back-end/src/util/stats.ts @ 7b9be5a9258d689bbbddb4eb0fcb3aaf1ea03e36.
[Q]  packages/stats/tests/frequentist/test_tests.py (a later stored version, no commit id in our index):
     TwoSidedTTest.test_two_sided_ttest_binom and SequentialTwoSidedTTest.test_sequential_test_runs_prop,
     both on gbstats `ProportionStatistic` (variance p(1 − p)), 5 decimals.
[P]  packages/shared/test/experiments.test.ts @ 6837c4f2a36db2f605d86e2bb0bbf43ab2f3cac6
     adjustPValuesHolmBonferroni (exact), adjustPValuesBenjaminiHochberg (toFixed(8)), setAdjustedPValuesOnResults.

No published values were found for: the ratio metric's delta-method variance (only its covariance is published,
[S]) and for decide() (ours); those are tested against hand-computed values below.
"""

from fractions import Fraction

import pytest

from serving.experiments.statistics import (
    BASELINE_VARIATION_ZERO,
    SRM_P_THRESHOLD,
    ZERO_NEGATIVE_VARIANCE,
    ArmStats,
    ProportionArmStats,
    RatioArmStats,
    Uplift,
    absolute_difference,
    benjamini_hochberg,
    decide,
    holm,
    holm_bonferroni,
    relative_uplift,
    sequential_rho,
    sequential_uplift,
    srm_p_value,
)


def r5(x):
    return round(float(x), 5)


def r9(x):
    return round(float(x), 9)


# The arms of [T]/[F]: SampleMeanStatistic(sum, sum_squares, n)
CONTROL_3407 = ArmStats(n=3407, sum=1396.87, sum_squares=52377.9767)
CONTROL_3000 = ArmStats(n=3000, sum=1396.87, sum_squares=52377.9767)
TREATMENT = ArmStats(n=3461, sum=2422.7, sum_squares=134698.29)


# --- per-arm statistics ---------------------------------------------------------------------------------

def test_arm_mean_and_variance_published():  # [S] test_sample_mean_statistic
    arm = ArmStats(n=4, sum=23.7, sum_squares=485.15)
    assert r5(arm.mean) == 5.925
    assert arm.variance == pytest.approx(114.90916666666665, rel=1e-12)


def test_arm_variance_low_n_is_zero_published():  # [S] test_sample_mean_statistic_low_n
    assert ArmStats(n=1, sum=23.7, sum_squares=485.15).variance == 0


def test_arm_variance_hand_computed():
    # y = 0, 1, 1, 4: S = 6, Q = 0 + 1 + 1 + 16 = 18, μ = 1.5, s² = (18 − 36/4)/3 = 9/3 = 3
    arm = ArmStats(n=4, sum=6, sum_squares=18)
    assert arm.mean == 1.5
    assert arm.variance == 3.0


def test_arm_stats_add_and_empty():
    assert ArmStats(2, 1.0, 1.0) + ArmStats(3, 2.0, 4.0) == ArmStats(5, 3.0, 5.0)
    assert ArmStats(0, 0.0, 0.0).mean == 0.0
    with pytest.raises(ValueError):
        ArmStats(-1, 0.0, 0.0)


# --- fixed-horizon relative uplift (TwoSidedTTest) -----------------------------------------------------------

def test_relative_uplift_published():  # [T] test_two_sided_ttest, [F] TwoSidedTTest.test_two_sided_ttest
    u = relative_uplift(CONTROL_3407, TREATMENT)
    assert r5(u.delta) == 0.70732
    assert (r5(u.ci_low), r5(u.ci_high)) == (-0.03526, 1.44989)
    assert r5(u.se) == 0.37879
    assert r5(u.p_value) == 0.06191
    assert u.error is None and u.sequential_tuning is None
    assert (u.n_control, u.n_treatment) == (3407, 3461)


def test_absolute_difference_published():  # [F] TwoSidedTTest.test_two_sided_ttest_absolute
    u = absolute_difference(CONTROL_3407, TREATMENT)
    assert r5(u.delta) == 0.29
    assert (r5(u.ci_low), r5(u.ci_high)) == (0.04538, 0.53462)
    assert r5(u.se) == 0.12478
    assert r5(u.p_value) == 0.02016


def test_relative_uplift_missing_variance_published():  # [F] test_two_sided_ttest_missing_variance
    # n = 2 with these sums gives a negative s²: GrowthBook's uninformative default output.
    u = relative_uplift(ArmStats(n=2, sum=1396.87, sum_squares=52377.9767), TREATMENT)
    assert (u.delta, u.ci_low, u.ci_high, u.se, u.p_value) == (0.0, 0.0, 0.0, 0.0, 1.0)
    assert u.error == ZERO_NEGATIVE_VARIANCE


def _from_mean_sd(n, mean, sd):
    return ArmStats(n=n, sum=n * mean, sum_squares=(n - 1) * sd * sd + n * mean * mean)


def test_relative_uplift_from_gbstats_metric_rows_published():
    # [G] TestAnalyzeMetricDfFrequentist: dimension "one", control 2.7 ± 1.1 (n 100), variation 2.5 ± 1 (n 120)
    u = relative_uplift(_from_mean_sd(100, 2.7, 1.1), _from_mean_sd(120, 2.5, 1.0))
    assert r9(u.delta) == -0.074074074
    assert r9(u.p_value) == 0.145219005


def test_relative_uplift_matches_the_spec_formulas_by_hand():
    # Control: n 100, μ 2, s² 4; treatment: n 100, μ 2.2, s² 4 (spec: ab-statistics.md)
    c = _from_mean_sd(100, 2.0, 2.0)
    t = _from_mean_sd(100, 2.2, 2.0)
    u = relative_uplift(c, t)
    # Δ = (2.2 − 2)/2 = 0.1
    assert u.delta == pytest.approx(0.1)
    # Var = s²T/(nT μC²) + s²C μT²/(nC μC⁴) = 4/(100·4) + 4·4.84/(100·16) = 0.01 + 0.0121 = 0.0221
    assert u.se ** 2 == pytest.approx(0.0221)
    # Welch df = (4/100 + 4/100)² / ((4/100)²/99 · 2) = 0.0064 / (0.0016·2/99) = 198
    assert u.df == pytest.approx(198.0)


def test_relative_uplift_baseline_zero_and_empty_arms():
    zero = relative_uplift(ArmStats(10, 0.0, 0.0), ArmStats(10, 5.0, 9.0))
    assert zero.error == ZERO_NEGATIVE_VARIANCE  # a control of all zeros has no variance either
    centred = relative_uplift(ArmStats(4, 0.0, 8.0), ArmStats(4, 4.0, 8.0))  # mean 0, s² 8/3
    assert centred.error == BASELINE_VARIATION_ZERO and centred.p_value == 1.0
    empty = relative_uplift(ArmStats(0, 0.0, 0.0), TREATMENT)
    assert empty.error == ZERO_NEGATIVE_VARIANCE and empty.p_value == 1.0
    with pytest.raises(ValueError):
        relative_uplift(CONTROL_3407, TREATMENT, alpha=0)


# --- sequential (asymptotic confidence sequence) -----------------------------------------------------------

def test_sequential_uplift_published():  # [F] SequentialTwoSidedTTest.test_sequential_test_runs (N* 1000)
    u = sequential_uplift(CONTROL_3000, TREATMENT, tuning=1000)
    assert r5(u.delta) == 0.50336
    assert (r5(u.ci_low), r5(u.ci_high)) == (-0.55844, 1.56516)
    assert r5(u.se) == 0.33341
    assert r5(u.p_value) == 1.0
    assert u.sequential_tuning == 1000


def test_binomial_relative_uplift_published():  # [Q] test_two_sided_ttest_binom
    u = relative_uplift(ProportionArmStats(n=28, successes=14), ProportionArmStats(n=30, successes=16))
    assert r5(u.delta) == r5((16 / 30 - 0.5) / 0.5) == 0.06667
    assert (r5(u.ci_low), r5(u.ci_high)) == (-0.47767, 0.61101)
    assert r5(u.se) == 0.2717
    assert r5(u.p_value) == 0.80707


def test_binomial_sequential_uplift_published():  # [Q] test_sequential_test_runs_prop (default N* 5000)
    u = sequential_uplift(ProportionArmStats(n=3000, successes=1396), ProportionArmStats(n=3461, successes=2422))
    assert r5(u.delta) == 0.50386
    assert (r5(u.ci_low), r5(u.ci_high)) == (0.40098, 0.60675)
    assert r5(u.se) == 0.03386
    assert r5(u.p_value) == 0.0


def test_binomial_variance_is_p_one_minus_p_not_the_sample_variance():
    arm = ProportionArmStats(n=30, successes=16)
    p = 16 / 30
    assert arm.mean == p and arm.variance == pytest.approx(p * (1 - p))
    # the sample variance of the same 0/1 values is larger by n/(n − 1): the bug this replaces
    as_values = ArmStats(n=30, sum=16, sum_squares=16)
    assert as_values.variance == pytest.approx(p * (1 - p) * 30 / 29)
    wrong = relative_uplift(ArmStats(n=28, sum=14, sum_squares=14), ArmStats(n=30, sum=16, sum_squares=16))
    assert r5(wrong.se) != 0.2717  # sample variance misses GrowthBook's published value
    assert (ProportionArmStats(10, 3) + ProportionArmStats(20, 5)) == ProportionArmStats(30, 8)
    with pytest.raises(ValueError):
        ProportionArmStats(n=3, successes=4)


@pytest.mark.parametrize(("tuning", "ci", "p_value"), [
    (10.0, (-0.76785, 1.77457), 1.0),        # result_below
    (6461.0, (-0.50861, 1.51534), 1.0),      # result_near (N* = nC + nT)
    (10000.0, (-0.51485, 1.52157), 0.95385),  # result_above: an always-valid p-value below 1
])
def test_sequential_tuning_published(tuning, ci, p_value):  # [F] test_sequential_test_tuning_as_expected
    u = sequential_uplift(CONTROL_3000, TREATMENT, tuning=tuning)
    assert (r5(u.ci_low), r5(u.ci_high)) == ci
    assert r5(u.p_value) == p_value


def test_sequential_interval_is_wider_than_fixed_and_default_tuning_is_5000():
    fixed = relative_uplift(CONTROL_3000, TREATMENT)
    seq = sequential_uplift(CONTROL_3000, TREATMENT)
    assert seq.sequential_tuning == 5000
    assert seq.ci_low < fixed.ci_low and seq.ci_high > fixed.ci_high
    assert seq.delta == fixed.delta and seq.se == fixed.se


def test_sequential_rho_by_hand():
    # ρ² = (−2 ln 0.05 + ln(−2 ln 0.05 + 1)) / N*; −2 ln 0.05 = 5.991465, ln(6.991465) = 1.944691
    assert sequential_rho(0.05, 5000) ** 2 == pytest.approx((5.991465 + 1.944691) / 5000, rel=1e-6)
    with pytest.raises(ValueError):
        sequential_rho(0.05, 0)


def test_sequential_degenerate_returns_default():
    u = sequential_uplift(ArmStats(1, 1.0, 1.0), TREATMENT)
    assert u.error == ZERO_NEGATIVE_VARIANCE and u.sequential_tuning == 5000 and u.p_value == 1.0


# --- ratio metrics ----------------------------------------------------------------------------------------

def test_ratio_covariance_published():  # [S] test_ratio_statistic_covariance
    ratio = RatioArmStats(n=4, m_sum=23.7, m_sum_squares=485.15, d_sum=11.0, d_sum_squares=39.0,
                          md_sum_products=71.6)
    assert ratio.covariance == pytest.approx(2.1416666666666666, rel=1e-12)


def test_ratio_denominator_zero_published():  # [S] test_ratio_denom_zero
    ratio = RatioArmStats(n=4, m_sum=23.7, m_sum_squares=485.15, d_sum=0.0, d_sum_squares=39.0,
                          md_sum_products=71.6)
    assert ratio.variance == 0
    assert ratio.mean == 0


def test_ratio_variance_hand_computed():
    # Not published by GrowthBook: by hand with exact fractions, same inputs as [S].
    # μM = 23.7/4 = 5.925, s²M = (485.15 − 23.7²/4)/3 = (485.15 − 140.4225)/3 = 114.909166…
    # μD = 11/4 = 2.75,    s²D = (39 − 121/4)/3 = 8.75/3 = 2.916666…
    # cov = (71.6 − 23.7·11/4)/3 = (71.6 − 65.175)/3 = 2.141666…
    # Var = s²M/μD² + μM² s²D/μD⁴ − 2 cov μM/μD³
    #     = 114.909167/7.5625 + 35.105625·2.916667/57.191406 − 2·2.141667·5.925/20.796875
    #     = 15.1946006 + 1.7903285 − 1.2203156 = 15.7646135
    f = Fraction
    mm, md = f("23.7") / 4, f(11, 4)
    vm, vd = (f("485.15") - f("23.7") ** 2 / 4) / 3, (f(39) - f(121, 4)) / 3
    cov = (f("71.6") - f("23.7") * 11 / 4) / 3
    exact = vm / md**2 + mm**2 * vd / md**4 - 2 * cov * mm / md**3
    ratio = RatioArmStats(n=4, m_sum=23.7, m_sum_squares=485.15, d_sum=11.0, d_sum_squares=39.0,
                          md_sum_products=71.6)
    assert ratio.mean == pytest.approx(23.7 / 11)
    assert ratio.variance == pytest.approx(float(exact), rel=1e-12)
    assert ratio.variance == pytest.approx(15.7646135, abs=1e-6)


def test_relative_uplift_accepts_ratio_arms():
    # Views per session: control ΣM/ΣD = 300/200 = 1.5, treatment 360/200 = 1.8 → Δ = 0.2
    control = RatioArmStats(n=100, m_sum=300, m_sum_squares=1200, d_sum=200, d_sum_squares=500,
                            md_sum_products=700)
    treatment = RatioArmStats(n=100, m_sum=360, m_sum_squares=1600, d_sum=200, d_sum_squares=500,
                              md_sum_products=820)
    u = relative_uplift(control, treatment)
    assert u.delta == pytest.approx(0.2)
    vc, vt = control.variance / 100, treatment.variance / 100
    assert u.se ** 2 == pytest.approx(vt / 1.5**2 + vc * 1.8**2 / 1.5**4)


# --- sample ratio mismatch --------------------------------------------------------------------------------

@pytest.mark.parametrize(("users", "weights", "expected"), [
    ([1000, 1200], [0.5, 0.5], 0.000020079),          # simple 2-way ([B]; also [G] test_srm)
    ([135, 115], [0.5, 0.5], 0.205903211),            # another 2-way
    ([310, 98], [0.75, 0.25], 0.647434186),           # uneven weights
    ([1000], [0.5, 0.5], 1),                          # not enough valid variations
    ([1000, 900, 800], [1, 0, 0], 1),                 # not enough valid weights
    ([1000, 1200, 900], [0.5, 0.5, 0], 0.000020079),  # skip empty weights
    ([0, 0, 0], [0.34, 0.33, 0.33], 1),               # skip if all users are 0
    ([0, 10, 10], [0.34, 0.33, 0.33], 0.005790624),   # use empty users in the test
    ([500, 500, 600], [0.34, 0.33, 0.33], 0.000592638),  # more than 2 variations
    ([500, 500], [0.5, 0.5], 1),                      # completely equal
])
def test_srm_published(users, weights, expected):  # [B] "calculates SRM correctly"
    assert r9(srm_p_value(users, weights)) == expected


def test_srm_threshold():
    assert SRM_P_THRESHOLD == 0.001
    assert srm_p_value([1000, 1200], [0.5, 0.5]) < SRM_P_THRESHOLD < srm_p_value([135, 115], [0.5, 0.5])


# --- multiple comparisons ---------------------------------------------------------------------------------

def test_holm_bonferroni_published():  # [P] "does HB procedure correctly" (exact equality upstream)
    # Upstream lists the adjusted values in sorted order with their original indices [3, 0, 2, 1, 4, 5];
    # here they are back in input order.
    assert holm_bonferroni([0.01, 0.04, 0.03, 0.005, 0.55, 0.6]) == [0.05, 0.12, 0.12, 0.03, 1, 1]
    assert holm is holm_bonferroni


def test_benjamini_hochberg_published():  # [P] "does BH procedure correctly" (toFixed(8) upstream)
    adjusted = benjamini_hochberg([0.898, 0.138, 0.007, 0.964, 0.538, 0.006, 0.138])
    # upstream: [0.964, 0.964, 0.7532, 0.2415, 0.2415, 0.0245, 0.0245] at indices [3, 0, 4, 1, 6, 2, 5]
    assert [round(p, 8) for p in adjusted] == [0.964, 0.2415, 0.0245, 0.964, 0.7532, 0.0245, 0.2415]


def test_corrections_on_two_metrics_published():  # [P] "pvals and CIs adjusted in place"
    assert holm_bonferroni([0.025, 0.03]) == [0.05, 0.05]
    assert benjamini_hochberg([0.025, 0.03]) == [0.03, 0.03]


def test_corrections_empty_and_single():
    assert holm_bonferroni([]) == [] and benjamini_hochberg([]) == []
    assert holm_bonferroni([0.2]) == [0.2] and benjamini_hochberg([0.2]) == [0.2]


# --- decide -----------------------------------------------------------------------------------------------

def _seq(low, high, n_control=5000, n_treatment=5000, error=None, tuning=5000.0):
    return Uplift(delta=(low + high) / 2, ci_low=low, ci_high=high, p_value=0.5, se=0.01, df=9998.0,
                  n_control=n_control, n_treatment=n_treatment, sequential_tuning=tuning, error=error)


def test_decide_ship_when_lower_bound_above_zero_with_enough_users():
    d = decide(_seq(0.012, 0.081), min_users=1000, guardrail_failed=False)
    assert d.status == "ship"
    assert "[+1.2%, +8.1%]" in d.rule and "entirely above 0" in d.rule and "N* = 5000" in d.rule


def test_decide_keeps_running_when_above_zero_but_too_few_users():
    d = decide(_seq(0.012, 0.081, n_control=400, n_treatment=5000), min_users=1000, guardrail_failed=False)
    assert d.status == "keep running"
    assert "400 control" in d.rule and "minimum 1000 per arm" in d.rule


def test_decide_roll_back_when_upper_bound_below_zero():
    d = decide(_seq(-0.09, -0.004, n_control=50, n_treatment=50), min_users=1000, guardrail_failed=False)
    assert d.status == "roll back" and "entirely below 0" in d.rule


def test_decide_roll_back_on_guardrail_even_when_winning():
    d = decide(_seq(0.05, 0.2), min_users=10, guardrail_failed=True)
    assert d.status == "roll back" and "guardrail" in d.rule


def test_decide_keep_running_when_interval_includes_zero():
    d = decide(_seq(-0.02, 0.03), min_users=10, guardrail_failed=False)
    assert d.status == "keep running" and "includes 0" in d.rule


def test_decide_keep_running_when_the_test_cannot_run():
    d = decide(_seq(0.0, 0.0, n_control=1, error=ZERO_NEGATIVE_VARIANCE), min_users=10, guardrail_failed=False)
    assert d.status == "keep running" and "not enough data" in d.rule


def test_decide_refuses_a_fixed_horizon_interval():
    with pytest.raises(ValueError, match="sequential"):
        decide(relative_uplift(CONTROL_3000, TREATMENT), min_users=10, guardrail_failed=False)


def test_decide_end_to_end_on_published_arms():
    # [F] arms: the N* = 5000 sequence straddles 0 ([-0.5…, +1.5…]), so keep running
    d = decide(sequential_uplift(CONTROL_3000, TREATMENT), min_users=1000, guardrail_failed=False)
    assert d.status == "keep running"
