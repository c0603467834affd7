"""Paired run comparison and the regression gate, on constructed runs."""

import math

import pytest

from evaluation.metrics.compare import (
    RegressionGate,
    bootstrap_ci,
    by_case,
    compare_metric,
    compare_runs,
    t_cdf,
    t_ci,
    t_quantile,
)


def run(values: dict[str, float], metric: str = "accuracy") -> dict[str, dict[str, float]]:
    return {case_id: {metric: v} for case_id, v in values.items()}


# 100 cases, baseline always right; the candidate gets the first 20 wrong.
IDS = [f"c{i:03d}" for i in range(100)]
BASE = run(dict.fromkeys(IDS, 1.0))
CAND = run({i: (0.0 if n < 20 else 1.0) for n, i in enumerate(IDS)})


@pytest.mark.parametrize("p, df, expected", [
    (0.975, 1, 12.7062), (0.975, 3, 3.1824), (0.975, 9, 2.2622), (0.975, 30, 2.0423),
    (0.995, 4, 4.6041), (0.95, 2, 2.9200), (0.975, 99, 1.9842), (0.025, 9, -2.2622),
])
def test_t_quantile_matches_tables(p, df, expected):
    assert t_quantile(p, df) == pytest.approx(expected, abs=1e-4)
    assert t_cdf(t_quantile(p, df), df) == pytest.approx(p, abs=1e-9)


def test_paired_t_interval_by_hand():
    # d = 1, 2, 3, 4: mean 2.5; sd = sqrt((2.25 + 0.25 + 0.25 + 2.25)/3) = sqrt(5/3) = 1.290994
    # se = 1.290994/2 = 0.645497; t(0.975, 3) = 3.182446; half width = 2.054254
    low, high = t_ci([1, 2, 3, 4])
    assert (low, high) == (pytest.approx(2.5 - 2.054254, abs=1e-5), pytest.approx(2.5 + 2.054254, abs=1e-5))
    assert all(math.isnan(x) for x in t_ci([1.0]))


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
    # fails when ci_high < −max_drop: −0.1202 < −0.10 → a drop larger than 0.10 is established
    strict = RegressionGate(metrics=("accuracy",), max_drop=0.10, method="t").check(BASE, CAND)
    assert strict.passed is False
    assert "FAIL — a drop larger than 0.1000 is established (20 cases regressed)" in strict.reasons[0]
    # −0.1202 < −0.15 is false → the drop may be within 0.15: pass
    lenient = RegressionGate(metrics=("accuracy",), max_drop=0.15, method="t").check(BASE, CAND)
    assert lenient.passed is True and lenient.reasons[0].endswith("pass")


def test_gate_with_the_bootstrap():
    assert RegressionGate(metrics=("accuracy",), max_drop=0.05, n_resamples=2000).check(BASE, CAND).passed is False
    assert RegressionGate(metrics=("accuracy",), max_drop=0.30, n_resamples=2000).check(BASE, CAND).passed is True


def test_gate_passes_a_drop_that_is_not_established():
    # one case of 100 regressed: the interval reaches 0, so even max_drop 0 passes
    cand = run({i: (0.0 if n == 0 else 1.0) for n, i in enumerate(IDS)})
    result = RegressionGate(metrics=("accuracy",), max_drop=0.0, n_resamples=2000).check(BASE, cand)
    assert result.passed is True
    assert result.comparison["accuracy"].regressed == ("c000",)


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


def test_gate_fails_without_enough_data():
    gate = RegressionGate(metrics=("accuracy", "recovery"), max_drop=0.5)
    result = gate.check(run({"a": 1}), run({"a": 1}))
    assert result.passed is False
    assert "only 1 paired cases (< 2)" in result.reasons[0]
    assert "only 0 paired cases" in result.reasons[1]


def test_gate_configuration_is_validated():
    with pytest.raises(ValueError):
        RegressionGate(metrics=())
    with pytest.raises(ValueError):
        RegressionGate(metrics=("accuracy",), max_drop=-0.1)
    with pytest.raises(ValueError):
        RegressionGate(metrics=("accuracy",), method="z")
    with pytest.raises(ValueError):
        RegressionGate(metrics=("accuracy",), confidence=1.0)


def test_by_case():
    rows = [{"case_id": "a", "accuracy": 1}, {"case_id": "b", "accuracy": 0}]
    assert by_case(rows) == {"a": {"accuracy": 1}, "b": {"accuracy": 0}}
    with pytest.raises(ValueError, match="twice"):
        by_case(rows + rows)
