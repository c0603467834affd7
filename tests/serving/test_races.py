"""Experiment starts under real concurrent transactions on PostgreSQL."""

import pytest

from console.access import Actor
from console.models import AuditEvent
from harness import services as harness_services
from serving.experiments.services import ExperimentError, experiment_create, experiment_start, experiment_stop
from serving.models import Experiment
from tests.concurrency import concurrently

pytestmark = pytest.mark.django_db(transaction=True)
SYSTEM = Actor.system("test")
ARMS = [{"name": "control", "weight": 1, "kind": "react"},
        {"name": "harness", "weight": 1, "kind": "label", "label": "production"}]


@pytest.fixture
def labelled(harness):
    harness_services.label_move(actor=SYSTEM, harness=harness, name="production", version=harness.head, reason="go")
    return harness


def draft(workspace, harness, key):
    return experiment_create(actor=SYSTEM, workspace=workspace, key=key, harness=harness, arms=ARMS)


def test_an_experiment_started_twice_at_once_starts_once(workspace, labelled):
    for round_ in range(10):
        experiment = draft(workspace, labelled, f"twice-{round_}")
        def start(pk=experiment.pk):  # each thread with its own copy of the draft, as two requests would
            return experiment_start(actor=SYSTEM, experiment=Experiment.objects.get(pk=pk))

        results = concurrently(start, start)
        assert sorted(kind for kind, _ in results) == ["error", "ok"], results
        assert isinstance(next(v for k, v in results if k == "error"), ExperimentError)
        assert AuditEvent.objects.filter(action="experiment.start", target_id=str(experiment.pk)).count() == 1
        experiment_stop(actor=SYSTEM, experiment=experiment, reason="next round")


def test_two_experiments_of_one_harness_never_run_together(workspace, labelled):
    for round_ in range(10):
        a, b = draft(workspace, labelled, f"a-{round_}"), draft(workspace, labelled, f"b-{round_}")
        results = concurrently(lambda a=a: experiment_start(actor=SYSTEM, experiment=a),
                               lambda b=b: experiment_start(actor=SYSTEM, experiment=b))
        assert sorted(kind for kind, _ in results) == ["error", "ok"], results
        running = list(Experiment.objects.filter(harness=labelled, status=Experiment.Status.RUNNING))
        assert len(running) == 1
        experiment_stop(actor=SYSTEM, experiment=running[0], reason="next round")
