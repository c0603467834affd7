"""API schemas for harness evolution (XIn / XOut pairs)."""

from datetime import datetime

from ninja import Schema
from pydantic import Field


class DiagnosisOut(Schema):
    id: int
    harness: str
    version: int
    run: int
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
