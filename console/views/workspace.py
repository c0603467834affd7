"""Workspace pages: home, members, API keys, audit log."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_POST

from console.access import ADMIN, API_KEY_SCOPES
from console.models import Role
from console.selectors import audit_events, members, workspaces_for_user
from console.services import MembershipError, ToolHostsError, membership_set, workspace_tool_hosts_set
from console.views.scoping import workspace_view
from serving.models import ApiKey
from serving.services import ApiKeyError, api_key_create, api_key_revoke


@login_required
def home(request):
    spaces = list(workspaces_for_user(request.user))
    if len(spaces) == 1:
        return redirect("harness_list", ws=spaces[0].slug)
    return render(request, "console/home.html", {"spaces": spaces})


@workspace_view()
def member_list(request):
    return render(request, "console/members.html", {"members": members(request.workspace), "roles": Role.choices})


@require_POST
@workspace_view(ADMIN)
def member_set(request):
    role = request.POST.get("role") or None
    if request.POST.get("remove"):
        role = None
    try:
        membership_set(actor=request.actor, workspace=request.workspace,
                       username=request.POST.get("username", "").strip(), role=role)
        messages.success(request, "Membership updated.")
    except MembershipError as exc:
        messages.error(request, str(exc))
    return redirect("member_list", ws=request.workspace.slug)


NEW_TOKEN_SESSION_KEY = "new_api_key_token"


@workspace_view(ADMIN)
def key_list(request):
    """POST creates a key and redirects (a refresh cannot create another); the next GET shows its token once."""
    if request.method == "POST":
        try:
            _, token = api_key_create(actor=request.actor, workspace=request.workspace,
                                      name=request.POST.get("name", ""), scopes=request.POST.getlist("scopes"))
            request.session[NEW_TOKEN_SESSION_KEY] = {"workspace": request.workspace.pk, "token": token}
        except ApiKeyError as exc:
            messages.error(request, str(exc))
        return redirect("key_list", ws=request.workspace.slug)
    pending = request.session.pop(NEW_TOKEN_SESSION_KEY, None)
    new_token = pending["token"] if pending and pending.get("workspace") == request.workspace.pk else None
    keys = ApiKey.objects.filter(workspace=request.workspace).order_by("-created_at")
    response = render(request, "console/keys.html", {"keys": keys, "scopes": API_KEY_SCOPES, "new_token": new_token,
                                                     "tool_hosts": "\n".join(request.workspace.tool_hosts)})
    add_never_cache_headers(response)  # the page may carry a secret: never from a cache or the back button
    return response


@require_POST
@workspace_view(ADMIN)
def tool_hosts_set(request):
    try:
        workspace_tool_hosts_set(actor=request.actor, workspace=request.workspace,
                                 hosts=request.POST.get("hosts", "").splitlines())
        messages.success(request, "HTTP tool hosts updated.")
    except ToolHostsError as exc:
        messages.error(request, str(exc))
    return redirect("key_list", ws=request.workspace.slug)


@require_POST
@workspace_view(ADMIN)
def key_revoke(request, key_id: int):
    key = get_object_or_404(ApiKey, pk=key_id, workspace=request.workspace)
    api_key_revoke(actor=request.actor, key=key)
    messages.success(request, f"Key {key.prefix} revoked.")
    return redirect("key_list", ws=request.workspace.slug)


@workspace_view()
def audit_log(request):
    filters = {k: request.GET.get(k, "").strip() for k in ("action", "actor", "target")}
    page = Paginator(audit_events(request.workspace, **filters), 50).get_page(request.GET.get("page"))
    context = {"page": page, "filters": filters}
    if request.htmx:
        return render(request, "console/audit.html#rows", context)
    return render(request, "console/audit.html", context)
