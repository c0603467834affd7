"""`/metrics`: the Prometheus scrape (workspaces.metrics), behind a bearer token.

Without HARNESSOPS_METRICS_TOKEN the route answers 404, as if it were not there: figures about traffic are not
for whoever finds the URL. A wrong or missing token is a 401.

Like /healthz, a scrape is answered by a middleware placed first (MetricsMiddleware), before host validation and
the HTTPS redirect: Prometheus scrapes the web containers over the internal network by their address
(docs/observability.md), and the token is what guards it.
"""

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings
from django.http import Http404, HttpResponse
from django.views.decorators.http import require_GET

from workspaces.metrics import authorised, exposition

METRICS_PATH = "/metrics"


@require_GET
def metrics(request) -> HttpResponse:
    allowed = authorised(request.headers.get("Authorization", ""))
    if allowed is None:
        raise Http404("No metrics here.")
    return _scrape(allowed)


def _scrape(allowed: bool) -> HttpResponse:
    if not allowed:
        response = HttpResponse("A scrape needs the bearer token.\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    text, content_type = exposition(settings.REDIS_URL)
    return HttpResponse(text, content_type=content_type)


class MetricsMiddleware:
    """Answers an authorised scrape of /metrics before anything reads the Host header; without a configured
    token it does nothing, and the request goes on to the URLconf's 404 like any unknown path."""

    sync_capable = async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request):
        if self.is_async:
            return self.__acall__(request)
        allowed = _scrape_allowed(request)
        return self.get_response(request) if allowed is None else _scrape(allowed)

    async def __acall__(self, request):
        allowed = _scrape_allowed(request)
        if allowed is None:
            return await self.get_response(request)
        return await sync_to_async(_scrape, thread_sensitive=False)(allowed)


def _scrape_allowed(request) -> bool | None:
    if request.path != METRICS_PATH or request.method not in ("GET", "HEAD"):
        return None
    return authorised(request.META.get("HTTP_AUTHORIZATION", ""))
