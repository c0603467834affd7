"""Template context shared by every console page."""

from workspaces.access import ADMIN, APPROVE, WRITE


def workspaces(request):
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {}
    from workspaces.selectors import workspaces_for_user

    caps = getattr(request, "capabilities", frozenset())
    return {
        "user_workspaces": workspaces_for_user(request.user),
        "workspace": getattr(request, "workspace", None),
        "role": getattr(request, "role", None),
        "can_write": WRITE in caps,
        "can_approve": APPROVE in caps,
        "can_admin": ADMIN in caps,
    }
