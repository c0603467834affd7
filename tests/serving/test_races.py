"""Experiment starts under real concurrent transactions on PostgreSQL."""

import random
import uuid
from datetime import UTC, datetime

import pytest

from harness import services as harness_services
from serving.experiments.ingest import events_ingest
from serving.experiments.lifecycle import (
    ExperimentError,
    experiment_create,
    experiment_start,
    experiment_stop,
)
from serving.experiments.routing import assign_viewer
from serving.models import Experiment, Exposure, Rollup
from tests.concurrency import concurrently
from workspaces.access import Actor
from workspaces.models import AuditEvent

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


def ingest_at_once(workspace, harness, key, viewers, make_batches):
    """Start experiment `key` with `viewers` assigned, then ingest the batches `make_batches(view)` builds
    (`view(viewer)`: a new page view of that viewer) all at once, each in its own thread and transaction.
    Every batch must go in; returns the experiment and each batch's result, in order."""
    experiment = draft(workspace, harness, key)
    experiment_start(actor=SYSTEM, experiment=experiment)
    for viewer in viewers:
        assign_viewer(experiment, viewer)
    now = datetime.now(UTC).isoformat()

    def view(viewer):
        return {"event_id": uuid.uuid4().hex, "type": "item_page_view", "viewer_id": viewer, "room_id": "demo-room",
                "item_id": "L001", "ts": now}

    ingester = Actor.system("platform")
    results = concurrently(*(lambda b=b: events_ingest(actor=ingester, workspace=workspace, events=b)
                             for b in make_batches(view)))
    assert all(kind == "ok" for kind, _ in results), results
    return experiment, [result for _, result in results]


def test_concurrent_overlapping_batches_count_each_view_once_without_deadlock(workspace, labelled):
    """Four batches at once, each touching every viewer (in a different order) and repeating one another's
    event ids: the set-based insert and the ordered locks of the rollup fold neither deadlock nor
    double-count."""
    viewers = [f"v{i:03d}" for i in range(60)]
    events, batches = [], []

    def overlapping(view):
        events.extend(view(viewer) for viewer in viewers for _ in range(3))
        for seed in range(4):
            batch = events[:]
            random.Random(seed).shuffle(batch)
            batches.append(batch[:150])  # overlapping subsets: many ids arrive in two or more batches at once
        return batches

    experiment, results = ingest_at_once(workspace, labelled, "ingest-race", viewers, overlapping)
    stored = {e["event_id"] for b in batches for e in b}
    assert sum(r.accepted for r in results) == len(stored)  # each id accepted by exactly one batch
    per_viewer = {v: sum(1 for e in events if e["event_id"] in stored and e["viewer_id"] == v) for v in viewers}
    exposures = {x.viewer_id: x.ipv for x in Exposure.objects.filter(experiment=experiment)}
    assert exposures == per_viewer
    rollups = Rollup.objects.filter(experiment=experiment)
    assert sum(r.sum_y for r in rollups) == len(stored)
    assert sum(r.sum_y2 for r in rollups) == sum(k * k for k in per_viewer.values())


def test_concurrent_batches_of_the_same_viewers_fold_without_deadlock(workspace, labelled):
    """Distinct ids (each batch goes in by COPY) over the same viewers in different orders: the folds lock
    the viewers' exposures and the rollups in one order, so they queue instead of deadlocking."""
    viewers = [f"w{i:03d}" for i in range(80)]

    def shuffled_repeats(view):
        batches = []
        for seed in range(4):
            order = viewers[:]
            random.Random(seed).shuffle(order)
            batches.append([view(viewer) for viewer in order * (seed + 1)])
        return batches

    experiment, results = ingest_at_once(workspace, labelled, "fold-race", viewers, shuffled_repeats)
    assert [r.accepted for r in results] == [80, 160, 240, 320]
    assert set(Exposure.objects.filter(experiment=experiment).values_list("ipv", flat=True)) == {10}
    rollups = Rollup.objects.filter(experiment=experiment)
    assert sum(r.sum_y for r in rollups) == 800 and sum(r.sum_y2 for r in rollups) == 80 * 100
