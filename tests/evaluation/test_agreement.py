"""Agreement metrics against values computed by hand (the arithmetic is in the comments)."""

import math

import pytest

from evaluation.metrics.agreement import (
    agreement_report,
    cohen_kappa,
    confusion_matrix,
    fleiss_kappa,
    majority_labels,
    mean_pairwise_cohen_kappa,
    pairwise_cohen_kappa,
    percent_agreement,
)

# 50 items: both yes 20, a yes / b no 5, a no / b yes 10, both no 15.
A = ["yes"] * 25 + ["no"] * 25
B = ["yes"] * 20 + ["no"] * 5 + ["yes"] * 10 + ["no"] * 15


def test_two_by_two():
    # p_o = (20 + 15) / 50 = 0.7
    assert percent_agreement(A, B) == pytest.approx(0.7)
    # marginals: a yes 25/50 = 0.5, b yes 30/50 = 0.6
    # p_e = 0.5·0.6 + 0.5·0.4 = 0.5;  κ = (0.7 − 0.5) / (1 − 0.5) = 0.4
    assert cohen_kappa(A, B) == pytest.approx(0.4)
    matrix = confusion_matrix(A, B, labels=["yes", "no"])
    assert matrix.counts == ((20, 5), (10, 15)) and matrix.n == 50
    assert confusion_matrix(A, B).labels == ("no", "yes")  # default: sorted labels


# Effectiveness-like ordinal labels 0 < 0.5 < 1.
E_A = [0, 0, 0.5, 1, 1, 1]
E_B = [0, 0.5, 0.5, 1, 1, 0.5]


def test_nominal_and_weighted_kappa_on_ordinal_labels():
    # confusion (rows a, cols b; labels 0, 0.5, 1): [[1,1,0],[0,1,0],[0,1,2]], n = 6
    assert confusion_matrix(E_A, E_B).counts == ((1, 1, 0), (0, 1, 0), (0, 1, 2))
    # rows r = [2,1,3], cols c = [1,3,2]
    # nominal: p_o = (1+1+2)/6 = 2/3; p_e = (2·1 + 1·3 + 3·2)/36 = 11/36
    #          κ = (24/36 − 11/36) / (25/36) = 13/25 = 0.52
    assert cohen_kappa(E_A, E_B) == pytest.approx(0.52)
    # linear w = |i−j|/2: observed Σ w·O = (0.5·1 + 0.5·1)/6 = 1/6
    #   expected Σ w·r_i·c_j/36 = (0.5·2·3 + 1·2·2 + 0.5·1·1 + 0.5·1·2 + 1·3·1 + 0.5·3·3)/36
    #                          = (3 + 4 + 0.5 + 1 + 3 + 4.5)/36 = 16/36
    #   κ_lin = 1 − (1/6)/(16/36) = 1 − 6/16 = 0.625
    assert cohen_kappa(E_A, E_B, weights="linear") == pytest.approx(0.625)
    # quadratic w = (i−j)²/4: observed (0.25 + 0.25)/6 = 1/12 = 3/36
    #   expected (0.25·6 + 1·4 + 0.25·1 + 0.25·2 + 1·3 + 0.25·9)/36 = 11.5/36
    #   κ_quad = 1 − 3/11.5 = 0.7391304…
    assert cohen_kappa(E_A, E_B, weights="quadratic") == pytest.approx(1 - 3 / 11.5)
    # weights follow the label order given, not the values: with a shuffled order the ordinal κ changes
    assert cohen_kappa(E_A, E_B, labels=[0.5, 0, 1], weights="linear") != pytest.approx(0.625)


def test_kappa_edge_cases():
    assert cohen_kappa([1, 1, 0], [1, 1, 0]) == 1.0
    # both raters always say 1: p_o = 1, p_e = 1 → undefined
    assert math.isnan(cohen_kappa([1, 1, 1], [1, 1, 1]))
    # systematic disagreement: p_o = 0, p_e = 0.5·0.5·2 = 0.5 → κ = −1
    assert cohen_kappa([1, 0], [0, 1]) == pytest.approx(-1.0)
    with pytest.raises(ValueError):
        cohen_kappa([1, 0], [1])
    with pytest.raises(ValueError):
        cohen_kappa([], [])
    with pytest.raises(ValueError):
        cohen_kappa([1], [1], weights="cubic")
    with pytest.raises(ValueError, match="not in the label list"):
        cohen_kappa([1, 2], [1, 1], labels=[1])


def test_fleiss_kappa_small():
    ratings = [[1, 1, 1], [1, 1, 0], [0, 0, 0], [1, 0, 0]]  # 4 items × 3 raters
    # P_i = Σ n_ik(n_ik − 1) / (3·2): item1 (3·2)/6 = 1, item2 (2·1)/6 = 1/3, item3 1, item4 (2·1)/6 = 1/3
    # P̄ = (1 + 1/3 + 1 + 1/3)/4 = 2/3
    # p_1 = (3+2+0+1)/12 = 0.5, p_0 = 0.5 → P_e = 0.25 + 0.25 = 0.5
    # κ = (2/3 − 1/2)/(1 − 1/2) = 1/3
    assert fleiss_kappa(ratings) == pytest.approx(1 / 3)


def test_fleiss_kappa_textbook_table():
    # Fleiss (1971)-style worked example: 10 items, 14 raters, 5 categories; counts per category.
    table = [[0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
             [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7]]
    ratings = [[k for k, n in enumerate(row) for _ in range(n)] for row in table]
    # p_k = column sums / (10·14) = [20, 28, 39, 21, 32]/140; P_e = Σ p_k² = 4170/19600 = 0.21276
    # P_i = Σ_k n_ik(n_ik − 1) / (14·13): numerators 182, 46, 56, 80, 60, 84, 44, 32, 52, 52 (sum 688)
    # P̄ = 688/1820 = 0.37802;  κ = (0.37802 − 0.21276)/(1 − 0.21276) = 0.20993
    p_k = [20 / 140, 28 / 140, 39 / 140, 21 / 140, 32 / 140]
    p_e = sum(p * p for p in p_k)
    p_bar = sum(sum(n * (n - 1) for n in row) / 182 for row in table) / 10
    assert fleiss_kappa(ratings) == pytest.approx((p_bar - p_e) / (1 - p_e))
    assert fleiss_kappa(ratings) == pytest.approx(0.2099, abs=5e-4)


def test_fleiss_kappa_needs_equal_rater_counts():
    with pytest.raises(ValueError):
        fleiss_kappa([[1, 1], [1]])
    with pytest.raises(ValueError):
        fleiss_kappa([[1], [0]])
    assert math.isnan(fleiss_kappa([[1, 1], [1, 1]]))


def test_pairwise_and_mean_pairwise_kappa():
    panel = {"ann": [1, 1, 0, 0], "bo": [1, 0, 0, 0], "cy": [1, 1, 0, 1]}
    # ann–bo: p_o 3/4; yes rates 1/2, 1/4 → p_e = 1/2·1/4 + 1/2·3/4 = 1/2 → κ = (3/4 − 1/2)/(1/2) = 0.5
    # ann–cy: p_o 3/4; yes rates 1/2, 3/4 → p_e = 3/8 + 1/8 = 1/2 → κ = 0.5
    # bo–cy:  p_o 2/4; yes rates 1/4, 3/4 → p_e = 3/16 + 3/16 = 3/8 → κ = (1/2 − 3/8)/(5/8) = 0.2
    pairs = pairwise_cohen_kappa(panel)
    assert pairs[("ann", "bo")] == pytest.approx(0.5)
    assert pairs[("ann", "cy")] == pytest.approx(0.5)
    assert pairs[("bo", "cy")] == pytest.approx(0.2)
    assert mean_pairwise_cohen_kappa(panel) == pytest.approx((0.5 + 0.5 + 0.2) / 3)
    with pytest.raises(ValueError):
        mean_pairwise_cohen_kappa({"ann": [1]})


def test_majority_labels():
    panel = {"a": [1, 0, 0.5, 1], "b": [1, 0, 1, 0], "c": [0, 0, 0, 0.5]}
    assert majority_labels(panel) == [1, 0, None, None]


def test_agreement_report():
    report = agreement_report(E_A, E_B, weights="linear")
    assert report.n == 6
    assert report.percent_agreement == pytest.approx(4 / 6)
    assert report.kappa == pytest.approx(0.52)
    assert report.weighted_kappa == pytest.approx(0.625)
    assert report.as_dict()["confusion"]["counts"] == [[1, 1, 0], [0, 1, 0], [0, 1, 2]]
    assert agreement_report(A, B).weighted_kappa is None


def test_inter_annotator_agreement_with_varying_numbers_of_raters():
    from evaluation.metrics.agreement import inter_annotator_agreement

    # equal rater counts: the same as Fleiss' κ
    same = [[1, 1, 1], [1, 1, 0], [0, 0, 0], [1, 0, 0]]
    assert inter_annotator_agreement(same) == pytest.approx(fleiss_kappa(same))
    # items: [1,1] (m=2), [1,0,0] (m=3), [0,0] (m=2), [1] (skipped: one rating)
    # P_i: [1,1] → 2·1/(2·1) = 1; [1,0,0] → 2·1/(3·2) = 1/3; [0,0] → 1;  P̄ = (1 + 1/3 + 1)/3 = 7/9
    # p_1 = (2 + 1 + 0)/7 = 3/7, p_0 = 4/7 → P_e = 9/49 + 16/49 = 25/49
    # κ = (7/9 − 25/49)/(1 − 25/49) = ((343 − 225)/441)/(24/49) = (118/441)·(49/24) = 118/216 = 0.5463
    assert inter_annotator_agreement([[1, 1], [1, 0, 0], [0, 0], [1]]) == pytest.approx(118 / 216)
    with pytest.raises(ValueError):
        inter_annotator_agreement([[1], [0]])
