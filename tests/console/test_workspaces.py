"""First use of a production install: a workspace and its members from the CLI or the console, audited."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.urls import reverse

from tests.conftest import make_user
from workspaces.models import AuditEvent, Membership, Role, Workspace

pytestmark = pytest.mark.django_db


def test_cli_creates_a_workspace_and_adds_members(capsys):
    root = get_user_model().objects.create_superuser(username="root", password="pw-pw-pw-pw", email="")
    make_user("bob")
    call_command("workspace_create", "shop", "--name", "Shop Live", "--admin", "root")
    call_command("member_add", "shop", "bob", "--role", "operator")
    shop = Workspace.objects.get(slug="shop")
    assert shop.name == "Shop Live"
    assert dict(Membership.objects.filter(workspace=shop).values_list("user__username", "role")) == {
        "root": Role.ADMIN, "bob": Role.OPERATOR}
    actions = list(AuditEvent.objects.filter(workspace=shop).order_by("pk").values_list("action", "actor_label"))
    assert actions == [("workspace.create", "cli:workspace_create"), ("membership.add", "cli:workspace_create"),
                       ("membership.add", "cli:member_add")]
    assert "shop" in capsys.readouterr().out
    assert root.pk


@pytest.mark.parametrize(("args", "message"), [
    (["shop", "--admin", "ghost"], "No user named “ghost”"),
    (["bad slug", "--admin", "root"], "lowercase letters and digits"),  # the identifier rule's message
    (["x" * 65, "--admin", "root"], "longer than 64"),
])
def test_cli_refuses_bad_input(args, message):
    make_user("root")
    with pytest.raises(CommandError, match=message):
        call_command("workspace_create", *args)
    assert not Workspace.objects.exists()


def test_cli_refuses_a_taken_slug_and_unknown_members(workspace):
    make_user("root")
    with pytest.raises(CommandError, match="already exists"):
        call_command("workspace_create", "acme", "--admin", "root")
    with pytest.raises(CommandError, match="No workspace"):
        call_command("member_add", "nope", "root")
    with pytest.raises(CommandError, match="No user"):
        call_command("member_add", "acme", "ghost")


def test_staff_create_a_workspace_in_the_console(client):
    staff = get_user_model().objects.create_user(username="ops", password="pw-pw-pw-pw", is_staff=True)
    client.force_login(staff)
    home = client.get(reverse("home"))
    assert "create the first one" in home.content.decode().lower() and reverse("workspace_new") in home.content.decode()
    bad = client.post(reverse("workspace_new"), {"slug": "<b>x</b>", "name": "X"})
    assert bad.status_code == 422 and "lowercase letters and digits" in bad.content.decode()
    assert "<b>x</b>" not in bad.content.decode()
    response = client.post(reverse("workspace_new"), {"slug": "shop", "name": "Shop Live"})
    assert response.status_code == 302 and response.url == reverse("member_list", kwargs={"ws": "shop"})
    assert Membership.objects.get(workspace__slug="shop", user=staff).role == Role.ADMIN
    assert AuditEvent.objects.filter(workspace__slug="shop", action="workspace.create", actor_label="ops").exists()
    taken = client.post(reverse("workspace_new"), {"slug": "shop", "name": "Again"})
    assert taken.status_code == 422 and "already exists" in taken.content.decode()


def test_admin_invites_a_newcomer_who_sets_a_password_once(client, members):
    client.force_login(members["admin"])
    url = reverse("member_invite", kwargs={"ws": "acme"})
    response = client.post(url, {"username": "carol", "role": "operator"})
    assert response.status_code == 302
    page = client.get(response.url).content.decode()
    link = re.search(r"http://testserver(/accounts/invite/[^<\s]+)", page).group(1)
    assert "carol" not in client.get(response.url).content.decode().split("Members of")[0]  # shown once
    assert "/accounts/invite/" not in client.get(response.url).content.decode()
    carol = get_user_model().objects.get(username="carol")
    assert not carol.has_usable_password()
    assert Membership.objects.get(user=carol).role == Role.OPERATOR
    assert AuditEvent.objects.filter(action="membership.invite", target_label="carol", actor_label="admin").exists()
    # An existing user cannot be "invited" again, and a viewer cannot invite.
    client.post(url, {"username": "carol", "role": "viewer"})
    assert get_user_model().objects.filter(username="carol").count() == 1
    client.force_login(members["viewer"])
    assert client.post(url, {"username": "dave", "role": "viewer"}).status_code == 403

    client.logout()
    form = client.get(link, follow=True)
    assert "Set your password" in form.content.decode()
    done = client.post(form.redirect_chain[-1][0] if form.redirect_chain else link,
                       {"new_password1": "a-long-fresh-secret-42", "new_password2": "a-long-fresh-secret-42"})
    assert done.status_code == 302
    assert client.login(username="carol", password="a-long-fresh-secret-42")
    client.logout()
    assert "Link expired" in client.get(link, follow=True).content.decode()  # used once
