"""Console pages for live A/B experiments: list, create, start/stop, and the live dashboard."""

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from console.form_values import decimal_number, to_decimal
from console.views.scoping import workspace_view
from harness import selectors as harness_selectors
from serving.experiments import lifecycle
from serving.experiments.guardrails import guardrail_thresholds
from serving.experiments.lifecycle import (
    ExperimentError,
    experiment_create,
    experiment_start,
    experiment_stop,
)
from serving.experiments.live import publish_experiment
from serving.experiments.selectors import experiment_arms, experiment_snapshot
from serving.models import Experiment
from workspaces.access import ADMIN, WRITE


def _experiment(request, key: str) -> Experiment:
    experiment = Experiment.objects.filter(workspace=request.workspace, key=key).select_related("harness").first()
    if experiment is None:
        raise Http404("No such experiment.")
    return experiment


NEW_EXPERIMENT_FIELDS = ("key", "harness", "coverage", "rooms", "arms", "latency_p95_ms", "accuracy_drop",
                         "min_samples")
NEW_EXPERIMENT_DEFAULTS = {"coverage": "1.0", "arms": "control 0.5 react\nharness 0.5 label:production",
                           "min_samples": "50"}


def _list(request, *, form: dict | None = None, error: str = "", status: int = 200):
    archived = request.GET.get("archived") == "1"
    return render(request, "serving/experiments.html", {
        "experiments": Experiment.objects.filter(workspace=request.workspace, archived_at__isnull=not archived)
        .select_related("harness"),
        "archived": archived,
        "harnesses": harness_selectors.harness_list(request.workspace),
        "form": form or NEW_EXPERIMENT_DEFAULTS, "error": error,
    }, status=status)


@workspace_view()
def experiment_list(request):
    return _list(request)


@require_POST
@workspace_view(WRITE)
def experiment_new(request):
    """Arms come as one line each: `name weight react` | `name weight label:<label>` | `name weight v<N>`,
    optionally followed by the arm's model (`checkpoint:<id>` or a backend name)."""
    try:
        harness = harness_selectors.harness_get(request.workspace, request.POST.get("harness", ""))
        arms = []
        for number, line in enumerate(request.POST.get("arms", "").splitlines(), start=1):
            if not line.strip():
                continue
            words = line.split()
            if not 3 <= len(words) <= 4:
                raise ExperimentError(f"Arm line {number} has {len(words)} word(s); write "
                                      "“name weight target [model]”, e.g. “control 0.5 react”.")
            name, weight_text, target, *model = words
            weight = to_decimal(weight_text, label=f"Arm line {number}, weight", minimum=0)
            if target == "react":
                arms.append({"name": name, "weight": weight, "kind": "react"})
            elif target.startswith("label:"):
                arms.append({"name": name, "weight": weight, "kind": "label", "label": target[6:]})
            elif target.startswith("v") and target[1:].isdigit():
                arms.append({"name": name, "weight": weight, "kind": "version", "version": int(target[1:])})
            else:
                raise ExperimentError(f"Arm line {number}: unknown target “{target}”; use react, label:NAME or vN.")
            if model:
                arms[-1]["backend"] = model[0]
        guardrails = {}
        for key, label in (("latency_p95_ms", "Latency P95 limit (ms)"), ("accuracy_drop", "Judge accuracy drop"),
                           ("min_samples", "Samples per arm")):
            value = decimal_number(request.POST, key, label=label, minimum=0)
            if value is not None:
                guardrails[key] = value
        experiment = experiment_create(
            actor=request.actor, workspace=request.workspace, key=request.POST.get("key", "").strip(), harness=harness,
            arms=arms, coverage=decimal_number(request.POST, "coverage", label="Coverage", default=1.0,
                                               minimum=0, maximum=1),
            rooms=[r for r in request.POST.get("rooms", "").split() if r], guardrails=guardrails)
    except (ExperimentError, ValueError, Http404) as exc:
        # The form comes back as the operator typed it, with the reason, rather than reset by a redirect.
        form = {name: request.POST.get(name, "") for name in NEW_EXPERIMENT_FIELDS}
        return _list(request, form=form, error=f"Not created: {exc}", status=422)
    return redirect("experiment_detail", ws=request.workspace.slug, key=experiment.key)


@workspace_view()
def experiment_detail(request, key: str):
    experiment = _experiment(request, key)
    snapshot = experiment_snapshot(experiment)
    return render(request, "serving/experiment.html", {
        "experiment": experiment, "snapshot": snapshot, "arms": experiment_arms(experiment),
        "thresholds": guardrail_thresholds(experiment)})


@require_POST
@workspace_view(WRITE)
def experiment_action(request, key: str, action: str):
    experiment = _experiment(request, key)
    try:
        if action == "start":
            experiment_start(actor=request.actor, experiment=experiment)
        elif action == "stop":
            experiment_stop(actor=request.actor, experiment=experiment,
                            reason=request.POST.get("reason") or "stopped by an operator")
        else:
            raise Http404("Unknown action.")
        publish_experiment(experiment)  # other open dashboards of this experiment reload with the new state
    except ExperimentError as exc:
        messages.error(request, str(exc))
    return redirect("experiment_detail", ws=request.workspace.slug, key=key)


@require_POST
@workspace_view(WRITE)
def experiment_archive(request, key: str):
    """Archive (or, with archived=0, restore) a stopped or draft experiment: it leaves the list."""
    experiment = _experiment(request, key)
    archive = request.POST.get("archived", "1") != "0"
    try:
        lifecycle.experiment_archive(actor=request.actor, experiment=experiment, archived=archive)
    except ExperimentError as exc:
        messages.error(request, str(exc))
        return redirect("experiment_detail", ws=request.workspace.slug, key=key)
    messages.success(request, f"{'Archived' if archive else 'Restored'} experiment {experiment.key}.")
    return redirect("experiment_list", ws=request.workspace.slug)


@require_POST
@workspace_view(ADMIN)
def experiment_delete(request, key: str):
    experiment = _experiment(request, key)
    try:
        lifecycle.experiment_delete(actor=request.actor, experiment=experiment)
    except ExperimentError as exc:
        messages.error(request, f"Not deleted: {exc}")
        return redirect("experiment_detail", ws=request.workspace.slug, key=key)
    messages.success(request, f"Deleted experiment {experiment.key}.")
    return redirect("experiment_list", ws=request.workspace.slug)
