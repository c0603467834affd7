"""Every console page is reached through `workspace_view`: login, membership, capability."""

from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied

from workspaces.access import READ, ROLE_CAPABILITIES, Actor
from workspaces.selectors import workspace_for_user


def workspace_view(capability: str = READ):
    """Resolve `ws` to one of the user's workspaces (404 otherwise) and require `capability` (403)."""

    def decorator(view):
        @login_required
        @wraps(view)
        def wrapper(request, ws: str, *args, **kwargs):
            workspace, role = workspace_for_user(request.user, ws)
            request.workspace = workspace
            request.role = role
            request.capabilities = ROLE_CAPABILITIES[role]
            request.actor = Actor.for_user(request.user)
            if capability not in request.capabilities:
                raise PermissionDenied(f"This needs the '{capability}' permission; your role is {role}.")
            return view(request, *args, **kwargs)

        return wrapper

    return decorator
