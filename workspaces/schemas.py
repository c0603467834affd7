"""The error shape every platform API answer shares (console/api.py maps domain errors onto it)."""

from ninja import Schema
from ninja.errors import ValidationError
from pydantic import Field


class ErrorOut(Schema):
    detail: str = Field(description="What went wrong, for a person.")
    errors: list[dict] = Field(default_factory=list, description="Field paths and messages, or diff entries.")


# What each status means on this API (the handlers in console/api.py and ninja's own answers).
ERROR_MEANINGS = {
    400: "The body is not JSON, or the request cannot be carried out as asked.",
    401: "No valid API key.",
    403: "The key lacks the scope this needs.",
    404: "No such object in the key's workspace.",
    409: "Conflict with the current state (a stale base version).",
    413: "The body is too large.",
    422: "The request is invalid; `errors` lists the fields.",
    429: "Rate limit reached for this key.",
    503: "Not available in this deployment (e.g. no model server configured).",
}


def errors(*codes: int) -> dict[int, type[ErrorOut]]:
    """`response={200: XOut, **errors(401, 403, 404)}`: document the error answers an endpoint can give."""
    unknown = set(codes) - set(ERROR_MEANINGS)
    if unknown:
        raise ValueError(f"undocumented error codes {sorted(unknown)}")
    return dict.fromkeys(codes, ErrorOut)


def reject_unknown_query(request, *names: str) -> None:
    """422 for query parameters the endpoint does not define: a typo (`?steam=1`) is an error, not ignored."""
    unknown = sorted(set(request.GET) - set(names))
    if unknown:
        raise ValidationError([{"loc": ("query", name), "msg": "Unknown query parameter."} for name in unknown])
