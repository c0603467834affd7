"""Membership changes under real concurrent transactions on PostgreSQL."""

import pytest
from django.core.exceptions import PermissionDenied

from tests.concurrency import concurrently
from tests.conftest import make_user
from workspaces.access import Actor
from workspaces.models import Membership, Role
from workspaces.services import MembershipError, membership_set

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_admins_demoting_each_other_leave_one_admin(workspace):
    ann, bob = make_user("ann"), make_user("bob")
    for round_ in range(15):
        Membership.objects.filter(workspace=workspace).delete()
        Membership.objects.create(workspace=workspace, user=ann, role=Role.ADMIN)
        Membership.objects.create(workspace=workspace, user=bob, role=Role.ADMIN)
        results = concurrently(
            lambda: membership_set(actor=Actor.for_user(ann), workspace=workspace, username="bob", role=Role.OPERATOR),
            lambda: membership_set(actor=Actor.for_user(bob), workspace=workspace, username="ann", role=Role.OPERATOR),
        )
        outcomes = sorted(kind for kind, _ in results)
        admins = Membership.objects.filter(workspace=workspace, role=Role.ADMIN).count()
        assert admins == 1, f"round {round_}: {admins} admins left, {results}"
        # One demotion wins; the other is refused (its actor is no longer an admin, or would be the last).
        assert outcomes == ["error", "ok"], results
        assert all(isinstance(value, (MembershipError, PermissionDenied)) for kind, value in results if kind == "error")
