"""Websocket consumers. Each authenticates, checks workspace membership, joins a named group, relays events."""

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from workspaces.models import Membership


class WorkspaceObjectConsumer(AsyncJsonWebsocketConsumer):
    """Follows one object of a workspace: members only; sends a snapshot, then the group's events.

    Subclasses name the URL argument, the object's workspace, the group and the snapshot.
    """

    url_kwarg = ""

    def workspace_id(self, object_id: int) -> int | None:
        raise NotImplementedError

    def group_name(self, object_id: int) -> str:
        raise NotImplementedError

    def snapshot(self, object_id: int) -> dict:
        raise NotImplementedError

    async def connect(self):
        user = self.scope.get("user")
        self.object_id = int(self.scope["url_route"]["kwargs"][self.url_kwarg])
        if user is None or not user.is_authenticated or not await self._may_watch(user):
            await self.close(code=4403)
            return
        self.group = self.group_name(self.object_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.send_json(await database_sync_to_async(self.snapshot)(self.object_id))

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    @database_sync_to_async
    def _may_watch(self, user) -> bool:
        workspace_id = self.workspace_id(self.object_id)
        return workspace_id is not None and Membership.objects.filter(workspace_id=workspace_id, user=user).exists()


class RunProgressConsumer(WorkspaceObjectConsumer):
    """`/ws/runs/<id>/`: `run.progress` events of one eval run."""

    url_kwarg = "run_id"

    def workspace_id(self, object_id):
        from evaluation.models import EvalRun

        return EvalRun.objects.filter(pk=object_id).values_list("workspace_id", flat=True).first()

    def group_name(self, object_id):
        from evaluation.progress import run_group

        return run_group(object_id)

    def snapshot(self, object_id):
        from evaluation.selectors import run_progress

        return run_progress(object_id)

    async def run_progress(self, event):
        await self.send_json(event["payload"])


class ExperimentConsumer(WorkspaceObjectConsumer):
    """`/ws/experiments/<id>/`: `experiment.update` snapshots of one experiment."""

    url_kwarg = "experiment_id"

    def workspace_id(self, object_id):
        from serving.models import Experiment

        return Experiment.objects.filter(pk=object_id).values_list("workspace_id", flat=True).first()

    def group_name(self, object_id):
        from serving.experiments.live import experiment_group

        return experiment_group(object_id)

    def snapshot(self, object_id):
        from serving.experiments.selectors import experiment_snapshot
        from serving.models import Experiment

        return experiment_snapshot(Experiment.objects.get(pk=object_id))

    async def experiment_update(self, event):
        await self.send_json(event["payload"])


class TrainingJobConsumer(WorkspaceObjectConsumer):
    """`/ws/training/jobs/<id>/`: a snapshot (state, every curve point, log tail), then `training.progress` updates."""

    url_kwarg = "job_id"

    def workspace_id(self, object_id):
        from training.models import TrainingJob

        return TrainingJob.objects.filter(pk=object_id).values_list("workspace_id", flat=True).first()

    def group_name(self, object_id):
        from training.progress import job_group

        return job_group(object_id)

    def snapshot(self, object_id):
        from training.selectors import job_snapshot

        return job_snapshot(object_id)

    async def receive_json(self, content, **kwargs):
        # The page asks again when an update's point number shows it missed one.
        if isinstance(content, dict) and content.get("kind") == "snapshot":
            await self.send_json(await database_sync_to_async(self.snapshot)(self.object_id))

    async def training_progress(self, event):
        await self.send_json(event["payload"])
