"""Bearer-token authentication for the platform API."""

from ninja.security import HttpBearer

from console.access import Actor
from serving.services import api_key_authenticate


class ApiKeyAuth(HttpBearer):
    """`Authorization: Bearer hok_<prefix>_<secret>`; sets `request.actor` and `request.api_key`."""

    def authenticate(self, request, token):
        key = api_key_authenticate(token)
        if key is None:
            return None
        request.api_key = key
        request.workspace = key.workspace
        request.actor = Actor.for_api_key(key)
        return key
