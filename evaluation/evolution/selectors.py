"""Reads for harness evolution: diagnoses with clusters and proposals, review evidence, history per harness."""

from datetime import datetime, timedelta

from django.db.models import Count, Q
from django.http import Http404

from evaluation.evolution.models import Cluster, Diagnosis, Proposal, Round
from evaluation.models import EvalResult, EvalRun, EvalSetVersion
from harness.models import Harness
from workspaces.models import Workspace

DEFAULT_LIVE_WINDOW = timedelta(days=7)
CHART_CLUSTERS = 10  # the clusters-over-time chart draws the largest ones; the table lists every one


def diagnoses(workspace: Workspace):
    return Diagnosis.objects.filter(workspace=workspace).select_related("harness", "version", "run")


def diagnosis_get(workspace: Workspace, diagnosis_id: int) -> Diagnosis:
    diagnosis = diagnoses(workspace).filter(pk=diagnosis_id).first()
    if diagnosis is None:
        raise Http404("No such diagnosis.")
    return diagnosis


def diagnoses_of_run(run: EvalRun):
    return Diagnosis.objects.filter(run=run).order_by("-created_at", "-id")


def proposal_get(workspace: Workspace, proposal_id: int) -> Proposal:
    proposal = Proposal.objects.select_related("diagnosis__harness", "diagnosis__version", "diagnosis__workspace",
                                               "cluster").filter(diagnosis__workspace=workspace,
                                                                 pk=proposal_id).first()
    if proposal is None:
        raise Http404("No such proposal.")
    return proposal


def round_of(diagnosis: Diagnosis) -> Round | None:
    return Round.objects.filter(diagnosis=diagnosis).select_related("candidate", "run", "comparison").first()


def representative_rows(diagnosis: Diagnosis, case_ids) -> dict:
    """case id → the row that shows it: the run's EvalResult, or for a live diagnosis the live Trace."""
    if diagnosis.is_live:
        from serving.models import Trace

        return {t.trace_id: t for t in Trace.objects.filter(workspace=diagnosis.workspace, trace_id__in=case_ids)}
    return {r.case.case_id: r for r in EvalResult.objects.filter(run=diagnosis.run, case__case_id__in=case_ids)
            .select_related("case")}


def review(diagnosis: Diagnosis) -> list[dict]:
    """Clusters ranked by impact, each with its representative cases' evidence and its proposals."""
    clusters = list(diagnosis.clusters.all())
    wanted = {cid for c in clusters for cid in (c.data.get("centre_case"), c.data.get("boundary_case"),
                                                  *c.data.get("passing_cases", []))}
    # A judge-suspect cluster lists every case, each to label or fix, instead of an edit to the harness.
    wanted |= {cid for c in clusters if c.judge_suspect for cid in c.data.get("case_ids", [])}
    results = representative_rows(diagnosis, wanted)
    proposals: dict[int | None, list[Proposal]] = {}
    for proposal in diagnosis.proposals.all().order_by("-valid", "id"):
        proposals.setdefault(proposal.cluster_id, []).append(proposal)
    earlier = {}  # cluster_id → (diagnosis id, size) in the latest earlier diagnosis of the harness
    for cluster_id, diagnosis_id, size in Cluster.objects.filter(
            diagnosis__harness=diagnosis.harness, diagnosis__created_at__lt=diagnosis.created_at,
            cluster_id__in=[c.cluster_id for c in clusters]).order_by("diagnosis__created_at", "diagnosis_id") \
            .values_list("cluster_id", "diagnosis_id", "size"):
        earlier[cluster_id] = (diagnosis_id, size)
    out = []
    for cluster in clusters:
        data = cluster.data
        representatives = [(role, results.get(cid)) for role, cid in
                           [("nearest the centre", data.get("centre_case")), ("boundary", data.get("boundary_case")),
                            *[("passing, same skill", cid) for cid in data.get("passing_cases", [])]]]
        suspect = [results[cid] for cid in data.get("case_ids", []) if cid in results] if cluster.judge_suspect else []
        out.append({"cluster": cluster, "representatives": [(role, r) for role, r in representatives if r],
                    "proposals": proposals.get(cluster.pk, []), "earlier": earlier.get(cluster.cluster_id),
                    "suspect_cases": suspect})
    return out


def split_key(diagnosis: Diagnosis) -> str:
    """Rounds are comparable when they were gated on the same cases: the same set and split."""
    split = diagnosis.split or {}
    if split.get("kind") == "seeded":
        return f"gate split of {split.get('set')} (seed {split.get('seed')}, {split.get('gate_share'):.0%} of cases)"
    if split.get("gate_set"):
        return f"gate set {split['gate_set']}"
    return "the diagnosed set (no held-out split)"


def round_rows(harness: Harness) -> list[dict]:
    """Gated rounds, oldest first, with their gate-split figures (and the diagnosis split's beside them)."""
    rows = []
    for r in Round.objects.filter(harness=harness, status=Round.Status.GATED).select_related(
            "diagnosis__version", "candidate", "comparison").order_by("created_at", "id"):
        gate = (r.figures or {}).get("gate", {}).get("accuracy")
        if not gate:
            continue
        rows.append({"round": r, "key": split_key(r.diagnosis), "gate": gate,
                     "diagnosis": (r.figures or {}).get("diagnosis", {}).get("accuracy"),
                     "fitted": (r.figures or {}).get("fitted", "")})
    return rows


def best_round(harness: Harness) -> dict | None:
    """The best version so far on the gate split of the latest gated round: each comparable round's candidate,
    and the version the first of them was made from (so "keep what you had" is an answer too), by gate
    accuracy with its 95% bootstrap interval. Ties go to the earlier version (fewer edits)."""
    rows = round_rows(harness)
    if not rows:
        return None
    key = rows[-1]["key"]
    comparable = [row for row in rows if row["key"] == key]
    first = comparable[0]
    options = [{"version": first["round"].diagnosis.version.number, "version_pk": first["round"].diagnosis.version_id,
                "round": None, "accuracy": first["gate"]["baseline"], "ci": first["gate"].get("baseline_ci"),
                "split": key, "passed": True}]
    for row in comparable:
        r = row["round"]
        options.append({"version": r.candidate.number, "version_pk": r.candidate_id, "round": r.pk,
                        "accuracy": row["gate"]["candidate"], "ci": row["gate"].get("candidate_ci"), "split": key,
                        "passed": bool(r.comparison and r.comparison.passed)})
    scored = [o for o in options if o["accuracy"] is not None]
    return max(scored, key=lambda o: (o["accuracy"], -o["version"])) if scored else None


def cluster_timeline(harness: Harness) -> dict[str, list[tuple[int, int]]]:
    """cluster_id → [(diagnosis id, size)] over the harness's diagnoses, oldest first."""
    timeline: dict[str, list[tuple[int, int]]] = {}
    for cluster_id, diagnosis_id, size in Cluster.objects.filter(diagnosis__harness=harness).order_by(
            "diagnosis__created_at", "diagnosis_id").values_list("cluster_id", "diagnosis_id", "size"):
        timeline.setdefault(cluster_id, []).append((diagnosis_id, size))
    return timeline


def history(harness: Harness) -> dict:
    """The chain of diagnosed versions and their candidates: Acc/Eff per round, ledger, clusters over time."""
    rounds = list(Round.objects.filter(harness=harness).select_related(
        "diagnosis__version", "diagnosis__run", "baseline", "candidate", "run", "comparison")
        .order_by("created_at", "id"))
    points = []
    for r in rounds:
        gate = (r.figures or {}).get("gate") or {}
        if gate.get("accuracy"):  # the round's reported figures: the gate split's, never the diagnosed cases
            if not points:
                points.append({"label": f"v{r.diagnosis.version.number}", "accuracy": gate["accuracy"]["baseline"],
                               "effectiveness": (gate.get("effectiveness") or {}).get("baseline")})
            points.append({"label": f"v{r.candidate.number}", "accuracy": gate["accuracy"]["candidate"],
                           "effectiveness": (gate.get("effectiveness") or {}).get("candidate")})
            continue
        base_run = r.baseline or r.diagnosis.run
        if base_run is None or base_run.status != EvalRun.Status.DONE or r.figures:
            continue  # not evaluated yet: no point to draw
        baseline = base_run.summary.get("overall", {})
        if not points:
            points.append({"label": f"v{r.diagnosis.version.number}", "accuracy": baseline.get("accuracy"),
                           "effectiveness": baseline.get("effectiveness")})
        if r.run_id and r.run.status == EvalRun.Status.DONE:
            overall = r.run.summary.get("overall", {})
            points.append({"label": f"v{r.candidate.number}", "accuracy": overall.get("accuracy"),
                           "effectiveness": overall.get("effectiveness")})
    accepted = Proposal.objects.filter(diagnosis__harness=harness, status=Proposal.Status.ACCEPTED,
                                       diagnosis__round__isnull=False).select_related("diagnosis__round__candidate")
    ledger = []
    for proposal in accepted.order_by("id"):
        attribution = proposal.diagnosis.round.attribution or {}
        entry = attribution.get("proposals", {}).get(str(proposal.pk), {})
        results, where, run = attribution.get("results", {}), attribution.get("split_of", {}), attribution.get("run")

        def links(ids, results=results, where=where, run=run):  # each case with its result page in the round's run
            return [{"id": c, "result": results.get(c), "run": run, "split": where.get(c, "")} for c in ids]

        ledger.append({"proposal": proposal, "round": proposal.diagnosis.round, **entry,
                       "fixed_links": links(entry.get("fixed", [])), "broke_links": links(entry.get("regressed", []))})
    return {"rounds": rounds, "points": points, "ledger": ledger, "timeline": cluster_timeline(harness),
            "best": best_round(harness), "comparable": round_rows(harness)}


def cluster_chart(harness: Harness) -> dict:
    """Cluster sizes per diagnosis of the harness (oldest first) for the chart: a cluster absent from a
    diagnosis is 0 there (gone, or not yet seen), and the long tail (noise) is a series of its own."""
    done = list(Diagnosis.objects.filter(harness=harness, status=Diagnosis.Status.DONE)
                .select_related("version").order_by("created_at", "id"))
    index = {d.pk: i for i, d in enumerate(done)}
    sizes: dict[str, list[int]] = {}
    for cluster_id, diagnosis_id, size in Cluster.objects.filter(diagnosis__in=done).values_list(
            "cluster_id", "diagnosis_id", "size"):
        sizes.setdefault(cluster_id, [0] * len(done))[index[diagnosis_id]] = size
    largest = sorted(sizes, key=lambda c: (-max(sizes[c]), c))[:CHART_CLUSTERS]
    return {"labels": [f"#{d.pk} v{d.version.number}{' live' if d.is_live else ''}" for d in done],
            "series": [{"label": c, "sizes": sizes[c]} for c in largest],
            "noise": [len(d.summary.get("noise", [])) for d in done]}


def live_window_counts(harness: Harness, now: datetime) -> list[dict]:
    """Per version: live API traces in the default window before `now`, and how many the live judge scored."""
    from serving.models import Trace

    rows = (Trace.objects.filter(workspace=harness.workspace, harness=harness, source=Trace.Source.API,
                                 created_at__gte=now - DEFAULT_LIVE_WINDOW, harness_version__isnull=False)
            .values("harness_version__number")
            .annotate(total=Count("id"), judged=Count("id", filter=Q(judge_accuracy__isnull=False,
                                                                      judge_effectiveness__isnull=False)))
            .order_by("-harness_version__number"))
    return [{"version": r["harness_version__number"], "total": r["total"], "judged": r["judged"]} for r in rows]


def gate_sets(diagnosis: Diagnosis) -> list[EvalSetVersion]:
    """Eval set versions a live diagnosis's candidate can be gated on (harness suites, newest first)."""
    return list(EvalSetVersion.objects.filter(eval_set__workspace=diagnosis.workspace,
                                               eval_set__archived_at__isnull=True)
                .exclude(eval_set__suite="ifeval").select_related("eval_set")
                .order_by("eval_set__name", "-number")[:100])
