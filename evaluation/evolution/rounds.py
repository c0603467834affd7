"""Rounds: the accepted edits of one diagnosis combined into one candidate version, evaluated and gated.

The candidate is committed OFF the head by the AI actor (which may only read and propose): no label points
at it and the head stays where it was until the candidate passed the gate and a person promotes it
(`round_promote`). The person's approval and promotion are separate audit events, so the audit log tells
the AI author and the person apart. Evaluating is a job: the request creates the runs and enqueues by task
name (this module never imports the tasks); the worker runs them, gates on the GATE split only, reports the
diagnosis split beside it, and attributes regressed cases to edits by leave-one-out (`attribution.py`).
"""

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from evaluation.evolution.attribution import attribute
from evaluation.evolution.decisions import MAX_REASON
from evaluation.evolution.errors import EvolutionError
from evaluation.evolution.models import Diagnosis, Proposal, Round
from evaluation.evolution.patches import PatchError, apply_onto
from evaluation.evolution.splits import fitted
from evaluation.models import EvalRun, EvalSetVersion
from harness.services import StoreError, head_promote, label_move, version_commit_candidate
from harness.spec import parse_files
from workspaces.access import WRITE, Actor, require
from workspaces.jobs import enqueue
from workspaces.services import audit_record


def ai_actor(generators, workspace) -> Actor:
    """The author of AI-made proposals and candidates: reads and proposes in `workspace`, nothing else; its
    label names the generators."""
    return Actor.ai(f"ai:evolution ({', '.join(sorted(set(generators)))})", workspace)


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
    diagnosis.harness.refresh_from_db(fields=["head"])
    head = diagnosis.harness.head
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
        try:
            candidate = version_commit_candidate(
                actor=ai_actor((p.generator for p in combined), diagnosis.workspace), harness=diagnosis.harness,
                files=files, base_version=diagnosis.version,
                message=f"Evolution (diagnosis {diagnosis.pk}): {message}"[:500])
        except StoreError as exc:
            raise EvolutionError(str(exc)) from exc
        for proposal, reason in conflicts:
            Proposal.objects.filter(pk=proposal.pk).update(status=Proposal.Status.CONFLICT, reason=reason)
        evolution_round = Round.objects.create(diagnosis=diagnosis, harness=diagnosis.harness,
                                               candidate=candidate, approved_by=actor.label)
        audit_record(actor=actor, workspace=diagnosis.workspace, action="evolution.round.approve",
                     target_type="harness_version", target_id=candidate.pk, target_label=str(candidate),
                     after={"diagnosis": diagnosis.pk, "proposals": [p.pk for p in combined],
                            "conflicts": [p.pk for p, _ in conflicts], "author": candidate.author_label})
    return evolution_round


def _gate_baseline(actor, evolution_round: Round, set_version: EvalSetVersion, backend: str, judge: str):
    """The diagnosed version's done run on `set_version` (same backend and judge), else a new one to run first."""
    from evaluation.services import run_create

    diagnosis = evolution_round.diagnosis
    workspace = evolution_round.harness.workspace
    return (EvalRun.objects.filter(workspace=workspace, set_version=set_version, harness_version=diagnosis.version,
                                   backend=backend, judge=judge, status=EvalRun.Status.DONE)
            .order_by("-created_at", "-id").first()
            or run_create(actor=actor, workspace=workspace, set_version=set_version, harness=evolution_round.harness,
                          version=diagnosis.version, backend=backend, judge=judge, queue="cpu", start=False))


def check_gate_set(workspace, set_version: EvalSetVersion) -> None:
    if set_version.eval_set.workspace_id != workspace.pk:
        raise EvolutionError("That eval set belongs to another workspace.")
    if set_version.eval_set.suite == "ifeval":
        raise EvolutionError("IFEval tests the model, not the harness: choose a harness eval set.")


def round_evaluate(*, actor: Actor, evolution_round: Round, set_version: EvalSetVersion | None = None) -> EvalRun:
    """One click: evaluate the candidate, then compare and gate on the gate split (in the worker).

    Default split (one eval set): the candidate runs the diagnosed run's set; the gate compares the gate
    split's cases only. Two sets: the candidate runs the gate set (against the diagnosed version's run on it)
    and, for the diagnosis figures, the diagnosis set too. A live diagnosis has no paired cases, so the
    operator names the gate set; the diagnosed version is evaluated on it first when it has no run there."""
    from evaluation.services import run_create

    require(actor, evolution_round.harness.workspace, WRITE)
    if evolution_round.run_id is not None:
        raise EvolutionError("This round's candidate is already being evaluated.")
    diagnosis = evolution_round.diagnosis
    workspace = evolution_round.harness.workspace
    kind = diagnosis.split.get("kind")
    diagnosis_run = None
    with transaction.atomic():
        if diagnosis.is_live:
            if set_version is None:
                raise EvolutionError("Choose the eval set to gate on: live traffic has no paired cases to re-run.")
            check_gate_set(workspace, set_version)
            backend = diagnosis.config.get("backend") or settings.MODEL_BACKEND
            baseline = _gate_baseline(actor, evolution_round, set_version, backend, "reference")
            Diagnosis.objects.filter(pk=diagnosis.pk).update(
                split={**diagnosis.split, "kind": "live", "gate_set": str(set_version)})
        elif kind == "sets":
            gate_set = EvalSetVersion.objects.select_related("eval_set").get(pk=diagnosis.split["gate_set_version"])
            run = diagnosis.run
            baseline = _gate_baseline(actor, evolution_round, gate_set, run.backend, run.judge)
            diagnosis_run = run_create(actor=actor, workspace=workspace, set_version=run.set_version,
                                       harness=evolution_round.harness, version=evolution_round.candidate,
                                       backend=run.backend, judge=run.judge, concurrency=run.concurrency,
                                       queue="cpu", start=False)
        else:
            baseline = diagnosis.run
        run = run_create(actor=actor, workspace=workspace, set_version=baseline.set_version,
                         harness=evolution_round.harness, version=evolution_round.candidate, backend=baseline.backend,
                         judge=baseline.judge, concurrency=baseline.concurrency, queue="cpu", start=False)
        Round.objects.filter(pk=evolution_round.pk).update(run=run, baseline=baseline, diagnosis_run=diagnosis_run,
                                                           status=Round.Status.EVALUATING)
        transaction.on_commit(lambda: enqueue("evolution.evaluate_round", args=[evolution_round.pk], queue="cpu"))
    evolution_round.refresh_from_db()
    return run


def _metrics(baseline: EvalRun, candidate: EvalRun, case_ids=None) -> dict:
    """Accuracy and effectiveness of two runs on `case_ids` (all paired cases when None): means, delta and
    the paired bootstrap interval, and the interval of the candidate's own mean."""
    from evaluation.metrics.compare import bootstrap_ci, compare_runs

    def rows(run):
        return {cid: {"accuracy": acc, "effectiveness": eff} for cid, acc, eff in run.results.values_list(
            "case__case_id", "accuracy", "effectiveness") if case_ids is None or cid in case_ids}

    a, b = rows(baseline), rows(candidate)
    out = {}
    def interval(run_rows, name):
        values = [row[name] for row in run_rows.values() if row[name] is not None]
        return [_num(v) for v in bootstrap_ci(values)] if values else [None, None]

    for name, m in compare_runs(a, b, ["accuracy", "effectiveness"]).metrics.items():
        out[name] = {"n": m.n, "baseline": _num(m.baseline_mean), "candidate": _num(m.candidate_mean),
                     "delta": _num(m.delta), "ci_low": _num(m.ci_low), "ci_high": _num(m.ci_high),
                     "candidate_ci": interval(b, name), "baseline_ci": interval(a, name),
                     "regressed": list(m.regressed),
                     "improved": list(m.improved)}
    return out


def _num(value):
    import math

    return None if value is None or (isinstance(value, float) and math.isnan(value)) else round(float(value), 4)


def _execute(run: EvalRun, what: str) -> EvalRun:
    from evaluation.services import run_execute

    if run.status != EvalRun.Status.DONE:
        status = run_execute(run_id=run.pk)
        if status != EvalRun.Status.DONE:
            raise EvolutionError(f"{what} ended {status}")
    return EvalRun.objects.get(pk=run.pk)


def round_finish(*, round_id: int) -> str:
    """Inside the worker: run the evals (the diagnosed version's first when it has none on the gate set), gate
    on the gate split, report both splits (and whether they disagree), and attribute regressed cases to edits
    by leave-one-out."""
    from evaluation.services import cases_evaluate, comparison_create

    evolution_round = Round.objects.select_related("diagnosis__version", "baseline", "run", "diagnosis_run",
                                                   "candidate").get(pk=round_id)
    diagnosis = evolution_round.diagnosis
    try:
        baseline = evolution_round.baseline or diagnosis.run
        if baseline is None:
            raise EvolutionError("the round has no baseline run to compare with")
        baseline = _execute(baseline, "the diagnosed version's eval")
        candidate = _execute(evolution_round.run, "the candidate's eval")
        split = diagnosis.split
        if split.get("kind") == "seeded":
            gate_ids, diagnosis_ids = set(split["gate_case_ids"]), set(split["diagnosis_case_ids"])
            comparison = comparison_create(actor=Actor.system("evolution"), baseline=baseline, candidate=candidate,
                                           gate=settings.EVOLUTION_GATE or None,
                                           case_ids=gate_ids, split=f"gate split (seed {split.get('seed')})")
            figures = {"gate": _metrics(baseline, candidate, gate_ids),
                       "diagnosis": _metrics(baseline, candidate, diagnosis_ids)}
            splits = {"diagnosis": sorted(diagnosis_ids), "gate": sorted(gate_ids)}
        else:
            comparison = comparison_create(actor=Actor.system("evolution"), baseline=baseline, candidate=candidate,
                                           gate=settings.EVOLUTION_GATE or None,
                                           split=f"gate set {baseline.set_version}" if split.get("kind") else "")
            figures = {"gate": _metrics(baseline, candidate)}
            if split.get("kind") == "sets" and evolution_round.diagnosis_run_id:
                figures["diagnosis"] = _metrics(diagnosis.run, _execute(evolution_round.diagnosis_run,
                                                                        "the candidate's eval on the diagnosis set"))
            elif not split.get("kind") and not diagnosis.is_live:
                figures["diagnosis"] = figures["gate"]  # an old diagnosis without a split: one set did both
            splits = None
        figures["fitted"] = "" if not split.get("kind") else fitted(figures.get("diagnosis"), figures["gate"])
        figures["held_out"] = bool(split.get("kind"))

        def rejudge(files, case_ids):
            found = cases_evaluate(run=candidate, files=files, case_ids=case_ids)
            return {cid: acc is not None and eff is not None and acc >= 1 and eff >= 1
                    for cid, (acc, eff) in found.items()}

        attribution = attribute(diagnosis, baseline, candidate, candidate_files=evolution_round.candidate.files,
                                rejudge=rejudge, splits=splits)
        Round.objects.filter(pk=round_id).update(status=Round.Status.GATED, comparison=comparison,
                                                 attribution=attribution, figures=figures)
    except Exception as exc:
        Round.objects.filter(pk=round_id).update(status=Round.Status.FAILED, error=str(exc)[:2000])
        raise
    return Round.Status.GATED


def round_promote(*, actor: Actor, evolution_round: Round) -> Round:
    """A person makes a gated candidate that passed the gate the harness's head (audited). The AI actor
    cannot: it lacks the write permission."""
    require(actor, evolution_round.harness.workspace, WRITE)
    if evolution_round.promoted_at is not None:
        raise EvolutionError(f"v{evolution_round.candidate.number} was already promoted by "
                             f"{evolution_round.promoted_by}.")
    comparison = evolution_round.comparison
    if evolution_round.status != Round.Status.GATED or comparison is None:
        raise EvolutionError("Evaluate and gate the candidate first: only a candidate that passed the gate is "
                             "promoted.")
    if not comparison.passed:
        raise EvolutionError(f"The gate did not pass ({comparison.verdict or 'fail'}: "
                             f"{'; '.join(comparison.reasons)[:300]}): the candidate stays off the head.")
    try:
        with transaction.atomic():
            head_promote(actor=actor, harness=evolution_round.harness, version=evolution_round.candidate,
                         reason=f"Evolution round {evolution_round.pk} passed the gate (comparison #{comparison.pk})")
            Round.objects.filter(pk=evolution_round.pk).update(promoted_by=actor.label, promoted_at=timezone.now())
            audit_record(actor=actor, workspace=evolution_round.harness.workspace, action="evolution.round.promote",
                         target_type="harness_version", target_id=evolution_round.candidate_id,
                         target_label=str(evolution_round.candidate), after={"round": evolution_round.pk,
                                                                              "comparison": comparison.pk})
    except StoreError as exc:
        raise EvolutionError(str(exc)) from exc
    evolution_round.refresh_from_db()
    return evolution_round


def keep_version(*, actor: Actor, harness, version, label: str, round_pk: int | None) -> None:
    """Point `label` at the version stop advice says to keep: an ordinary, audited label move (a protected
    label needs the approve permission and passes the regression gate, as every move does)."""
    what = f"round {round_pk}" if round_pk else "the version before the rounds"
    try:
        label_move(actor=actor, harness=harness, name=label, version=version,
                   reason=f"Evolution: keep v{version.number} ({what}, best on the gate split)")
    except StoreError as exc:
        raise EvolutionError(str(exc)) from exc
