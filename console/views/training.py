"""Console pages for training: jobs with progress bars and the launch form, the live job page, checkpoint
promotion, and the checkpoint × harness-version matrix (fan-out of eval runs + heat map)."""

import json

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from console.form_values import FormValueError, whole_number
from console.views.scoping import workspace_view
from evaluation import selectors as eval_selectors
from evaluation.services import EvalError
from harness.models import HarnessVersion
from training import selectors, services
from training.services import TrainingError
from workspaces.access import APPROVE, WRITE

# The launch form's starting point: all three stages, a few steps each, the offline SmolLM2 on CPU.
DEFAULT_CONFIG = {
    "model": {"base": "smollm2-135m-instruct", "finetune": "full", "device": "auto"},
    "trajectories": {"teacher": "oracle", "augmented_variants": 1},
    "stages": [{"kind": "sft", "config": {"max_steps": 20}}, {"kind": "opd", "config": {"max_steps": 10}},
               {"kind": "rl", "config": {"max_steps": 10}}],
    "seed": 0,
}
MAX_UPLOAD = 50 * 1024 * 1024


def _version_options(workspace, chosen=()) -> list[dict]:
    versions = HarnessVersion.objects.filter(harness__workspace=workspace).select_related("harness").order_by(
        "harness__name", "-number").defer("files")
    options = []
    for v in versions:
        value = f"{v.harness.name}@v{v.number}"
        options.append({"value": value, "label": f"{value} · {v.message[:40]}", "selected": value in chosen})
    return options


def _set_options(workspace, chosen=()) -> list[dict]:
    """Eval set versions; the newest Harness-Variant QA set is the matrix's default."""
    options, default = [], None
    for eval_set in eval_selectors.eval_sets(workspace):
        for version in eval_set.versions.all():
            value = f"{eval_set.name}@v{version.number}"
            if default is None and eval_set.suite == "harness_variant":
                default = value
            options.append({"value": value, "label": f"{value} ({eval_set.suite}, {version.case_count} cases)",
                            "selected": value in chosen})
    for option in options:
        option["default"] = option["value"] == default
    return options


# How the forms name their fields in a sentence; service messages start with the request's field name.
FIELD_LABELS = {
    "name": "Name", "base_model": "Base model", "harness_versions": "Harness versions",
    "excluded_sets": "Excluded eval sets", "imported_jsonl": "Imported cases", "simulator": "Simulator cases",
    "simulator.size": "Simulator cases", "config": "Config", "harnesses": "Config", "base_checkpoint": "Base checkpoint",
    "checkpoints": "Checkpoints", "set": "Eval set",
}


def form_sentence(exc: Exception) -> str:
    """The refusal as a sentence: a leading `field_name: ` becomes the field's label."""
    message = str(exc)
    field = getattr(exc, "field", "")
    if field in FIELD_LABELS and message.startswith(f"{field}: "):
        message = f"{FIELD_LABELS[field]}: {message[len(field) + 2:]}"
    return message


def _home(request, *, job_form: dict | None = None, job_error: str = "", matrix_form: dict | None = None,
          matrix_error: str = "", status: int = 200):
    """The page; a refused form comes back as it was typed (both forms, the other one fresh) with its error."""
    workspace = request.workspace
    jobs = list(selectors.jobs(workspace)[:100])
    if request.htmx and request.method == "GET":  # the job table refreshing itself while jobs run
        return render(request, "training/home.html#jobs", {"jobs": jobs, "any_active": any(j.active for j in jobs)})
    job_form = job_form or {"seed": "0", "size": "24", "config": json.dumps(DEFAULT_CONFIG, indent=2)}
    checkpoints = list(selectors.checkpoints(workspace)[:100])
    chosen = set((matrix_form or {}).get("checkpoints", ()))
    matrix_sets = _set_options(workspace, [matrix_form["set"]] if matrix_form else ())
    if matrix_form:  # what the operator picked, not the default
        for option in matrix_sets:
            option["default"] = option["selected"]
    context = {
        "jobs": jobs, "any_active": any(j.active for j in jobs), "checkpoints": checkpoints,
        "matrices": selectors.matrices(workspace)[:20],
        "versions": _version_options(workspace, job_form.get("versions", ())),
        "sets": _set_options(workspace, job_form.get("excluded", ())),
        "form": job_form, "error": job_error,
        "matrix_checkpoints": [{"checkpoint": c, "selected": str(c.pk) in chosen} for c in checkpoints],
        "matrix_versions": _version_options(workspace, (matrix_form or {}).get("versions", ())),
        "matrix_sets": matrix_sets, "matrix_error": matrix_error,
    }
    return render(request, "training/home.html", context, status=status)


@workspace_view()
def training_home(request):
    return _home(request)


@require_POST
@workspace_view(WRITE)
def training_job_create(request):
    post = request.POST
    form = {"name": post.get("name", "").strip(), "base_model": post.get("base_model", "").strip(),
            "versions": post.getlist("harness_versions"),
            "excluded": post.getlist("excluded_sets"), "seed": post.get("seed", ""), "size": post.get("size", ""),
            "config": post.get("config", "")}
    try:
        try:
            config = json.loads(form["config"] or "{}")
        except json.JSONDecodeError as exc:
            raise TrainingError(f"Config: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}).",
                                field="config") from None
        upload = request.FILES.get("jsonl")
        imported = ""
        if upload is not None:
            if upload.size > MAX_UPLOAD:
                raise TrainingError("The imported file is larger than 50 MiB.", field="imported_jsonl")
            try:
                imported = upload.read().decode("utf-8")
            except UnicodeDecodeError:
                raise TrainingError("The imported file is not UTF-8 text.", field="imported_jsonl") from None
        simulator = None
        size = whole_number(post, "size", label="Simulator cases", minimum=0)
        if size is not None:
            simulator = {"seed": whole_number(post, "seed", label="Simulator seed", default=0), "size": size}
        job = services.job_create(
            actor=request.actor, workspace=request.workspace, name=form["name"], base_model=form["base_model"],
            config=config,
            harness_versions=services.resolve_harness_versions(request.workspace, form["versions"]),
            excluded_sets=services.resolve_eval_sets(request.workspace, form["excluded"]),
            simulator=simulator, imported_jsonl=imported, imported_name=upload.name if upload else "")
    except (TrainingError, FormValueError) as exc:
        return _home(request, job_form=form, job_error=f"Not launched: {form_sentence(exc)}", status=422)
    messages.success(request, f"Job {job.pk} queued on the gpu queue.")
    return redirect("training_job_detail", ws=request.workspace.slug, job_id=job.pk)


@workspace_view()
def training_job_detail(request, job_id: int):
    job = selectors.job_get(request.workspace, job_id)
    return render(request, "training/job.html", {"job": job, "snapshot": selectors.job_snapshot(job.pk),
                                                 "checkpoints": job.checkpoints.all()})


@require_POST
@workspace_view(WRITE)
def training_job_cancel(request, job_id: int):
    job = services.job_cancel(actor=request.actor, job=selectors.job_get(request.workspace, job_id))
    messages.info(request, f"Job {job.pk}: {job.status}{' (stopping at the next step)' if job.active else ''}.")
    return redirect("training_job_detail", ws=request.workspace.slug, job_id=job.pk)


@require_POST
@workspace_view(APPROVE)
def checkpoint_promote(request, checkpoint_id: int):
    checkpoint = selectors.checkpoint_get(request.workspace, checkpoint_id)
    promoted = request.POST.get("promoted", "1") == "1"
    services.checkpoint_promote(actor=request.actor, checkpoint=checkpoint, promoted=promoted)
    messages.success(request, f"{checkpoint.backend_name} {'promoted' if promoted else 'withdrawn'}.")
    return redirect("training_home", ws=request.workspace.slug)


@require_POST
@workspace_view(WRITE)
def matrix_create(request):
    workspace = request.workspace
    post = request.POST
    form = {"checkpoints": post.getlist("checkpoints"), "versions": post.getlist("harness_versions"),
            "set": post.get("set", "")}
    try:
        if any(not i.isdigit() for i in form["checkpoints"]):
            raise TrainingError("Checkpoints: choose them from the list.", field="checkpoints")
        ids = {int(i) for i in form["checkpoints"]}
        checkpoints = list(selectors.checkpoints(workspace).filter(pk__in=ids))
        if len(checkpoints) != len(ids):
            raise TrainingError("Checkpoints: one of them is not in this workspace (any more).", field="checkpoints")
        versions = services.resolve_harness_versions(workspace, form["versions"])
        found = services.resolve_eval_sets(workspace, [form["set"]]) if form["set"] else []
        if not found:
            raise TrainingError("Eval set: choose one (Harness-Variant QA by default).", field="set")
        matrix = services.matrix_create(actor=request.actor, workspace=workspace, checkpoints=checkpoints,
                                        harness_versions=versions, set_version=found[0])
    except (TrainingError, EvalError) as exc:
        if isinstance(exc, TrainingError) and exc.field == "excluded_sets":  # the resolver names its usual field
            exc = TrainingError(str(exc).replace("excluded_sets: ", "Eval set: ", 1), field="set")
        return _home(request, matrix_form=form, matrix_error=f"No matrix started: {form_sentence(exc)}", status=422)
    return redirect("matrix_detail", ws=workspace.slug, matrix_id=matrix.pk)


@workspace_view()
def matrix_detail(request, matrix_id: int):
    matrix = selectors.matrix_get(request.workspace, matrix_id)
    metric = request.GET.get("metric", "accuracy")
    if metric not in ("accuracy", "effectiveness"):
        raise Http404("Unknown metric.")
    cells = selectors.matrix_cells(matrix, metric)
    template = "training/matrix.html#heatmap" if request.htmx else "training/matrix.html"
    return render(request, template, {"matrix": matrix, "cells": cells, "metric": metric})
