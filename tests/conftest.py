"""Shared fixtures: workspaces with one user per role, a foreign workspace, and the demo harness."""

from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from console.access import Actor
from console.models import Membership, Role, Workspace
from harness import services
from harness.spec import read_dir

DEMO_HARNESS = Path(__file__).resolve().parent.parent / "harness" / "demo" / "avatar"
PASSWORD = "correct-horse-battery"


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    # PBKDF2 costs ~0.3 s per user on these machines; the tests make many users.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def demo_files() -> dict[str, str]:
    return read_dir(DEMO_HARNESS)


def make_user(username: str):
    return get_user_model().objects.create_user(username=username, password=PASSWORD)


@pytest.fixture
def workspace(db) -> Workspace:
    return Workspace.objects.create(slug="acme", name="Acme Live")


@pytest.fixture
def foreign_workspace(db) -> Workspace:
    return Workspace.objects.create(slug="rival", name="Rival Shop")


@pytest.fixture
def members(workspace) -> dict[str, object]:
    """One user per role in `workspace`, keyed by role; plus 'outsider' with no membership."""
    users = {}
    for role in Role.values:
        user = make_user(role)
        Membership.objects.create(workspace=workspace, user=user, role=role)
        users[role] = user
    users["outsider"] = make_user("outsider")
    return users


@pytest.fixture
def actors(members) -> dict[str, Actor]:
    return {name: Actor.for_user(user) for name, user in members.items()}


@pytest.fixture
def harness(workspace, demo_files):
    return services.harness_create(actor=Actor.system("test"), workspace=workspace, name="avatar",
                                   files=demo_files, message="first")


@pytest.fixture
def foreign_harness(foreign_workspace, demo_files):
    return services.harness_create(actor=Actor.system("test"), workspace=foreign_workspace, name="secret",
                                   files=demo_files, message="theirs")
