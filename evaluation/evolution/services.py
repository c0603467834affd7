"""Writes for harness evolution: request and run a diagnosis, decide on proposals, rounds, reverts.

The analysis itself is the pure core (diagnosis.py); this module turns rows (an eval run's results, or a
window of live traces with live judge scores) into `CaseRecord`s and the version's `HarnessSpec`, and
stores what comes back. Accepted edits become one candidate version whose
author is the AI (a system actor `ai:evolution (…generators)`) and whose approval by the person is a
separate audit event, so the audit log tells the two apart.
"""

import asyncio
import logging
from collections import Counter
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from console.access import WRITE, Actor, require
from console.jobs import enqueue
from console.services import audit_record
from evaluation.evolution.models import Cluster, Diagnosis, Proposal, Round
from evaluation.evolution.patches import PatchError, apply_diff
from evaluation.evolution.signatures import CaseRecord
from evaluation.models import EvalResult, EvalRun, EvalSetVersion
from harness import selectors as harness_selectors
from harness.models import Draft, Harness, HarnessVersion
from harness.services import version_commit
from harness.spec import SpecInvalid, parse_files

log = logging.getLogger(__name__)
MAX_REASON = 1000
MODEL_PROPOSALS_PER_DIAGNOSIS = 3  # the model proposer reads the top actionable clusters only
MAX_LIVE_WINDOW = timedelta(days=31)
MAX_LIVE_TRACES = 2000  # the most recent judged traces of a window; a bigger window is read in part (said so)


class EvolutionError(ValueError):
    """A request evolution refuses, with a message for the user."""


# Diagnosis ------------------------------------------------------------------------------------------

def diagnosis_request(*, actor: Actor, run: EvalRun) -> Diagnosis:
    """Queue a diagnosis of a finished run (the job starts after the transaction commits)."""
    from evaluation.evolution.tasks import diagnose

    require(actor, run.workspace, WRITE)
    if run.status != EvalRun.Status.DONE:
        raise EvolutionError("Only a finished (done) run can be diagnosed.")
    if run.set_version.eval_set.suite == "ifeval":
        raise EvolutionError("IFEval runs test the model, not the harness: there is nothing to diagnose.")
    with transaction.atomic():
        diagnosis = Diagnosis.objects.create(
            workspace=run.workspace, harness=run.harness, version=run.harness_version, run=run,
            created_by=actor.label, config={"proposer": settings.EVOLUTION_PROPOSER or None})
        audit_record(actor=actor, workspace=run.workspace, action="evolution.diagnose", target_type="diagnosis",
                     target_id=diagnosis.pk, target_label=str(diagnosis), after={"run": run.pk})
        transaction.on_commit(lambda: enqueue(diagnose, args=[diagnosis.pk], queue="cpu"))
    return diagnosis


def _aware(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment  # naive times are read as UTC


def live_traces(version: HarnessVersion, start: datetime, end: datetime):
    """The live traffic of one version in [start, end): API replies only (not the playground or evals)."""
    from serving.models import Trace

    return Trace.objects.filter(workspace_id=version.harness.workspace_id, harness_version=version,
                                source=Trace.Source.API, created_at__gte=start, created_at__lt=end)


def judged(traces):
    """Traces the live judge scored (an abstention keeps null scores: the judge's "don't know")."""
    return traces.filter(judge_accuracy__isnull=False, judge_effectiveness__isnull=False)


def diagnosis_request_live(*, actor: Actor, harness: Harness, version: HarnessVersion, start: datetime,
                           end: datetime) -> Diagnosis:
    """Queue a diagnosis of one version's live traces in [start, end) that carry live judge scores.

    Live judging samples replies of running experiments (HARNESSOPS_LIVE_JUDGE_RATE); a window with no
    traces, or none judged, is refused with what was found, and nothing is stored."""
    from evaluation.evolution.tasks import diagnose

    require(actor, harness.workspace, WRITE)
    if version.harness_id != harness.pk:
        raise EvolutionError(f"v{version.number} is not a version of {harness.name}.")
    start, end = _aware(start), _aware(end)
    if start >= end:
        raise EvolutionError("The window's start must be before its end.")
    if end - start > MAX_LIVE_WINDOW:
        raise EvolutionError(f"The window is longer than {MAX_LIVE_WINDOW.days} days: choose a shorter one.")
    span = f"{start:%Y-%m-%d %H:%M} and {end:%Y-%m-%d %H:%M} UTC"
    traces = live_traces(version, start, end)
    total = traces.count()
    if total == 0:
        raise EvolutionError(f"No live traces of {harness.name}@v{version.number} between {span}: "
                             "choose a window in which this version answered viewers.")
    scored = judged(traces).count()
    if scored == 0:
        abstained = traces.exclude(judge_version="").count()
        raise EvolutionError(
            f"None of the {total} live traces of {harness.name}@v{version.number} between {span} has a live "
            f"judge score{f' ({abstained} judged, the judge abstained)' if abstained else ''}: the live judge "
            f"scores a sample ({settings.LIVE_JUDGE_RATE:.0%}, HARNESSOPS_LIVE_JUDGE_RATE) of the replies "
            "served inside an experiment. Choose a longer window, or diagnose an eval run.")
    backends = Counter(judged(traces).values_list("backend", flat=True)[:MAX_LIVE_TRACES])
    with transaction.atomic():
        diagnosis = Diagnosis.objects.create(
            workspace=harness.workspace, harness=harness, version=version, source=Diagnosis.Source.LIVE,
            window_start=start, window_end=end, created_by=actor.label,
            config={"proposer": settings.EVOLUTION_PROPOSER or None, "backend": backends.most_common(1)[0][0]})
        audit_record(actor=actor, workspace=harness.workspace, action="evolution.diagnose", target_type="diagnosis",
                     target_id=diagnosis.pk, target_label=str(diagnosis),
                     after={"live": [start.isoformat(), end.isoformat()], "traces": total, "judged": scored})
        transaction.on_commit(lambda: enqueue(diagnose, args=[diagnosis.pk], queue="cpu"))
    return diagnosis


def live_records(diagnosis: Diagnosis) -> tuple[list[CaseRecord], dict]:
    """The window's judged live traces as the pure core reads them (live traffic has no expected answer:
    no expected skills), and counts of what was left out."""
    traces = live_traces(diagnosis.version, diagnosis.window_start, diagnosis.window_end)
    rows = list(judged(traces).order_by("-created_at", "-id")[:MAX_LIVE_TRACES])
    records = [CaseRecord(case_id=t.trace_id, category="live", accuracy=t.judge_accuracy,
                          effectiveness=t.judge_effectiveness, reasons=tuple(str(r) for r in t.judge_reasons or ()),
                          reply=t.reply, message=t.message, trace=t.data or {})
               for t in reversed(rows)]
    counts = {"traces": traces.count(), "judged": len(records),
              "abstained": traces.filter(judge_accuracy__isnull=True).exclude(judge_version="").count(),
              "unjudged": traces.filter(judge_version="").count(),
              "read_in_part": judged(traces).count() > MAX_LIVE_TRACES}
    return records, counts


def case_records(run: EvalRun) -> list[CaseRecord]:
    """The run's results as the pure core reads them."""
    records = []
    # An abstention is the judge's "don't know", not a harness failure: it is left out (and counted apart).
    for result in EvalResult.objects.filter(run=run, accuracy__isnull=False, effectiveness__isnull=False) \
            .select_related("case").order_by("id"):
        data = result.case.data or {}
        dialogue = tuple(str(turn.get("text", "")) for turn in data.get("dialogue") or () if isinstance(turn, dict))
        records.append(CaseRecord(
            case_id=result.case.case_id, category=result.category, accuracy=result.accuracy,
            effectiveness=result.effectiveness, reasons=tuple(result.reasons or ()), reply=result.reply,
            message=str(data.get("message", "")), expected_skills=tuple((data.get("expected") or {}).get("skills") or ()),
            trace=result.trace or {}, texts=dialogue))
    return records


def _history(diagnosis: Diagnosis) -> tuple[list[dict], list[float], set[str], list[str]]:
    """What earlier diagnoses of the harness teach this one: cluster identities, round gains, rejections."""
    earlier = Cluster.objects.filter(diagnosis__harness=diagnosis.harness).exclude(diagnosis=diagnosis) \
        .order_by("-diagnosis__created_at", "-id")
    previous, seen = [], set()
    for cluster in earlier:
        if cluster.cluster_id not in seen:
            seen.add(cluster.cluster_id)
            previous.append({"cluster_id": cluster.cluster_id, "core": cluster.core,
                             "terms": cluster.data.get("terms", [])})
    gains = [r.comparison.metrics.get("accuracy", {}).get("delta") or 0.0
             for r in Round.objects.filter(harness=diagnosis.harness, comparison__isnull=False)
             .select_related("comparison").order_by("created_at", "id")]
    rejected = Proposal.objects.filter(diagnosis__harness=diagnosis.harness, status=Proposal.Status.REJECTED)
    return previous, gains, set(rejected.values_list("fingerprint", flat=True)), \
        list(rejected.values_list("reason", flat=True))


MIN_CALIBRATION_LABELS = 5  # fewer human labels than this say nothing about a category


def category_calibration(run: EvalRun | None = None, *, workspace=None, judge_versions=None,
                         pooled_as: str = "") -> dict[str, float]:
    """Per category: Cohen's kappa of this run's judge against human labels (majority per case) on accuracy,
    over every annotated result judged by the same judge in the workspace; categories with too few labels
    or an undefined kappa are left out. Live traffic has no category: with `pooled_as` every category's
    labels are pooled under that one name (the judge's agreement overall)."""
    import math
    from collections import defaultdict

    from evaluation.metrics.agreement import cohen_kappa

    if run is not None:
        workspace = run.workspace
        judge_versions = set(run.results.values_list("judge_version", flat=True).distinct())
    pairs: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    annotated = (EvalResult.objects.filter(run__workspace=workspace, judge_version__in=set(judge_versions or ()),
                                           annotations__isnull=False, accuracy__isnull=False)
                 .distinct().prefetch_related("annotations"))
    for result in annotated:
        values = [float(a.accuracy) for a in result.annotations.all()]
        human = max(sorted(set(values)), key=values.count)
        judge, people = pairs[pooled_as or result.category]
        judge.append(float(result.accuracy))
        people.append(human)
    out = {}
    for category, (judge, people) in pairs.items():
        if len(judge) >= MIN_CALIBRATION_LABELS:
            kappa = cohen_kappa(judge, people)
            if not math.isnan(kappa):
                out[category] = kappa
    return out


def diagnosis_execute(*, diagnosis_id: int) -> str:
    """Run one diagnosis (inside the worker): clusters, advice, rule proposals and, when configured, the
    model proposer's; everything stored in one transaction. A failure is recorded, never half-stored."""
    from evaluation.evolution.diagnosis import DiagnosisConfig, case_texts, diagnose
    from evaluation.evolution.validation import validate_proposal

    diagnosis = Diagnosis.objects.select_related("version__harness", "run", "harness").get(pk=diagnosis_id)
    if diagnosis.status == Diagnosis.Status.DONE:
        return diagnosis.status
    Diagnosis.objects.filter(pk=diagnosis_id).update(status=Diagnosis.Status.RUNNING)
    try:
        if diagnosis.is_live:
            records, live = live_records(diagnosis)
            if not records:
                raise EvolutionError("The window no longer holds any live trace with a judge score.")
            judges = set(judged(live_traces(diagnosis.version, diagnosis.window_start, diagnosis.window_end))
                         .values_list("judge_version", flat=True).distinct())
            calibration = category_calibration(workspace=diagnosis.workspace, judge_versions=judges, pooled_as="live")
            abstained = live["abstained"]
        else:
            records, live = case_records(diagnosis.run), None
            calibration = category_calibration(diagnosis.run)
            abstained = EvalResult.objects.filter(run=diagnosis.run, accuracy__isnull=True).count()
        spec = harness_selectors.version_spec(diagnosis.version)
        previous, gains, rejected, reasons = _history(diagnosis)
        config = DiagnosisConfig()
        result = diagnose(records, spec, previous=previous, calibration=calibration, gains=gains,
                          rejected=rejected, config=config)
        proposals, proposer_runs = list(result.proposals), None
        if diagnosis.config.get("proposer"):
            made, proposer_runs = _model_proposals(diagnosis.config["proposer"], result.clustering.clusters, records,
                                                   spec, reasons, rejected, case_texts(records), validate_proposal,
                                                   config, proposer_spec=_proposer_spec(diagnosis.workspace))
            proposals += made
        with transaction.atomic():
            rows = {}
            for rank, cluster in enumerate(result.clustering.clusters, 1):
                rows[cluster.cluster_id] = Cluster.objects.create(
                    diagnosis=diagnosis, cluster_id=cluster.cluster_id, rank=rank, title=cluster.title[:300],
                    core=cluster.core[:500], size=cluster.size, share=cluster.share,
                    accuracy_lost=cluster.accuracy_lost, effectiveness_lost=cluster.effectiveness_lost,
                    judge_suspect=cluster.judge_suspect, data=cluster.to_dict())
            Proposal.objects.bulk_create([Proposal(
                diagnosis=diagnosis, cluster=rows.get(p.cluster_id), generator=p.generator[:120],
                hypothesis=p.hypothesis, rationale=p.rationale, diff=p.diff, target=p.target[:300],
                base_hash=p.base_hash, evidence=list(p.evidence), fingerprint=p.fingerprint, errors=list(p.errors),
                valid=p.valid) for p in proposals])
            clustering = result.clustering
            Diagnosis.objects.filter(pk=diagnosis_id).update(
                status=Diagnosis.Status.DONE, finished_at=timezone.now(), advice=result.advice.to_dict(),
                config={**diagnosis.config, **config.to_dict(), "rejections_read": len(reasons),
                        "calibration": calibration},
                summary={"total": clustering.total, "failures": clustering.failures, "noise": list(clustering.noise),
                         "groups": [{"key": key, "case_ids": list(ids)} for key, ids in clustering.groups],
                         "proposals": len(proposals), "valid": sum(p.valid for p in proposals),
                         "abstained": abstained, **({"live": live} if live else {}),
                         **({"proposer_runs": proposer_runs} if proposer_runs is not None else {})})
    except Exception as exc:
        log.exception("diagnosis %s failed", diagnosis_id)
        Diagnosis.objects.filter(pk=diagnosis_id).update(status=Diagnosis.Status.FAILED, error=str(exc)[:2000],
                                                         finished_at=timezone.now())
        raise
    return Diagnosis.Status.DONE


def _proposer_spec(workspace):
    """The proposer a diagnosis of this workspace runs: its harness named PROPOSER_NAME (the production
    label's version, else the head), which alone may bind the proposer's run-supplied read tools; None
    (the shipped proposer) when the workspace has none."""
    from evaluation.evolution.proposer import PROPOSER_NAME

    stored = Harness.objects.filter(workspace=workspace, name=PROPOSER_NAME, archived_at__isnull=True).first()
    if stored is None or stored.head_id is None:
        return None
    label = stored.labels.select_related("version").filter(name="production").first()
    return harness_selectors.version_spec(label.version if label else stored.head)


def _model_proposals(backend_name, clusters, records, spec, reasons, rejected, texts, validate, config, *,
                     proposer_spec=None):
    """The proposer harness's validated edits for the top actionable clusters, and what each run did (a model
    that never answers in the diff form proposes nothing)."""
    from evaluation.evolution.proposer import HarnessProposer
    from serving.model_config import backend_for

    proposer = HarnessProposer(lambda: backend_for(backend_name), spec=proposer_spec, rejections=reasons)
    by_id = {r.case_id: r for r in records}
    targets = [c for c in clusters if not c.judge_suspect][:MODEL_PROPOSALS_PER_DIAGNOSIS]

    async def run_all():
        return [await proposer(cluster, by_id, spec) for cluster in targets]

    made = [p for p in asyncio.run(run_all()) if p is not None]
    return [validate(p, spec, case_texts=texts, rejected=rejected, config=config.validation) for p in made], \
        proposer.runs


# Decisions ------------------------------------------------------------------------------------------

def _decide(actor: Actor, proposal: Proposal, status: str, reason: str = "") -> Proposal:
    require(actor, proposal.diagnosis.workspace, WRITE)
    if not proposal.valid:
        raise EvolutionError("An invalid proposal is not a candidate: " + "; ".join(proposal.errors)[:300])
    if proposal.status != Proposal.Status.PENDING:
        raise EvolutionError(f"This proposal was already {proposal.status}.")
    if hasattr(proposal.diagnosis, "round"):
        raise EvolutionError("This diagnosis already made its candidate version; diagnose again to go on.")
    with transaction.atomic():
        proposal.status, proposal.reason = status, reason
        proposal.decided_by, proposal.decided_at = actor.label, timezone.now()
        proposal.save(update_fields=["status", "reason", "decided_by", "decided_at"])
        audit_record(actor=actor, workspace=proposal.diagnosis.workspace, action=f"evolution.proposal.{status}",
                     target_type="proposal", target_id=proposal.pk, target_label=proposal.hypothesis[:300],
                     after={"generator": proposal.generator, "fingerprint": proposal.fingerprint, "reason": reason})
    return proposal


def proposal_accept(*, actor: Actor, proposal: Proposal) -> Proposal:
    return _decide(actor, proposal, Proposal.Status.ACCEPTED)


def proposal_reject(*, actor: Actor, proposal: Proposal, reason: str) -> Proposal:
    """Reject with a reason: later diagnoses read it, and the same edit is not proposed again."""
    reason = (reason or "").strip()
    if not reason:
        raise EvolutionError("Say why you reject it: the next diagnosis reads the reason.")
    if len(reason) > MAX_REASON:
        raise EvolutionError(f"The reason is longer than {MAX_REASON} characters.")
    return _decide(actor, proposal, Proposal.Status.REJECTED, reason)


def proposal_edit(*, actor: Actor, proposal: Proposal, user) -> Draft:
    """Put the diagnosed version with this edit applied into the user's draft, for the file editor."""
    if user is None or not getattr(user, "pk", None):
        raise EvolutionError("Editing needs a signed-in user (drafts belong to people).")
    diagnosis = proposal.diagnosis
    files = _applied(diagnosis.version.files, proposal)
    existing = Draft.objects.filter(harness=diagnosis.harness, author=user).first()
    if existing is not None and existing.files != existing.base_version.files:
        raise EvolutionError("You have unsaved changes in your draft of this harness: commit or discard them first.")
    _decide(actor, proposal, Proposal.Status.EDITED)
    with transaction.atomic():
        Draft.objects.filter(harness=diagnosis.harness, author=user).delete()
        return Draft.objects.create(harness=diagnosis.harness, author=user, base_version=diagnosis.version,
                                    files=files)


def _applied(files: dict, proposal: Proposal) -> dict:
    try:
        edited = apply_diff(files, proposal.diff)
        parse_files(edited)
    except (PatchError, SpecInvalid) as exc:
        raise EvolutionError(f"The edit no longer applies: {exc}") from exc
    return edited


# Rounds ---------------------------------------------------------------------------------------------

def ai_actor(generators) -> Actor:
    """The author of AI-made versions: a system actor whose label names the generators."""
    return Actor.system(f"ai:evolution ({', '.join(sorted(set(generators)))})"[:200])


def round_create(*, actor: Actor, diagnosis: Diagnosis) -> Round:
    """Combine the accepted edits into one candidate version (authored by the AI, approved by `actor`).

    Each edit applies to the diagnosed version and is merged three-way into the edits before it, so edits
    of different lines of one file combine; one that changes the same lines as an earlier accepted edit
    (a real conflict) is marked `conflict` with the reason and left out.
    """
    from evaluation.evolution.patches import apply_onto

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
    from evaluation.evolution.tasks import evaluate_round
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
        transaction.on_commit(lambda: enqueue(evaluate_round, args=[evolution_round.pk], queue="cpu"))
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


def attribute(diagnosis: Diagnosis, baseline: EvalRun, candidate: EvalRun) -> dict:
    """Which accepted edit fixed which of its cluster's cases, and the cases that regressed.

    A fixed case counts for the edit whose cluster held it; a regressed case (passing before, failing now)
    counts for the edits whose target file is the skill the case expects, else it stays unattributed.
    A live diagnosis's clusters hold live traces, which the dev-set eval does not re-run: its edits get
    no fix rate (None), only the regressed cases.
    """
    def outcomes(run):  # abstentions say neither "fixed" nor "broke"
        return {cid: (acc, eff) for cid, acc, eff in run.results.filter(accuracy__isnull=False, effectiveness__isnull=False)
                .values_list("case__case_id", "accuracy", "effectiveness")}

    before, after = outcomes(baseline), outcomes(candidate)
    passed = {cid for cid, (acc, eff) in after.items() if acc >= 1 and eff >= 1}
    regressed = sorted(cid for cid, (acc, eff) in before.items() if acc >= 1 and eff >= 1 and cid not in passed
                       and cid in after)
    skills = {r.case.case_id: set((r.case.data.get("expected") or {}).get("skills") or ())
              for r in baseline.results.select_related("case").filter(case__case_id__in=regressed)}
    ledger, claimed = {}, set()
    for proposal in diagnosis.proposals.filter(status=Proposal.Status.ACCEPTED).select_related("cluster"):
        cases = list(proposal.cluster.data.get("case_ids", [])) if proposal.cluster and not diagnosis.is_live else []
        fixed = sorted(c for c in cases if c in passed)
        skill = proposal.target.split("/")[1] if proposal.target.startswith("skills/") else None
        broke = sorted(c for c in regressed if skill and skill in skills.get(c, set()))
        claimed.update(broke)
        ledger[str(proposal.pk)] = {"fixed": fixed, "still_failing": sorted(set(cases) - set(fixed)),
                                    "regressed": broke, "fix_rate": round(len(fixed) / len(cases), 4) if cases else None}
    return {"proposals": ledger, "regressed": regressed, "unattributed": sorted(set(regressed) - claimed)}


def proposal_revert(*, actor: Actor, proposal: Proposal) -> HarnessVersion:
    """Undo one accepted edit on top of the harness's head, as a new version by `actor`."""
    from evaluation.evolution.patches import reverse_diff

    require(actor, proposal.diagnosis.workspace, WRITE)
    if proposal.status != Proposal.Status.ACCEPTED or not hasattr(proposal.diagnosis, "round"):
        raise EvolutionError("Only an edit that went into a candidate version can be reverted.")
    harness = proposal.diagnosis.harness
    head = harness_selectors.harness_get(proposal.diagnosis.workspace, harness.name).head
    try:
        files = apply_diff(head.files, reverse_diff(proposal.diff))
    except PatchError as exc:
        raise EvolutionError(f"The edit cannot be reverted on v{head.number}: {exc}") from exc
    with transaction.atomic():
        result = version_commit(actor=actor, harness=harness, files=files, base_version=head,
                                message=f"Revert evolution edit #{proposal.pk} ({proposal.generator}): "
                                        f"{proposal.hypothesis}"[:500])
        audit_record(actor=actor, workspace=harness.workspace, action="evolution.proposal.revert",
                     target_type="proposal", target_id=proposal.pk, target_label=proposal.hypothesis[:300],
                     after={"version": result.version.number})
    return result.version
