"""Console pages for evaluation: sets, runs with live progress, per-case results, exports."""

import csv
import io
import json

from django.contrib import messages
from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils.text import slugify
from django.views.decorators.http import require_POST

from console.form_values import decimal_number, whole_number
from console.pagination import page_from_query
from console.views.scoping import workspace_view
from evaluation import selectors
from evaluation import services as evaluation_services
from evaluation.evolution import selectors as evolution_selectors
from evaluation.execution import SUITES
from evaluation.models import EvalResult
from evaluation.services import (
    EvalError,
    default_concurrency,
    eval_set_add_version,
    eval_set_generate,
    judge_models,
    parse_cases,
    run_cancel,
    run_create,
)
from harness import selectors as harness_selectors
from serving.model_config import available_backends
from serving.model_state import backend_states
from workspaces.access import ADMIN, WRITE

MAX_UPLOAD = 20 * 1024 * 1024


SET_FORM_FIELDS = ("name", "suite", "seed", "n")
RUN_FORM_FIELDS = ("set", "harness", "version", "backend", "judge", "concurrency", "queue")


def _home(request, *, set_form: dict | None = None, run_form: dict | None = None, set_error: str = "",
          run_error: str = "", status: int = 200):
    """The evaluation page; a form that failed comes back with what the operator typed and why."""
    from django.conf import settings

    backends = available_backends(request.workspace)
    ordered = sorted(backends, key=lambda b: b != settings.MODEL_BACKEND)  # the deployment's default first
    if run_form is None:  # a version page's "evaluate" link preselects its harness and version
        version = request.GET.get("version", "")
        run_form = {"harness": request.GET.get("harness", ""),
                    "version": f"v{version}" if version else "production", "judge": "reference", "queue": "cpu"}
    return render(request, "evaluation/home.html", {
        "set_form": set_form or {"seed": "1", "n": "40"}, "run_form": run_form,
        "set_error": set_error, "run_error": run_error,
        "sets": selectors.eval_sets(request.workspace), "runs": selectors.runs(request.workspace)[:50],
        "history": selectors.run_history(request.workspace),
        "archived_sets": selectors.eval_sets(request.workspace, archived=True),
        "suites": SUITES, "harnesses": harness_selectors.harness_list(request.workspace),
        "backends": [(b, default_concurrency(b)) for b in ordered],
        "judge_models": sorted(judge_models()),
        "models": backend_states(request.workspace, ordered),
    }, status=status)


@workspace_view()
def evaluation_home(request):
    return _home(request)


@require_POST
@workspace_view(WRITE)
def eval_set_create(request):
    name, suite = request.POST.get("name", "").strip(), request.POST.get("suite", "")
    try:
        if not name:
            raise EvalError("Give the set a name.")
        upload = request.FILES.get("jsonl")
        if upload is not None:
            if upload.size > MAX_UPLOAD:
                raise EvalError("The file is larger than 20 MiB.")
            lines = upload.read().decode("utf-8").splitlines()
            version = eval_set_add_version(actor=request.actor, workspace=request.workspace, name=name, suite=suite,
                                           cases=parse_cases(suite, lines), source=f"upload {upload.name}")
        else:
            version = eval_set_generate(
                actor=request.actor, workspace=request.workspace, name=name, suite=suite,
                seed=whole_number(request.POST, "seed", label="Seed", default=0),
                n=whole_number(request.POST, "n", label="Number of cases", default=50))
    except (EvalError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        reason = "the file is not UTF-8 text." if isinstance(exc, UnicodeDecodeError) else exc
        form = {field: request.POST.get(field, "") for field in SET_FORM_FIELDS}
        return _home(request, set_form=form, set_error=f"No set created: {reason}", status=422)
    messages.success(request, f"Created {version} with {version.case_count} cases.")
    return redirect("evaluation_home", ws=request.workspace.slug)


@require_POST
@workspace_view(WRITE)
def eval_set_archive(request, name: str):
    """Archive (or, with archived=0, restore) a set: it leaves the lists and the run form, its runs stay."""
    eval_set = selectors.eval_set_get(request.workspace, name)
    archive = request.POST.get("archived", "1") != "0"
    evaluation_services.eval_set_archive(actor=request.actor, eval_set=eval_set, archived=archive)
    messages.success(request, f"{'Archived' if archive else 'Restored'} eval set {eval_set.name}.")
    return redirect("evaluation_home", ws=request.workspace.slug)


@require_POST
@workspace_view(ADMIN)
def eval_set_delete(request, name: str):
    eval_set = selectors.eval_set_get(request.workspace, name)
    try:
        evaluation_services.eval_set_delete(actor=request.actor, eval_set=eval_set)
        messages.success(request, f"Deleted eval set {eval_set.name}.")
    except EvalError as exc:
        messages.error(request, f"Not deleted: {exc}")
    return redirect("evaluation_home", ws=request.workspace.slug)


@workspace_view()
def eval_set_detail(request, name: str, number: int):
    version = selectors.set_version_get(request.workspace, name, number)
    if request.GET.get("format") == "jsonl":
        body = "".join(json.dumps(c.data, ensure_ascii=False) + "\n" for c in version.cases.all())
        response = HttpResponse(body, content_type="application/x-ndjson")
        # slugify: a name stored before names were validated must not break (or inject into) the header.
        response["Content-Disposition"] = f'attachment; filename="{slugify(name) or "eval-set"}-v{number}.jsonl"'
        return response
    cases = version.cases.all()
    category = request.GET.get("category", "").strip()
    categories = sorted(set(version.cases.values_list("category", flat=True)))
    errors = []
    if category and category not in categories:
        errors.append(f"Category: “{category}” is not in this set; it has {', '.join(categories) or 'no categories'}.")
        cases = cases.none()
    elif category:
        cases = cases.filter(category=category)
    paged = page_from_query(request.GET, cases)
    return render(request, "evaluation/set.html", {"version": version, "page": paged.page, "category": category,
                                                   "categories": categories, "errors": errors,
                                                   "page_error": paged.error},
                  status=422 if errors or paged.error else 200)


@require_POST
@workspace_view(WRITE)
def eval_run_create(request):
    try:
        name, _, number = request.POST.get("set", "").partition("@v")
        if not number.isdigit():
            raise EvalError("Choose an eval set version (name@vN).")
        set_version = selectors.set_version_get(request.workspace, name, int(number))
        harness = harness_selectors.harness_get(request.workspace, request.POST.get("harness", ""))
        version = harness_selectors.version_resolve(harness, request.POST.get("version") or "production")
        run = run_create(actor=request.actor, workspace=request.workspace, set_version=set_version, harness=harness,
                         version=version, backend=request.POST.get("backend", ""),
                         judge=request.POST.get("judge") or "reference",
                         concurrency=whole_number(request.POST, "concurrency", label="Concurrency"),
                         queue=request.POST.get("queue") or "cpu")
    except (EvalError, ValueError, ImproperlyConfigured, Http404) as exc:
        form = {field: request.POST.get(field, "") for field in RUN_FORM_FIELDS}
        return _home(request, run_form=form, run_error=f"Run not started: {exc}", status=422)
    return redirect("eval_run_detail", ws=request.workspace.slug, run_id=run.pk)


@workspace_view()
def eval_run_detail(request, run_id: int):
    run = selectors.run_get(request.workspace, run_id)
    export = request.GET.get("format")
    results = run.results.select_related("case").defer("trace")
    if export in ("csv", "jsonl"):
        return _export(run, results, export)
    failing = request.GET.get("failing") == "1"
    if failing:
        results = results.filter(accuracy__lt=1)
    paged = page_from_query(request.GET, results)
    # Other finished runs of the same set version: the only ones the compare page can pair with this one.
    peers = selectors.runs(request.workspace).filter(status="done", set_version=run.set_version).exclude(pk=run.pk)
    return render(request, "evaluation/run.html", {"run": run, "page": paged.page, "page_error": paged.error,
                                                   "failing": failing, "peers": peers[:50],
                                                   "diagnoses": evolution_selectors.diagnoses_of_run(run)[:20],
                                                   "progress": selectors.run_progress(run.pk),
                                                   "latency": selectors.run_latency_distribution(run),
                                                   "replay": selectors.run_replay(run) if run.status == "done" else None},
                  status=422 if paged.error else 200)


def _export(run, results, fmt):
    if fmt == "jsonl":
        body = "".join(json.dumps({"case_id": r.case.case_id, "category": r.category, "accuracy": r.accuracy,
                                   "effectiveness": r.effectiveness, "abstained": r.abstained, "scores": r.scores,
                                   "reasons": r.reasons, "judge": r.judge_version, "judge_models": r.judge_models,
                                   "judge_hash": r.judge_hash, "outcome": r.outcome, "latency_ms": r.latency_ms,
                                   "reply": r.reply}, ensure_ascii=False) + "\n" for r in results)
        response = HttpResponse(body, content_type="application/x-ndjson")
    else:
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(["case_id", "category", "accuracy", "effectiveness", "abstained", "outcome", "latency_ms",
                         "judge", "judge_models", "judge_hash", "reply"])
        for r in results:
            writer.writerow([r.case.case_id, r.category, r.accuracy, r.effectiveness, r.abstained, r.outcome,
                             round(r.latency_ms, 1), r.judge_version, " ".join(r.judge_models), r.judge_hash,
                             r.reply])
        response = HttpResponse(buffer.getvalue(), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="run-{run.pk}.{fmt}"'
    return response


@workspace_view()
def eval_result_detail(request, run_id: int, result_id: int):
    run = selectors.run_get(request.workspace, run_id)
    result = EvalResult.objects.select_related("case").filter(run=run, pk=result_id).first()
    if result is None:
        raise Http404("No such result.")
    return render(request, "evaluation/result.html", {"run": run, "result": result, "trace": result.trace,
                                                      "case": result.case.data})


@require_POST
@workspace_view(WRITE)
def eval_run_cancel(request, run_id: int):
    run = run_cancel(actor=request.actor, run=selectors.run_get(request.workspace, run_id))
    messages.info(request, f"Run {run.pk}: {run.status}{' (stopping)' if run.cancel_requested else ''}.")
    return redirect("eval_run_detail", ws=request.workspace.slug, run_id=run.pk)


@workspace_view(WRITE)
def annotate(request):
    """The annotation queue: one case at a time; several annotators label each case."""
    from evaluation.calibration import CalibrationError, annotation_add, annotation_queue

    if request.method == "POST":
        result = EvalResult.objects.filter(run__workspace=request.workspace, pk=request.POST.get("result")).first()
        if result is None:
            raise Http404("No such case.")
        try:
            annotation_add(actor=request.actor, workspace=request.workspace, user=request.user, result=result,
                           accuracy=whole_number(request.POST, "accuracy", label="Accuracy", default=-1),
                           effectiveness=decimal_number(request.POST, "effectiveness", label="Effectiveness",
                                                        default=-1.0),
                           comment=request.POST.get("comment", ""))
            messages.success(request, f"Labelled {result.case.case_id}.")
        except (CalibrationError, ValueError) as exc:
            messages.error(request, str(exc))
        return redirect("annotate", ws=request.workspace.slug)
    queue = annotation_queue(request.workspace, request.user)
    chosen = request.GET.get("result", "")
    # A case picked elsewhere (a judge-suspect cluster's): that one first, if it is this workspace's.
    result = (EvalResult.objects.filter(run__workspace=request.workspace, pk=int(chosen)).select_related("case")
              .first() if chosen.isdigit() else None) or queue.first()
    return render(request, "evaluation/annotate.html", {"result": result, "remaining": queue.count(),
                                                        "case": result.case.data if result else None,
                                                        "trace": result.trace if result else None})


@workspace_view()
def agreement(request):
    from evaluation.calibration import agreement_report

    return render(request, "evaluation/agreement.html", {"report": agreement_report(request.workspace)})


@workspace_view()
def compare(request):
    """GET: pick two runs; POST: compare them with the regression gate (stored); ?id= shows a stored one."""
    from evaluation.metrics.compare import RULES
    from evaluation.models import RunComparison
    from evaluation.services import DEFAULT_GATE, comparison_create

    comparison, status = None, 200
    if request.method == "POST":
        if WRITE not in request.capabilities:
            raise PermissionDenied("Comparing runs needs the write permission.")
        try:
            baseline = selectors.run_get(request.workspace, whole_number(request.POST, "baseline", label="Baseline run",
                                                                         default=0))
            candidate = selectors.run_get(request.workspace, whole_number(request.POST, "candidate",
                                                                          label="Candidate run", default=0))
            gate = {"max_drop": request.POST.get("max_drop", DEFAULT_GATE["max_drop"]),
                    "confidence": request.POST.get("confidence", DEFAULT_GATE["confidence"]),
                    "rule": request.POST.get("rule") or DEFAULT_GATE["rule"],
                    "min_cases": request.POST.get("min_cases") or DEFAULT_GATE["min_cases"]}
            comparison = comparison_create(actor=request.actor, baseline=baseline, candidate=candidate, gate=gate)
            return redirect(f"{request.path}?id={comparison.pk}")
        except (EvalError, ValueError, Http404) as exc:
            messages.error(request, f"Not compared: {exc}")
            status = 422
    elif request.GET.get("id"):
        if not request.GET["id"].isdigit():
            raise Http404("No such comparison.")
        comparison = RunComparison.objects.filter(workspace=request.workspace, pk=request.GET["id"]).select_related(
            "baseline", "candidate").first()
        if comparison is None:
            raise Http404("No such comparison.")
    done = selectors.runs(request.workspace).filter(status="done")
    # "Compare with…" on a run page arrives with ?baseline=&candidate= to preselect the pair; a refused POST
    # keeps the pair it was given.
    source = request.POST if request.method == "POST" else request.GET
    picked = {k: int(v) for k in ("baseline", "candidate") if (v := source.get(k, "")).isdigit()}
    if not picked and comparison is None:
        picked = _default_pair(done)
    metrics = {k: v for k, v in comparison.metrics.items() if not k.startswith("_")} if comparison else {}
    return render(request, "evaluation/compare.html", {
        "runs": done, "comparison": comparison, "picked": picked, "metrics": metrics, "gate": DEFAULT_GATE, "rules": RULES,
        "abstained": comparison.metrics.get("_abstained") if comparison else None,
        "history": RunComparison.objects.filter(workspace=request.workspace)[:20]}, status=status)


def _default_pair(done) -> dict[str, int]:
    """The newest finished run as candidate against the one before it on the same set version (the only
    pairs the gate accepts), so the form never opens on a run compared with itself."""
    seen: dict[int, int] = {}
    for pk, set_version_id in done.values_list("pk", "set_version_id")[:200]:  # newest first
        if set_version_id in seen:
            return {"baseline": pk, "candidate": seen[set_version_id]}
        seen[set_version_id] = pk
    return {}
