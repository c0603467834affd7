"""Shared fixtures: workspaces with one user per role, a foreign workspace, and the demo harness."""

import os
import shutil
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from harness import services
from harness.spec import read_dir
from workspaces.access import Actor
from workspaces.models import Membership, Role, Workspace

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


# Browser tests: headless Debian Chromium driven by Playwright (never a downloaded browser).
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
# Playwright's sync API runs an event loop in this thread; Django's ORM calls from test code are still sync.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


# Module scope: Playwright's sync API keeps an event loop running in this thread while it is open,
# which would make every later test's async_to_sync refuse to run.
@pytest.fixture(scope="module")
def browser():
    if not shutil.which(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing; .ci/run installs Debian's chromium package.")
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"],
        )
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()


@pytest.fixture
def purge_queue_fixture():
    """An empty Celery queue before and after a test that runs a real worker."""
    from console.celery import app

    app.control.purge()
    yield
    app.control.purge()
