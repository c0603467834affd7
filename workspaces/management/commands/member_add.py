"""Add a user to a workspace with a role, or change their role (audited).

    manage.py member_add shop bob --role operator
"""

from django.core.management.base import BaseCommand, CommandError

from workspaces.access import Actor
from workspaces.models import Role, Workspace
from workspaces.services import MembershipError, membership_set


class Command(BaseCommand):
    help = __doc__.split("\n\n")[0]

    def add_arguments(self, parser):
        parser.add_argument("workspace", help="workspace slug")
        parser.add_argument("username", help="an existing user")
        parser.add_argument("--role", choices=Role.values, default=Role.VIEWER)

    def handle(self, *, workspace, username, role, **options):
        space = Workspace.objects.filter(slug=workspace).first()
        if space is None:
            raise CommandError(f"No workspace “{workspace}”.")
        try:
            membership_set(actor=Actor.system("cli:member_add"), workspace=space, username=username, role=role)
        except MembershipError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"{username} is {role} in {space.slug}.")
