"""Workspace pages: an API key's secret is shown once after a redirect; the HTTP tool host allowlist."""

import pytest

from serving.models import ApiKey
from serving.services import api_key_authenticate
from workspaces.models import AuditEvent, Workspace

pytestmark = pytest.mark.django_db


def test_creating_a_key_redirects_then_shows_the_secret_once(client, members):
    client.force_login(members["admin"])
    response = client.post("/w/acme/keys/", {"name": "platform", "scopes": ["read", "ingest"]})
    # The POST answers with a redirect, never with the secret: a refresh cannot create a second key.
    assert response.status_code == 302 and response["Location"] == "/w/acme/keys/"
    assert b"hok_" not in response.content

    page = client.get("/w/acme/keys/")
    token = page.context["new_token"]
    assert token.startswith("hok_") and token.encode() in page.content
    assert "no-store" in page["Cache-Control"]
    assert api_key_authenticate(token) == ApiKey.objects.get(name="platform")

    again = client.get("/w/acme/keys/")  # shown once: a reload no longer carries it
    assert again.context["new_token"] is None and token.encode() not in again.content
    assert ApiKey.objects.filter(workspace__slug="acme").count() == 1


def test_a_bad_key_request_redirects_with_the_error_and_creates_nothing(client, members):
    client.force_login(members["admin"])
    response = client.post("/w/acme/keys/", {"name": "", "scopes": ["read"]}, follow=True)
    assert response.redirect_chain == [("/w/acme/keys/", 302)]
    assert b"name is required" in response.content and response.context["new_token"] is None
    assert not ApiKey.objects.exists()


def test_tool_hosts_are_validated_normalised_and_audited(client, members):
    client.force_login(members["admin"])
    response = client.post("/w/acme/keys/tool-hosts/", {"hosts": "API.Shop.example\n10.1.2.3/8\n\napi.shop.example"})
    assert response.status_code == 302
    assert Workspace.objects.get(slug="acme").tool_hosts == ["api.shop.example", "10.0.0.0/8"]
    assert AuditEvent.objects.filter(action="workspace.tool_hosts").count() == 1

    page = client.post("/w/acme/keys/tool-hosts/", {"hosts": "http://evil/<b>"}, follow=True)
    assert b"is neither a host name nor an IP network" in page.content and b"<b>" not in page.content
    assert Workspace.objects.get(slug="acme").tool_hosts == ["api.shop.example", "10.0.0.0/8"]
