"""The platform API: wires each package's router and maps domain errors to clear 4xx answers."""

import logging
from functools import wraps

from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.db import InterfaceError as DatabaseInterfaceError
from django.db import OperationalError as DatabaseUnavailable
from django.http import Http404
from ninja import NinjaAPI
from ninja.errors import ValidationError as NinjaValidationError
from ninja.parser import Parser
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from evaluation.evolution.api import router as evolution_router
from evaluation.evolution.errors import EvolutionError
from harness.api import router as harness_router
from harness.services import CommitConflict, LabelConflict, StoreError
from harness.spec import SpecInvalid
from serving.api import router as serving_router
from serving.auth import ApiKeyAuth
from serving.experiments.lifecycle import ExperimentError
from serving.services import ReplyRequestError
from training.api import router as training_router
from training.services import TrainingError
from workspaces.identifiers import InvalidIdentifier
from workspaces.schemas import ERROR_MEANINGS, RETRY_AFTER_HEADER, RETRY_AFTER_S

log = logging.getLogger(__name__)

# PostgreSQL text and jsonb cannot hold NUL characters; a request that carries one (valid JSON, valid for
# the schema) would fail deep in a write. They never mean anything here, so they arrive as U+FFFD.
NUL, REPLACEMENT = "\x00", "\ufffd"


def without_nul(value):
    if isinstance(value, str):
        return value.replace(NUL, REPLACEMENT)
    if isinstance(value, list):
        return [without_nul(item) for item in value]
    if isinstance(value, dict):
        return {without_nul(k): without_nul(v) for k, v in value.items()}
    return value


def _may_carry_nul(body: bytes) -> bool:
    """Whether a JSON body can decode to text with a NUL: only through the escape `\\u0000` (a raw control
    character is invalid JSON), or as a zero byte (a UTF-16/32 body). Most bodies have neither, and then the
    parsed payload is returned without walking every value."""
    return b"\\u0000" in body or b"\x00" in body


class ApiParser(Parser):
    def parse_body(self, request):
        data = super().parse_body(request)
        return without_nul(data) if _may_carry_nul(request.body) else data

    def parse_querydict(self, data, list_fields, request):
        return without_nul(super().parse_querydict(data, list_fields, request))


def path_without_nul(run):
    @wraps(run)
    def wrapper(request, **path_params):
        return run(request, **without_nul(path_params))

    return wrapper


class PlatformApi(NinjaAPI):
    def get_openapi_schema(self, *, path_prefix=None, path_params=None):
        """Each documented error answer says what it means on this API (workspaces.schemas.ERROR_MEANINGS), and a
        503 the Retry-After header it carries when a dependency is away (_dependency_away)."""
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        for operations in schema["paths"].values():
            for operation in operations.values():
                for status, answer in operation["responses"].items():
                    if int(status) in ERROR_MEANINGS:
                        answer["description"] = ERROR_MEANINGS[int(status)]
                    if int(status) == 503:
                        answer["headers"] = RETRY_AFTER_HEADER
        return schema


api = PlatformApi(
    title="HarnessOps platform API",
    version="1",
    urls_namespace="api",
    auth=ApiKeyAuth(),
    docs_url="/docs",
    parser=ApiParser(),
)
api.add_decorator(path_without_nul, mode="view")
api.add_router("/v1", harness_router)
api.add_router("/v1", serving_router)
api.add_router("/v1", evolution_router)
api.add_router("/v1", training_router)


@api.exception_handler(SpecInvalid)
def _spec_invalid(request, exc: SpecInvalid):
    errors = [{"path": e.path, "message": e.message} for e in exc.errors]
    return api.create_response(request, {"detail": f"The harness has {len(errors)} error(s).", "errors": errors},
                               status=422)


@api.exception_handler(InvalidIdentifier)
def _invalid_identifier(request, exc: InvalidIdentifier):
    return api.create_response(request, {"detail": str(exc), "errors": [{"path": exc.field, "message": str(exc)}]},
                               status=422)


@api.exception_handler(CommitConflict)
def _conflict(request, exc: CommitConflict):
    changes = [{"path": c.path, "status": c.status} for c in (exc.diff.changes if exc.diff else ())]
    return api.create_response(request, {"detail": str(exc), "head": exc.head.number,
                                         "base": exc.base.number if exc.base else None, "errors": changes},
                               status=409)


@api.exception_handler(LabelConflict)
def _label_conflict(request, exc: LabelConflict):
    return api.create_response(request, {"detail": str(exc), "errors": []}, status=409)


@api.exception_handler(StoreError)
@api.exception_handler(ExperimentError)
def _store_error(request, exc: Exception):
    return api.create_response(request, {"detail": str(exc), "errors": []}, status=400)


# What these refuse through the API is a valid request at odds with the current state (a room without a
# harness in a workspace with several; a proposal already decided, a run not done, a window without judged
# traces): the schemas refuse the invalid ones first, with a 422 naming the field.
@api.exception_handler(ReplyRequestError)
@api.exception_handler(EvolutionError)
def _state_conflict(request, exc: Exception):
    return api.create_response(request, {"detail": str(exc), "errors": []}, status=409)


@api.exception_handler(TrainingError)
def _training_invalid(request, exc: TrainingError):
    return api.create_response(request, {"detail": str(exc), "errors": [{"path": exc.field, "message": str(exc)}]},
                               status=422)


@api.exception_handler(ImproperlyConfigured)
def _misconfigured(request, exc):
    return api.create_response(request, {"detail": f"Not available here: {exc}", "errors": []}, status=503)


@api.exception_handler(DatabaseUnavailable)
@api.exception_handler(DatabaseInterfaceError)
@api.exception_handler(RedisConnectionError)
@api.exception_handler(RedisTimeoutError)
def _dependency_away(request, exc):
    """PostgreSQL (or a Redis call that does not degrade) away for a moment: a 503 that says when to come back,
    never a 500. A write under way was rolled back whole, or had committed before the answer was lost: resent,
    what it stored answers as duplicates (event batches), never a second count."""
    log.warning("%s %s: a dependency is unreachable (%s: %s)", request.method, request.path, type(exc).__name__,
                str(exc).strip()[:300])
    response = api.create_response(request, {"detail": "A service this needs is unreachable for a moment; send "
                                                       f"the request again after {RETRY_AFTER_S} s.", "errors": []},
                                   status=503)
    response["Retry-After"] = str(RETRY_AFTER_S)
    return response


@api.exception_handler(PermissionDenied)
def _forbidden(request, exc):
    return api.create_response(request, {"detail": str(exc) or "Forbidden.", "errors": []}, status=403)


@api.exception_handler(Http404)
def _not_found(request, exc):
    return api.create_response(request, {"detail": str(exc) or "Not found.", "errors": []}, status=404)


@api.exception_handler(NinjaValidationError)
def _invalid_request(request, exc: NinjaValidationError):
    errors = [{"path": ".".join(str(p) for p in e.get("loc", ())), "message": e.get("msg", "")} for e in exc.errors]
    return api.create_response(request, {"detail": "The request is invalid.", "errors": errors}, status=422)
