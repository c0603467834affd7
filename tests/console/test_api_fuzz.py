"""Schemathesis fuzzes the platform API against its own OpenAPI schema, with every check.

No answer is a server error, and each answer (status code, content type, body) is one the schema
documents; schema-valid requests are not rejected and invalid ones are. The API runs in-process (WSGI) on
the test database, with a key holding every scope, a registered room and the scripted model, so fuzzed
requests reach the services rather than stopping at authentication. Bounded and deterministic: a fixed
number of examples per operation, derandomized.
"""

import os
import zlib

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.core.parameters import ParameterLocation

from harness import services as harness_services
from serving.services import api_key_create, room_upsert
from tests.serving.test_reply_api import ROOM
from workspaces.access import Actor

# Enough to reach every documented answer in the suite; raise it for a deeper local run.
EXAMPLES_PER_OPERATION = int(os.environ.get("HARNESSOPS_FUZZ_EXAMPLES", "25"))

# A commit's files are a harness directory (docs/harness-format.md): their contents are YAML, Markdown
# and JSON that only the harness parser can judge, so a schema-valid commit may still be a documented
# 422 listing each file's errors. A live diagnosis's window is only known to hold judged traces once it is
# read: a schema-valid window with none (or with `start` after `end`) is the documented 400. Everywhere
# else a schema-valid request must be accepted.
CONFIG = schemathesis.Config.from_dict({"operations": [{
    "include-path": "/api/v1/harnesses/{name}/versions", "include-method": "POST",
    "checks": {"positive_data_acceptance": {"expected-statuses": ["2xx", "401", "403", "404", "409", "422"]}},
}, {
    "include-path": "/api/v1/harnesses/{name}/diagnoses", "include-method": "POST",
    "checks": {"positive_data_acceptance": {"expected-statuses": ["2xx", "400", "401", "403", "404"]}},
}]})
schema = schemathesis.openapi.from_wsgi("/api/openapi.json", get_wsgi_application(), config=CONFIG)

# Random names find nothing and answer 404 before the endpoint does any work, so half of the
# schema-valid cases address the objects the fixture made: the harness, its labels, its room.
KNOWN = {"name": ["avatar"], "room_id": ["demo-room"], "label": ["staging", "production"],
         "ref": ["1", "v1", "staging"]}


@schema.hook
def map_case(context, case):
    path = case.meta.components.get(ParameterLocation.PATH) if case.meta else None
    if not case.path_parameters or (path is not None and path.mode.is_negative):
        return case
    seed = zlib.crc32(repr(sorted(case.path_parameters.items())).encode())
    if seed % 2:
        for param, known in KNOWN.items():
            if param in case.path_parameters:
                case.path_parameters[param] = known[seed % len(known)]
    return case


@pytest.fixture
def token(workspace, harness, settings):
    settings.MODEL_BACKEND = "scripted"
    settings.SCRIPTED_STEPS = ["Happy to help!"]
    settings.TRACE_WRITES = "sync"
    system = Actor.system("fuzz")
    for label in ("production", "staging"):
        harness_services.label_move(actor=system, harness=harness, name=label, version=harness.head, reason="go")
    room_upsert(workspace=workspace, context=ROOM, harness=harness)
    # As Django's test client does: requests must not close the test's connection (and its transaction).
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield api_key_create(actor=system, workspace=workspace, name="fuzz",
                         scopes=["read", "write", "approve", "ingest"])[1]
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.mark.django_db
@schema.parametrize()
@settings(max_examples=EXAMPLES_PER_OPERATION, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_schema(case, token):
    case.call_and_validate(headers={"Authorization": f"Bearer {token}"})
