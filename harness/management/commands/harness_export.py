from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.http import Http404

from harness import selectors
from harness.spec import write_dir
from workspaces.models import Workspace


class Command(BaseCommand):
    help = "Export NAME@REF (a label, vN or a hash prefix) into an empty or new directory."

    def add_arguments(self, parser):
        parser.add_argument("ref", help="NAME@LABEL, NAME@v3 or NAME@<hash prefix>")
        parser.add_argument("directory")
        parser.add_argument("--workspace", help="workspace slug (needed when the name exists in several)")

    def handle(self, ref, directory, workspace, **options):
        name, _, version_ref = ref.partition("@")
        if not name or not version_ref:
            raise CommandError("Give the version as NAME@LABEL, e.g. avatar@production.")
        spaces = Workspace.objects.filter(harnesses__name=name)
        if workspace:
            spaces = spaces.filter(slug=workspace)
        spaces = list(spaces.distinct())
        if len(spaces) != 1:
            raise CommandError(f"{len(spaces)} workspaces have a harness “{name}”; pass --workspace.")
        target = Path(directory)
        if target.exists() and any(target.iterdir()):
            raise CommandError(f"{target} is not empty; export into a new or empty directory.")
        try:
            version = selectors.version_resolve(selectors.harness_get(spaces[0], name), version_ref)
        except Http404 as exc:
            raise CommandError(str(exc)) from None
        write_dir(version.files, target)
        self.stdout.write(f"exported {version} {version.content_hash} → {target}")
