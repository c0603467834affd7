"""The live job feed: `/ws/training/jobs/<id>/` lets members of the job's workspace in (snapshot first),
keeps others out, and relays what the worker's reporter publishes."""

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator

from console.access import Actor
from console.consumers import TrainingJobConsumer
from tests.training.jobs_builders import mini_harness, sft, tiny_config
from training import services
from training.services import JobReporter

pytestmark = pytest.mark.django_db(transaction=True)


def communicator(job_id: int, user) -> WebsocketCommunicator:
    client = WebsocketCommunicator(TrainingJobConsumer.as_asgi(), f"/ws/training/jobs/{job_id}/")
    client.scope["user"] = user
    client.scope["url_route"] = {"kwargs": {"job_id": job_id}}
    return client


def test_members_get_a_snapshot_then_the_reporters_events(workspace, members):
    job = services.job_create(actor=Actor.system("t"), workspace=workspace, name="live", config=tiny_config(sft(4)),
                              harness_versions=[mini_harness(workspace).head], simulator={"seed": 1, "size": 4},
                              start=False)

    async def scenario():
        outsider = communicator(job.pk, members["outsider"])
        connected, code = await outsider.connect(timeout=15)
        assert not connected and code == 4403
        viewer = communicator(job.pk, members["viewer"])
        connected, _ = await viewer.connect(timeout=15)
        assert connected
        snapshot = await viewer.receive_json_from(timeout=15)
        assert snapshot["kind"] == "snapshot" and snapshot["job"]["status"] == "queued" and snapshot["points"] == []
        reporter = JobReporter(job)
        await sync_to_async(reporter.log)("sft", 1, 4, {"loss": 2.5, "learning_rate": 1e-5, "num_tokens": 900})
        update = await viewer.receive_json_from(timeout=15)
        assert update["point"]["values"]["loss"] == 2.5 and update["job"]["step"] == 1
        await sync_to_async(reporter.line)("hello from the worker")
        update = await viewer.receive_json_from(timeout=15)
        assert update["lines"] == ["hello from the worker"]
        await viewer.disconnect()

    async_to_sync(scenario)()
