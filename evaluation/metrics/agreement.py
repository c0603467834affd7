"""Agreement between raters: a judge vs humans (calibration) and humans among themselves.

Two raters (paired label sequences a, b of equal length n):

- `percent_agreement(a, b)` = p_o = (number of items with a_i == b_i) / n.
- `confusion_matrix(a, b, labels)`: counts[i][j] = items rated labels[i] by a and labels[j] by b.
- `cohen_kappa(a, b)` (nominal) = (p_o − p_e) / (1 − p_e), with chance agreement
  p_e = Σ_k (row_k / n)·(col_k / n) from the two raters' marginals.
- `cohen_kappa(a, b, weights="linear"|"quadratic")`: weighted κ for ORDINAL labels
  (e.g. Effectiveness 0 < 0.5 < 1), κ_w = 1 − Σ w_ij·O_ij / Σ w_ij·E_ij with
  O the observed proportions, E_ij = (row_i / n)(col_j / n), and disagreement
  weights w_ij = |i − j| / (K − 1) (linear) or (i − j)² / (K − 1)² (quadratic),
  i, j being positions in `labels` (default: the sorted distinct labels). With
  weights=None this equals the nominal κ.
- κ is undefined when chance agreement is total (both raters used one and the
  same single label: p_e = 1); then it returns NaN, never a made-up 0 or 1.

More than two raters:

- `fleiss_kappa(ratings)`: Fleiss' κ for N items each rated by the same number m ≥ 2
  of raters (`ratings[i]` is the list of the m labels item i received; raters need
  not be the same people across items). P_i = Σ_k n_ik(n_ik − 1) / (m(m − 1)),
  P̄ = mean P_i, p_k = Σ_i n_ik / (N·m), P̄_e = Σ_k p_k², κ = (P̄ − P̄_e) / (1 − P̄_e).
- `inter_annotator_agreement(ratings)`: Fleiss' κ generalised to items rated by
  DIFFERENT numbers of raters (m_i ≥ 2; items with fewer ratings are skipped), as
  a calibration set where some cases got two labels and some three needs:
  P_i = Σ_k n_ik(n_ik − 1) / (m_i(m_i − 1)), P̄ = mean P_i,
  p_k = Σ_i n_ik / Σ_i m_i, P̄_e = Σ_k p_k², κ = (P̄ − P̄_e) / (1 − P̄_e).
  With the same m for every item it IS `fleiss_kappa`. This is the number to
  report as inter-annotator agreement.
- `mean_pairwise_cohen_kappa(annotations)`: the mean of Cohen's κ over every pair
  of named raters who labelled the same items (Light's κ). Prefer Fleiss' κ for
  the headline number (one chance model for the whole panel); the pairwise mean
  shows which annotator disagrees with the rest.
- `majority_labels(annotations)`: the per-item majority label of a panel (None
  for a tie), e.g. the human reference a judge is calibrated against.

`agreement_report(a, b)` bundles percent agreement, κ and the confusion matrix.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

WEIGHTS = (None, "linear", "quadratic")


def _pair(a: Sequence[Hashable], b: Sequence[Hashable]) -> tuple[list, list]:
    a, b = list(a), list(b)
    if len(a) != len(b):
        raise ValueError(f"rater sequences differ in length: {len(a)} vs {len(b)}")
    if not a:
        raise ValueError("no items to compare")
    return a, b


def _labels(labels: Sequence[Hashable] | None, *seqs: Sequence[Hashable]) -> list:
    seen = set().union(*(set(s) for s in seqs))
    if labels is None:
        try:
            return sorted(seen)
        except TypeError:
            return sorted(seen, key=repr)
    labels = list(labels)
    unknown = seen - set(labels)
    if unknown:
        raise ValueError(f"labels not in the label list: {sorted(map(repr, unknown))}")
    if len(set(labels)) != len(labels):
        raise ValueError("duplicate labels")
    return labels


def percent_agreement(a: Sequence[Hashable], b: Sequence[Hashable]) -> float:
    a, b = _pair(a, b)
    return sum(x == y for x, y in zip(a, b, strict=True)) / len(a)


@dataclass(frozen=True)
class ConfusionMatrix:
    labels: tuple
    counts: tuple[tuple[int, ...], ...]  # counts[i][j]: rater a said labels[i], rater b said labels[j]

    @property
    def n(self) -> int:
        return sum(map(sum, self.counts))

    def as_dict(self) -> dict[str, Any]:
        return {"labels": list(self.labels), "counts": [list(r) for r in self.counts]}


def confusion_matrix(a: Sequence[Hashable], b: Sequence[Hashable],
                     labels: Sequence[Hashable] | None = None) -> ConfusionMatrix:
    a, b = _pair(a, b)
    labels = _labels(labels, a, b)
    index = {label: i for i, label in enumerate(labels)}
    counts = [[0] * len(labels) for _ in labels]
    for x, y in zip(a, b, strict=True):
        counts[index[x]][index[y]] += 1
    return ConfusionMatrix(tuple(labels), tuple(tuple(r) for r in counts))


def cohen_kappa(a: Sequence[Hashable], b: Sequence[Hashable], *, labels: Sequence[Hashable] | None = None,
                weights: str | None = None) -> float:
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {WEIGHTS}, not {weights!r}")
    matrix = confusion_matrix(a, b, labels)
    k = len(matrix.labels)
    n = matrix.n
    rows = [sum(r) / n for r in matrix.counts]
    cols = [sum(matrix.counts[i][j] for i in range(k)) / n for j in range(k)]

    def w(i: int, j: int) -> float:
        if weights is None:
            return 0.0 if i == j else 1.0
        if k == 1:
            return 0.0
        if weights == "linear":
            return abs(i - j) / (k - 1)
        return (i - j) ** 2 / (k - 1) ** 2

    observed = sum(w(i, j) * matrix.counts[i][j] / n for i in range(k) for j in range(k))
    expected = sum(w(i, j) * rows[i] * cols[j] for i in range(k) for j in range(k))
    if expected == 0:
        return math.nan
    return 1.0 - observed / expected


def fleiss_kappa(ratings: Sequence[Sequence[Hashable]], labels: Sequence[Hashable] | None = None) -> float:
    items = [list(r) for r in ratings]
    if not items:
        raise ValueError("no items")
    m = len(items[0])
    if m < 2 or any(len(r) != m for r in items):
        raise ValueError("Fleiss' kappa needs the same number (>= 2) of ratings for every item")
    labels = _labels(labels, *items)
    n_items = len(items)
    counts = [Counter(r) for r in items]
    p_i = [sum(c[k] * (c[k] - 1) for k in labels) / (m * (m - 1)) for c in counts]
    p_bar = sum(p_i) / n_items
    p_k = [sum(c[k] for c in counts) / (n_items * m) for k in labels]
    p_e = sum(p * p for p in p_k)
    if p_e == 1:
        return math.nan
    return (p_bar - p_e) / (1 - p_e)


def inter_annotator_agreement(ratings: Sequence[Sequence[Hashable]],
                              labels: Sequence[Hashable] | None = None) -> float:
    items = [list(r) for r in ratings if len(r) >= 2]
    if not items:
        raise ValueError("no item has two or more ratings")
    labels = _labels(labels, *items)
    counts = [Counter(r) for r in items]
    p_i = [sum(c[k] * (c[k] - 1) for k in labels) / (len(r) * (len(r) - 1)) for c, r in zip(counts, items, strict=True)]
    p_bar = sum(p_i) / len(items)
    total = sum(len(r) for r in items)
    p_e = sum((sum(c[k] for c in counts) / total) ** 2 for k in labels)
    if p_e == 1:
        return math.nan
    return (p_bar - p_e) / (1 - p_e)


def mean_pairwise_cohen_kappa(annotations: Mapping[str, Sequence[Hashable]], *,
                              weights: str | None = None) -> float:
    names = list(annotations)
    if len(names) < 2:
        raise ValueError("need at least two raters")
    labels = _labels(None, *annotations.values())
    kappas = [cohen_kappa(annotations[x], annotations[y], labels=labels, weights=weights)
              for x, y in combinations(names, 2)]
    return sum(kappas) / len(kappas)


def pairwise_cohen_kappa(annotations: Mapping[str, Sequence[Hashable]], *,
                         weights: str | None = None) -> dict[tuple[str, str], float]:
    labels = _labels(None, *annotations.values())
    return {(x, y): cohen_kappa(annotations[x], annotations[y], labels=labels, weights=weights)
            for x, y in combinations(list(annotations), 2)}


def majority_labels(annotations: Mapping[str, Sequence[Hashable]]) -> list:
    columns = list(annotations.values())
    n = len(columns[0]) if columns else 0
    if any(len(c) != n for c in columns):
        raise ValueError("raters labelled different numbers of items")
    out = []
    for i in range(n):
        ranked = Counter(c[i] for c in columns).most_common()
        out.append(ranked[0][0] if len(ranked) == 1 or ranked[0][1] > ranked[1][1] else None)
    return out


@dataclass(frozen=True)
class AgreementReport:
    n: int
    percent_agreement: float
    kappa: float
    weighted_kappa: float | None
    confusion: ConfusionMatrix

    def as_dict(self) -> dict[str, Any]:
        return {"n": self.n, "percent_agreement": self.percent_agreement, "kappa": self.kappa,
                "weighted_kappa": self.weighted_kappa, "confusion": self.confusion.as_dict()}


def agreement_report(a: Sequence[Hashable], b: Sequence[Hashable], *, labels: Sequence[Hashable] | None = None,
                     weights: str | None = None) -> AgreementReport:
    """Percent agreement, nominal κ, optionally weighted κ (ordinal labels), confusion matrix."""
    matrix = confusion_matrix(a, b, labels)
    return AgreementReport(
        n=matrix.n,
        percent_agreement=percent_agreement(a, b),
        kappa=cohen_kappa(a, b, labels=matrix.labels),
        weighted_kappa=cohen_kappa(a, b, labels=matrix.labels, weights=weights) if weights else None,
        confusion=matrix,
    )
