"""Webhook endpoints of a workspace and their deliveries (workspaces.webhooks): admins only."""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_POST

from console.views.scoping import workspace_view
from workspaces.access import ADMIN
from workspaces.models import WebhookDelivery, WebhookEndpoint
from workspaces.webhooks import EVENTS, WebhookError, delivery_replay, endpoint_create, endpoint_delete

NEW_SECRET_SESSION_KEY = "new_webhook_secret"
DELIVERIES_SHOWN = 50


@workspace_view(ADMIN)
def webhook_list(request):
    """POST registers an endpoint and redirects; the next GET shows its signing secret once."""
    if request.method == "POST":
        try:
            endpoint, secret = endpoint_create(actor=request.actor, workspace=request.workspace,
                                               url=request.POST.get("url", ""), events=request.POST.getlist("events"))
            request.session[NEW_SECRET_SESSION_KEY] = {"workspace": request.workspace.pk, "endpoint": endpoint.pk,
                                                       "secret": secret}
        except WebhookError as exc:
            messages.error(request, str(exc))
        return redirect("webhook_list", ws=request.workspace.slug)
    pending = request.session.pop(NEW_SECRET_SESSION_KEY, None)
    new_secret = pending if pending and pending.get("workspace") == request.workspace.pk else None
    endpoints = WebhookEndpoint.objects.filter(workspace=request.workspace)
    deliveries = (WebhookDelivery.objects.filter(endpoint__workspace=request.workspace)
                  .select_related("endpoint")[:DELIVERIES_SHOWN])
    response = render(request, "console/webhooks.html", {"endpoints": endpoints, "deliveries": deliveries,
                                                         "events": EVENTS.items(), "new_secret": new_secret})
    add_never_cache_headers(response)  # the page may carry a secret
    return response


@require_POST
@workspace_view(ADMIN)
def webhook_delete(request, endpoint_id: int):
    endpoint = get_object_or_404(WebhookEndpoint, pk=endpoint_id, workspace=request.workspace)
    endpoint_delete(actor=request.actor, endpoint=endpoint)
    messages.success(request, f"Endpoint {endpoint.url} removed.")
    return redirect("webhook_list", ws=request.workspace.slug)


@require_POST
@workspace_view(ADMIN)
def webhook_replay(request, delivery_id: int):
    delivery = get_object_or_404(WebhookDelivery, pk=delivery_id, endpoint__workspace=request.workspace)
    again = delivery_replay(actor=request.actor, delivery=delivery)
    messages.success(request, f"Delivery {delivery.pk} sent again as delivery {again.pk}.")
    return redirect("webhook_list", ws=request.workspace.slug)
