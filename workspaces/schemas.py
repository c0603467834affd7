"""What every platform API schema shares: the error shape (console/api.py maps domain errors onto it), strict
request bodies, ISO date-times and the OpenAPI links from an operation to those that use what it answered."""

import re
from datetime import datetime
from typing import Annotated

from ninja import Schema
from ninja.errors import ValidationError
from pydantic import BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError


class ErrorOut(Schema):
    detail: str = Field(description="What went wrong, for a person.")
    errors: list[dict] = Field(default_factory=list, description="Field paths and messages, or diff entries.")


# What each status means on this API (the handlers in console/api.py and ninja's own answers); the OpenAPI
# schema gives each documented error answer its meaning (console/api.py).
ERROR_MEANINGS = {
    400: "The body is not JSON, or the request cannot be carried out as asked.",
    401: "No valid API key.",
    403: "The key lacks the scope this needs.",
    404: "No such object in the key's workspace.",
    409: "Conflict with the current state: a stale base version, a label already there, a proposal already "
         "decided, a run not finished, no judged traces in the window, a room without a harness.",
    413: "The body is too large.",
    422: "The request is invalid; `errors` lists the fields.",
    429: "Rate limit reached for this key.",
    503: "Not available in this deployment (e.g. no model server configured), or a service it needs (the "
         "database) is unreachable for a moment: then the Retry-After header says in how many seconds to send the "
         "request again.",
}
RETRY_AFTER_S = 5  # what a 503 for a dependency that is away asks the client to wait
# Every documented 503 carries it then (OpenAPI `responses.503.headers`; absent on a 503 for what this deployment
# does not run).
RETRY_AFTER_HEADER = {"Retry-After": {"description": "When a service it needs is unreachable for a moment: seconds "
                                                     "to wait before sending the request again.",
                                      "required": False, "schema": {"type": "integer", "minimum": 1}}}


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


class BodyIn(Schema):
    """A request body: each value must have the JSON type the schema gives it (`"override": 0` is not a
    boolean, `"version": "3"` not an integer), as client generators read the schema. A float field still
    takes a JSON integer; integer fields are `json_int()`."""

    model_config = ConfigDict(strict=True)


def _json_integer(value):
    # JSON Schema counts 3.0 as an integer, and clients send it so; a boolean or a string is not one.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


def json_int(**constraints) -> type:
    """An integer in a strict body: a JSON number without a fractional part (3 or 3.0), never true or "3".
    `constraints` (ge, le) go here rather than on the field: pydantic leaves a field's constraints out of the
    JSON schema of `json_int() | None`."""
    return Annotated[int, Field(strict=False, **constraints), BeforeValidator(_json_integer)]


# Text that is not blank: some character Python's str.strip() keeps (services strip and refuse blank text).
# Spelled out rather than `\S`, which JSON Schema (ECMA), pydantic (Rust) and Python each read differently:
# U+001C-U+001F are blank to Python only, so a reason of "\x1f" passed `\S` and the service refused it.
NOT_BLANK = r"[^\t\n\v\f\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]"


_ISO_DATE = re.compile(r"\d{4}-\d\d-\d\d")


def _iso_text(value):
    # Lax pydantic would read 0 or "0" as 1970-01-01 (a Unix time); the schema says an ISO 8601 string.
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str) or not _ISO_DATE.match(value):
        raise ValueError("Input should be an ISO 8601 date-time, e.g. 2026-01-31T12:00:00Z")
    return value


# A date-time in a strict body: ISO 8601 text (`format: date-time`), parsed as pydantic parses it.
IsoDateTime = Annotated[datetime, Field(strict=False), BeforeValidator(_iso_text)]


def links(*statuses: int, **targets: dict[str, str]) -> dict:
    """`openapi_extra=links(201, training_api_get_job={"job_id": "$response.body#/id"})`: OpenAPI links from this
    operation's answers with `statuses` to the operations (by operationId, ninja's `<module>_<function>`) that
    read or act on what it answered, their parameters as runtime expressions. Client generators and
    Schemathesis's stateful phase follow them; tests/console/test_api_contract.py checks that each resolves."""
    described = {name: {"operationId": name, "parameters": parameters} for name, parameters in targets.items()}
    return {"responses": {status: {"links": described} for status in statuses}}
