"""Websocket consumers. Each authenticates, checks workspace membership, joins a named group, relays events."""

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from console.models import Membership
from evaluation.models import EvalRun
from evaluation.progress import run_group


class RunProgressConsumer(AsyncJsonWebsocketConsumer):
    """`/ws/runs/<id>/`: `run.progress` events of one eval run, for members of its workspace."""

    async def connect(self):
        user = self.scope.get("user")
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        if user is None or not user.is_authenticated or not await self._may_watch(user):
            await self.close(code=4403)
            return
        self.group = run_group(self.run_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.send_json(await self._snapshot())

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def run_progress(self, event):
        await self.send_json(event["payload"])

    @database_sync_to_async
    def _may_watch(self, user) -> bool:
        run = EvalRun.objects.filter(pk=self.run_id).values("workspace_id").first()
        return bool(run) and Membership.objects.filter(workspace_id=run["workspace_id"], user=user).exists()

    @database_sync_to_async
    def _snapshot(self) -> dict:
        from evaluation.selectors import run_progress

        return run_progress(self.run_id)


class ExperimentConsumer(AsyncJsonWebsocketConsumer):
    """`/ws/experiments/<id>/`: `experiment.update` snapshots of one experiment, for members of its workspace."""

    async def connect(self):
        from serving.experiments.live import experiment_group

        user = self.scope.get("user")
        self.experiment_id = int(self.scope["url_route"]["kwargs"]["experiment_id"])
        if user is None or not user.is_authenticated or not await self._may_watch(user):
            await self.close(code=4403)
            return
        self.group = experiment_group(self.experiment_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.send_json(await self._snapshot())

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def experiment_update(self, event):
        await self.send_json(event["payload"])

    @database_sync_to_async
    def _may_watch(self, user) -> bool:
        from serving.models import Experiment

        row = Experiment.objects.filter(pk=self.experiment_id).values("workspace_id").first()
        return bool(row) and Membership.objects.filter(workspace_id=row["workspace_id"], user=user).exists()

    @database_sync_to_async
    def _snapshot(self) -> dict:
        from serving.experiments.selectors import experiment_snapshot
        from serving.models import Experiment

        return experiment_snapshot(Experiment.objects.get(pk=self.experiment_id))
