"""Paired run comparison and the regression gate, on constructed runs."""

import math

import pytest
from scipy.stats import ttest_1samp

from evaluation.metrics.compare import (
    RegressionGate,
    bootstrap_ci,
    by_case,
    compare_metric,
    compare_runs,
    mcnemar_exact,
    t_ci,
)


def run(values: dict[str, float], metric: str = "accuracy") -> dict[str, dict[str, float]]:
    return {case_id: {metric: v} for case_id, v in values.items()}


# 100 cases, baseline always right; the candidate gets the first 20 wrong.
IDS = [f"c{i:03d}" for i in range(100)]
BASE = run(dict.fromkeys(IDS, 1.0))
CAND = run({i: (0.0 if n < 20 else 1.0) for n, i in enumerate(IDS)})


def test_paired_t_interval_by_hand_and_against_scipy():
    # d = 1, 2, 3, 4: mean 2.5; sd = sqrt((2.25 + 0.25 + 0.25 + 2.25)/3) = sqrt(5/3) = 1.290994
    # se = 1.290994/2 = 0.645497; t(0.975, 3) = 3.182446 (tables); half width = 2.054254
    low, high = t_ci([1, 2, 3, 4])
    assert (low, high) == (pytest.approx(2.5 - 2.054254, abs=1e-5), pytest.approx(2.5 + 2.054254, abs=1e-5))
    diffs = [-1.0] * 7 + [0.0] * 30 + [1.0] * 3
    for confidence in (0.8, 0.95, 0.99):
        expected = ttest_1samp(diffs, 0.0).confidence_interval(confidence)
        assert t_ci(diffs, confidence=confidence) == (pytest.approx(expected.low, abs=1e-12),
                                                      pytest.approx(expected.high, abs=1e-12))
    assert all(math.isnan(x) for x in t_ci([1.0]))


def test_exact_mcnemar_by_hand():
    # 1 case got worse, 9 got better: p = 2 · P(X ≤ 1), X ~ Bin(10, ½) = 2 · 11/1024
    assert mcnemar_exact(1, 9) == pytest.approx(22 / 1024, rel=1e-12)
    assert mcnemar_exact(9, 1) == mcnemar_exact(1, 9)
    assert mcnemar_exact(5, 5) == 1.0 and mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(0, 6) == pytest.approx(2 / 64)
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 2)


def test_binary_metrics_carry_the_mcnemar_p():
    base = run({f"c{i}": 1.0 if i < 12 else 0.0 for i in range(40)})
    cand = run({f"c{i}": 1.0 if 2 <= i < 12 + 6 else 0.0 for i in range(40)})  # 2 worse, 6 better
    result = compare_metric(base, cand, "accuracy", n_resamples=500)
    assert result.binary and result.mcnemar_p == pytest.approx(mcnemar_exact(2, 6))
    halves = compare_metric(run({"a": 0.5, "b": 1}), run({"a": 1, "b": 1}), "accuracy", n_resamples=100)
    assert not halves.binary and halves.mcnemar_p is None


def test_bootstrap_interval():
    diffs = [-1.0] * 20 + [0.0] * 80
    low, high = bootstrap_ci(diffs, n_resamples=2000, seed=1)
    assert low < -0.2 < high
    assert (low, high) == bootstrap_ci(diffs, n_resamples=2000, seed=1)  # seeded: reproducible
    # the resampled mean is −k/100 with k ~ Binomial(100, 0.2): sd 0.04, so the 95% interval ≈ −0.2 ± 0.08
    assert low == pytest.approx(-0.28, abs=0.02) and high == pytest.approx(-0.12, abs=0.02)
    assert bootstrap_ci([0.5, 0.5, 0.5]) == (0.5, 0.5)
    assert all(math.isnan(x) for x in bootstrap_ci([]))


def test_compare_metric_lists_regressions_and_improvements():
    base = run({"a": 1, "b": 0.5, "c": 0, "d": 1, "e": None})
    cand = run({"a": 0.5, "b": 1, "c": 0, "d": 1, "e": 1, "f": 1})
    result = compare_metric(base, cand, "accuracy", method="t")
    assert result.n == 4  # a-d; e has no baseline value; f is only in the candidate
    assert result.regressed == ("a",) and result.improved == ("b",) and result.unpaired == ("e",)
    assert result.baseline_mean == pytest.approx(2.5 / 4)
    assert result.candidate_mean == pytest.approx(2.5 / 4)
    assert result.delta == pytest.approx(0.0)
    full = compare_runs(base, cand)
    assert list(full.metrics) == ["accuracy"] and full.only_in_candidate == ("f",)
    assert full["accuracy"].as_dict()["regressed"] == ["a"]


def test_compare_runs_takes_every_metric_and_skips_not_applicable_values():
    base = {"x": {"accuracy": 1, "recovery": None}, "y": {"accuracy": 1, "recovery": 1}}
    cand = {"x": {"accuracy": 0, "recovery": None}, "y": {"accuracy": 1, "recovery": 0}}
    result = compare_runs(base, cand, n_resamples=200)
    assert set(result.metrics) == {"accuracy", "recovery"}
    assert result["recovery"].n == 1 and result["recovery"].regressed == ("y",)
    assert result["accuracy"].delta == pytest.approx(-0.5)


def test_gate_rule_by_hand_with_the_t_interval():
    # d: 20 × −1, 80 × 0 → mean −0.2, sd = sqrt(0.16·100/99) = 0.402015, se = 0.0402015
    # t(0.975, 99) = 1.984217 → CI = −0.2 ± 0.079770 = [−0.279770, −0.120230]
    comparison = compare_runs(BASE, CAND, ["accuracy"], method="t")
    assert comparison["accuracy"].ci_high == pytest.approx(-0.120230, abs=1e-5)
    assert comparison["accuracy"].ci_low == pytest.approx(-0.279770, abs=1e-5)
    # −0.1202 < −0.10: a drop larger than 0.10 is established, under either rule
    for rule in ("non_inferiority", "established_drop"):
        strict = RegressionGate(metrics=("accuracy",), max_drop=0.10, method="t", rule=rule).check(BASE, CAND)
        assert strict.verdict == "fail"
        assert "FAIL — a drop larger than 0.1000 is established (20 cases regressed)" in strict.reasons[0]
        assert "exact McNemar p=" in strict.reasons[0]
    # max_drop 0.15: the old rule passes (−0.1202 < −0.15 is false) …
    lenient = RegressionGate(metrics=("accuracy",), max_drop=0.15, method="t", rule="established_drop")
    assert lenient.check(BASE, CAND).passed is True
    # … but non-inferiority is not shown (the lower bound −0.2798 is below −0.15): the default fails it
    default = RegressionGate(metrics=("accuracy",), max_drop=0.15, method="t").check(BASE, CAND)
    assert default.verdict == "fail" and "non-inferiority not shown" in default.reasons[0]
    assert RegressionGate(metrics=("accuracy",), max_drop=0.30, method="t").check(BASE, CAND).passed is True


def test_gate_with_the_bootstrap():
    assert RegressionGate(metrics=("accuracy",), max_drop=0.05, n_resamples=2000).check(BASE, CAND).passed is False
    assert RegressionGate(metrics=("accuracy",), max_drop=0.30, n_resamples=2000).check(BASE, CAND).passed is True


def test_an_under_powered_drop_fails_non_inferiority_but_passed_the_old_rule():
    # one case of 100 regressed: the interval reaches 0, so the old rule passed even with max_drop 0
    cand = run({i: (0.0 if n == 0 else 1.0) for n, i in enumerate(IDS)})
    old = RegressionGate(metrics=("accuracy",), max_drop=0.0, n_resamples=2000, rule="established_drop")
    assert old.check(BASE, cand).passed is True
    new = RegressionGate(metrics=("accuracy",), max_drop=0.0, n_resamples=2000).check(BASE, cand)
    assert new.verdict == "fail" and new.comparison["accuracy"].regressed == ("c000",)
    assert RegressionGate(metrics=("accuracy",), max_drop=0.05, n_resamples=2000).check(BASE, cand).passed


def test_gate_improvement_passes_and_per_metric_drops():
    base = {i: {"accuracy": 0.0, "effectiveness": 1.0} for i in IDS}
    cand = {i: {"accuracy": 1.0, "effectiveness": 0.5} for i in IDS}
    gate = RegressionGate(metrics=("accuracy", "effectiveness"), max_drop={"effectiveness": 0.6}, method="t")
    result = gate.check(base, cand)
    assert result.passed is True  # accuracy improved; effectiveness −0.5 within 0.6
    gate = RegressionGate(metrics=("accuracy", "effectiveness"), max_drop={"effectiveness": 0.4}, method="t")
    result = gate.check(base, cand)
    assert result.passed is False
    assert result.reasons[0].startswith("accuracy: Δ +1.0000") and result.reasons[0].endswith("pass")
    assert "effectiveness" in result.reasons[1] and "FAIL" in result.reasons[1]


def test_too_few_cases_is_not_enough_evidence_never_a_pass():
    identical = run({f"c{i}": 1.0 for i in range(29)})
    result = RegressionGate(metrics=("accuracy", "recovery"), max_drop=0.5).check(identical, identical)
    assert result.verdict == "not enough evidence" and result.passed is False
    assert "only 29 paired cases (at least 30 needed)" in result.reasons[0]
    assert "only 0 paired cases" in result.reasons[1]
    assert RegressionGate(metrics=("accuracy",), max_drop=0.02, min_cases=29).check(identical, identical).passed
    # a failing metric beats missing evidence in the overall verdict
    worse = run({f"c{i}": 0.0 for i in range(29)})
    mixed = RegressionGate(metrics=("accuracy",), min_cases=5).check(identical, worse)
    assert mixed.verdict == "fail"


def test_two_runs_of_nothing_but_fallback_lines_do_not_pass():
    # Both runs answered every case with the fallback: identical scores, a perfect "no regression"…
    rows = {f"c{i:02d}": {"accuracy": 0.0, "effectiveness": 0.0, "safety_net": 1.0} for i in range(40)}
    result = RegressionGate(metrics=("accuracy", "effectiveness"), max_drop=0.02).check(rows, rows)
    assert result.verdict == "fail"
    assert "100% of 40 turns ended in a fallback, deadline or error" in result.reasons[-1]
    healthy = {k: {**v, "safety_net": 0.0} for k, v in rows.items()}
    assert RegressionGate(metrics=("accuracy",), max_drop=0.02).check(healthy, healthy).passed
    assert RegressionGate(metrics=("accuracy",), max_drop=0.02, max_safety_net_share=None).check(rows, rows).passed


def test_gate_configuration_is_validated():
    with pytest.raises(ValueError):
        RegressionGate(metrics=())
    with pytest.raises(ValueError):
        RegressionGate(metrics=("accuracy",), max_drop=-0.1)
    with pytest.raises(ValueError):
        RegressionGate(metrics=("accuracy",), method="z")
    with pytest.raises(ValueError):
        RegressionGate(metrics=("accuracy",), confidence=1.0)
    with pytest.raises(ValueError):
        RegressionGate(metrics=("accuracy",), rule="vibes")
    with pytest.raises(ValueError):
        RegressionGate(metrics=("accuracy",), min_cases=1)
    with pytest.raises(ValueError):
        RegressionGate(metrics=("accuracy",), max_safety_net_share=1.5)


def test_by_case():
    rows = [{"case_id": "a", "accuracy": 1}, {"case_id": "b", "accuracy": 0}]
    assert by_case(rows) == {"a": {"accuracy": 1}, "b": {"accuracy": 0}}
    with pytest.raises(ValueError, match="twice"):
        by_case(rows + rows)
