"""Platform API for harness evolution: request a diagnosis, read clusters and proposals, accept or reject."""

from ninja import Router, Status

from evaluation import selectors as eval_selectors
from evaluation.evolution import decisions, diagnosing, selectors
from evaluation.evolution.models import Cluster, Diagnosis, Proposal
from evaluation.evolution.schemas import ClusterOut, DiagnosisOut, LiveDiagnosisIn, ProposalOut, RejectIn
from harness import selectors as harness_selectors
from workspaces.access import READ, require
from workspaces.schemas import errors, links

router = Router(tags=["evolution"])

# A diagnosis is read, its clusters and proposals listed; a listed proposal accepted or rejected (OpenAPI links).
_NEW_DIAGNOSIS = {"diagnosis_id": "$response.body#/id"}
_DIAGNOSIS_LINKS = {"evaluation_evolution_api_get_diagnosis": _NEW_DIAGNOSIS,
                    "evaluation_evolution_api_list_clusters": _NEW_DIAGNOSIS,
                    "evaluation_evolution_api_list_proposals": _NEW_DIAGNOSIS}
_FIRST_PROPOSAL = {"proposal_id": "$response.body#/0/id"}


def _diagnosis_out(d: Diagnosis) -> dict:
    return {"id": d.pk, "harness": d.harness.name, "version": d.version.number, "source": d.source, "run": d.run_id,
            "window_start": d.window_start, "window_end": d.window_end, "status": d.status,
            "error": d.error, "advice": d.advice, "split": d.split, "summary": d.summary, "created_at": d.created_at}


def _cluster_out(c: Cluster) -> dict:
    data = c.data
    return {"cluster_id": c.cluster_id, "rank": c.rank, "title": c.title, "size": c.size, "share": c.share,
            "accuracy_lost": c.accuracy_lost, "effectiveness_lost": c.effectiveness_lost,
            "judge_suspect": c.judge_suspect, "component": data.get("component"), "case_ids": data.get("case_ids", []),
            "centre_case": data.get("centre_case", ""), "boundary_case": data.get("boundary_case", ""),
            "passing_cases": data.get("passing_cases", []), "suspect_reasons": data.get("suspect_reasons", [])}


def _proposal_out(p: Proposal) -> dict:
    return {"id": p.pk, "cluster_id": p.cluster.cluster_id if p.cluster_id else None, "generator": p.generator,
            "hypothesis": p.hypothesis, "rationale": p.rationale, "diff": p.diff, "target": p.target,
            "base_hash": p.base_hash, "evidence": p.evidence, "valid": p.valid, "errors": p.errors,
            "status": p.status, "reason": p.reason, "decided_by": p.decided_by}


def _diagnosis(request, diagnosis_id: int) -> Diagnosis:
    require(request.actor, request.workspace, READ)
    return selectors.diagnosis_get(request.workspace, diagnosis_id)


@router.post("/eval/runs/{run_id}/diagnoses", response={201: DiagnosisOut, **errors(401, 403, 404, 409, 422)},
             summary="Diagnose a finished eval run", openapi_extra=links(201, **_DIAGNOSIS_LINKS))
def request_diagnosis(request, run_id: int):
    """Queue a diagnosis (write scope): failure signatures, clusters, stop advice and proposed edits.

    409 when the run is not finished (done), or is an IFEval run (it tests the model, not the harness)."""
    run = eval_selectors.run_get(request.workspace, run_id)
    return Status(201, _diagnosis_out(diagnosing.diagnosis_request(actor=request.actor, run=run)))


@router.post("/harnesses/{name}/diagnoses", response={201: DiagnosisOut, **errors(400, 401, 403, 404, 409, 422)},
             summary="Diagnose a version's live traces in a time window",
             openapi_extra=links(201, **_DIAGNOSIS_LINKS))
def request_live_diagnosis(request, name: str, payload: LiveDiagnosisIn):
    """Queue a diagnosis (write scope) of the version's live API traces in [start, end) that carry live judge
    scores (the live judge samples replies inside experiments, HARNESSOPS_LIVE_JUDGE_RATE).

    422 naming `end` when `start` is not before `end` or the window is longer than 31 days; 409 when the
    window holds no live trace of the version, or none with a judge score; 404 for an unknown harness or
    version."""
    harness = harness_selectors.harness_get(request.workspace, name)
    version = harness_selectors.version_get(harness, payload.version)
    return Status(201, _diagnosis_out(diagnosing.diagnosis_request_live(
        actor=request.actor, harness=harness, version=version, start=payload.start, end=payload.end)))


@router.get("/diagnoses/{diagnosis_id}", response={200: DiagnosisOut, **errors(401, 403, 404, 422)},
            openapi_extra=links(200, evaluation_evolution_api_list_clusters=_NEW_DIAGNOSIS,
                                evaluation_evolution_api_list_proposals=_NEW_DIAGNOSIS))
def get_diagnosis(request, diagnosis_id: int):
    return _diagnosis_out(_diagnosis(request, diagnosis_id))


@router.get("/diagnoses/{diagnosis_id}/clusters", response={200: list[ClusterOut], **errors(401, 403, 404, 422)})
def list_clusters(request, diagnosis_id: int):
    """Clusters ranked by the accuracy and effectiveness they cost."""
    return [_cluster_out(c) for c in _diagnosis(request, diagnosis_id).clusters.all()]


@router.get("/diagnoses/{diagnosis_id}/proposals", response={200: list[ProposalOut], **errors(401, 403, 404, 422)},
            openapi_extra=links(200, evaluation_evolution_api_accept_proposal=_FIRST_PROPOSAL,
                                evaluation_evolution_api_reject_proposal=_FIRST_PROPOSAL))
def list_proposals(request, diagnosis_id: int, valid: bool | None = None):
    """Proposed edits; `valid=true` for the candidates only (invalid ones keep their errors)."""
    proposals = _diagnosis(request, diagnosis_id).proposals.select_related("cluster")
    if valid is not None:
        proposals = proposals.filter(valid=valid)
    return [_proposal_out(p) for p in proposals]


@router.post("/proposals/{proposal_id}/accept", response={200: ProposalOut, **errors(401, 403, 404, 409, 422)})
def accept_proposal(request, proposal_id: int):
    """Accept a valid proposal (write scope); accepted edits become one candidate version in the console.

    409 when the proposal is invalid or already decided, or its diagnosis already made its candidate."""
    proposal = selectors.proposal_get(request.workspace, proposal_id)
    return _proposal_out(decisions.proposal_accept(actor=request.actor, proposal=proposal))


@router.post("/proposals/{proposal_id}/reject", response={200: ProposalOut, **errors(400, 401, 403, 404, 409, 422)})
def reject_proposal(request, proposal_id: int, payload: RejectIn):
    """Reject with a reason (write scope): later diagnoses read it and never propose the same edit again.

    409 when the proposal was already decided."""
    proposal = selectors.proposal_get(request.workspace, proposal_id)
    return _proposal_out(decisions.proposal_reject(actor=request.actor, proposal=proposal, reason=payload.reason))
