"""An experiment's life: created as a draft, started, stopped (by hand or by a guardrail), archived, deleted;
and how its arms are named on traces."""

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils import timezone

from harness import selectors as harness_selectors
from harness.models import Harness
from harness.routing import routing_changed
from serving.model_config import backend_for
from serving.model_sources import named_model
from serving.models import Arm, Experiment
from workspaces import webhooks
from workspaces.access import ADMIN, WRITE, Actor, require
from workspaces.identifiers import check_identifier
from workspaces.models import Workspace
from workspaces.services import archived_set, audit_record
from workspaces.tokens import token_replaced

ROOM_ID_MAX = 100  # Room.room_id


class ExperimentError(ValueError):
    pass


@transaction.atomic
def experiment_create(*, actor: Actor, workspace: Workspace, key: str, harness: Harness, arms: list[dict],
                      coverage: float = 1.0, rooms: list[str] | None = None, guardrails: dict | None = None,
                      seed: str = "") -> Experiment:
    """A draft experiment. `arms`: [{"name", "weight", "kind": react|label|version, "label"?, "version"?,
    "backend"?}]; the first arm is the control. An arm's backend may be a training checkpoint
    (`checkpoint:<id>`) of this workspace that an approver promoted for live traffic."""
    require(actor, workspace, WRITE)
    check_identifier(key, field="experiment key")
    arms = [{**arm, "name": arm.get("name") or f"arm-{index}"} for index, arm in enumerate(arms)]
    for index, arm in enumerate(arms):
        check_identifier(arm["name"], field=f"arm {index + 1} name")
        if arm.get("kind", "label") == "label":
            check_identifier(arm.get("label", ""), field=f"arm {index + 1} label")
    if len({arm["name"] for arm in arms}) != len(arms):
        raise ExperimentError("Arm names must be different from each other.")
    for room in rooms or []:
        check_identifier(room, field="room", max_length=ROOM_ID_MAX)
    if harness.workspace_id != workspace.pk:
        raise ExperimentError("The harness belongs to another workspace.")
    if len(arms) < 2:
        raise ExperimentError("An experiment needs a control and at least one treatment.")
    if not 0 < coverage <= 1:
        raise ExperimentError("Coverage must be within (0, 1].")
    weights = [float(a.get("weight", 0)) for a in arms]
    if any(w <= 0 for w in weights):
        raise ExperimentError("Every arm needs a positive weight.")
    if Experiment.objects.filter(workspace=workspace, key=key).exists():
        raise ExperimentError(f"An experiment “{key}” already exists.")
    experiment = Experiment.objects.create(workspace=workspace, key=key, seed=seed or key, harness=harness,
                                           coverage=coverage, rooms=rooms or [], guardrails=guardrails or {},
                                           created_by=actor.label)
    total = sum(weights)
    for index, (arm, weight) in enumerate(zip(arms, weights, strict=True)):
        kind = arm.get("kind", "label")
        version = None
        if kind == "label":
            harness_selectors.version_by_label(harness, arm.get("label", ""))  # must exist now
        elif kind == "version":
            version = harness_selectors.version_get(harness, int(arm["version"]))
        elif kind != "react":
            raise ExperimentError(f"Arm kind must be react, label or version, not “{kind}”.")
        backend = _arm_backend(workspace, arm.get("backend") or "")
        Arm.objects.create(experiment=experiment, index=index, name=arm["name"],
                           weight=weight / total, kind=kind, label=arm.get("label", ""), version=version,
                           backend=backend)
    audit_record(actor=actor, workspace=workspace, action="experiment.create", target_type="experiment",
                 target_id=experiment.pk, target_label=key, after={"arms": arms, "coverage": coverage})
    return experiment


def _arm_backend(workspace: Workspace, name: str) -> str:
    """An arm's model must exist here; a checkpoint must be promoted (live traffic is an approver's call)."""
    if not name:
        return ""
    try:
        backend_for(name, workspace=workspace)
    except ImproperlyConfigured as exc:
        raise ExperimentError(str(exc)) from None
    model = named_model(name)
    if model is not None and not model.live:
        raise ExperimentError(f"{name} is not promoted for live traffic; an approver promotes it first.")
    return name


def experiment_start(*, actor: Actor, experiment: Experiment) -> Experiment:
    require(actor, experiment.workspace, WRITE)
    with transaction.atomic():
        # The harness row serialises starts: the same experiment started twice at once, or two experiments
        # of one harness, see each other's outcome instead of both passing the checks.
        Harness.objects.select_for_update().filter(pk=experiment.harness_id).first()
        status = Experiment.objects.filter(pk=experiment.pk).values_list("status", flat=True).first()
        if status != Experiment.Status.DRAFT:
            raise ExperimentError("Only a draft experiment can start.")
        if Experiment.objects.filter(harness_id=experiment.harness_id, status=Experiment.Status.RUNNING).exists():
            raise ExperimentError("Another experiment is already running on this harness.")
        Experiment.objects.filter(pk=experiment.pk).update(status=Experiment.Status.RUNNING, started_at=timezone.now())
        routing_changed(experiment.harness_id)
        token_replaced(running_token_key(experiment.workspace_id))
        audit_record(actor=actor, workspace=experiment.workspace, action="experiment.start",
                     target_type="experiment", target_id=experiment.pk, target_label=experiment.key)
        webhooks.emit(experiment.workspace, "experiment.started", {
            "experiment": experiment.key, "harness_id": experiment.harness_id, "actor": actor.label})
    experiment.refresh_from_db()
    return experiment


def experiment_stop(*, actor: Actor, experiment: Experiment, reason: str, control_only: bool = False) -> Experiment:
    """Stop: viewers go back to the label default, or with control_only (a guardrail stop) all to control."""
    require(actor, experiment.workspace, WRITE)
    with transaction.atomic():
        Experiment.objects.filter(pk=experiment.pk).update(status=Experiment.Status.STOPPED, stopped_at=timezone.now(),
                                                           stop_reason=reason[:500], control_only=control_only)
        routing_changed(experiment.harness_id)
        token_replaced(running_token_key(experiment.workspace_id))
        audit_record(actor=actor, workspace=experiment.workspace, action="experiment.stop", target_type="experiment",
                     target_id=experiment.pk, target_label=experiment.key,
                     after={"reason": reason, "control_only": control_only})
        webhooks.emit(experiment.workspace, "experiment.stopped", {
            "experiment": experiment.key, "reason": reason, "control_only": control_only, "actor": actor.label,
            "by_guardrail": actor.label == "system:guardrail"})
    experiment.refresh_from_db()
    return experiment


def experiment_archive(*, actor: Actor, experiment: Experiment, archived: bool = True) -> Experiment:
    """Hide an experiment from the list (or bring it back); a running one must be stopped first."""
    require(actor, experiment.workspace, WRITE)
    if archived and experiment.status == Experiment.Status.RUNNING:
        raise ExperimentError("Stop the experiment before archiving it.")
    archived_set(actor=actor, obj=experiment, kind="experiment", label=experiment.key, archived=archived)
    return experiment


def experiment_delete(*, actor: Actor, experiment: Experiment) -> None:
    """Delete an experiment that is not running (admin): its arms, exposures and rollups go with it;
    traces keep their arm label."""
    require(actor, experiment.workspace, ADMIN)
    with transaction.atomic():
        locked = Experiment.objects.select_for_update().get(pk=experiment.pk)
        if locked.status == Experiment.Status.RUNNING:
            raise ExperimentError("Stop the experiment before deleting it.")
        audit_record(actor=actor, workspace=locked.workspace, action="experiment.delete", target_type="experiment",
                     target_id=locked.pk, target_label=locked.key,
                     before={"status": locked.status, "arms": list(locked.arms.values_list("name", flat=True)),
                             "exposures": locked.exposures.count()}, after=None)
        locked.delete()
        routing_changed(locked.harness_id)
        token_replaced(running_token_key(locked.workspace_id))


def running_token_key(workspace_id: int) -> str:
    """The shared cache's key of the token of a workspace's running experiments (harness.routing's tokens):
    replaced whenever one of them starts, stops or goes."""
    return f"running:{workspace_id}"


def experiment_arm_label(key: str, arm: str) -> str:
    """How traces name an experiment's arm (`exp:<key>:<arm>`), so guardrails can find them."""
    return f"exp:{key}:{arm}"


def experiment_key_of(arm_label: str) -> str | None:
    kind, _, rest = arm_label.partition(":")
    return rest.partition(":")[0] if kind == "exp" else None
