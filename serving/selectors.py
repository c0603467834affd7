"""Reads for rooms and traces, within one workspace."""

from django.db.models import QuerySet
from django.http import Http404

from console.models import Workspace
from serving.models import Room, Trace


def rooms(workspace: Workspace) -> QuerySet[Room]:
    return Room.objects.filter(workspace=workspace).select_related("harness").order_by("room_id")


def trace_list(workspace: Workspace, *, version: str = "", outcome: str = "", hook: str = "", source: str = "",
               min_latency_ms: float | None = None) -> QuerySet[Trace]:
    traces = Trace.objects.filter(workspace=workspace).select_related("harness", "harness_version").defer("data")
    if version:
        name, _, number = version.partition("@v")
        traces = traces.filter(harness__name=name, harness_version__number=number) if number.isdigit() \
            else traces.filter(harness__name=name)
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
