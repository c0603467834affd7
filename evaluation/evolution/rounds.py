"""Rounds: the accepted edits of one diagnosis combined into one candidate version, evaluated and gated.

The candidate's author is the AI (a system actor naming the generators) and its approval by the person is
a separate audit event, so the audit log tells the two apart. Evaluating is a job: the request creates the
runs and enqueues by task name (this module never imports the tasks); the worker runs them, compares with
the regression gate and attributes fixed and regressed cases to the edits (`attribution.py`).
"""

from django.conf import settings
from django.db import transaction

from evaluation.evolution.attribution import attribute
from evaluation.evolution.decisions import MAX_REASON
from evaluation.evolution.errors import EvolutionError
from evaluation.evolution.models import Diagnosis, Proposal, Round
from evaluation.evolution.patches import PatchError, apply_onto
from evaluation.models import EvalRun, EvalSetVersion
from harness import selectors as harness_selectors
from harness.services import version_commit
from harness.spec import parse_files
from workspaces.access import WRITE, Actor, require
from workspaces.jobs import enqueue
from workspaces.services import audit_record


def ai_actor(generators) -> Actor:
    """The author of AI-made versions: a system actor whose label names the generators."""
    return Actor.system(f"ai:evolution ({', '.join(sorted(set(generators)))})"[:200])


def round_create(*, actor: Actor, diagnosis: Diagnosis) -> Round:
    """Combine the accepted edits into one candidate version (authored by the AI, approved by `actor`).

    Each edit applies to the diagnosed version and is merged three-way into the edits before it, so edits
    of different lines of one file combine; one that changes the same lines as an earlier accepted edit
    (a real conflict) is marked `conflict` with the reason and left out.
    """
    require(actor, diagnosis.workspace, WRITE)
    if hasattr(diagnosis, "round"):
        raise EvolutionError("This diagnosis already has its candidate version.")
    accepted = list(diagnosis.proposals.filter(status=Proposal.Status.ACCEPTED).order_by("id"))
    if not accepted:
        raise EvolutionError("Accept at least one proposal first.")
    head = harness_selectors.harness_get(diagnosis.workspace, diagnosis.harness.name).head
    if head.pk != diagnosis.version_id:
        raise EvolutionError(f"The harness moved on to v{head.number} since this diagnosis of "
                             f"v{diagnosis.version.number}: diagnose the new head instead.")
    base = dict(diagnosis.version.files)
    files, combined, conflicts = dict(base), [], []
    for proposal in accepted:
        try:
            files = apply_onto(base, files, proposal.diff)
            combined.append(proposal)
        except PatchError as exc:
            conflicts.append((proposal, f"conflicts with the other accepted edits: {exc}"[:MAX_REASON]))
    if not combined:
        raise EvolutionError("None of the accepted edits applies.")
    parse_files(files)  # SpecInvalid if the combination is invalid (each was valid alone)
    with transaction.atomic():
        message = "; ".join(p.hypothesis for p in combined)
        result = version_commit(actor=ai_actor(p.generator for p in combined), harness=diagnosis.harness,
                                files=files, base_version=diagnosis.version,
                                message=f"Evolution (diagnosis {diagnosis.pk}): {message}"[:500])
        for proposal, reason in conflicts:
            Proposal.objects.filter(pk=proposal.pk).update(status=Proposal.Status.CONFLICT, reason=reason)
        evolution_round = Round.objects.create(diagnosis=diagnosis, harness=diagnosis.harness,
                                               candidate=result.version, approved_by=actor.label)
        audit_record(actor=actor, workspace=diagnosis.workspace, action="evolution.round.approve",
                     target_type="harness_version", target_id=result.version.pk, target_label=str(result.version),
                     after={"diagnosis": diagnosis.pk, "proposals": [p.pk for p in combined],
                            "conflicts": [p.pk for p, _ in conflicts], "author": result.version.author_label})
    return evolution_round


def round_evaluate(*, actor: Actor, evolution_round: Round, set_version: EvalSetVersion | None = None) -> EvalRun:
    """One click: evaluate the candidate on the dev set, then compare and gate (in the worker).

    A run diagnosis is gated on its own run's set. A live diagnosis has no paired cases, so the operator
    names the dev set: the diagnosed version's done run on it (same backend and judge) is the baseline when
    there is one, else the worker evaluates the diagnosed version first."""
    from evaluation.services import run_create

    require(actor, evolution_round.harness.workspace, WRITE)
    if evolution_round.run_id is not None:
        raise EvolutionError("This round's candidate is already being evaluated.")
    diagnosis = evolution_round.diagnosis
    workspace = evolution_round.harness.workspace
    with transaction.atomic():
        if not diagnosis.is_live:
            baseline = diagnosis.run
        else:
            if set_version is None:
                raise EvolutionError("Choose the eval set to gate on: live traffic has no paired cases to re-run.")
            if set_version.eval_set.workspace_id != workspace.pk:
                raise EvolutionError("That eval set belongs to another workspace.")
            if set_version.eval_set.suite == "ifeval":
                raise EvolutionError("IFEval tests the model, not the harness: choose a harness eval set.")
            backend = diagnosis.config.get("backend") or settings.MODEL_BACKEND
            baseline = (EvalRun.objects.filter(workspace=workspace, set_version=set_version,
                                               harness_version=diagnosis.version, backend=backend, judge="reference",
                                               status=EvalRun.Status.DONE).order_by("-created_at", "-id").first()
                        or run_create(actor=actor, workspace=workspace, set_version=set_version,
                                      harness=evolution_round.harness, version=diagnosis.version, backend=backend,
                                      queue="cpu", start=False))
        run = run_create(actor=actor, workspace=workspace, set_version=baseline.set_version,
                         harness=evolution_round.harness, version=evolution_round.candidate, backend=baseline.backend,
                         judge=baseline.judge, concurrency=baseline.concurrency, queue="cpu", start=False)
        Round.objects.filter(pk=evolution_round.pk).update(run=run, baseline=baseline, status=Round.Status.EVALUATING)
        transaction.on_commit(lambda: enqueue("evolution.evaluate_round", args=[evolution_round.pk], queue="cpu"))
    evolution_round.refresh_from_db()
    return run


def round_finish(*, round_id: int) -> str:
    """Inside the worker: run the candidate's eval (and a live diagnosis's baseline eval first), then the
    comparison with the regression gate and the attribution of fixed and regressed cases to the edits."""
    from evaluation.services import comparison_create, run_execute

    evolution_round = Round.objects.select_related("diagnosis", "baseline", "run").get(pk=round_id)
    try:
        baseline = evolution_round.baseline or evolution_round.diagnosis.run
        if baseline is None:
            raise EvolutionError("the round has no baseline run to compare with")
        if baseline.status != EvalRun.Status.DONE:
            status = run_execute(run_id=baseline.pk)
            if status != EvalRun.Status.DONE:
                raise EvolutionError(f"the diagnosed version's eval ended {status}")
        status = run_execute(run_id=evolution_round.run_id)
        if status != EvalRun.Status.DONE:
            raise EvolutionError(f"the candidate's eval ended {status}")
        baseline = EvalRun.objects.get(pk=baseline.pk)
        candidate = EvalRun.objects.get(pk=evolution_round.run_id)
        comparison = comparison_create(actor=Actor.system("evolution"), baseline=baseline, candidate=candidate)
        attribution = attribute(evolution_round.diagnosis, baseline, candidate)
        Round.objects.filter(pk=round_id).update(status=Round.Status.GATED, comparison=comparison,
                                                 attribution=attribution)
    except Exception as exc:
        Round.objects.filter(pk=round_id).update(status=Round.Status.FAILED, error=str(exc)[:2000])
        raise
    return Round.Status.GATED
