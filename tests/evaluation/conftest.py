"""Fixtures for the evaluation tests: real OpenAI-compatible model servers come from the serving tests, and a
finished eval run for the evolution tests."""

import json

import pytest

from evaluation import services as eval_services
from evaluation.models import EvalRun
from tests.live_servers import child_env
from tests.serving.conftest import scripted_server  # noqa: F401  (a fixture: judge models over real HTTP)
from workspaces.access import Actor


@pytest.fixture
def finished_run(workspace, harness, settings):
    """A done run of the demo harness on 12 simulated cases with the scripted model (it fails many)."""
    settings.SCRIPTED_STEPS = json.loads(child_env()["HARNESSOPS_SCRIPTED_STEPS"])  # as the worker answers
    system = Actor.system("test")
    version = eval_services.eval_set_generate(actor=system, workspace=workspace, name="dev", suite="live_stream_qa",
                                              seed=3, n=12)
    run = eval_services.run_create(actor=system, workspace=workspace, set_version=version, harness=harness,
                                   version=harness.head, backend="scripted", concurrency=2, start=False)
    assert eval_services.run_execute(run_id=run.pk) == "done"
    return EvalRun.objects.get(pk=run.pk)
