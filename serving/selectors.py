"""Reads for rooms and traces, within one workspace."""

from django.db.models import Q, QuerySet
from django.http import Http404

from console.models import Workspace
from serving.models import Room, Trace


def rooms(workspace: Workspace) -> QuerySet[Room]:
    return Room.objects.filter(workspace=workspace).select_related("harness").order_by("room_id")


class TraceFilterError(ValueError):
    """A trace filter value that cannot mean anything; the message says what would."""


def _version_filter(workspace: Workspace, text: str) -> Q:
    """`avatar@v3` / `avatar@production` / `avatar@1a2b3c4d` (one harness), `v3` (any harness's v3),
    `production` (whatever each harness's production label points at now) or a harness name."""
    from harness import selectors as harness_selectors
    from harness.models import Harness, Label

    name, at, ref = text.partition("@")
    if at:
        harness = Harness.objects.filter(workspace=workspace, name=name.strip()).first()
        if harness is None:
            raise TraceFilterError(f"Version: there is no harness named “{name.strip()}”.")
        try:
            version = harness_selectors.version_resolve(harness, ref)
        except Http404 as exc:
            raise TraceFilterError(f"Version: {exc}") from None
        return Q(harness_version=version)
    if text[:1] == "v" and text[1:].isascii() and text[1:].isdigit() and len(text) <= 10:
        return Q(harness_version__number=int(text[1:]))
    if Harness.objects.filter(workspace=workspace, name=text).exists():
        return Q(harness__name=text)
    pointed = list(Label.objects.filter(harness__workspace=workspace, name=text).values_list("version_id", flat=True))
    if pointed:
        return Q(harness_version_id__in=pointed)
    raise TraceFilterError(f"Version: “{text}” is not a harness, a label, vN or harness@vN.")


def trace_list(workspace: Workspace, *, version: str = "", outcome: str = "", hook: str = "", source: str = "",
               min_latency_ms: float | None = None) -> QuerySet[Trace]:
    """Traces matching every filter given; a version filter that names nothing raises TraceFilterError."""
    traces = Trace.objects.filter(workspace=workspace).select_related("harness", "harness_version").defer("data")
    if version:
        traces = traces.filter(_version_filter(workspace, version))
    if outcome:
        traces = traces.filter(outcome=outcome)
    if hook:
        # JSON lists are searched as text so the filter works on SQLite and PostgreSQL alike.
        traces = traces.filter(hooks_fired__icontains=f'"{hook}"')
    if source:
        traces = traces.filter(source=source)
    if min_latency_ms is not None:
        traces = traces.filter(latency_ms__gte=min_latency_ms)
    return traces


def trace_get(workspace: Workspace, trace_id: str) -> Trace:
    trace = Trace.objects.select_related("harness", "harness_version").filter(workspace=workspace,
                                                                            trace_id=trace_id).first()
    if trace is None:
        raise Http404("No such trace.")
    return trace
