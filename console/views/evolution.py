"""Console pages for harness evolution: the review queue of a diagnosis, rounds, and history per harness."""

from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_POST

from console.views.scoping import workspace_view
from evaluation import selectors as eval_selectors
from evaluation.evolution import decisions, diagnosing, rounds, selectors
from evaluation.evolution.errors import EvolutionError
from evaluation.evolution.models import Round
from evaluation.services import EvalError
from harness import selectors as harness_selectors
from harness.spec import SpecInvalid
from workspaces.access import WRITE

ACTIONS = ("accept", "reject", "edit", "revert")


@require_POST
@workspace_view(WRITE)
def diagnosis_request(request, run_id: int):
    run = eval_selectors.run_get(request.workspace, run_id)
    try:
        seed, share, gate = (request.POST.get(k, "").strip() for k in ("seed", "gate_share", "gate_set"))
        if seed and not seed.isdigit():
            raise EvolutionError("The split seed must be a whole number from 0 to 2147483647.")
        try:
            gate_share = float(share) / 100 if share else diagnosing.DEFAULT_GATE_SHARE
        except ValueError:
            raise EvolutionError("The gate share must be a percentage between 10 and 90.") from None
        gate_set = None
        if gate:
            set_name, _, number = gate.partition("@v")
            try:
                gate_set = eval_selectors.set_version_get(request.workspace, set_name,
                                                          int(number) if number.isdigit() else 0)
            except Http404:
                raise EvolutionError(f"No eval set version “{gate}” to gate on.") from None
        diagnosis = diagnosing.diagnosis_request(actor=request.actor, run=run,
                                                 seed=int(seed) if seed else diagnosing.DEFAULT_SEED,
                                                 gate_share=gate_share, gate_set=gate_set)
    except EvolutionError as exc:
        messages.error(request, str(exc))
        return redirect("eval_run_detail", ws=request.workspace.slug, run_id=run.pk)
    return redirect("diagnosis_detail", ws=request.workspace.slug, diagnosis_id=diagnosis.pk)


WINDOW_FORMAT = "%Y-%m-%dT%H:%M"  # what <input type="datetime-local"> sends; read as UTC


def _window_time(value: str, field: str) -> datetime:
    try:
        return datetime.strptime(value.strip(), WINDOW_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        raise EvolutionError(f"The window's {field} must be a date and time (YYYY-MM-DDTHH:MM, UTC).") \
            from None


@require_POST
@workspace_view(WRITE)
def live_diagnosis_request(request, name: str):
    """Diagnose one version's live traces in a time window (those with live judge scores)."""
    harness = harness_selectors.harness_get(request.workspace, name)
    try:
        number = request.POST.get("version", "")
        if not number.isdigit():
            raise EvolutionError("Choose the version whose live traffic to diagnose.")
        try:
            version = harness_selectors.version_get(harness, int(number))
        except Http404:
            raise EvolutionError(f"“{harness.name}” has no version v{int(number)}.") from None
        diagnosis = diagnosing.diagnosis_request_live(
            actor=request.actor, harness=harness, version=version,
            start=_window_time(request.POST.get("start", ""), "start"),
            end=_window_time(request.POST.get("end", ""), "end"))
    except EvolutionError as exc:
        form = {"version": request.POST.get("version", ""), "start": request.POST.get("start", ""),
                "end": request.POST.get("end", "")}
        return _history(request, harness, live_form=form, live_error=f"Not diagnosed: {exc}", status=422)
    return redirect("diagnosis_detail", ws=request.workspace.slug, diagnosis_id=diagnosis.pk)


def _round_context(diagnosis) -> dict:
    """What the candidate card shows: the round, or how many edits are accepted so far."""
    return {"diagnosis": diagnosis, "round": selectors.round_of(diagnosis),
            "eval_sets": selectors.gate_sets(diagnosis) if diagnosis.is_live else [],
            "accepted": diagnosis.proposals.filter(status="accepted").count()}


def _diagnosis_context(diagnosis) -> dict:
    return {**_round_context(diagnosis), "worker_lost": diagnosing.diagnosis_worker_lost(diagnosis),
            "max_attempts": diagnosing.MAX_ATTEMPTS,
            "review": selectors.review(diagnosis) if diagnosis.status == "done" else [],
            "trials": _trial_counts(diagnosis.summary.get("trials")),
            "invalid": diagnosis.proposals.filter(valid=False).select_related("cluster")}


def _trial_counts(trials) -> dict | None:
    """What propose-try-keep did, in counts for the status card (None: no trials were run)."""
    if trials is None:
        return None
    return {"tried": sum(1 for t in trials if t.get("kept") is not None),
            "kept": sum(1 for t in trials if t.get("kept")),
            "unknown": sum(1 for t in trials if t.get("kept") is None)}


@workspace_view()
def diagnosis_detail(request, diagnosis_id: int):
    """The review queue; htmx polls `#status` while the job runs and `#round` while the candidate is evaluated."""
    diagnosis = selectors.diagnosis_get(request.workspace, diagnosis_id)
    context = _diagnosis_context(diagnosis)
    part = request.GET.get("part")
    if request.htmx and part in ("status", "round"):
        response = render(request, f"evolution/diagnosis.html#{part}", context)
        if part == "status" and diagnosis.status in ("done", "failed"):
            response["HX-Refresh"] = "true"  # the clusters and proposals arrive with the whole page
        return response
    return render(request, "evolution/diagnosis.html", context)


@require_POST
@workspace_view(WRITE)
def proposal_action(request, proposal_id: int, action: str):
    """Accept, reject (with a reason), edit (opens the file editor with the result) or revert one edit.
    htmx gets the proposal's fragment back (422 with the error when refused); plain posts are redirected."""
    if action not in ACTIONS:
        raise Http404("No such action.")
    proposal = selectors.proposal_get(request.workspace, proposal_id)
    diagnosis = proposal.diagnosis
    try:
        if action == "accept":
            decisions.proposal_accept(actor=request.actor, proposal=proposal)
        elif action == "reject":
            decisions.proposal_reject(actor=request.actor, proposal=proposal, reason=request.POST.get("reason", ""))
        elif action == "edit":
            decisions.proposal_edit(actor=request.actor, proposal=proposal, user=request.user)
            url = reverse("harness_edit", kwargs={"ws": request.workspace.slug, "name": diagnosis.harness.name})
            return redirect(url + "?" + urlencode({"path": proposal.target or "harness.yaml"}))
        else:
            version = decisions.proposal_revert(actor=request.actor, proposal=proposal)
            messages.success(request, f"Reverted edit #{proposal.pk} as v{version.number}.")
            return redirect("evolution_history", ws=request.workspace.slug, name=diagnosis.harness.name)
        error, status = "", 200
    except EvolutionError as exc:
        error, status = str(exc), 422
    if not request.htmx:
        if error:
            messages.error(request, error)
        return redirect("diagnosis_detail", ws=request.workspace.slug, diagnosis_id=diagnosis.pk)
    proposal.refresh_from_db()
    context = {**_round_context(diagnosis), "proposal": proposal, "error": error}
    response = render(request, "evolution/diagnosis.html#proposal", context, status=status)
    # The candidate card counts the accepted edits (and offers to make the candidate): swapped out-of-band.
    response.content += render_to_string("evolution/diagnosis.html#round", {**context, "oob": True},
                                         request=request).encode()
    return response


@require_POST
@workspace_view(WRITE)
def round_create(request, diagnosis_id: int):
    """The accepted edits as one candidate version (author: the AI; approver: you)."""
    diagnosis = selectors.diagnosis_get(request.workspace, diagnosis_id)
    try:
        evolution_round = rounds.round_create(actor=request.actor, diagnosis=diagnosis)
        messages.success(request, f"Created the candidate v{evolution_round.candidate.number}.")
    except (EvolutionError, SpecInvalid) as exc:
        messages.error(request, str(exc))
    return redirect("diagnosis_detail", ws=request.workspace.slug, diagnosis_id=diagnosis.pk)


@require_POST
@workspace_view(WRITE)
def round_evaluate(request, round_id: int):
    """One click: the dev-set eval of the candidate, then the comparison with the regression gate."""
    evolution_round = Round.objects.filter(pk=round_id, harness__workspace=request.workspace).first()
    if evolution_round is None:
        raise Http404("No such round.")
    try:
        set_version = None
        if request.POST.get("set"):
            set_name, _, number = request.POST["set"].partition("@v")
            set_version = eval_selectors.set_version_get(request.workspace, set_name,
                                                         int(number) if number.isdigit() else 0)
        rounds.round_evaluate(actor=request.actor, evolution_round=evolution_round, set_version=set_version)
    except (EvolutionError, EvalError, Http404) as exc:
        messages.error(request, str(exc))
    return redirect("diagnosis_detail", ws=request.workspace.slug, diagnosis_id=evolution_round.diagnosis_id)


@require_POST
@workspace_view(WRITE)
def round_promote(request, round_id: int):
    """A person makes the gated candidate the head (only one that passed the gate)."""
    evolution_round = Round.objects.filter(pk=round_id, harness__workspace=request.workspace).select_related(
        "candidate", "comparison", "harness").first()
    if evolution_round is None:
        raise Http404("No such round.")
    try:
        rounds.round_promote(actor=request.actor, evolution_round=evolution_round)
        messages.success(request, f"v{evolution_round.candidate.number} is the head now.")
    except EvolutionError as exc:
        messages.error(request, str(exc))
    return redirect("diagnosis_detail", ws=request.workspace.slug, diagnosis_id=evolution_round.diagnosis_id)


@require_POST
@workspace_view(WRITE)
def keep(request, name: str):
    """Point a label at the version stop advice says to keep (an audited label move)."""
    harness = harness_selectors.harness_get(request.workspace, name)
    number, label = request.POST.get("version", ""), request.POST.get("label", "").strip()
    round_pk = request.POST.get("round", "")
    try:
        if not number.isdigit():
            raise EvolutionError("Choose the version to keep.")
        try:
            version = harness_selectors.version_get(harness, int(number))
        except Http404:
            raise EvolutionError(f"“{harness.name}” has no version v{int(number)}.") from None
        rounds.keep_version(actor=request.actor, harness=harness, version=version, label=label or "production",
                            round_pk=int(round_pk) if round_pk.isdigit() else None)
        messages.success(request, f"{label or 'production'} points at v{version.number} now.")
    except (EvolutionError, PermissionDenied) as exc:
        messages.error(request, str(exc))
    return redirect("evolution_history", ws=request.workspace.slug, name=harness.name)


@workspace_view()
def evolution_history(request, name: str):
    return _history(request, harness_selectors.harness_get(request.workspace, name))


def _history(request, harness, *, live_form: dict | None = None, live_error: str = "", status: int = 200):
    """Versions with Acc/Eff per round (chart), the attribution ledger with reverts, clusters over time; a
    refused live-diagnosis form comes back as it was filled in, with the reason."""
    history = selectors.history(harness)
    now = datetime.now(UTC)
    versions = harness_selectors.version_list(harness).order_by("-number")[:50]
    live_form = live_form or {"version": str(harness.head.number) if harness.head else "",
                              "start": (now - selectors.DEFAULT_LIVE_WINDOW).strftime(WINDOW_FORMAT),
                              "end": (now + timedelta(minutes=1)).strftime(WINDOW_FORMAT)}
    return render(request, "evolution/history.html", {
        "harness": harness, **history, "clusters_chart": selectors.cluster_chart(harness),
        "versions": [{"number": v.number, "selected": str(v.number) == live_form["version"]} for v in versions],
        "live": selectors.live_window_counts(harness, now), "window": live_form, "live_error": live_error,
        "diagnoses": selectors.diagnoses(request.workspace).filter(harness=harness)[:50],
        "chart": {"labels": [p["label"] for p in history["points"]],
                  "accuracy": [p["accuracy"] for p in history["points"]],
                  "effectiveness": [p["effectiveness"] for p in history["points"]]}}, status=status)
