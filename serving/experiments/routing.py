"""Which arm a viewer's reply runs: the experiment routing a harness, sticky assignment, the arm's selection."""

from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import F
from django.http import Http404
from django.utils import timezone

from harness.models import Harness
from harness.routing import NotRemembered, memory_only, remembered
from serving.experiments.assignment import assign
from serving.experiments.lifecycle import experiment_arm_label
from serving.experiments.live import publish_experiment
from serving.models import Arm, Experiment, Exposure, Rollup
from serving.selection import DEFAULT_LABEL, Selection, label_version, register_experiment_selector


def _bucket(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


def arm_selection(experiment: Experiment, arm: Arm, harness: Harness) -> Selection:
    if arm.kind == Arm.Kind.VERSION:
        version = arm.version
    elif arm.kind == Arm.Kind.LABEL:
        version = label_version(harness, arm.label)
    else:  # the ReAct control runs on the production version's tools
        try:
            version = label_version(harness, DEFAULT_LABEL)
        except Http404:
            version = harness.head
    return Selection(version=version, arm=experiment_arm_label(experiment.key, arm.name),
                     baseline=arm.kind == Arm.Kind.REACT, backend=arm.backend, experiment=experiment)


def assign_viewer(experiment: Experiment, viewer_id: str, *, arms: list[Arm] | None = None) -> Arm | None:
    """The viewer's arm: sticky once exposed; otherwise hashed (GrowthBook v2) and recorded once.
    `arms`: the experiment's arms in order, when the caller has them already."""
    if arms is None:
        arms = list(experiment.arms.all())
    exposed = Exposure.objects.filter(experiment=experiment, viewer_id=viewer_id).values_list("arm_id", flat=True)
    arm_id = exposed.first()
    if arm_id is not None:
        return next(a for a in arms if a.pk == arm_id)
    index = assign(experiment.seed, viewer_id, [a.weight for a in arms], coverage=experiment.coverage)
    if index is None or index < 0:
        return None
    arm, now = arms[index], timezone.now()
    try:
        with transaction.atomic():
            Exposure.objects.create(experiment=experiment, arm=arm, viewer_id=viewer_id, bucket=_bucket(now),
                                    first_seen_at=now)
            rollup, _ = Rollup.objects.get_or_create(experiment=experiment, arm=arm, bucket=_bucket(now))
            Rollup.objects.filter(pk=rollup.pk).update(users=F("users") + 1)
    except IntegrityError:  # a concurrent request exposed this viewer first: use that arm
        return Exposure.objects.select_related("arm").get(experiment=experiment, viewer_id=viewer_id).arm
    publish_experiment(experiment)
    return arm


def _routing_experiment(harness: Harness) -> tuple[Experiment, list[Arm]] | None:
    """The experiment that routes this harness's viewers (running, or stopped to control only), with its arms."""
    experiment = (Experiment.objects.filter(harness=harness).filter(status=Experiment.Status.RUNNING).first()
                  or Experiment.objects.filter(harness=harness, status=Experiment.Status.STOPPED, control_only=True)
                  .order_by("-stopped_at").first())
    return (experiment, list(experiment.arms.select_related("version"))) if experiment is not None else None


def experiment_routing(harness: Harness):
    """The harness's running experiment and its arms, or None; remembered per process until the harness's routing
    changes (start, stop, delete: harness.routing)."""
    return remembered(harness.pk, "experiment", lambda: _routing_experiment(harness))


@register_experiment_selector
def experiment_selector(harness: Harness, viewer_id: str, room_id: str) -> Selection | None:
    routing = experiment_routing(harness)
    if routing is None:
        return None
    experiment, arms = routing
    if experiment.rooms and room_id not in experiment.rooms:
        return None
    if memory_only():  # an arm's reply records exposures and publishes: the request cycle's work
        raise NotRemembered("experiment arm")
    if experiment.control_only:
        return arm_selection(experiment, arms[0], harness)
    arm = assign_viewer(experiment, viewer_id, arms=arms)
    return arm_selection(experiment, arm, harness) if arm is not None else None
