"""Create a workspace and make a user its first admin (first run after `createsuperuser`).

    manage.py workspace_create shop --name "Shop Live" --admin alice
"""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from workspaces.access import Actor
from workspaces.services import WorkspaceError, workspace_create


class Command(BaseCommand):
    help = __doc__.split("\n\n")[0]

    def add_arguments(self, parser):
        parser.add_argument("slug", help="the workspace's URL name: letters, digits, - or _")
        parser.add_argument("--name", default="", help="display name (default: the slug)")
        parser.add_argument("--admin", required=True, help="username of an existing user who becomes its admin")

    def handle(self, *, slug, name, admin, **options):
        owner = get_user_model().objects.filter(username=admin).first()
        if owner is None:
            raise CommandError(f"No user named “{admin}”; create one first (manage.py createsuperuser).")
        try:
            workspace = workspace_create(actor=Actor.system("cli:workspace_create"), slug=slug, name=name,
                                         owner=owner)
        except WorkspaceError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"Workspace “{workspace.slug}” ({workspace.name}) created; {admin} is its admin.")
