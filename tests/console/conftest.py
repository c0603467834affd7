import pytest

from harness import services as harness_services
from serving.services import room_upsert
from tests.serving.test_reply_api import ROOM
from workspaces.access import Actor


@pytest.fixture
def operator(client, members, workspace, harness, settings):
    """An operator signed in, the scripted model answering, the harness in production in the demo room."""
    settings.MODEL_BACKEND = "scripted"
    harness_services.label_move(actor=Actor.system("test"), harness=harness, name="production", version=harness.head,
                                reason="go")
    room_upsert(workspace=workspace, context=ROOM, harness=harness)
    client.force_login(members["operator"])
    return client
