"""API schemas for harness evolution (XIn / XOut pairs)."""

from datetime import UTC, datetime

from ninja import Schema
from pydantic import Field, ValidationInfo, field_validator

from evaluation.evolution.diagnosing import MAX_LIVE_WINDOW
from workspaces.schemas import NOT_BLANK, BodyIn, IsoDateTime, json_int


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment  # naive times are read as UTC


class LiveDiagnosisIn(BodyIn):
    """A window of live traces: `start` before `end`, at most 31 days apart (else a 422 on `end`)."""

    version: json_int(ge=1, le=2_147_483_647) = Field(description="The harness version whose live traces are diagnosed.")
    start: IsoDateTime = Field(description="Start of the window (inclusive); a time without a zone is UTC.")
    end: IsoDateTime = Field(description=f"End of the window (exclusive): after `start`, at most "
                                         f"{MAX_LIVE_WINDOW.days} days after it.")

    @field_validator("end")
    @classmethod
    def _window(cls, end: datetime, info: ValidationInfo) -> datetime:
        start = info.data.get("start")
        if start is not None:  # else `start` has its own error
            if _utc(end) <= _utc(start):
                raise ValueError("The window's end must be after its start.")
            if _utc(end) - _utc(start) > MAX_LIVE_WINDOW:
                raise ValueError(f"The window is longer than {MAX_LIVE_WINDOW.days} days: choose a shorter one.")
        return end


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
    advice: dict = Field(description="Stop advice: stop, rule, detail; when stopping, `keep` names the best version "
                                     "so far on the gate split (version, round, accuracy, ci).")
    split: dict = Field(description="The diagnosis and gate splits: `kind` seeded (seed, gate_share, "
                                    "diagnosis_case_ids, gate_case_ids), sets (gate_set), live, or empty (no "
                                    "held-out split). The diagnosis read only the diagnosis split.")
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


class RejectIn(BodyIn):
    reason: str = Field(min_length=1, max_length=1000, pattern=NOT_BLANK, description="Why: the next diagnosis reads it.")
