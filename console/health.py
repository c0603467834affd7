"""`/healthz`: is this process up and can it reach its database?

Container probes call it as `http://127.0.0.1:8000/healthz`: plain HTTP, with a Host that is not in
ALLOWED_HOSTS. `HealthCheckMiddleware` runs first in MIDDLEWARE and answers before SecurityMiddleware's
HTTPS redirect and before anything reads the Host header, so the probe works under production settings.
It reveals nothing but "ok" or which dependency is down (the shared cache: down for how long, as this process
last saw it).
"""

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.db import DatabaseError, connection
from django.http import JsonResponse

from workspaces.tokens import cache_health

HEALTH_PATH = "/healthz"


def healthz(request) -> JsonResponse:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError:
        return JsonResponse({"status": "unavailable", "database": "unreachable"}, status=503)
    # A cache outage is not a reason to take this process out of service (replies degrade, module tokens.py);
    # it is said here, as this process last saw it.
    return JsonResponse({"status": "ok", **cache_health()})


class HealthCheckMiddleware:
    """Both sync and async, so that under ASGI a request that is not the probe stays on the event loop."""

    sync_capable = async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request):
        if self.is_async:
            return self.__acall__(request)
        if _is_probe(request):
            return healthz(request)
        return self.get_response(request)

    async def __acall__(self, request):
        if _is_probe(request):
            return await sync_to_async(healthz)(request)
        return await self.get_response(request)


def _is_probe(request) -> bool:
    return request.path == HEALTH_PATH and request.method in ("GET", "HEAD")
