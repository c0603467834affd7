"""The OpenAPI schema is the whole contract, checked as a client generator would read it: Schemathesis runs
every check, the stateful phase included, against the real server (Daphne on this test's database).

A schema-valid request is served or answered 401/403/404/409/429, a schema-invalid one is refused, every
answer is one the schema documents, and the links from each creator to its readers let the stateful phase
reach every operation with real identifiers (a run that leaves an operation unreachable fails: its
"missing test data" warning). Bounded and repeatable: a fixed example count and seed.
"""

import json
import os
import subprocess
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from evaluation.evolution import diagnosing
from evaluation.evolution.models import Diagnosis
from harness import services as harness_services
from serving.models import Trace
from serving.services import api_key_create, room_upsert
from serving.traces import trace_row, traces_store
from tests.console.test_api_fuzz import JUDGED_BEYOND_THE_SCHEMA
from tests.evaluation.conftest import finished_run  # noqa: F401  (a fixture: a done eval run to diagnose)
from tests.live_servers import BIN, ROOT, requires_services, start_daphne, stop
from tests.serving.test_reply_api import ROOM
from tests.training.jobs_builders import mini_harness, sft, tiny_config
from training import services as training_services
from workspaces.access import Actor

# A few minutes on two cores; raise them for a deeper local run.
EXAMPLES = int(os.environ.get("HARNESSOPS_CONTRACT_EXAMPLES", "10"))
STATEFUL_STEPS = int(os.environ.get("HARNESSOPS_CONTRACT_STEPS", "20"))
SEED = int(os.environ.get("HARNESSOPS_CONTRACT_SEED", "44"))


def config(known: dict[str, list], known_to: dict[str, dict[str, list]]) -> str:
    """schemathesis.toml. Half of the generated values of `known` parameters (`path.name`, `body.start`), and of
    `known_to[operation]`'s in that operation, name what the fixture made and no operation creates (the harness,
    a room, an eval run, a diagnosis run to its proposals and those proposals, a window with a judged live
    trace), as random ones find nothing; versions, labels and jobs the stateful phase reaches through the links.
    The operations judged beyond the schema keep their 422 (test_api_fuzz.py says why)."""
    lines = [f"[phases.stateful]\nmax-steps = {STATEFUL_STEPS}\n"]
    dictionaries = {"": known} | {f"{i}-": values for i, values in enumerate(known_to.values())}
    for prefix, values in dictionaries.items():
        lines += [f"[dictionaries.{prefix}{param.replace('.', '-')}]\nvalues = {json.dumps(v)}\n"
                  for param, v in values.items()]

    def bound(prefix: str, values: dict) -> list[str]:
        return [f'"{param}" = {{ dictionary = "{prefix}{param.replace(".", "-")}", probability = 0.5 }}'
                for param in values]

    lines += ["[parameters]", *bound("", known)]
    for i, (name, values) in enumerate(known_to.items()):
        lines += ["", "[[operations]]", f'include-name = "{name}"', "[operations.parameters]", *bound(f"{i}-", values)]
    for name in JUDGED_BEYOND_THE_SCHEMA:
        lines += ["", "[[operations]]", f'include-name = "{name}"',
                  'checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409", "422"]']
    return "\n".join(lines) + "\n"


@pytest.fixture
def seeded(workspace, harness, finished_run, settings, purge_queue_fixture):  # noqa: F811
    """What a workspace in use holds: labels, a room, a done run with a diagnosis and its proposals, a queued
    training job, a judged live trace, and a key with every scope."""
    system = Actor.system("contract")
    for label in ("production", "staging"):
        harness_services.label_move(actor=system, harness=harness, name=label, version=harness.head, reason="go")
    room_upsert(workspace=workspace, context=ROOM, harness=harness)
    diagnosis = Diagnosis.objects.create(workspace=workspace, harness=harness, version=harness.head,
                                         run=finished_run, created_by="contract")
    assert diagnosing.diagnosis_execute(diagnosis_id=diagnosis.pk) == "done"
    training_services.job_create(actor=system, workspace=workspace, name="contract", config=tiny_config(sft(2)),
                                 harness_versions=[mini_harness(workspace).head], simulator={"seed": 1, "size": 4},
                                 start=False)
    # Live traffic of v1 with a live judge's verdict, to diagnose in a window of the last hour.
    result = finished_run.results.order_by("id").first()
    trace = {**result.trace, "trace_id": uuid.uuid4().hex, "started_at": time.time() - 60}
    traces_store([trace_row(workspace_id=workspace.pk, data=trace, source=Trace.Source.API, harness_id=harness.pk,
                            version_id=harness.head_id)])
    Trace.objects.filter(trace_id=trace["trace_id"]).update(judge_accuracy=result.accuracy, judge_version="contract",
                                                            judge_effectiveness=result.effectiveness)
    now = datetime.now(UTC)
    token = api_key_create(actor=system, workspace=workspace, name="contract",
                           scopes=["read", "write", "approve", "ingest"])[1]
    known = {"path.name": ["avatar"], "path.room_id": ["demo-room"], "path.run_id": [finished_run.pk],
             "path.diagnosis_id": [diagnosis.pk], "body.version": [harness.head.number],
             "body.start": [(now - timedelta(hours=1)).isoformat()], "body.end": [(now + timedelta(hours=1)).isoformat()]}
    # A proposal is decided once: accepting and rejecting each get their own.
    candidates = list(diagnosis.proposals.filter(valid=True).values_list("pk", flat=True))
    assert len(candidates) >= 2
    known_to = {"POST /api/v1/proposals/{proposal_id}/accept": {"path.proposal_id": candidates[::2]},
                "POST /api/v1/proposals/{proposal_id}/reject": {"path.proposal_id": candidates[1::2]}}
    return token, known, known_to


@requires_services
@pytest.mark.django_db(transaction=True)  # the server reads what the fixture wrote
@pytest.mark.timeout(900)  # about a minute and a half here; Daphne alone may take minutes to start on a starved host
def test_the_live_server_keeps_its_openapi_contract(seeded, tmp_path: Path):
    token, known, known_to = seeded
    (tmp_path / "schemathesis.toml").write_text(config(known, known_to))
    # A reply may name the `local` backend: SmolLM2 on llama.cpp takes seconds a turn on these CPUs, so here its
    # model file is missing and the turn answers at once with the fallback (the contract is the same).
    process, base = start_daphne(HARNESSOPS_REPLY_RATE_PER_MINUTE="1000000",
                                 HARNESSOPS_LOCAL_MODEL=str(tmp_path / "absent.gguf"))
    report = tmp_path / "report.json"
    try:
        run = subprocess.run(
            [str(BIN / "schemathesis"), "--config-file", str(tmp_path / "schemathesis.toml"), "run",
             f"{base}/api/openapi.json", "--checks", "all", "--phases", "examples,coverage,fuzzing,stateful",
             "--max-examples", str(EXAMPLES), "--seed", str(SEED), "--workers", "1", "--generation-database", "none",
             "--header", f"Authorization: Bearer {token}", "--report", "json", "--report-json-path", str(report),
             "--no-color"],
            cwd=ROOT, capture_output=True, text=True, timeout=600)
    finally:
        stop(process)
    assert report.exists(), run.stdout[-4000:] + run.stderr[-4000:]
    verdict = json.loads(report.read_text())
    warnings = {kind: labels for kind, labels in verdict["warnings"].items() if labels}
    # Random commits, windows and job configs are rarely valid harnesses, windows and pipelines: mostly refused
    # is expected of the operations judged beyond the schema.
    warnings["validation_mismatch"] = sorted(set(warnings.get("validation_mismatch", ())) - set(JUDGED_BEYOND_THE_SCHEMA))
    warnings = {kind: labels for kind, labels in warnings.items() if labels}
    problems = {"failures": verdict["failures"], "errors": verdict["errors"], "warnings": warnings}
    assert verdict["complete"] and verdict["phases"]["stateful"]["status"] != "skip", verdict
    assert not any(problems.values()), json.dumps(problems, indent=1) + "\n" + run.stdout[-6000:]
    assert run.returncode == 0, run.stdout[-6000:]


# --- The schema itself (no server) -----------------------------------------------------------------------------

def _openapi() -> dict:
    from console.api import api

    return json.loads(json.dumps(api.get_openapi_schema()))  # as served: JSON keys


def _operations(schema: dict) -> dict[str, dict]:
    return {op["operationId"]: {**op, "path": path} for path, ops in schema["paths"].items() for op in ops.values()}


def _pointer(schema: dict, node: dict, pointer: str) -> bool:
    """Whether `pointer` (`/version/number`, `/0/id`) can name a value of an answer with JSON schema `node`."""
    for part in filter(None, pointer.split("/")):
        while "$ref" in node:
            node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
        if part.isdigit():
            if node.get("type") != "array":
                return False
            node = node["items"]
        elif part in node.get("properties", {}):
            node = node["properties"][part]
        else:
            return False
    return True


def test_each_link_names_an_operation_its_parameters_and_values_the_answer_holds():
    schema = _openapi()
    operations = _operations(schema)
    linked = 0
    for source in operations.values():
        path_params = {p["name"] for p in source.get("parameters", []) if p["in"] == "path"}
        for status, answer in source["responses"].items():
            for name, link in answer.get("links", {}).items():
                linked += 1
                target = operations.get(link["operationId"])
                assert target is not None, (source["operationId"], name)
                assert set(link["parameters"]) <= {p["name"] for p in target.get("parameters", [])}, name
                body = answer["content"]["application/json"]["schema"]
                for value in link["parameters"].values():
                    if value.startswith("$request.path."):
                        assert value.removeprefix("$request.path.") in path_params, (name, value)
                    else:
                        assert value.startswith("$response.body#") and _pointer(schema, body, value.split("#")[1]), \
                            (source["operationId"], status, name, value)
    assert linked >= 20


def test_what_an_operation_makes_or_lists_links_to_what_reads_and_acts_on_it():
    operations = _operations(_openapi())

    def targets(operation_id: str, status: str) -> set[str]:
        return set(operations[operation_id]["responses"][status].get("links", {}))

    assert {"harness_api_list_versions", "harness_api_get_version", "harness_api_diff_versions",
            "harness_api_commit_version", "harness_api_move_label"} <= targets("harness_api_list_harnesses", "200")
    assert {"harness_api_get_version", "harness_api_diff_versions"} <= \
        targets("harness_api_commit_version", "201") & targets("harness_api_list_versions", "200")
    for created in ("evaluation_evolution_api_request_diagnosis", "evaluation_evolution_api_request_live_diagnosis"):
        assert targets(created, "201") == {"evaluation_evolution_api_get_diagnosis",
                                           "evaluation_evolution_api_list_clusters",
                                           "evaluation_evolution_api_list_proposals"}
    assert targets("evaluation_evolution_api_list_proposals", "200") == {
        "evaluation_evolution_api_accept_proposal", "evaluation_evolution_api_reject_proposal"}
    assert targets("training_api_create_job", "201") == targets("training_api_list_jobs", "200") == {
        "training_api_get_job", "training_api_cancel_job"}


def test_error_answers_say_what_they_mean_and_state_conflicts_are_documented():
    from workspaces.schemas import ERROR_MEANINGS

    operations = _operations(_openapi())
    for operation in operations.values():
        for status, answer in operation["responses"].items():
            if int(status) in ERROR_MEANINGS:
                assert answer["description"] == ERROR_MEANINGS[int(status)]
    for conflicted in ("serving_api_reply", "evaluation_evolution_api_request_diagnosis",
                       "evaluation_evolution_api_request_live_diagnosis", "evaluation_evolution_api_accept_proposal",
                       "evaluation_evolution_api_reject_proposal", "harness_api_commit_version"):
        assert "409" in operations[conflicted]["responses"], conflicted


def test_the_harness_path_pattern_is_the_parsers_rule():
    """Every path the schema allows is a harness file whose name the parser accepts, when the name is at most 64
    characters (the one part of the rule the pattern cannot say, in the field's description); others are
    refused. 75 characters of path hold a name of at most 64 in every kind of file."""
    import re

    from hypothesis import given
    from hypothesis import settings as hypothesis_settings
    from hypothesis import strategies as st

    from harness.schemas import HARNESS_PATH_PATTERN, MINIMAL_HARNESS
    from harness.spec import SpecInvalid, parse_files

    @hypothesis_settings(max_examples=60, deadline=None, database=None, derandomize=True)
    @given(st.from_regex(HARNESS_PATH_PATTERN, fullmatch=True).filter(lambda path: len(path) <= 75))
    def allowed(path):
        try:
            parse_files({**MINIMAL_HARNESS, path: ""})
        except SpecInvalid as error:
            assert not [e for e in error.errors if e.file == path and ("not a harness file" in e.message
                                                                        or "name" in e.message)], error

    allowed()
    for path in ("README.md", "skills/qa/notes.md", "skills/Product QA/SKILL.md", "tools/a.yaml", "hooks/x.json",
                 "prompt/1-persona.md", "prompt/01-persona.txt", "../harness.yaml", "/harness.yaml"):
        assert not re.fullmatch(HARNESS_PATH_PATTERN, path), path
        with pytest.raises(SpecInvalid):
            parse_files({**MINIMAL_HARNESS, path: ""})


def test_training_stage_kinds_are_the_pipelines():
    from training.pipeline_config import STAGE_CONFIGS
    from training.schemas import STAGE_KINDS

    assert list(STAGE_KINDS) == list(STAGE_CONFIGS)


def test_request_bodies_take_json_types_as_the_schema_says_them(settings):
    """No coercion: `0` is not a boolean, `"3"` or `true` not an integer; an integral number is an integer."""
    from pydantic import ValidationError

    from harness.schemas import LabelMoveIn
    from serving.schemas import ReplyIn, backend_pattern

    assert LabelMoveIn.model_validate({"version": 3.0, "reason": "go"}).version == 3
    for bad in ({"override": 0}, {"override": "true"}, {"version": "3"}, {"version": True}, {"version": 2.5}):
        with pytest.raises(ValidationError):
            LabelMoveIn.model_validate({"version": 3, "reason": "go", **bad})
    settings.OPENAI_BASE_URL, settings.SCRIPTED_STEPS = None, ["hi"]
    assert "scripted" in backend_pattern() and "openai" not in backend_pattern()
    for backend in ("scripted", "local", "checkpoint:12"):
        assert ReplyIn.model_validate({"message": "hi", "viewer_id": "v", "backend": backend}).backend == backend
    for backend in ("openai", "transformers", "checkpoint:", "checkpoint:x", "nonesuch", ""):
        with pytest.raises(ValidationError):
            ReplyIn.model_validate({"message": "hi", "viewer_id": "v", "backend": backend})
