"""Console pages for the running agent: the playground and the trace browser."""

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ImproperlyConfigured
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST
from django.views.decorators.vary import vary_on_headers

from console.pagination import page_from_query
from console.views.scoping import workspace_view
from harness import selectors as harness_selectors
from harness.runtime import OUTCOMES
from harness.spec import parse_files
from serving import selectors
from serving.model_config import available_backends
from serving.model_state import backend_states, outcome_explanation, trained_default
from serving.models import Trace
from serving.services import ReplyRequestError, room_reply
from workspaces.access import WRITE

DIALOGUE_KEEP = 10


def _session_key(workspace) -> str:
    return f"playground:{workspace.slug}"


def _trained_for(harnesses) -> str:
    """The harness the embedded trained model was trained on, when the workspace has it at its head (the
    first thing a new operator tries should be what the default model can answer), else ""."""
    trained = trained_default()
    wanted = (trained or {}).get("harness", {}).get("content_hash")
    return next((h.name for h in harnesses if wanted and h.head and h.head.content_hash == wanted), "")


@workspace_view(WRITE)
def playground(request):
    """Chat with any version (or your draft) in any room, with any backend, and read each turn's trace."""
    harnesses = list(harness_selectors.harness_list(request.workspace))
    rooms = list(selectors.rooms(request.workspace))
    state = request.session.get(_session_key(request.workspace), {"dialogue": []})
    backends = available_backends(request.workspace)
    context = {"harnesses": harnesses, "rooms": rooms, "backends": backends, "state": state,
               "choice": state.get("choice", {}), "error": "", "models": backend_states(request.workspace, backends),
               "default_backend": settings.MODEL_BACKEND}
    if request.method != "POST":
        # A version page links here with ?harness=&version=N to preselect that version.
        if request.GET.get("harness") and request.GET.get("version", "").isdigit():
            context["choice"] = {**context["choice"], "harness": request.GET["harness"],
                                 "version": request.GET["version"]}
            heads = {(h.name, str(h.head.number)) for h in harnesses if h.head}
            if (request.GET["harness"], request.GET["version"]) not in heads:  # a head already has its option
                context["pinned"] = f"{request.GET['harness']} v{request.GET['version']}"
        elif not context["choice"].get("harness"):
            context["choice"] = {**context["choice"], "harness": _trained_for(harnesses)}
        return render(request, "serving/playground.html", context)

    choice = {k: request.POST.get(k, "") for k in ("harness", "version", "backend", "room", "viewer_id")}
    message = request.POST.get("message", "").strip()
    context["choice"] = choice
    try:
        if not message:
            raise ReplyRequestError("Type a viewer message.")
        if choice["backend"] and choice["backend"] not in context["backends"]:
            raise ReplyRequestError(f"The {choice['backend']} backend is not available here; "
                                    f"choose one of {', '.join(context['backends'])}.")
        harness = harness_selectors.harness_get(request.workspace, choice["harness"])
        version = spec = None
        if choice["version"] == "draft":
            draft = harness_selectors.draft_for(harness, request.user)
            if draft is None:
                raise ReplyRequestError("You have no draft of this harness.")
            spec = parse_files(draft.files)
        elif choice["version"].isdigit():
            version = int(choice["version"])
        label = choice["version"][6:] if choice["version"].startswith("label:") else None
        outcome = room_reply(
            actor=request.actor, workspace=request.workspace, room_id=choice["room"], message=message,
            viewer_id=choice["viewer_id"] or "playground", recent_dialogue=[tuple(t) for t in state["dialogue"]],
            harness_name=harness.name, label=label, version=version, backend_name=choice["backend"] or None,
            source=Trace.Source.PLAYGROUND, spec_override=spec,
        )
    except (ReplyRequestError, ImproperlyConfigured, Http404) as exc:
        context["error"] = str(exc)
        template = "serving/playground.html#turn" if request.htmx else "serving/playground.html"
        return render(request, template, context, status=422)
    result = outcome.result
    state["dialogue"] = (state["dialogue"] + [["viewer", message]]
                         + ([] if result.silent else [["assistant", result.reply]]))[-DIALOGUE_KEEP:]
    state["choice"] = choice
    request.session[_session_key(request.workspace)] = state
    context.update(message=message, result=result, trace=result.trace,
                   explanation=outcome_explanation(result.trace),
                   models=backend_states(request.workspace, backends))  # with this turn's speed
    template = "serving/playground.html#turn" if request.htmx else "serving/playground.html"
    return render(request, template, context)


@require_POST
@workspace_view(WRITE)
def playground_reset(request):
    request.session.pop(_session_key(request.workspace), None)
    messages.info(request, "Conversation cleared.")
    return redirect("playground", ws=request.workspace.slug)


TRACE_FILTERS = ("version", "outcome", "hook", "source", "min_latency_ms")


def _trace_filter_errors(filters: dict[str, str]) -> tuple[list[str], float | None]:
    """Messages for filter values that cannot match anything, and the parsed latency bound."""
    errors, min_latency = [], None
    if filters["outcome"] and filters["outcome"] not in OUTCOMES:
        errors.append(f"Outcome: “{filters['outcome']}” is not one of {', '.join(OUTCOMES)}.")
    if filters["source"] and filters["source"] not in Trace.Source.values:
        errors.append(f"Source: “{filters['source']}” is not one of {', '.join(Trace.Source.values)}.")
    if filters["min_latency_ms"]:
        try:
            min_latency = float(filters["min_latency_ms"])
            if not 0 <= min_latency < float("inf"):
                raise ValueError
        except ValueError:
            errors.append(f"Min latency: “{filters['min_latency_ms']}” is not a number of milliseconds (e.g. 1500).")
    return errors, min_latency


@vary_on_headers("HX-Request")  # the same URL answers a fragment or the page: caches must tell them apart
@workspace_view()
def trace_list(request):
    """Filters live in the query string, so a filtered list can be shared, bookmarked and gone back to."""
    filters = {k: request.GET.get(k, "").strip() for k in TRACE_FILTERS}
    errors, min_latency = _trace_filter_errors(filters)
    traces = Trace.objects.none()
    if not errors:
        try:
            traces = selectors.trace_list(request.workspace, version=filters["version"], outcome=filters["outcome"],
                                          hook=filters["hook"], source=filters["source"], min_latency_ms=min_latency)
        except selectors.TraceFilterError as exc:
            errors.append(str(exc))
    paged = page_from_query(request.GET, traces)
    context = {"page": paged.page, "page_error": None if errors else paged.error, "filters": filters,
               "outcomes": OUTCOMES, "sources": Trace.Source.values, "errors": errors}
    status = 422 if errors or paged.error else 200
    if request.htmx and not request.htmx.history_restore_request:  # a history restore needs the page
        return render(request, "serving/traces.html#rows", context, status=status)
    return render(request, "serving/traces.html", context, status=status)


@workspace_view()
def trace_detail(request, trace_id: str):
    trace = selectors.trace_get(request.workspace, trace_id)
    data = trace.data if isinstance(trace.data, dict) else {}
    sent = selectors.trace_sent_request(trace)
    return render(request, "serving/trace.html", {"trace": trace, "data": {**data, "request": sent} if sent else data,
                                                  "sent": sent, "sent_lost": bool(data.get("request")) and not sent})
