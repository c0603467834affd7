"""API schemas for harness evolution (XIn / XOut pairs)."""

from datetime import datetime

from ninja import Schema
from pydantic import Field


class LiveDiagnosisIn(Schema):
    version: int = Field(ge=1, le=2_147_483_647, description="The harness version whose live traces are diagnosed.")
    start: datetime = Field(description="Start of the window (inclusive); a time without a zone is UTC.")
    end: datetime = Field(description="End of the window (exclusive), at most 31 days after `start`.")


class DiagnosisOut(Schema):
    id: int
    harness: str
    version: int
    source: str = Field(description="`run`: an eval run's results; `live`: live traces with live judge scores.")
    run: int | None = Field(description="The diagnosed eval run (null for a live diagnosis).")
    window_start: datetime | None
    window_end: datetime | None
    status: str
    error: str
    advice: dict
    summary: dict
    created_at: datetime


class ClusterOut(Schema):
    cluster_id: str = Field(description="Stable across diagnoses of the same harness.")
    rank: int
    title: str
    size: int
    share: float
    accuracy_lost: float
    effectiveness_lost: float
    judge_suspect: bool
    component: dict | None
    case_ids: list[str]
    centre_case: str
    boundary_case: str
    passing_cases: list[str]
    suspect_reasons: list[str]


class ProposalOut(Schema):
    id: int
    cluster_id: str | None
    generator: str = Field(description="rules:<rule> or proposer:<spec hash>/<model>")
    hypothesis: str
    rationale: str
    diff: str
    target: str
    base_hash: str
    evidence: list[str]
    valid: bool
    errors: list[str]
    status: str
    reason: str
    decided_by: str


class RejectIn(Schema):
    reason: str = Field(min_length=1, max_length=1000, description="Why: the next diagnosis reads it.")
