"""Seed the demo workspace, admin user, demo harness and demo room. Safe to re-run."""

import dataclasses
import json
import os
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from harness import services
from harness.models import Harness, Label
from harness.spec import parse_files, read_dir, to_files
from serving.model_sources import local_default_manifest
from serving.services import room_upsert
from workspaces.access import Actor
from workspaces.models import Membership, Role, Workspace
from workspaces.services import workspace_create

DEMO_DIR = Path(settings.BASE_DIR) / "harness" / "demo"


def compact_files() -> dict[str, str]:
    """The compact demo harness, with the decoding the embedded default was chosen to be served with (its
    manifest's `decoding`, chosen on a validation split): constrained unless that says free."""
    files = read_dir(DEMO_DIR / "compact")
    shipped = local_default_manifest() or {}
    if shipped.get("decoding") == "free":
        spec = parse_files(files)
        files = to_files(dataclasses.replace(spec, settings=dataclasses.replace(spec.settings,
                                                                                constrained_decoding=False)))
    return files


class Command(BaseCommand):
    help = __doc__

    def handle(self, **options):
        actor = Actor.system("system:seed")
        with transaction.atomic():
            user, password = self._admin()
            workspace = Workspace.objects.filter(slug="demo").first() or workspace_create(
                actor=actor, slug="demo", name="Demo Store")
            Membership.objects.get_or_create(workspace=workspace, user=user, defaults={"role": Role.ADMIN})
            if not Harness.objects.filter(workspace=workspace, name="avatar").exists():
                harness = services.harness_create(actor=actor, workspace=workspace, name="avatar",
                                                  files=read_dir(DEMO_DIR / "avatar"),
                                                  message="Demo harness for the live-room avatar")
                for label in ("production", "staging"):
                    services.label_move(actor=actor, harness=harness, name=label, version=harness.head,
                                        reason="Initial demo release")
            if not Harness.objects.filter(workspace=workspace, name="avatar-compact").exists():
                # The compact avatar the embedded default model was trained on (docs/hat-reproduction.md):
                # pick it in the playground to see that model answer.
                compact = services.harness_create(actor=actor, workspace=workspace, name="avatar-compact",
                                                  files=compact_files(),
                                                  message="Compact demo avatar (the embedded model's training harness)")
                services.label_move(actor=actor, harness=compact, name="production", version=compact.head,
                                    reason="Initial demo release")
            room_upsert(workspace=workspace, context=json.loads((DEMO_DIR / "room.json").read_text()),
                        harness=Harness.objects.get(workspace=workspace, name="avatar"))
        harness = Harness.objects.get(workspace=workspace, name="avatar")
        labels = ", ".join(f"{lb.name}→v{lb.version.number}" for lb in Label.objects.filter(harness=harness))
        self.stdout.write(f"Demo workspace “demo”: harness avatar v{harness.head.number} ({labels}), room demo-room.")
        url = os.environ.get("HARNESSOPS_URL", "http://127.0.0.1:8000")
        self.stdout.write(f"Log in at {url} as {user.username} / {password}")

    def _admin(self):
        """The admin from HARNESSOPS_ADMIN_USER/PASSWORD, or 'admin' with a generated password kept in var/."""
        username = os.environ.get("HARNESSOPS_ADMIN_USER", "admin")
        password = os.environ.get("HARNESSOPS_ADMIN_PASSWORD")
        saved = Path(settings.VAR_DIR) / "admin-password"
        if not password:
            if saved.exists():
                password = saved.read_text().strip()
            else:
                password = secrets.token_urlsafe(12)
                saved.parent.mkdir(parents=True, exist_ok=True)
                saved.write_text(password)
        User = get_user_model()
        user = User.objects.filter(username=username).first()
        if user is None:
            user = User.objects.create_superuser(username=username, password=password, email="")
        elif not user.check_password(password):
            if os.environ.get("HARNESSOPS_ADMIN_PASSWORD"):
                user.set_password(password)
                user.save(update_fields=["password"])
            else:
                password = "(unchanged; set HARNESSOPS_ADMIN_PASSWORD to reset it)"
        return user, password
