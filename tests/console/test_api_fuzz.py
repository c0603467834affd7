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

# Everywhere a schema-valid request must be served or answered 401/403/404/409/429, except where part of a body
# is judged by code a schema cannot say (tests/console/test_api_contract.py runs the same exceptions live):
# - a commit's files are a harness directory: their YAML, Markdown and JSON only the harness parser can judge
#   (docs/harness-format.md), so a schema-valid commit may still be the documented 422 listing each file's errors;
# - a live diagnosis's window must start before it ends and span at most 31 days: rules between two fields,
#   which JSON Schema cannot state (the description does; the answer is a 422 naming `end`);
# - a training job's config is judged by the pipeline's config class (each stage's knobs, their ranges and the
#   rules between them), and the harness versions and eval sets it names must exist in the workspace: a 422
#   naming the field.
# (An operation is named as "METHOD path": `include-path` and `include-method` given together match either.)
JUDGED_BEYOND_THE_SCHEMA = ["POST /api/v1/harnesses/{name}/versions", "POST /api/v1/harnesses/{name}/diagnoses",
                            "POST /api/v1/training/jobs"]
CONFIG = schemathesis.Config.from_dict({"operations": [{
    "include-name": name,
    "checks": {"positive_data_acceptance": {"expected-statuses": ["2xx", "401", "403", "404", "409", "422"]}},
} for name in JUDGED_BEYOND_THE_SCHEMA]})
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
def token(workspace, harness, settings, tmp_path):
    settings.MODEL_BACKEND = "scripted"
    settings.SCRIPTED_STEPS = ["Happy to help!"]
    # A request may name the `local` backend; SmolLM2 on llama.cpp takes seconds a turn on these CPUs, so here
    # its model file is missing and the turn answers at once with the fallback (the contract is the same).
    settings.LOCAL_MODEL = str(tmp_path / "absent.gguf")
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
