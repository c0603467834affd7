"""Bearer-token authentication for the platform API."""

from ninja.security import HttpBearer

from serving.services import api_key_authenticate, api_key_remembered
from workspaces.access import Actor


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


class RememberedApiKeyAuth(ApiKeyAuth):
    """The same, from the per-process memo of keys (`api_key_remembered`); sets `request.key_generation`,
    which the view must compare with the current generation before doing anything (serving.api._key_current):
    the reply route, which reads that generation in its one Redis round trip anyway (serving/admission.py), and
    the events route, whose batches would otherwise each pay the key's query."""

    def authenticate(self, request, token):
        key, generation = api_key_remembered(token)
        if key is None:
            return None
        request.api_key, request.key_generation, request.key_token = key, generation, token
        request.workspace = key.workspace
        request.actor = Actor.for_api_key(key)
        return key
