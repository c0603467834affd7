"""One diagnosis of one evaluated version: clusters, stop advice and validated rule proposals. Pure: no Django."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evaluation.evolution.clusters import ClusterConfig, Clustering, cluster_failures
from evaluation.evolution.proposals import Proposal, propose_by_rules
from evaluation.evolution.signatures import CaseRecord
from evaluation.evolution.stopping import StopAdvice, StopConfig, stop_advice
from evaluation.evolution.validation import ValidationConfig, validate_proposal
from harness.spec import HarnessSpec


@dataclass(frozen=True)
class DiagnosisConfig:
    """Everything that shapes a diagnosis; stored with it."""

    clusters: ClusterConfig = field(default_factory=ClusterConfig)
    stop: StopConfig = field(default_factory=StopConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


@dataclass(frozen=True)
class DiagnosisResult:
    clustering: Clustering
    advice: StopAdvice
    proposals: tuple[Proposal, ...]


def case_texts(records: Iterable[CaseRecord]) -> list[str]:
    """The eval cases' own words, which no proposal may copy."""
    return [text for record in records for text in (record.message, *record.texts) if text]


def diagnose(records: Sequence[CaseRecord], spec: HarnessSpec, *, previous: Sequence[Mapping[str, Any]] = (),
             calibration: Mapping[str, float] | None = None, gains: Sequence[float] = (),
             rejected: Iterable[str] = (), config: DiagnosisConfig = DiagnosisConfig(),
             guard_texts: Sequence[str] = (), rejected_rules: Mapping[str, Mapping[str, str]] | None = None
             ) -> DiagnosisResult:
    """Cluster the failures of `spec` on `records`, advise, and propose validated edits by the rule catalogue.

    `guard_texts` are other cases' words (the gate split's) that no edit may copy either; nothing else of
    those cases is read."""
    clustering = cluster_failures(records, spec, config=config.clusters, calibration=calibration, previous=previous)
    advice = stop_advice(clustering, gains=gains, config=config.stop)
    by_id = {r.case_id: r for r in records}
    rejected = set(rejected)
    texts = [*case_texts(records), *guard_texts]
    proposals = tuple(validate_proposal(p, spec, case_texts=texts, rejected=rejected, config=config.validation)
                      for p in propose_by_rules(clustering.clusters, by_id, spec, rejected_rules=rejected_rules))
    return DiagnosisResult(clustering, advice, proposals)
