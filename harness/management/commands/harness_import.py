from django.core.management.base import BaseCommand, CommandError

from harness import services
from harness.spec import SpecInvalid, read_dir
from workspaces.access import Actor
from workspaces.identifiers import InvalidIdentifier
from workspaces.models import Workspace


class Command(BaseCommand):
    help = "Import a harness directory as a new version (creating the harness if needed)."

    def add_arguments(self, parser):
        parser.add_argument("directory")
        parser.add_argument("--workspace", required=True, help="workspace slug")
        parser.add_argument("--harness", required=True, help="harness name")
        parser.add_argument("--message", default="Imported from directory")

    def handle(self, directory, workspace, harness, message, **options):
        space = Workspace.objects.filter(slug=workspace).first()
        if space is None:
            raise CommandError(f"No workspace “{workspace}”.")
        try:
            files = read_dir(directory)
            result = services.harness_import(actor=Actor.system("cli:harness_import"), workspace=space,
                                             name=harness, files=files, message=message)
        except SpecInvalid as invalid:
            raise CommandError("The harness is invalid:\n" + "\n".join(f"  {e}" for e in invalid.errors)) from None
        except (OSError, InvalidIdentifier, services.StoreError, services.CommitConflict) as exc:
            raise CommandError(str(exc)) from None
        verb = "created" if result.created else "unchanged (identical to)"
        self.stdout.write(f"{verb} {result.version} {result.version.content_hash}")
