"""Diagnoses as jobs: a request checks what can be diagnosed and queues it; the worker runs the pure core
(`diagnosis.py`) over the rows `records.py` reads and stores the result whole.

The request and the job are split by the queue (a diagnosis clusters and may call a model, too slow for a
request), so a refusal the user can fix is raised at request time, and the job records any later failure on
the row instead of storing half a result. The job is enqueued by its task name, so this module never
imports the tasks that call it.
"""

import asyncio
import logging
from collections import Counter
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from evaluation.evolution.calibration import category_calibration
from evaluation.evolution.errors import EvolutionError
from evaluation.evolution.models import Cluster, Diagnosis, Proposal, Round
from evaluation.evolution.records import MAX_LIVE_TRACES, case_records, judged, live_records, live_traces
from evaluation.evolution.splits import DEFAULT_GATE_SHARE, DEFAULT_SEED, stratified_split
from evaluation.models import EvalResult, EvalRun, EvalSetVersion
from harness import selectors as harness_selectors
from harness.models import Harness, HarnessVersion
from workspaces import webhooks
from workspaces.access import PROPOSE, WRITE, Actor, require
from workspaces.jobs import enqueue, job_is_running
from workspaces.services import audit_record

log = logging.getLogger(__name__)
DIAGNOSE = "evolution.diagnose"  # the job's task name
# A diagnosis whose worker stopped (killed, out of memory) is run again from the start (it stores its result
# in one transaction, so an interrupted attempt left nothing); one that stopped its worker this often fails.
MAX_ATTEMPTS = 3
MODEL_PROPOSALS_PER_DIAGNOSIS = 3  # the model proposer reads the top actionable clusters only
PROPOSER_VARIANTS = 2  # answers asked of the proposer per cluster (the same answer twice counts once)
MAX_LIVE_WINDOW = timedelta(days=31)


def run_split(run: EvalRun, *, seed: int = DEFAULT_SEED, gate_share: float = DEFAULT_GATE_SHARE,
              gate_set: EvalSetVersion | None = None) -> dict:
    """The diagnosis and gate splits of a run's diagnosis, as stored on it: by default a seeded split of the
    run's set stratified by category; or the run's whole set to diagnose and another set to gate on."""
    if gate_set is not None:
        from evaluation.evolution.rounds import check_gate_set

        check_gate_set(run.workspace, gate_set)
        if gate_set.pk == run.set_version_id:
            raise EvolutionError("The gate set must differ from the diagnosed run's set: pick another eval set, "
                                 "or leave the gate set empty for a seeded split of this one.")
        return {"kind": "sets", "diagnosis_set": str(run.set_version), "gate_set": str(gate_set),
                "gate_set_version": gate_set.pk}
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= 2**31 - 1:
        raise EvolutionError("The split seed must be a whole number from 0 to 2147483647.")
    if not 0.1 <= gate_share <= 0.9:
        raise EvolutionError("The gate share must be between 0.1 and 0.9.")
    cases = run.set_version.cases.values_list("case_id", "category")
    split = stratified_split(cases, seed=seed, gate_share=gate_share)
    if not split.diagnosis or not split.gate:  # said on the diagnosis and the round, never silently
        return {"kind": "", "reason": f"{run.set_version} has too few cases to split into a diagnosis and a gate "
                                      "part", "set": str(run.set_version)}
    return {"kind": "seeded", "seed": seed, "gate_share": gate_share, "set": str(run.set_version),
            **split.to_dict()}


def diagnosis_request(*, actor: Actor, run: EvalRun, seed: int = DEFAULT_SEED,
                      gate_share: float = DEFAULT_GATE_SHARE, gate_set: EvalSetVersion | None = None) -> Diagnosis:
    """Queue a diagnosis of a finished run (the job starts after the transaction commits). It reads only
    the diagnosis split; the round's gate reads only the gate split (`run_split`, recorded on the diagnosis)."""
    require(actor, run.workspace, WRITE)
    if run.status != EvalRun.Status.DONE:
        raise EvolutionError("Only a finished (done) run can be diagnosed.")
    if run.set_version.eval_set.suite == "ifeval":
        raise EvolutionError("IFEval runs test the model, not the harness: there is nothing to diagnose.")
    split = run_split(run, seed=seed, gate_share=gate_share, gate_set=gate_set)
    with transaction.atomic():
        diagnosis = Diagnosis.objects.create(
            workspace=run.workspace, harness=run.harness, version=run.harness_version, run=run, split=split,
            created_by=actor.label, config={"proposer": settings.EVOLUTION_PROPOSER or None})
        audit_record(actor=actor, workspace=run.workspace, action="evolution.diagnose", target_type="diagnosis",
                     target_id=diagnosis.pk, target_label=str(diagnosis),
                     after={"run": run.pk, "split": {k: v for k, v in split.items() if not k.endswith("_ids")}})
        transaction.on_commit(lambda: enqueue(DIAGNOSE, args=[diagnosis.pk], queue="cpu"))
    return diagnosis


def _aware(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment  # naive times are read as UTC


def diagnosis_request_live(*, actor: Actor, harness: Harness, version: HarnessVersion, start: datetime,
                           end: datetime) -> Diagnosis:
    """Queue a diagnosis of one version's live traces in [start, end) that carry live judge scores.

    Live judging samples replies of running experiments (HARNESSOPS_LIVE_JUDGE_RATE); a window with no
    traces, or none judged, is refused with what was found, and nothing is stored."""
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
        transaction.on_commit(lambda: enqueue(DIAGNOSE, args=[diagnosis.pk], queue="cpu"))
    return diagnosis


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
    # Rejections by the signature of the cluster they were for: they steer proposals for similar clusters only.
    by_core: dict[str, list[str]] = {}
    rules: dict[str, dict[str, str]] = {}
    for core, generator, reason in rejected.filter(cluster__isnull=False).order_by("id").values_list(
            "cluster__core", "generator", "reason"):
        by_core.setdefault(core, []).append(reason)
        if generator.startswith("rules:"):
            rules.setdefault(core, {})[generator] = reason
    return previous, gains, set(rejected.values_list("fingerprint", flat=True)), \
        list(rejected.values_list("reason", flat=True)), {"by_core": by_core, "rules": rules}


def diagnosis_worker_lost(diagnosis: Diagnosis) -> bool:
    """Whether a running diagnosis lost its worker: no process holds its job (the holder's lock ends with its
    database session, so with a killed process too)."""
    # Embedded mode (SQLite) runs jobs in threads of the server, without the lock: it cannot tell, so says nothing.
    return diagnosis.status == Diagnosis.Status.RUNNING and connection.vendor == "postgresql" \
        and not job_is_running(DIAGNOSE, diagnosis.pk)


def diagnosis_execute(*, diagnosis_id: int) -> str:
    """Run one diagnosis (inside the worker): clusters, advice, rule proposals and, when configured, the
    model proposer's; everything stored in one transaction. A failure is recorded, never half-stored."""
    from evaluation.evolution.diagnosis import DiagnosisConfig, case_texts, diagnose
    from evaluation.evolution.validation import validate_proposal

    diagnosis = Diagnosis.objects.select_related("version__harness", "run", "harness").get(pk=diagnosis_id)
    if diagnosis.status == Diagnosis.Status.DONE:
        return diagnosis.status
    # Until the diagnosis is done its summary holds only the attempts: a worker starting one that is already
    # running (the caller holds its single-flight lock, so no other process does) resumes a stopped worker's.
    attempts = int(diagnosis.summary.get("attempts", 0)) + 1
    if attempts > MAX_ATTEMPTS:
        error = (f"Gave up after {MAX_ATTEMPTS} attempts: the worker running this diagnosis stopped each time "
                 "(killed, or out of memory).")
        Diagnosis.objects.filter(pk=diagnosis_id).update(status=Diagnosis.Status.FAILED, error=error,
                                                         finished_at=timezone.now())
        return Diagnosis.Status.FAILED
    if attempts > 1:
        log.warning("diagnosis %s: its worker stopped; attempt %s starts it again", diagnosis_id, attempts)
    Diagnosis.objects.filter(pk=diagnosis_id).update(status=Diagnosis.Status.RUNNING, summary={"attempts": attempts})
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
            # Only the diagnosis split: the gate split's cases judge the edits, so nothing may be fitted to them.
            only = set(diagnosis.split["diagnosis_case_ids"]) if diagnosis.split.get("kind") == "seeded" else None
            records, live = case_records(diagnosis.run, case_ids=only), None
            calibration = category_calibration(diagnosis.run)
            abstentions = EvalResult.objects.filter(run=diagnosis.run, accuracy__isnull=True)
            abstained = (abstentions if only is None else abstentions.filter(case__case_id__in=only)).count()
        spec = harness_selectors.version_spec(diagnosis.version)
        previous, gains, rejected, reasons, steer = _history(diagnosis)
        config = DiagnosisConfig()
        guard = _gate_texts(diagnosis)
        result = diagnose(records, spec, previous=previous, calibration=calibration, gains=gains,
                          rejected=rejected, config=config, guard_texts=guard, rejected_rules=steer["rules"])
        proposals, proposer_runs = list(result.proposals), None
        if diagnosis.config.get("proposer"):
            made, proposer_runs = _model_proposals(diagnosis.config["proposer"], result.clustering.clusters, records,
                                                   spec, steer["by_core"], rejected, [*case_texts(records), *guard], validate_proposal,
                                                   config, proposer_spec=_proposer_spec(diagnosis.workspace))
            proposals += made
        trials = None
        if not diagnosis.is_live and any(p.valid for p in proposals):
            proposals, trials = _try_and_keep(diagnosis, proposals, result.clustering.clusters)
        ai = Actor.ai("ai:evolution (proposals)", diagnosis.workspace)
        advice = {**result.advice.to_dict(), **keep_advice(diagnosis.harness, result.advice.stop)}
        with transaction.atomic():
            require(ai, diagnosis.workspace, PROPOSE)  # the AI writes the proposals; it may do no more
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
                status=Diagnosis.Status.DONE, finished_at=timezone.now(), advice=advice,
                config={**diagnosis.config, **config.to_dict(), "rejections_read": len(reasons),
                        "calibration": calibration},
                summary={"total": clustering.total, "failures": clustering.failures, "noise": list(clustering.noise),
                         "groups": [{"key": key, "case_ids": list(ids)} for key, ids in clustering.groups],
                         "proposals": len(proposals), "valid": sum(p.valid for p in proposals), "attempts": attempts,
                         "abstained": abstained, **({"live": live} if live else {}),
                         **({"proposer_runs": proposer_runs} if proposer_runs is not None else {}),
                         **({"trials": trials} if trials is not None else {}),
                         "steered": {core: reasons for core, reasons in steer["by_core"].items()
                                     if core in {c.core for c in clustering.clusters}}})
            audit_record(actor=ai, workspace=diagnosis.workspace, action="evolution.propose",
                         target_type="diagnosis", target_id=diagnosis.pk, target_label=str(diagnosis),
                         after={"proposals": len(proposals), "valid": sum(p.valid for p in proposals),
                                "generators": sorted({p.generator for p in proposals})})
    except Exception as exc:
        log.exception("diagnosis %s failed", diagnosis_id)
        Diagnosis.objects.filter(pk=diagnosis_id).update(status=Diagnosis.Status.FAILED, error=str(exc)[:2000],
                                                         finished_at=timezone.now())
        raise
    webhooks.emit(diagnosis.workspace_id, "diagnosis.ready", {
        "diagnosis": diagnosis.pk, "harness": diagnosis.harness.name, "run": diagnosis.run_id,
        "proposals": len(proposals), "valid": sum(p.valid for p in proposals)})
    return Diagnosis.Status.DONE


def _try_and_keep(diagnosis: Diagnosis, proposals, clusters):
    """Each valid proposal tried on a sample of its cluster's diagnosis cases (same model, judge and set as the
    diagnosed run); per cluster and generator the best variant is kept."""
    from evaluation.evolution.trials import try_and_keep
    from evaluation.services import cases_evaluate

    def evaluate(files, case_ids):
        found = cases_evaluate(run=diagnosis.run, files=files, case_ids=case_ids)
        return {cid: None if acc is None or eff is None else acc >= 1 and eff >= 1
                for cid, (acc, eff) in found.items()}

    return try_and_keep(proposals, clusters, dict(diagnosis.version.files), evaluate)


def _gate_texts(diagnosis: Diagnosis) -> list[str]:
    """The gate split's message texts: never read for proposing, only to refuse an edit that copies them."""
    if diagnosis.is_live or diagnosis.split.get("kind") != "seeded":
        return []
    rows = diagnosis.run.set_version.cases.filter(case_id__in=diagnosis.split["gate_case_ids"]).values_list(
        "data", flat=True)
    return [str((data or {}).get("message", "")) for data in rows if (data or {}).get("message")]


def keep_advice(harness: Harness, stop: bool) -> dict:
    """When the advice is to stop: which version to keep (the best on the gate split so far) and its figures."""
    if not stop:
        return {}
    from evaluation.evolution.selectors import best_round

    best = best_round(harness)
    if best is None:
        return {}
    return {"keep": {"version": best["version"], "round": best["round"], "accuracy": best["accuracy"],
                     "ci": best["ci"], "split": best["split"]}}


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

    proposer = HarnessProposer(lambda: backend_for(backend_name), spec=proposer_spec, rejections_by_core=reasons)
    by_id = {r.case_id: r for r in records}
    targets = [c for c in clusters if not c.judge_suspect][:MODEL_PROPOSALS_PER_DIAGNOSIS]

    async def run_all():  # a few variants per cluster: trying them on diagnosis cases keeps the best
        return [await proposer(cluster, by_id, spec, variant=v) for cluster in targets
                for v in range(PROPOSER_VARIANTS)]

    made, seen = [], set()
    for proposal in asyncio.run(run_all()):
        if proposal is not None and (proposal.cluster_id, proposal.fingerprint) not in seen:
            seen.add((proposal.cluster_id, proposal.fingerprint))
            made.append(proposal)
    return [validate(p, spec, case_texts=texts, rejected=rejected, config=config.validation) for p in made], \
        proposer.runs
