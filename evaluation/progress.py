"""Live run progress over Channels: group names and the event producers use."""

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer


def run_group(run_id: int) -> str:
    return f"eval-run-{run_id}"


async def publish_progress(run_id: int, payload: dict) -> None:
    layer = get_channel_layer()
    if layer is not None:
        await layer.group_send(run_group(run_id), {"type": "run.progress", "payload": payload})


def publish_progress_sync(run_id: int, payload: dict) -> None:
    async_to_sync(publish_progress)(run_id, payload)
