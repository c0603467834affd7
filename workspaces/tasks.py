"""Celery tasks of the ground floor: webhook deliveries."""

from celery import shared_task

from workspaces.webhooks import deliver


@shared_task(name="workspaces.deliver_webhook", time_limit=60)
def deliver_webhook(delivery_id: int) -> str:
    """One attempt of a webhook delivery; a failed one queues the next after its backoff."""
    return deliver(delivery_id)
