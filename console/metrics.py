"""`/metrics`: the Prometheus scrape (workspaces.metrics), behind a bearer token.

Without HARNESSOPS_METRICS_TOKEN the route answers 404, as if it were not there: figures about traffic are not
for whoever finds the URL. A wrong or missing token is a 401.
"""

from django.conf import settings
from django.http import Http404, HttpResponse
from django.views.decorators.http import require_GET

from workspaces.metrics import authorised, exposition


@require_GET
def metrics(request) -> HttpResponse:
    allowed = authorised(request.headers.get("Authorization", ""))
    if allowed is None:
        raise Http404("No metrics here.")
    if not allowed:
        response = HttpResponse("A scrape needs the bearer token.\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    text, content_type = exposition(settings.REDIS_URL)
    return HttpResponse(text, content_type=content_type)
