"""The live job feed: `/ws/training/jobs/<id>/` lets members of the job's workspace in (snapshot first),
keeps others out, and relays what the worker's reporter publishes."""

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator

from console.consumers import TrainingJobConsumer
from tests.training.jobs_builders import mini_harness, sft, tiny_config
from training import services
from training.services import JobReporter
from workspaces.access import Actor

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
        assert snapshot["total_points"] == 0
        reporter = JobReporter(job)
        await sync_to_async(reporter.log)("sft", 1, 4, {"loss": 2.5, "learning_rate": 1e-5, "num_tokens": 900})
        update = await viewer.receive_json_from(timeout=15)
        assert update["point"]["values"]["loss"] == 2.5 and update["job"]["step"] == 1
        assert update["points"] == 1 and update["point"]["id"] > 0  # numbered, so a page sees a missed one
        await sync_to_async(reporter.line)("hello from the worker")
        update = await viewer.receive_json_from(timeout=15)
        assert update["lines"] == ["hello from the worker"]
        # A page that missed an update asks again and gets everything stored so far.
        await sync_to_async(reporter.log)("sft", 2, 4, {"loss": 2.0})
        assert (await viewer.receive_json_from(timeout=15))["points"] == 2
        await viewer.send_json_to({"kind": "snapshot"})
        again = await viewer.receive_json_from(timeout=15)
        assert again["kind"] == "snapshot" and again["total_points"] == 2
        assert [p["step"] for p in again["points"]] == [1, 2] and again["lines"][-1] == "hello from the worker"
        await viewer.send_json_to({"kind": "something else"})  # ignored, the socket stays open
        await sync_to_async(reporter.log)("sft", 3, 4, {"loss": 1.5})
        assert (await viewer.receive_json_from(timeout=15))["points"] == 3
        await viewer.disconnect()

    async_to_sync(scenario)()


def test_an_idle_feed_stays_open(workspace, members):
    """A page may see no event for minutes (a slow step); its consumer must keep waiting on the Redis
    channel layer, not die when a blocking read outlasts the client's socket timeout."""
    from channels.layers import get_channel_layer

    job = services.job_create(actor=Actor.system("t"), workspace=workspace, name="idle", config=tiny_config(sft(4)),
                              harness_versions=[mini_harness(workspace).head], simulator={"seed": 1, "size": 4},
                              start=False)
    idle_s = get_channel_layer().brpop_timeout * 2 + 1  # two blocking waits and more come and go

    async def scenario():
        viewer = communicator(job.pk, members["viewer"])
        connected, _ = await viewer.connect(timeout=15)
        assert connected
        assert (await viewer.receive_json_from(timeout=15))["kind"] == "snapshot"
        assert await viewer.receive_nothing(timeout=idle_s, interval=0.5)
        await sync_to_async(JobReporter(job).log)("sft", 1, 4, {"loss": 2.5})
        assert (await viewer.receive_json_from(timeout=15))["points"] == 1
        await viewer.disconnect()

    async_to_sync(scenario)()
