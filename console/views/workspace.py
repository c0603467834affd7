"""Workspace pages: home, new workspace, members (add, invite), API keys, audit log."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_POST
from django.views.decorators.vary import vary_on_headers

from console.pagination import page_from_query
from console.views.scoping import workspace_view
from serving.models import ApiKey
from serving.services import ApiKeyError, api_key_create, api_key_revoke
from workspaces.access import ADMIN, API_KEY_SCOPES, Actor, require_workspace_creator
from workspaces.models import Role
from workspaces.selectors import audit_events, members, workspaces_for_user
from workspaces.services import (
    MembershipError,
    ToolHostsError,
    WorkspaceError,
    member_invite,
    membership_set,
    workspace_create,
    workspace_tool_hosts_set,
)


@login_required
def home(request):
    spaces = list(workspaces_for_user(request.user))
    if len(spaces) == 1:
        return redirect("harness_list", ws=spaces[0].slug)
    return render(request, "console/home.html", {"spaces": spaces, "can_create": _can_create(request.user)})


def _can_create(user) -> bool:
    return user.is_active and (user.is_staff or user.is_superuser)


@login_required
def workspace_new(request):
    """Staff create a workspace and become its first admin."""
    actor = Actor.for_user(request.user)
    require_workspace_creator(actor)
    form = {"slug": "", "name": ""}
    if request.method == "POST":
        form = {k: request.POST.get(k, "").strip() for k in form}
        try:
            workspace = workspace_create(actor=actor, slug=form["slug"], name=form["name"], owner=request.user)
        except WorkspaceError as exc:
            return render(request, "console/workspace_new.html", {"form": form, "error": str(exc)}, status=422)
        messages.success(request, f"Workspace {workspace.name} created; you are its admin.")
        return redirect("member_list", ws=workspace.slug)
    return render(request, "console/workspace_new.html", {"form": form, "error": ""})


INVITE_SESSION_KEY = "member_invite"


def _members_page(request, *, invite=None, add: dict | None = None, invited: dict | None = None,
                  status: int = 200):
    """The members page; `add`/`invited` bring a refused form back with what was typed and why."""
    return render(request, "console/members.html", {
        "members": members(request.workspace), "roles": Role.choices, "invite": invite,
        "add": add or {}, "invited": invited or {}}, status=status)


@workspace_view()
def member_list(request):
    # An invitation link is shown once, on the page the invite redirects to.
    invite = request.session.pop(INVITE_SESSION_KEY, None)
    if invite and invite.get("ws") != request.workspace.slug:
        invite = None
    if invite:
        uidb64, token = invite["token"].split("/")
        invite["url"] = request.build_absolute_uri(reverse("password_reset_confirm",
                                                           kwargs={"uidb64": uidb64, "token": token}))
    return _members_page(request, invite=invite)


@require_POST
@workspace_view(ADMIN)
def member_invite_view(request):
    """Create an account for a newcomer, add them, and show a set-password link once."""
    username = request.POST.get("username", "")
    try:
        membership, token = member_invite(actor=request.actor, workspace=request.workspace, username=username,
                                          role=request.POST.get("role", ""))
    except MembershipError as exc:
        form = {"username": username, "role": request.POST.get("role", ""), "error": f"Not invited: {exc}"}
        return _members_page(request, invited=form, status=422)
    request.session[INVITE_SESSION_KEY] = {"ws": request.workspace.slug, "username": membership.user.username,
                                           "token": token}
    return redirect("member_list", ws=request.workspace.slug)


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
        if request.POST.get("form") == "add":  # the typed name comes back with the reason
            form = {"username": request.POST.get("username", ""), "role": request.POST.get("role", ""),
                    "error": f"Not added: {exc}"}
            return _members_page(request, add=form, status=422)
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


@vary_on_headers("HX-Request")  # the same URL answers a fragment or the page: caches must tell them apart
@workspace_view()
def audit_log(request):
    filters = {k: request.GET.get(k, "").strip() for k in ("action", "actor", "target")}
    paged = page_from_query(request.GET, audit_events(request.workspace, **filters))
    context = {"page": paged.page, "page_error": paged.error, "filters": filters}
    status = 422 if paged.error else 200
    if request.htmx and not request.htmx.history_restore_request:  # a history restore needs the page
        return render(request, "console/audit.html#rows", context, status=status)
    return render(request, "console/audit.html", context, status=status)
