"""Failure clusters of one diagnosed version: exact signatures first, then text clustering. Pure: no Django.

1. Failures are grouped by exact signature (signatures.py), and groups with the same cause-level core merge.
2. A core group of at least `min_cluster_size` cases is a cluster; inside it, k-means (k by silhouette)
   splits it only when its texts clearly separate (silhouette ≥ `split_silhouette`).
3. The failures left over (rare signatures) are clustered ACROSS groups with HDBSCAN over TF-IDF of their
   text (signature words, judge reasons, reply, tool sequence); HDBSCAN's noise, and any group it forms
   whose texts are not cohesive (mean cosine similarity below `min_cohesion`), is the long tail.

Each cluster carries its size, share of failures, accuracy/effectiveness lost (points of the run's mean),
the harness component it points at (with the version's content hash), representatives (nearest the centre,
a boundary case, passing cases of the same skill for contrast), and a judge-suspect flag. Identity is
stable across diagnoses of successive versions (`assign_identities`).
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from evaluation.evolution.judging import judge_contradictions
from evaluation.evolution.signatures import (
    CaseRecord,
    Signature,
    failure_text,
    group_by_signature,
    signature_of,
)
from harness.spec import HarnessSpec
from harness.spec.canonical import hook_path, prompt_path, skill_path, tool_path


@dataclass(frozen=True)
class ClusterConfig:
    """How failures are clustered; stored with every diagnosis."""

    min_cluster_size: int = 2  # fewer cases than this are long tail, not a pattern
    split_silhouette: float = 0.35  # a core group is split only when its parts separate at least this well
    max_split_k: int = 4
    min_cohesion: float = 0.5  # a text cluster's mean pairwise cosine similarity; looser groups stay noise
    top_terms: int = 8
    passing_contrast: int = 2  # passing cases of the same skill shown beside a cluster
    calibration_floor: float = 0.4  # judge/human agreement below this for a category makes its clusters suspect
    suspect_share: float = 0.5  # share of a cluster's cases whose judge reasons contradict the trace


@dataclass(frozen=True)
class Component:
    """The part of the harness a cluster points at."""

    kind: str  # skill | tool | hook | prompt
    name: str
    path: str

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "name": self.name, "path": self.path}


@dataclass(frozen=True)
class FailureCluster:
    cluster_id: str
    core: str
    case_ids: tuple[str, ...]
    share: float  # of the failures
    accuracy_lost: float  # points of the run's mean accuracy these cases cost
    effectiveness_lost: float
    signature: Signature  # the most common signature among the cases
    component: Component | None
    harness_hash: str
    terms: tuple[str, ...]
    centre_case: str
    boundary_case: str
    passing_cases: tuple[str, ...]
    judge_suspect: bool = False
    suspect_reasons: tuple[str, ...] = ()
    source: str = "signature"  # signature | split | text

    @property
    def size(self) -> int:
        return len(self.case_ids)

    @property
    def title(self) -> str:
        sig = self.signature
        what = ", ".join(sig.checks) or sig.verdict
        where = f" at {self.component.kind} {self.component.name}" if self.component else ""
        return f"{sig.verdict}: {what}{where}"

    def to_dict(self) -> dict[str, Any]:
        return {"cluster_id": self.cluster_id, "core": self.core, "case_ids": list(self.case_ids), "size": self.size,
                "share": self.share, "accuracy_lost": self.accuracy_lost,
                "effectiveness_lost": self.effectiveness_lost, "signature": self.signature.to_dict(),
                "component": self.component.to_dict() if self.component else None,
                "harness_hash": self.harness_hash, "terms": list(self.terms), "centre_case": self.centre_case,
                "boundary_case": self.boundary_case, "passing_cases": list(self.passing_cases),
                "judge_suspect": self.judge_suspect, "suspect_reasons": list(self.suspect_reasons),
                "source": self.source, "title": self.title}


@dataclass(frozen=True)
class Clustering:
    clusters: tuple[FailureCluster, ...]
    noise: tuple[str, ...]  # failures in no cluster: the long tail
    groups: tuple[tuple[str, tuple[str, ...]], ...]  # exact signature key → case ids
    failures: int
    total: int
    config: ClusterConfig = field(default_factory=ClusterConfig)


def cluster_failures(records: Sequence[CaseRecord], spec: HarnessSpec, *, config: ClusterConfig = ClusterConfig(),
                     calibration: Mapping[str, float] | None = None,
                     previous: Sequence[Mapping[str, Any]] = ()) -> Clustering:
    """Cluster the failed records of one run of `spec` (see the module docstring)."""
    by_id = {r.case_id: r for r in records}
    failed = [r for r in records if r.failed]
    groups = group_by_signature(failed)
    if not failed:
        return Clustering((), (), (), 0, len(records), config)
    signatures = {r.case_id: signature_of(r) for r in failed}
    texts = [failure_text(r, signatures[r.case_id]) for r in failed]
    vectors, terms = _tfidf(texts)
    row = {r.case_id: i for i, r in enumerate(failed)}

    by_core: dict[str, list[str]] = defaultdict(list)
    for group in groups:
        by_core[group.signature.core].extend(group.case_ids)
    members: list[tuple[list[str], str]] = []
    leftovers: list[str] = []
    for _core, ids in sorted(by_core.items(), key=lambda item: (-len(item[1]), item[0])):
        if len(ids) < config.min_cluster_size:
            leftovers.extend(ids)
            continue
        parts = _split(vectors[[row[i] for i in ids]], config)
        if parts is None:
            members.append((ids, "signature"))
        else:
            members += [([ids[j] for j in part], "split") for part in parts]
    noise: list[str] = []
    if len(leftovers) >= max(3, config.min_cluster_size):
        from sklearn.cluster import HDBSCAN  # scikit-learn loads here (1.5 s): not in every process's start

        labels = HDBSCAN(min_cluster_size=max(2, config.min_cluster_size), min_samples=1,
                         copy=True).fit_predict(vectors[[row[i] for i in leftovers]])
        found: dict[int, list[str]] = defaultdict(list)
        for case_id, label in zip(leftovers, labels, strict=True):
            (noise.append(case_id) if label < 0 else found[int(label)].append(case_id))
        for _, ids in sorted(found.items()):
            if _cohesion(vectors[[row[i] for i in ids]]) >= config.min_cohesion:
                members.append((ids, "text"))
            else:
                noise.extend(ids)
    else:
        noise = leftovers

    centres = [vectors[[row[i] for i in ids]].mean(axis=0) for ids, _ in members]
    clusters = []
    for index, (ids, source) in enumerate(members):
        clusters.append(_describe(index, ids, source, centres, vectors, row, terms, by_id, signatures, records,
                                  spec, config, calibration or {}))
    clusters = assign_identities(clusters, previous)
    clusters.sort(key=lambda c: (-c.accuracy_lost - c.effectiveness_lost, -c.size, c.cluster_id))
    return Clustering(tuple(clusters), tuple(sorted(noise)),
                      tuple((g.signature.key, g.case_ids) for g in groups), len(failed), len(records), config)


def _tfidf(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.feature_extraction.text import TfidfVectorizer

    vectorizer = TfidfVectorizer(token_pattern=r"[A-Za-z_][\w]+", sublinear_tf=True, min_df=1)
    matrix = vectorizer.fit_transform(texts)
    return matrix.toarray(), vectorizer.get_feature_names_out()  # rows are L2-normalised


def _cohesion(vectors: np.ndarray) -> float:
    """Mean pairwise cosine similarity (rows are L2-normalised)."""
    n = len(vectors)
    similarity = vectors @ vectors.T
    return float((similarity.sum() - n) / (n * (n - 1))) if n > 1 else 1.0


def _split(vectors: np.ndarray, config: ClusterConfig) -> list[list[int]] | None:
    """Parts of one core group when k-means separates them clearly (best silhouette over k), else None."""
    n = len(vectors)
    distinct = len({tuple(np.round(v, 6)) for v in vectors})
    if n < 2 * config.min_cluster_size or distinct < 2:
        return None
    from sklearn.cluster import KMeans
    from sklearn.metrics import silhouette_score

    best: tuple[float, np.ndarray] | None = None
    for k in range(2, min(config.max_split_k, n // config.min_cluster_size, distinct) + 1):
        labels = KMeans(n_clusters=k, n_init=10, random_state=0).fit_predict(vectors)
        if len(set(labels)) < 2 or min(Counter(labels).values()) < config.min_cluster_size:
            continue
        score = float(silhouette_score(vectors, labels))
        if best is None or score > best[0]:
            best = (score, labels)
    if best is None or best[0] < config.split_silhouette:
        return None
    parts: dict[int, list[int]] = defaultdict(list)
    for j, label in enumerate(best[1]):
        parts[int(label)].append(j)
    return [parts[label] for label in sorted(parts, key=lambda label: parts[label][0])]


def _describe(index, ids, source, centres, vectors, row, terms, by_id, signatures, records, spec, config,
              calibration) -> FailureCluster:
    cases = [by_id[i] for i in ids]
    own = centres[index]
    distances = {i: float(np.linalg.norm(vectors[row[i]] - own)) for i in ids}
    centre_case = min(ids, key=lambda i: (distances[i], i))
    if len(centres) > 1:  # the case closest to another cluster's centre, relative to its own
        others = [c for j, c in enumerate(centres) if j != index]
        margin = {i: min(float(np.linalg.norm(vectors[row[i]] - c)) for c in others) - distances[i] for i in ids}
        boundary_case = min(ids, key=lambda i: (margin[i], i))
    else:
        boundary_case = max(ids, key=lambda i: (distances[i], i))
    top = np.argsort(-own)[:config.top_terms]
    common = Counter(signatures[i].key for i in ids).most_common()
    signature = signatures[min(i for i in ids if signatures[i].key == common[0][0])]
    failures = sum(1 for r in records if r.failed)
    total = len(records) or 1
    skills = {s for r in cases for s in r.expected_skills}
    categories = {r.category for r in cases}
    passing = sorted(r.case_id for r in records if not r.failed and (
        (skills and skills & set(r.expected_skills)) or (not skills and r.category in categories)))
    suspect = _judge_suspicion(cases, calibration, config)
    return FailureCluster(
        cluster_id="", core=signature.core, case_ids=tuple(sorted(ids)), share=round(len(ids) / failures, 4),
        accuracy_lost=round(sum(1 - r.accuracy for r in cases) / total, 4),
        effectiveness_lost=round(sum(1 - r.effectiveness for r in cases) / total, 4),
        signature=signature, component=component_for(signature, spec), harness_hash=spec.content_hash,
        terms=tuple(str(terms[t]) for t in top if own[t] > 0), centre_case=centre_case,
        boundary_case=boundary_case, passing_cases=tuple(passing[:config.passing_contrast]),
        judge_suspect=bool(suspect), suspect_reasons=tuple(suspect), source=source)


def _judge_suspicion(cases: Sequence[CaseRecord], calibration: Mapping[str, float],
                     config: ClusterConfig) -> list[str]:
    """Why the evaluation, not the harness, should be checked for these cases (empty: no suspicion)."""
    reasons = []
    contradicted = {r.case_id: found for r in cases if (found := judge_contradictions(r))}
    if len(contradicted) >= config.suspect_share * len(cases):
        example_id, found = sorted(contradicted.items())[0]
        reasons.append(f"the judge's reasons contradict the trace in {len(contradicted)} of {len(cases)} cases "
                       f"(e.g. {example_id}: {found[0]})")
    # Any judge, not only the reference one: judges that disagree or abstain on a case, or a person's label
    # that contradicts the verdict, say the evaluation of these cases is in doubt.
    split = [r.case_id for r in cases if len({a for _, a in r.judge_votes if a is not None}) > 1]
    abstaining = [r.case_id for r in cases if any(a is None for _, a in r.judge_votes)]
    contradicted_by_people = [r.case_id for r in cases if r.human_accuracy is not None
                              and round(r.human_accuracy) != round(r.accuracy)]
    for ids, what in ((split, "the judges disagree"), (abstaining, "a judge abstained"),
                      (contradicted_by_people, "a person's label contradicts the verdict")):
        if ids and len(ids) >= config.suspect_share * len(cases):
            reasons.append(f"{what} in {len(ids)} of {len(cases)} cases (e.g. {sorted(ids)[0]})")
    category = Counter(r.category for r in cases).most_common(1)[0][0]
    agreement = calibration.get(category)
    if agreement is not None and agreement < config.calibration_floor:
        reasons.append(f"the judge agrees weakly with human labels on {category} "
                       f"({agreement:.2f} < {config.calibration_floor:.2f})")
    return reasons


def component_for(signature: Signature, spec: HarnessSpec) -> Component | None:
    """The harness module a signature points at: the denied/failing tool, the missing skill, a blocking
    hook, else the prompt block that states the reply constraints."""
    names = {"tool": {t.name for t in spec.tools}, "skill": {s.name for s in spec.skills},
             "hook": {h.name for h in spec.hooks}}
    if signature.failing_tool in names["tool"]:
        return Component("tool", signature.failing_tool, tool_path(signature.failing_tool))
    for skill in signature.skills_missing:
        if skill in names["skill"]:
            return Component("skill", skill, skill_path(skill))
    for hook in signature.hooks_blocking:
        if hook in names["hook"] and hook != "require-reply-skill":
            return Component("hook", hook, hook_path(hook))
    if "tools" in signature.checks and signature.skills_loaded:
        loaded = [s for s in signature.skills_loaded if s in names["skill"]]
        if loaded:
            return Component("skill", loaded[0], skill_path(loaded[0]))
    blocks = sorted(spec.prompt, key=lambda b: ("constraint" not in b.name, "policy" not in b.name, b.order))
    if blocks:
        return Component("prompt", blocks[0].name, prompt_path(blocks[0]))
    return None


# Identity across diagnoses --------------------------------------------------------------------------

def _jaccard(a: Sequence[str], b: Sequence[str]) -> float:
    a, b = set(a), set(b)
    return len(a & b) / len(a | b) if a | b else 0.0


def assign_identities(clusters: Sequence[FailureCluster], previous: Sequence[Mapping[str, Any]],
                      *, min_similarity: float = 0.5) -> list[FailureCluster]:
    """Give each cluster the id of the previous diagnosis's cluster it continues, else a new stable id.

    `previous` holds `{"cluster_id", "core", "terms"}` of the clusters seen so far for this harness. A match
    needs the same cause-level core (which outweighs any term overlap) or terms overlapping by
    `min_similarity` (Jaccard); best pairs first.
    New ids derive from the core, so the same failures diagnosed twice get the same id.
    """
    pairs = []
    for i, cluster in enumerate(clusters):
        for j, old in enumerate(previous):
            score = (2.0 if old.get("core") == cluster.core else 0.0) + _jaccard(cluster.terms, old.get("terms", ()))
            if old.get("core") == cluster.core or score >= min_similarity:
                pairs.append((-score, -cluster.size, i, j))
    given: dict[int, str] = {}
    taken: set[int] = set()
    for _, _, i, j in sorted(pairs):
        if i not in given and j not in taken:
            given[i], _ = previous[j]["cluster_id"], taken.add(j)
    used = set(given.values()) | {str(p["cluster_id"]) for p in previous}
    out = []
    order = sorted(range(len(clusters)), key=lambda i: (-clusters[i].size, clusters[i].case_ids))
    for i in order:
        if i not in given:
            base = "c-" + hashlib.sha256(clusters[i].core.encode()).hexdigest()[:8]
            candidate, n = base, 2
            while candidate in used:
                candidate, n = f"{base}-{n}", n + 1
            given[i] = candidate
            used.add(candidate)
    for i, cluster in enumerate(clusters):
        out.append(replace(cluster, cluster_id=given[i]))
    return out
