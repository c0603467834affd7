"""Live training progress over Channels: the group a job's page joins and the producer's send."""

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer


def job_group(job_id: int) -> str:
    return f"training-job-{job_id}"


def publish_job_event(job_id: int, payload: dict) -> None:
    """Send one `training.progress` event to the job's watchers (from the worker, outside transactions)."""
    layer = get_channel_layer()
    if layer is not None:
        async_to_sync(layer.group_send)(job_group(job_id), {"type": "training.progress", "payload": payload})
